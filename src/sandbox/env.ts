// Builds the guest environment: a short list of harmless host variables, never the whole
// host environment (it may hold credentials), then the caller's additions.
import { UsageError } from "../core/errors.js";

/** Host variables passed through by default, when set. */
export const DEFAULT_ENV_KEYS: readonly string[] = [
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "SHELL",
  "TERM",
  "COLORTERM",
  "LANG",
  "LANGUAGE",
  "TZ",
  "TMPDIR",
];

const DEFAULT_KEYS: ReadonlySet<string> = new Set(DEFAULT_ENV_KEYS);

/** CVISOR_SANDBOX in every guest: the sandbox's name, like its nodename (ephemeral runs: "cvisor"). */
export const SANDBOX_ENV = "CVISOR_SANDBOX";
export const DEFAULT_SANDBOX_NAME = "cvisor";

/** PATH when the host has none. */
export const FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

type EnvLayer = Readonly<Record<string, string | undefined>> | undefined;

/** The guest environment: defaults from `host`, then each layer in order (undefined removes). */
export function buildEnv(
  host: Readonly<Record<string, string | undefined>>,
  ...layers: EnvLayer[]
): Record<string, string> {
  const env: Record<string, string> = {};
  // Keys first, values only for the few kept: reading every value of process.env costs a
  // getenv each, at every run.
  for (const key of Object.keys(host)) {
    if (DEFAULT_KEYS.has(key) || key.startsWith("LC_")) {
      const value = host[key];
      if (value !== undefined) env[key] = value;
    }
  }
  env.PATH ??= FALLBACK_PATH;
  // A guest can tell it runs sandboxed (and which sandbox) without probing.
  env[SANDBOX_ENV] = DEFAULT_SANDBOX_NAME;
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer ?? {})) {
      if (value === undefined) delete env[key];
      else env[key] = value;
    }
  }
  return env;
}

/** "KEY=VALUE" strings for cv_run_add_env; a name that is empty or holds "=" is refused. */
export function envStrings(env: Readonly<Record<string, string>>): string[] {
  return Object.entries(env).map(([key, value]) => {
    if (key === "" || key.includes("=") || key.includes("\0") || value.includes("\0")) {
      throw new UsageError(`invalid environment variable: ${JSON.stringify(key)}`, "EINVALID_ENV");
    }
    return `${key}=${value}`;
  });
}
