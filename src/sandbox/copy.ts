// Copies between the host and a named sandbox (Sandbox.cp, `cvisor cp`), by docker cp's rules.
// Into: only the sandbox's upper layer is written (./copy-in.ts), and the sandbox is created if
// missing. Out: the merged view is read and nothing is written outside the destination, whatever
// the sandbox holds (./copy-out.ts). Either way the sandbox is held like a run (./open-layer.ts)
// while the copy goes, and the copy is all or nothing.
import { CopyError, CvisorError, restated, UsageError } from "../core/errors.js";
import { defaultHiddenPaths } from "../paths.js";
import { errCode } from "../store/fd-path.js";
import type { CopyHooks, CopyReport } from "./copy-tree.js";
import { abortedOr } from "./interrupt.js";

export type { CopyReport, Skipped } from "./copy-tree.js";

export interface CopyFilesOptions extends CopyHooks {
  /** "in": host paths into the sandbox; "out": sandbox paths onto the host. */
  direction: "in" | "out";
  /** Honour .gitignore and .dockerignore in directory copies (default true). */
  ignore?: boolean;
}

/**
 * Copies sources to dst between the host and the named sandbox. Sandbox paths are absolute
 * (sources going out, dst going in); a trailing `/.` copies a directory's contents. Throws a
 * CvisorError (nothing copied) when an operand does not fit or the copy fails part way.
 */
export async function copyFiles(
  name: string,
  sources: readonly string[],
  dst: string,
  opts: CopyFilesOptions,
): Promise<CopyReport> {
  const { direction } = opts;
  if (direction !== "in" && direction !== "out") {
    throw new UsageError(`cp: direction is "in" or "out" (not ${String(direction)})`);
  }
  if (sources.length === 0) throw new UsageError("cp: no source given");
  for (const p of [...sources, dst]) if (p === "") throw new UsageError("cp: an empty path");
  for (const p of direction === "in" ? [dst] : sources) {
    if (!p.startsWith("/")) throw new UsageError(`cp: sandbox paths are absolute (not ${p})`);
  }
  const [{ checkHostSources, copyIn }, { copyOut }, { useNamed }] = await Promise.all([
    import("./copy-in.js"),
    import("./copy-out.js"),
    import("./open-layer.js"),
  ]);
  const copyOpts = {
    ignore: opts.ignore !== false,
    hidden: defaultHiddenPaths(process.env),
    onSkip: opts.onSkip,
    onProgress: opts.onProgress,
    signal: opts.signal,
  };
  try {
    if (direction === "in") checkHostSources(sources); // before the sandbox is made
    const sb = useNamed(name, direction === "in");
    try {
      return direction === "in"
        ? await copyIn(sb.named, sources, dst, { ...copyOpts, lowers: sb.lowers })
        : await copyOut(sb.named.upper, sources, dst, { ...copyOpts, lowers: sb.lowers });
    } finally {
      sb.release();
    }
  } catch (caught) {
    const err = abortedOr(caught, opts.signal, "cp");
    if (err instanceof CvisorError && (err.code === "ENOSANDBOX" || err.kind === "aborted"))
      throw err;
    const message = err instanceof Error ? err.message : String(err);
    const said = message.startsWith("cp") ? message : `cp: ${message}`;
    if (err instanceof CvisorError) throw restated(err, said);
    throw new CopyError(said, errCode(err) ?? "ECP", { cause: err });
  }
}
