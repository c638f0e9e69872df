// The tar side of `cache save`: a directory tree (a host directory, or a directory of a
// sandbox's merged view) walked into a tar-stream pack, entry by entry, with back-pressure, so
// memory stays flat whatever the tree holds. Entry names are relative to the saved directory
// ("./" is the directory itself, then "a", "a/b", ...). Kept: regular files (contents, mode,
// mtime), directories (empty ones too), symlinks (target text as is, never followed), hard links
// (a second name of a file already in the archive is a tar link to the first). FIFOs, sockets,
// devices and names that are not UTF-8 are skipped with a warning. `.gitignore` and
// `.dockerignore` files inside the tree exclude entries as in `cvisor cp` (unless ignore is
// false). Times are whole seconds (tar's).
import { closeSync, fstatSync, readlinkSync, readSync, lstatSync } from "node:fs";
import type { Stats } from "node:fs";
import { once } from "node:events";
import type { Pack } from "tar-stream";
import { specialKind, walkDir } from "../../src/sandbox/copy-tree.js";
import type { Skipped, TreeSource } from "../../src/sandbox/copy-tree.js";
import { errCode, identity, listDirNames, openFileChecked } from "../../src/store/fd-path.js";
import { IgnoreRules } from "../../src/sandbox/ignore-rules.js";
import type { MergedView, ViewDir, ViewEntry } from "../../src/sandbox/view.js";
import type { AnnouncedEntry } from "./estargz.js";
import { LANDMARK_CONTENT, NO_PREFETCH_LANDMARK } from "./estargz.js";

/** A directory tree to read. D: an open directory; E: one of its entries. */
export interface PackSource<D, E extends { st: Stats }> extends Omit<
  TreeSource<D, E>,
  "refuse" | "shown"
> {
  /** How messages name NAME in dir (or dir). */
  shown(dir: D, name?: string): string;
}

/** An entry of a host directory. */
export interface HostEntry {
  st: Stats;
  path: string;
}

/** A host directory, by path (the user's own tree: its paths are used as given). */
export class HostSource implements PackSource<string, HostEntry> {
  list(dir: string): { names: string[]; undecodable: string[] } {
    return listDirNames(dir);
  }

  lookup(dir: string, name: string): HostEntry | undefined {
    const path = `${dir}/${name}`;
    const st = lstatSync(path, { throwIfNoEntry: false });
    return st && { st, path };
  }

  openDir(_parent: string, entry: { path: string }): string {
    return entry.path;
  }

  closeDir(): void {}

  openFile(_parent: string, entry: HostEntry): number {
    return openFileChecked(entry.path, entry.st);
  }

  readlink(_parent: string, entry: { path: string }): string {
    return readlinkSync(entry.path);
  }

  shown(dir: string, name?: string): string {
    return name === undefined ? dir : `${dir}/${name}`;
  }
}

/** A directory of a sandbox's merged view (never following what the sandbox holds). */
export class ViewSource implements PackSource<ViewDir, ViewEntry> {
  constructor(private readonly view: MergedView) {}

  list(dir: ViewDir): { names: string[]; undecodable: string[] } {
    return this.view.list(dir);
  }

  lookup(dir: ViewDir, name: string): ViewEntry | undefined {
    return this.view.lookup(dir, name);
  }

  openDir(parent: ViewDir, entry: ViewEntry): ViewDir {
    return this.view.openDir(parent, entry);
  }

  closeDir(dir: ViewDir): void {
    this.view.close(dir);
  }

  openFile(parent: ViewDir, entry: ViewEntry): number {
    return this.view.openFile(parent, entry);
  }

  readlink(parent: ViewDir, entry: ViewEntry): string {
    return this.view.readlink(parent, entry);
  }

  shown(dir: ViewDir, name?: string): string {
    if (name === undefined) return `sb:${dir.vpath}`;
    return `sb:${dir.vpath === "/" ? "" : dir.vpath}/${name}`;
  }
}

