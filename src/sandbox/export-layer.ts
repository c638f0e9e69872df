// The sandbox's layers as one OCI image layer tarball (`cvisor export`): the upper and the
// read-only snapshot layers under it amount to one layer (./effective-layer.ts), streamed entry
// by entry with the OCI conventions (`.wh.NAME` whiteouts, `.wh..wh..opq` opaque directories),
// hard links kept as links.
import { createReadStream, readlinkSync } from "node:fs";
import type { Writable } from "node:stream";
import { pack as tarPack, type Header } from "tar-stream";
import { openFileChecked } from "../store/fd-path.js";
import { shownText, walkEffective } from "./effective-layer.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";

type EntryHeader = Partial<Header> & { name: string };

/**
 * Writes the layers (absolute roots, top first: the upper, then the snapshot layers) to out as
 * one OCI layer tar. Whiteouts are kept where the host may have the name, opaque markers where a
 * directory stops showing the host's.
 */
export async function writeLayer(
  layers: readonly string[],
  out: Writable,
  summary: { entries: number; bytes: number },
  signal?: AbortSignal,
): Promise<void> {
  signal?.throwIfAborted();
  const tar = tarPack();
  const done = new Promise<void>((resolve, reject) => {
    out.on("error", reject);
    tar.on("error", reject);
    (out === process.stdout ? tar : out).on(out === process.stdout ? "end" : "close", () =>
      resolve(),
    );
  });
  done.catch(() => undefined); // awaited at the end; a failed entry may throw first
  // An abort stops the walk at once: the output is destroyed, and whatever step is waiting on
  // it gives up (a destroyed pack may never call an entry's callback).
  let reading: ReturnType<typeof createReadStream> | undefined; // the file being copied
  const aborted =
    signal &&
    new Promise<never>((_, reject) => {
      signal.addEventListener(
        "abort",
        () => {
          reject(signal.reason as Error);
          reading?.destroy();
          tar.destroy();
          out.destroy();
        },
        { once: true },
      );
    });
  aborted?.catch(() => undefined);
  const step = <T>(p: Promise<T>): Promise<T> => (aborted ? Promise.race([p, aborted]) : p);
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
      await step(entry(tar, marker(name)));
      continue;
    }
    if (e.rel === "") {
      // The root itself is not an entry; only whether it hides the host's.
      if (e.opaque) {
        summary.entries++;
        await step(entry(tar, marker(OPAQUE_MARKER)));
      }
      continue;
    }
    summary.entries++;
    if (st.isDirectory()) {
      await step(entry(tar, { ...base, type: "directory" }));
      if (e.opaque) {
        summary.entries++;
        await step(entry(tar, marker(`${rel}/${OPAQUE_MARKER}`)));
      }
    } else if (st.isSymbolicLink()) {
      await step(entry(tar, { ...base, type: "symlink", linkname: readlinkSync(e.path, "utf8") }));
    } else if (st.isFIFO()) {
      await step(entry(tar, { ...base, type: "fifo" }));
    } else if (st.isFile()) {
      const id = `${st.dev}:${st.ino}`;
      const first = st.nlink > 1 ? firstPath.get(id) : undefined;
      if (first !== undefined) {
        await step(entry(tar, { ...base, type: "link", linkname: first }));
        continue;
      }
      if (st.nlink > 1) firstPath.set(id, rel);
      summary.bytes += st.size;
      const fd = openFileChecked(e.path, st);
      await step(
        new Promise<void>((resolve, reject) => {
          const sink = tar.entry({ ...base, type: "file", size: st.size }, (err) =>
            err ? reject(err) : resolve(),
          );
          sink.on("error", reject); // the output failed: the callback alone leaves it unhandled
          reading = createReadStream(e.path, { fd });
          reading.on("error", reject).pipe(sink);
        }),
      );
      reading = undefined;
    } else {
      summary.entries--; // sockets, devices: not representable in a layer the guest could make
    }
  }
  tar.finalize();
  await step(done);
}

function entry(tar: ReturnType<typeof tarPack>, header: EntryHeader): Promise<void> {
  return new Promise((resolve, reject) => {
    // A file entry without data still needs its (empty) body, or it never finishes.
    const cb = (err?: Error | null): void => (err ? reject(err) : resolve());
    const sink = header.type === "file" ? tar.entry(header, "", cb) : tar.entry(header, cb);
    sink.on("error", reject);
  });
}
