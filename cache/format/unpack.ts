// The tar side of `cache restore`: a tar stream extracted into a fresh, private directory that
// nothing else writes (../restore.ts makes it and moves it into place afterwards). The archive
// is untrusted (a cache anyone with write access to the backend could have written), so:
//  - a name that is absolute, holds a `..` component or a NUL, or is empty, fails the restore;
//  - nothing is ever followed: every object made here is recorded, and an entry whose parent
//    is a symlink or a file made earlier (a symlink to /etc, then etc/passwd) fails the restore,
//    as does a directory over a non-directory or the reverse;
//  - a hard link must name a regular file made earlier from this archive, else it fails;
//  - a symlink whose target leaves the restored tree (absolute, or climbing out with `..`) fails
//    the restore unless allowExternalLinks (`--allow-external-links`: virtualenvs link to
//    /usr/bin/python3): a poisoned cache must not plant a link a later build step writes
//    through; symlinks are made with their target text as it is and never followed here;
//  - setuid and setgid bits are dropped, owners are not restored (files belong to whoever
//    restores), FIFOs and devices are skipped with a warning.
// Directories get their mode and times once everything inside them is in.
import { createHash } from "node:crypto";
import {
  closeSync,
  fchmodSync,
  futimesSync,
  linkSync,
  lutimesSync,
  mkdirSync,
  openSync,
  chmodSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeSync,
} from "node:fs";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { extract as tarExtract, type Header } from "tar-stream";
import type { Skipped } from "../../src/sandbox/copy-tree.js";
import { WHITEOUT_PREFIX } from "../../src/sandbox/layer-names.js";

/** A tar entry's contents as tar-stream hands them over. */
type EntryStream = AsyncIterable<unknown> & { resume(): unknown };

/** An archive that must not be extracted: the restore fails with this one line. */
export class HostileArchiveError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HostileArchiveError";
  }
}

export interface ExtractReport {
  files: number;
  dirs: number;
  symlinks: number;
  hardlinks: number;
  bytes: number;
  skipped: Skipped[];
}

export interface ExtractOptions {
  /** Top-level names that belong to the format, not the tree: read and handed to onMeta. */
  metaNames?: ReadonlySet<string>;
  /** Receives a meta entry's contents (at most maxMeta bytes are kept). */
  onMeta?: (name: string, content: Buffer) => void;
  maxMeta?: number;
  /** Record each regular file's sha256 ("sha256:<hex>") by name here. */
  digests?: Map<string, string>;
  onSkip?: (skipped: Skipped) => void;
  /** Skip names with a `.wh.` component (a sandbox layer's reserved names), with a warning. */
  skipReserved?: boolean;
  /** Accept symlinks whose target leaves the tree (else they fail the restore). */
  allowExternalLinks?: boolean;
}

/** A symlink at rel (relative to the tree's root) with this target leads outside the tree. */
function linkLeaves(rel: string, target: string): boolean {
  if (target.startsWith("/")) return true;
  let depth = rel.split("/").length - 1; // the directories above the link, inside the tree
  for (const part of target.split("/")) {
    if (part === "" || part === ".") continue;
    depth += part === ".." ? -1 : 1;
    if (depth < 0) return true;
  }
  return false;
}

type Kind = "dir" | "file" | "symlink";

/** The archive name as a relative path ("" for the root), or a reason it is refused. */
export function cleanName(name: string): string | { refused: string } {
  if (name.includes("\0")) return { refused: "a name holds a NUL byte" };
  if (name.startsWith("/")) return { refused: `absolute path ${JSON.stringify(name)}` };
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) return { refused: `path with '..': ${JSON.stringify(name)}` };
  return parts.join("/");
}

interface DirMeta {
  mode: number;
  mtime: Date;
}

class Extractor {
  readonly report: ExtractReport = {
    files: 0,
    dirs: 0,
    symlinks: 0,
    hardlinks: 0,
    bytes: 0,
    skipped: [],
  };
  /** Every object made, by relative path ("" is the root). */
  private readonly made = new Map<string, Kind>([["", "dir"]]);
  private readonly dirMeta = new Map<string, DirMeta>();

  constructor(
    private readonly root: string,
    private readonly opts: ExtractOptions,
  ) {}

  private path(rel: string): string {
    return rel === "" ? this.root : `${this.root}/${rel}`;
  }

  private skip(name: string, reason: string): void {
    const s = { path: name, reason };
    this.report.skipped.push(s);
    this.opts.onSkip?.(s);
  }

  /** Makes sure rel's parent directories are directories made here (made now if missing). */
  private parents(rel: string, name: string): void {
    const parts = rel.split("/");
    let at = "";
    for (let i = 0; i < parts.length - 1; i++) {
      at = at === "" ? (parts[i] as string) : `${at}/${parts[i] as string}`;
      const kind = this.made.get(at);
      if (kind === "dir") continue;
      if (kind === "symlink") {
        throw new HostileArchiveError(`${JSON.stringify(name)} goes through the symlink ${at}`);
      }
      if (kind === "file") {
        throw new HostileArchiveError(`${JSON.stringify(name)} goes through the file ${at}`);
      }
      mkdirSync(this.path(at), { mode: 0o700 });
      this.made.set(at, "dir");
    }
  }