export interface PackReport {
  files: number;
  dirs: number;
  symlinks: number;
  hardlinks: number;
  /** Bytes of file contents. */
  bytes: number;
  ignored: number;
  skipped: Skipped[];
}

export interface PackOptions {
  /** Honour .gitignore and .dockerignore (default true). */
  ignore?: boolean;
  /** Write eStargz's `.no.prefetch.landmark` first. */
  landmark?: boolean;
  /** Told about each entry before it is written (the eStargz TOC). */
  announce?: (entry: AnnouncedEntry) => void;
  /** "dev:ino" of directories never to enter (the cache's own storage). */
  exclude?: ReadonlySet<string>;
  onSkip?: (skipped: Skipped) => void;
  /** Called as the walk goes; throttle it. */
  onProgress?: (report: PackReport) => void;
}

/** Files up to this size are read whole and handed to pack in one piece. */
const WHOLE_FILE = 1 << 20;
const CHUNK = 1 << 20;

type Header = AnnouncedEntry;

class Packer<D, E extends { st: Stats }> {
  readonly report: PackReport = {
    files: 0,
    dirs: 0,
    symlinks: 0,
    hardlinks: 0,
    bytes: 0,
    ignored: 0,
    skipped: [],
  };
  /** "dev:ino" of multiply-linked files already written -> their name. */
  private readonly links = new Map<string, string>();

  constructor(
    private readonly src: PackSource<D, E>,
    private readonly tar: Pack,
    private readonly opts: PackOptions,
  ) {}

  private skip(path: string, reason: string): void {
    const s = { path, reason };
    this.report.skipped.push(s);
    this.opts.onSkip?.(s);
  }

  private entry(h: Header, body?: Buffer): Promise<void> {
    this.opts.announce?.(h);
    return new Promise((resolve, reject) => {
      const cb = (err?: Error | null): void => (err ? reject(err) : resolve());
      const sink =
        body !== undefined ? this.tar.entry({ ...h }, body, cb) : this.tar.entry({ ...h }, cb);
      sink.on("error", reject); // a destroyed pack: the callback alone leaves the event unhandled
    });
  }

  private header(name: string, st: Stats, type: Header["type"], size = 0): Header {
    return { name, type, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid, mtime: st.mtime, size };
  }

  async landmark(): Promise<void> {
    await this.entry(
      {
        name: NO_PREFETCH_LANDMARK,
        type: "file",
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: new Date(0),
        size: 1,
      },
      LANDMARK_CONTENT,
    );
  }

  async root(dir: D, st: Stats): Promise<void> {
    // Directories end in "/", the root is "./", as tar writes them (and eStargz's TOC names
    // each entry by its header's name).
    await this.entry(this.header("./", st, "directory"));
    this.report.dirs++;
    await this.contents(dir, IgnoreRules.none(), "");
  }

  private async contents(dir: D, rules: IgnoreRules, rel: string): Promise<void> {
    const { rules: here, visits } = walkDir(this.src, dir, this.src.list(dir), rules, rel, {
      ignore: this.opts.ignore,
      skip: (name, why) =>
        this.skip(
          this.src.shown(dir, name),
          why === "undecodable"
            ? "its name is not valid UTF-8: not cached"
            : "permission denied: not cached",
        ),
      ignored: () => this.report.ignored++,
    });
    for (const v of visits) {
      await this.one(dir, v.e, v.name, v.rel, here);
      this.opts.onProgress?.(this.report);
    }
  }

