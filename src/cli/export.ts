// `cvisor [--sandbox NAME] export FILE`: the sandbox's changes as an OCI image layer tarball.
// The upper layer already follows the OCI conventions (`.wh.NAME` whiteouts, `.wh..wh..opq`
// opaque directories), so the tarball is the upper tree as it is: streamed entry by entry,
// hard links kept as links, written to FILE.tmp~ and renamed into place (or to stdout for -).
import { createReadStream, createWriteStream, readlinkSync, renameSync, rmSync } from "node:fs";
import type { Writable } from "node:stream";
import { pack as tarPack, type Header } from "tar-stream";

type EntryHeader = Partial<Header> & { name: string };
import { CvisorError } from "../core/errors.js";
import { walkUpper } from "../sandbox/changes.js";
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

async function writeLayer(upper: string, out: Writable, summary: Summary): Promise<void> {
  const tar = tarPack();
  const done = new Promise<void>((resolve, reject) => {
    out.on("error", reject);
    tar.on("error", reject);
    (out === process.stdout ? tar : out).on(out === process.stdout ? "end" : "close", () =>
      resolve(),
    );
  });
  tar.pipe(out);
  const firstPath = new Map<string, string>(); // dev:ino -> the first name of a hard-linked file
  for (const e of walkUpper(upper)) {
    const st = e.st;
    const base: EntryHeader = {
      name: e.rel,
      mode: st.mode & 0o7777,
      mtime: st.mtime,
      uid: st.uid,
      gid: st.gid,
    };
    summary.entries++;
    if (st.isDirectory()) {
      await entry(tar, { ...base, type: "directory" });
    } else if (st.isSymbolicLink()) {
      await entry(tar, { ...base, type: "symlink", linkname: readlinkSync(e.real) });
    } else if (st.isFIFO()) {
      await entry(tar, { ...base, type: "fifo" });
    } else if (st.isFile()) {
      const id = `${st.dev}:${st.ino}`;
      const first = st.nlink > 1 ? firstPath.get(id) : undefined;
      if (first !== undefined) {
        await entry(tar, { ...base, type: "link", linkname: first });
        continue;
      }
      if (st.nlink > 1) firstPath.set(id, e.rel);
      summary.bytes += st.size;
      await new Promise<void>((resolve, reject) => {
        const sink = tar.entry({ ...base, type: "file", size: st.size }, (err) =>
          err ? reject(err) : resolve(),
        );
        createReadStream(e.real).on("error", reject).pipe(sink);
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
    tar.entry(header, (err) => (err ? reject(err) : resolve()));
  });
}

export async function exportLayer(plan: StoreCommandPlan): Promise<number> {
  const name = targetSandbox(plan);
  const dir = existingSandbox(name);
  const file = plan.operands[0] ?? "-";
  const summary: Summary = { sandbox: name, file, entries: 0, bytes: 0 };
  if (file === "-") {
    await writeLayer(`${dir}/upper`, process.stdout, summary);
  } else {
    const tmp = `${file}.tmp~${process.pid}`;
    try {
      await writeLayer(
        `${dir}/upper`,
        createWriteStream(tmp, { flags: "wx", mode: 0o644 }),
        summary,
      );
      renameSync(tmp, file);
    } catch (err) {
      rmSync(tmp, { force: true });
      const code = (err as NodeJS.ErrnoException).code;
      throw new CvisorError(`cannot write ${file}: ${code ?? (err as Error).message}`, "EEXPORT");
    }
  }
  if (plan.json) writeStderr(`${JSON.stringify(summary)}\n`);
  return EXIT_OK;
}
