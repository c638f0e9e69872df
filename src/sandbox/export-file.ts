// A named sandbox's changes as one OCI image layer tarball (Sandbox.export, `cvisor export`):
// to a stream, or to a file written beside it as FILE.tmp~<owner record> and renamed onto it,
// so FILE is the old one or the whole new one. The temp file is removed on SIGINT, SIGTERM and
// SIGHUP, and a killed export's by the next export to the same place.
import { createWriteStream, openSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Writable } from "node:stream";
import { getSystemErrorMap } from "node:util";
import { AbortedError, CopyError } from "../core/errors.js";
import { ownerRecord, removeDeadLeftovers } from "../store/owner.js";
import { abortedOr, cleanedUpOnSignal } from "./interrupt.js";
import { sandboxLayers } from "./manage.js";

/** What an export wrote. */
export interface ExportSummary {
  /** Tar entries written. */
  entries: number;
  /** Bytes of file data written. */
  bytes: number;
}

/** An fs error in words ("no such file or directory"), else its message. */
function errorText(err: unknown): string {
  const errno = (err as NodeJS.ErrnoException).errno;
  const known = errno === undefined ? undefined : getSystemErrorMap().get(errno);
  return known ? known[1] : (err as Error).message;
}

/** Options of an export. */
export interface ExportOptions {
  /**
   * Stops the export and undoes it: a file is left as it was, a stream is destroyed (the
   * promise rejects with an AbortedError). Given, no process signal listener is added.
   */
  signal?: AbortSignal;
}

/** Writes the named sandbox's changes to `to`: a file path, or a stream (which it ends). */
export async function exportChanges(
  name: string,
  to: string | Writable,
  opts: ExportOptions = {},
): Promise<ExportSummary> {
  const { writeLayer } = await import("./export-layer.js");
  const { signal } = opts;
  const layers = sandboxLayers(name);
  const summary: ExportSummary = { entries: 0, bytes: 0 };
  if (typeof to !== "string") {
    try {
      await writeLayer(layers, to, summary, signal);
    } catch (err) {
      throw abortedOr(err, signal, "export");
    }
    return summary;
  }
  const file = to;
  const prefix = `${basename(file)}.tmp~`;
  removeDeadLeftovers(dirname(file), prefix);
  const tmp = join(dirname(file), `${prefix}${ownerRecord()}`);
  const write = async (): Promise<void> => {
    // Opened here, not by the stream in the thread pool: a signal's cleanup must never run
    // before the file exists and then see it appear.
    const fd = openSync(tmp, "wx", 0o644);
    await writeLayer(layers, createWriteStream("", { fd }), summary, signal);
    signal?.throwIfAborted();
    renameSync(tmp, file);
  };
  try {
    await cleanedUpOnSignal(() => rmSync(tmp, { force: true }), write, signal);
  } catch (err) {
    rmSync(tmp, { force: true });
    const aborted = abortedOr(err, signal, "export");
    if (aborted instanceof AbortedError) throw aborted;
    throw new CopyError(`cannot write ${file}: ${errorText(err)}`, "EEXPORT");
  }
  return summary;
}