  private async one(dir: D, e: E, name: string, rel: string, rules: IgnoreRules): Promise<void> {
    const st = e.st;
    if (st.isDirectory()) {
      if (this.opts.exclude?.has(identity(st))) {
        this.skip(this.src.shown(dir, name), "the cache's own storage: not cached");
        return;
      }
      let child: D;
      try {
        child = this.src.openDir(dir, e);
      } catch (err) {
        if (errCode(err) !== "EACCES") throw err;
        this.skip(this.src.shown(dir, name), "permission denied: not cached");
        return;
      }
      try {
        await this.entry(this.header(`${rel}/`, st, "directory"));
        this.report.dirs++;
        await this.contents(child, rules, rel);
      } finally {
        this.src.closeDir(child);
      }
    } else if (st.isSymbolicLink()) {
      await this.entry({ ...this.header(rel, st, "symlink"), linkname: this.src.readlink(dir, e) });
      this.report.symlinks++;
    } else if (st.isFile()) {
      const id = identity(st);
      const first = st.nlink > 1 ? this.links.get(id) : undefined;
      if (first !== undefined) {
        await this.entry({ ...this.header(rel, st, "link"), linkname: first });
        this.report.hardlinks++;
        return;
      }
      let fd: number;
      try {
        fd = this.src.openFile(dir, e);
      } catch (err) {
        const c = errCode(err);
        if (c !== "ECHANGED" && c !== "EACCES") throw err;
        this.skip(
          this.src.shown(dir, name),
          c === "EACCES" ? "permission denied: not cached" : "it changed while being read",
        );
        return;
      }
      try {
        await this.file(fd, rel, fstatSync(fd), this.src.shown(dir, name));
      } finally {
        closeSync(fd);
      }
      if (st.nlink > 1) this.links.set(id, rel);
      this.report.files++;
    } else {
      this.skip(this.src.shown(dir, name), `${specialKind(st)}: not cached`);
    }
  }

  /** Fills buf from fd; false (with zeros past the end) when the file ends first. */
  private read(fd: number, buf: Buffer): boolean {
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) {
        buf.fill(0, n);
        return false;
      }
      n += got;
    }
    return true;
  }

  private async file(fd: number, rel: string, st: Stats, shown: string): Promise<void> {
    const h = this.header(rel, st, "file", st.size);
    // Told once per file, however many chunks are past its new end.
    const shrank = (): void =>
      this.skip(shown, "it shrank while being read: cached with zeros at its end");
    if (st.size <= WHOLE_FILE) {
      const buf = Buffer.allocUnsafe(st.size);
      if (!this.read(fd, buf)) shrank();
      this.report.bytes += st.size;
      await this.entry(h, buf);
      return;
    }
    this.opts.announce?.(h);
    let failed: Error | undefined;
    let settle: (err?: Error | null) => void = () => undefined;
    const done = new Promise<void>((resolve, reject) => {
      settle = (err) => (err ? reject(err) : resolve());
    });
    const sink = this.tar.entry({ ...h }, (err) => settle(err));
    sink.on("error", (err: Error) => settle(err));
    done.catch((err: Error) => (failed = err));
    let left = st.size;
    let short = false;
    while (left > 0 && failed === undefined) {
      const buf = Buffer.allocUnsafe(Math.min(CHUNK, left));
      if (short) buf.fill(0);
      else if (!this.read(fd, buf)) {
        short = true;
        shrank();
      }
      left -= buf.length;
      this.report.bytes += buf.length;
      if (!sink.write(buf)) await Promise.race([once(sink, "drain"), done]);
      this.opts.onProgress?.(this.report);
    }
    (sink as unknown as { end(): void }).end();
    await done;
  }
}

/**
 * Writes the tree under root (an open directory of src, with its stats) into tar, then
 * finalizes it; on failure destroys tar with the error (and rethrows it).
 */
export async function packTree<D, E extends { st: Stats }>(
  src: PackSource<D, E>,
  root: D,
  rootSt: Stats,
  tar: Pack,
  opts: PackOptions = {},
): Promise<PackReport> {
  const packer = new Packer(src, tar, opts);
  try {
    if (opts.landmark) await packer.landmark();
    await packer.root(root, rootSt);
    tar.finalize();
    return packer.report;
  } catch (err) {
    tar.destroy(err as Error);
    throw err;
  }
}
