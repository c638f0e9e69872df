// `cvisor [--sandbox NAME] export FILE`: the sandbox's changes as an OCI image layer tarball.
// The layers follow the OCI conventions (`.wh.NAME` whiteouts, `.wh..wh..opq` opaque
// directories), so the tarball is the one layer the upper and the read-only snapshot layers
// under it amount to (src/sandbox/effective-layer.ts): streamed entry by entry, hard links kept
// as links, written to FILE.tmp~<owner record> and renamed into place (or to stdout for -).
import {
  createReadStream,
  createWriteStream,
  existsSync,
  readlinkSync,
  renameSync,
  rmSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Writable } from "node:stream";
import { getSystemErrorMap } from "node:util";
import { pack as tarPack, type Header } from "tar-stream";

type EntryHeader = Partial<Header> & { name: string };
import { CopyError } from "../core/errors.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "../sandbox/layer-names.js";
import { shownText, walkEffective } from "../sandbox/effective-layer.js";
import { ownerRecord, removeDeadLeftovers } from "../store/owner.js";
import { cleanedUpOnSignal } from "../sandbox/interrupt.js";
import { openFileChecked } from "../store/fd-path.js";
import { sandboxLowers } from "../sandbox/lowers.js";
import { existingSandbox } from "./diff.js";
import { targetSandbox } from "./commands.js";
import { writeStderr } from "./errors.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";

interface Summary {
  sandbox: string;
  file: string;
  entries: number;
  bytes: number;
}

/**
 * Writes the layers (absolute roots, top first: the upper, then the snapshot layers) to out as
 * one OCI layer tar. Whiteouts are kept where the host may have the name, opaque markers where a
 * directory stops showing the host's.
 */
export async function writeLayer(
  layers: readonly string[],
  out: Writable,
  summary: { entries: number; bytes: number },
): Promise<void> {
  const tar = tarPack();
  const done = new Promise<void>((resolve, reject) => {
    out.on("error", reject);
    tar.on("error", reject);
    (out === process.stdout ? tar : out).on(out === process.stdout ? "end" : "close", () =>
      resolve(),
    );
  });
  done.catch(() => undefined); // awaited at the end; a failed entry may throw first
  tar.pipe(out);
  const firstPath = new Map<string, string>(); // dev:ino -> the first name of a hard-linked file
  for (const e of walkEffective(layers)) {
    if (e.kind === "leave") continue;
    const st = e.st;
    const rel = shownText(e.rel);
    const base: EntryHeader = {
      name: rel,
      mode: st.mode & 0o7777,
      mtime: st.mtime,
      uid: st.uid,
      gid: st.gid,
    };
    const marker = (name: string): EntryHeader => ({
      ...base,
      name,
      mode: 0o600,
      type: "file",
      size: 0,
    });
    if (e.kind === "whiteout") {
      const slash = rel.lastIndexOf("/");
      const name = `${rel.slice(0, slash + 1)}${WHITEOUT_PREFIX}${rel.slice(slash + 1)}`;
      summary.entries++;
      await entry(tar, marker(name));
      continue;
    }
    if (e.rel === "") {
      // The root itself is not an entry; only whether it hides the host's.
      if (e.opaque) {
        summary.entries++;
        await entry(tar, marker(OPAQUE_MARKER));
      }
      continue;
    }
    summary.entries++;
    if (st.isDirectory()) {
      await entry(tar, { ...base, type: "directory" });
      if (e.opaque) {
        summary.entries++;
        await entry(tar, marker(`${rel}/${OPAQUE_MARKER}`));
      }
    } else if (st.isSymbolicLink()) {
      await entry(tar, { ...base, type: "symlink", linkname: readlinkSync(e.path, "utf8") });
    } else if (st.isFIFO()) {
      await entry(tar, { ...base, type: "fifo" });
    } else if (st.isFile()) {
      const id = `${st.dev}:${st.ino}`;
      const first = st.nlink > 1 ? firstPath.get(id) : undefined;
      if (first !== undefined) {
        await entry(tar, { ...base, type: "link", linkname: first });
        continue;
      }
      if (st.nlink > 1) firstPath.set(id, rel);
      summary.bytes += st.size;
      const fd = openFileChecked(e.path, st);
      await new Promise<void>((resolve, reject) => {
        const sink = tar.entry({ ...base, type: "file", size: st.size }, (err) =>
          err ? reject(err) : resolve(),
        );
        sink.on("error", reject); // the output failed: the callback alone leaves it unhandled
        createReadStream(e.path, { fd }).on("error", reject).pipe(sink);
      });
    } else {
      summary.entries--; // sockets, devices: not representable in a layer the guest could make
    }
  }
  tar.finalize();
  await done;
}

function entry(tar: ReturnType<typeof tarPack>, header: EntryHeader): Promise<void> {
  return new Promise((resolve, reject) => {
    // A file entry without data still needs its (empty) body, or it never finishes.
    const cb = (err?: Error | null): void => (err ? reject(err) : resolve());
    const sink = header.type === "file" ? tar.entry(header, "", cb) : tar.entry(header, cb);
    sink.on("error", reject);
  });
}

/** An fs error in words ("no such file or directory"), else its message. */
function errorText(err: unknown): string {
  const errno = (err as NodeJS.ErrnoException).errno;
  const known = errno === undefined ? undefined : getSystemErrorMap().get(errno);
  return known ? known[1] : (err as Error).message;
}

export async function exportLayer(plan: StoreCommandPlan): Promise<number> {
  const name = targetSandbox(plan);
  const dir = existingSandbox(name);
  const upper = `${dir}/upper`;
  const layers = [...(existsSync(upper) ? [upper] : []), ...sandboxLowers({ dir })];
  const file = plan.operands[0] ?? "-";
  const summary: Summary = { sandbox: name, file, entries: 0, bytes: 0 };
  if (file === "-") {
    await writeLayer(layers, process.stdout, summary);
  } else {
    // Written beside FILE and renamed onto it: removed on a signal, and a killed export's by the
    // next export to the same place.
    const prefix = `${basename(file)}.tmp~`;
    removeDeadLeftovers(dirname(file), prefix);
    const tmp = join(dirname(file), `${prefix}${ownerRecord()}`);
    const write = async (): Promise<void> => {
      await writeLayer(layers, createWriteStream(tmp, { flags: "wx", mode: 0o644 }), summary);
      renameSync(tmp, file);
    };
    try {
      await cleanedUpOnSignal(() => rmSync(tmp, { force: true }), write);
    } catch (err) {
      rmSync(tmp, { force: true });
      throw new CopyError(`cannot write ${file}: ${errorText(err)}`, "EEXPORT");
    }
  }
  if (plan.json) writeStderr(`${JSON.stringify(summary)}\n`);
  return EXIT_OK;
}
