// The in-guest shim (native/src/shim/shim.c) goes into every dynamically linked guest through
// LD_PRELOAD: it keeps glibc's fstat a native call, which the filter otherwise sends to the
// supervisor (a stat with a path could name a hidden file). Nothing depends on it for safety;
// without it a guest's fstat calls are only slower.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { nativeDir } from "../core/native.js";

/** $CVISOR_SHIM: "off" (no shim), or the shim's path; else the package's core has it. */
export const SHIM_ENV = "CVISOR_SHIM";

let found: string | null | undefined;

/** The shim to preload, or undefined (switched off, or not built). */
export function shimPath(): string | undefined {
  const given = process.env[SHIM_ENV];
  if (given === "off") return undefined;
  if (given) return given;
  found ??= existsSync(join(nativeDir(), "libcvisor-shim.so"))
    ? join(nativeDir(), "libcvisor-shim.so")
    : null;
  return found ?? undefined;
}

const within = (path: string, dir: string): boolean =>
  path === dir || path.startsWith(dir.endsWith("/") ? dir : `${dir}/`);

/**
 * env with the shim first in LD_PRELOAD (the guest's own preloads after it). Not when the guest
 * could not read it: the dynamic loader would complain at every exec.
 */
export function withShim(
  env: Record<string, string>,
  hidden: readonly string[],
): Record<string, string> {
  const shim = shimPath();
  if (!shim || hidden.some((dir) => within(shim, dir))) return env;
  const own = env.LD_PRELOAD;
  return { ...env, LD_PRELOAD: own ? `${shim}:${own}` : shim };
}