  /** Clears rel for a new object of kind (a non-directory there is replaced). */
  private clear(rel: string, kind: Kind, name: string): boolean {
    const there = this.made.get(rel);
    if (there === undefined) return false;
    if (there === "dir" && kind === "dir") return true;
    if (there === "dir" || kind === "dir") {
      throw new HostileArchiveError(`${JSON.stringify(name)} replaces a ${there} with a ${kind}`);
    }
    unlinkSync(this.path(rel));
    this.made.delete(rel);
    return false;
  }

  async entry(header: Header, stream: EntryStream): Promise<void> {
    const name = header.name;
    const cleaned = cleanName(name);
    if (typeof cleaned !== "string") throw new HostileArchiveError(cleaned.refused);
    const rel = cleaned;
    const mtime = header.mtime ?? new Date(0);
    const mode = (header.mode ?? 0o644) & 0o1777; // no setuid, no setgid
    const type = header.type;
    if (this.opts.metaNames?.has(rel) && type === "file") {
      const limit = this.opts.maxMeta ?? 64 << 20;
      const parts: Buffer[] = [];
      let n = 0;
      for await (const chunk of stream) {
        const b = chunk as Buffer;
        n += b.length;
        if (n <= limit) parts.push(b);
      }
      if (n > limit) throw new HostileArchiveError(`${rel} is larger than ${limit} bytes`);
      this.opts.onMeta?.(rel, Buffer.concat(parts));
      return;
    }
    if (this.opts.skipReserved && rel.split("/").some((p) => p.startsWith(WHITEOUT_PREFIX))) {
      this.skip(name, "names starting with .wh. are reserved in the sandbox's layer: not restored");
      stream.resume();
      return;
    }
    if (rel === "") {
      if (type !== "directory") throw new HostileArchiveError(`the root entry is a ${type}`);
      this.dirMeta.set("", { mode, mtime });
      stream.resume();
      return;
    }
    switch (type) {
      case "directory": {
        this.parents(rel, name);
        if (!this.clear(rel, "dir", name)) {
          mkdirSync(this.path(rel), { mode: 0o700 });
          this.made.set(rel, "dir");
          this.report.dirs++;
        }
        this.dirMeta.set(rel, { mode, mtime });
        stream.resume();
        return;
      }
      case "file":
      case "contiguous-file": {
        this.parents(rel, name);
        this.clear(rel, "file", name);
        const fd = openSync(this.path(rel), "wx", 0o600);
        this.made.set(rel, "file");
        try {
          const hash = this.opts.digests ? createHash("sha256") : undefined;
          for await (const chunk of stream) {
            const b = chunk as Buffer;
            hash?.update(b);
            for (let done = 0; done < b.length;) done += writeSync(fd, b, done);
            this.report.bytes += b.length;
          }
          fchmodSync(fd, mode);
          futimesSync(fd, mtime, mtime);
          if (hash) this.opts.digests?.set(rel, `sha256:${hash.digest("hex")}`);
        } finally {
          closeSync(fd);
        }
        this.report.files++;
        return;
      }
      case "symlink": {
        const target = header.linkname ?? "";
        if (!this.opts.allowExternalLinks && linkLeaves(rel, target)) {
          throw new HostileArchiveError(
            `the symlink ${JSON.stringify(name)} -> ${JSON.stringify(target)} leads outside the restored ` +
              "directory (--allow-external-links accepts such links)",
          );
        }
        this.parents(rel, name);
        this.clear(rel, "symlink", name);
        symlinkSync(target, this.path(rel));
        this.made.set(rel, "symlink");
        lutimesSync(this.path(rel), mtime, mtime);
        this.report.symlinks++;
        stream.resume();
        return;
      }
      case "link": {
        const target = cleanName(header.linkname ?? "");
        if (typeof target !== "string" || this.made.get(target) !== "file") {
          throw new HostileArchiveError(
            `the hard link ${JSON.stringify(name)} points outside the archive's files (${JSON.stringify(header.linkname ?? "")})`,
          );
        }
        this.parents(rel, name);
        this.clear(rel, "file", name);
        linkSync(this.path(target), this.path(rel));
        this.made.set(rel, "file");
        this.report.hardlinks++;
        stream.resume();
        return;
      }
      default:
        stream.resume();
        if ((type as string) === "pax-global-header") return;
        this.skip(name, `a ${type} entry: not restored`);
        return;
    }
  }

  /** Directory modes and times, deepest first (a 0500 directory is finished last). */
  finish(): void {
    const dirs = [...this.dirMeta.entries()].sort(
      (a, b) => b[0].split("/").length - a[0].split("/").length || (b[0] > a[0] ? 1 : -1),
    );
    for (const [rel, m] of dirs) {
      if (rel !== "" && this.made.get(rel) !== "dir") continue;
      chmodSync(this.path(rel), m.mode);
      utimesSync(this.path(rel), m.mtime, m.mtime);
    }
    if (!this.dirMeta.has("")) chmodSync(this.root, 0o755);
  }
}

/**
 * Extracts the tar stream into root, an empty directory private to this restore. Throws
 * HostileArchiveError (see the top of this file) or the stream's own error; on any failure
 * root holds a partial tree that the caller removes.
 */
export async function extractTar(
  tar: Readable,
  root: string,
  opts: ExtractOptions = {},
): Promise<ExtractReport> {
  const ex = new Extractor(root, opts);
  const extract = tarExtract();
  extract.on("entry", (header, stream, next) => {
    ex.entry(header, stream).then(
      () => next(),
      (err: Error) => {
        stream.resume();
        extract.destroy(err);
      },
    );
  });
  await pipeline(tar, extract as unknown as NodeJS.WritableStream);
  ex.finish();
  return ex.report;
}
