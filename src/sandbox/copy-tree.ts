// The recursive copy shared by `cvisor cp` in both directions (./copy-in.ts: host → upper layer,
// ./copy-out.ts: merged view → host), and docker cp's rules for where a source lands.
//
// A tree is walked from a TreeSource into a TreeDest, entry by entry, never following a
// symlink: regular files are copied with their mode and times, symlinks as symlinks (the same
// target text), directories recursively (their mode and times set once their contents are in);
// FIFOs, sockets and device nodes are skipped with a warning. What the destination already has
// is looked at with lstat: a directory is merged into, a file or symlink is replaced (never
// written through), a directory where a non-directory goes (or the reverse) is an error.
import {
  closeSync,
  fchmodSync,
  futimesSync,
  lutimesSync,
  openSync,
  readSync,
  symlinkSync,
  unlinkSync,
  writeSync,
  type Stats,
} from "node:fs";
import { CvisorError, CopyError } from "../core/errors.js";
import { at, errCode, identity, lstatAt } from "../store/fd-path.js";
import { enterIgnoreFiles, IgnoreRules, type IgnoreSource } from "./ignore-rules.js";

/** An entry that was not copied, and why. */
export interface Skipped {
  /** As the user names it: a host path, or sb:/PATH. */
  path: string;
  reason: string;
}

/** What a copy did. */
export interface CopyReport {
  /** Regular files copied. */
  files: number;
  /** Directories copied (made or merged into). */
  dirs: number;
  symlinks: number;
  /** Bytes of file data copied. */
  bytes: number;
  /** Entries left out by .gitignore / .dockerignore rules (a directory counts once). */
  ignored: number;
  skipped: Skipped[];
}

export interface CopyHooks {
  /** Each skipped entry, as it happens. */
  onSkip?: (skipped: Skipped) => void;
  /** Called as the copy goes (after each entry and each chunk of file data); throttle it. */
  onProgress?: (report: CopyReport) => void;
  /**
   * Stops the copy at its next entry or chunk and undoes it (the promise rejects with an
   * AbortedError). Given, no process signal listener is added: cancelling is the caller's.
   */
  signal?: AbortSignal;
}

export interface CopyOptions extends CopyHooks {
  /** Honour .gitignore and .dockerignore in directory copies (default true). */
  ignore?: boolean;
}

function emptyReport(): CopyReport {
  return { files: 0, dirs: 0, symlinks: 0, bytes: 0, ignored: 0, skipped: [] };
}

/** An entry of a source directory. */
export interface SourceEntry {
  name: string;
  /** How messages name it. */
  shown: string;
  /** lstat. */
  st: Stats;
}

/** Where a copy reads from. D: an open directory; E: one of its entries (cache save's packer
 * reads through the same interface, with its own entry type). */
export interface TreeSource<D, E extends { st: Stats } = SourceEntry> {
  /** The names of a directory, sorted, and the (shown) names that are not valid UTF-8. */
  list(dir: D): { names: string[]; undecodable: string[] };
  /** An entry of dir, or undefined when it is gone. */
  lookup(dir: D, name: string): E | undefined;
  openDir(parent: D, entry: E): D;
  closeDir(dir: D): void;
  /** Opens a regular file for reading; throws code ECHANGED if it is no longer that file. */
  openFile(parent: D, entry: E): number;
  readlink(parent: D, entry: E): string;
  /** Why this entry must be left out (a reason for the warning), or undefined. */
  refuse?(parent: D, entry: E): string | undefined;
  /** How messages name a directory. */
  shown(dir: D): string;
}

/** Where a copy writes to. T: an open directory. Every new object appears whole or not at all. */
export interface TreeDest<T> {
  /** What the destination has at NAME (lstat), or undefined. */
  lookup(dir: T, name: string): Stats | undefined;
  /** Why NAME cannot be made here (a reserved name), or undefined. */
  refuseName?(name: string): string | undefined;
  /** Makes (or replaces) the file NAME: write(fd) fills it, then mode and times are set. */
  writeFile(dir: T, name: string, write: (fd: number) => Promise<void>, st: Stats): Promise<void>;
  /** Makes (or replaces) the symlink NAME -> target, with st's times. */
  writeSymlink(dir: T, name: string, target: string, st: Stats): void;
  /** Makes the new directory NAME (filled next, then finishDir). */
  makeDir(dir: T, name: string): T;
  /** Opens the existing directory NAME (never through a symlink). */
  openDir(dir: T, name: string): T;
  /** Gives a directory made by makeDir its final mode and times. */
  finishDir(dir: T, st: Stats): void;
  closeDir(dir: T): void;
  /** "dev:ino" of an open directory (so the walk never copies a directory into itself). */
  identity(dir: T): string;
  /** How messages name NAME in dir (or dir itself). */
  shown(dir: T, name?: string): string;
}

/** File data is copied this many bytes at a time. */
const CHUNK = 1 << 20;

/** A copy lets the event loop run this often (ms), so a signal's handler can clean up. */
const BREATHE_MS = 20;

/** The times to give a copy of an object with these stats (seconds, for futimes/lutimes). */
export function fileTimes(st: Stats): [number, number] {
  return [st.atimeMs / 1000, st.mtimeMs / 1000];
}

/** "permission denied" from a Node fs error ("EACCES: permission denied, open '...'"). */
export function fsErrorText(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const m = /^[A-Z0-9]+: ([^,]+)/.exec(message);
  return m?.[1] ?? message;
}

/**
 * Writes NAME in the staging directory open as dirFd (./staged-dest.ts: no one else looks there),
 * replacing what a source of the same name put there: a new file (O_CREAT|O_EXCL, never a
 * symlink's target) filled by write, then given mode and st's times.
 */
export async function writeStagedFile(
  dirFd: number,
  name: string,
  write: (fd: number) => Promise<void>,
  mode: number,
  st: Stats,
): Promise<void> {
  const fd = openSync(fresh(dirFd, name), "wx", 0o600);
  try {
    await write(fd);
    fchmodSync(fd, mode);
    futimesSync(fd, ...fileTimes(st));
  } finally {
    closeSync(fd);
  }
}

/** The symlink NAME -> target in the staging directory dirFd, with st's times. */
export function writeStagedSymlink(dirFd: number, name: string, target: string, st: Stats): void {
  const path = fresh(dirFd, name);
  symlinkSync(target, path);
  lutimesSync(path, ...fileTimes(st));
}

/** NAME in the directory dirFd, cleared for a new object. */
function fresh(dirFd: number, name: string): string {
  if (lstatAt(dirFd, name) !== undefined) unlinkSync(at(dirFd, name));
  return at(dirFd, name);
}

/** What a type that is not copied is called in warnings. */
/** What a file that is neither regular, a directory nor a symlink is ("a socket"). */
export function specialKind(st: Stats): string {
  if (st.isFIFO()) return "a FIFO (named pipe)";
  if (st.isSocket()) return "a socket";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  return "an unknown file type";
}

/** An entry a walk visits: its name, what lookup gave, its path from the walk's root. */
export interface Visit<E> {
  name: string;
  e: E;
  rel: string;
}

/** What walkDir reports instead of yielding. */
export interface WalkHooks {
  /** Honour .gitignore and .dockerignore (default true). */
  ignore?: boolean | undefined;
  /** A name left out: not valid UTF-8 ("undecodable"), or lookup was refused ("denied"). */
  skip(name: string, why: "undecodable" | "denied"): void;
  /** An entry the ignore rules exclude. */
  ignored(): void;
}

/**
 * One directory's step of a walk (cp's copy, cache save's packing): the rules below it (its own
 * ignore files added) and its entries in name order, each looked up just before it is yielded.
 */
export function walkDir<D, E extends { st: Stats }>(
  src: IgnoreSource<D, E>,
  dir: D,
  listed: { names: string[]; undecodable: string[] },
  rules: IgnoreRules,
  rel: string,
  hooks: WalkHooks,
): { rules: IgnoreRules; visits: Generator<Visit<E>> } {
  const here = hooks.ignore === false ? rules : enterIgnoreFiles(rules, rel, src, dir);
  function* visits(): Generator<Visit<E>> {
    for (const bad of listed.undecodable) hooks.skip(bad, "undecodable");
    for (const name of listed.names) {
      let e: E | undefined;
      try {
        e = src.lookup(dir, name);
      } catch (err) {
        if (errCode(err) !== "EACCES") throw err;
        hooks.skip(name, "denied");
        continue;
      }
      if (e === undefined) continue; // gone meanwhile
      const r = rel === "" ? name : `${rel}/${name}`;
      if (here.ignores(r, e.st.isDirectory())) hooks.ignored();
      else yield { name, e, rel: r };
    }
  }
  return { rules: here, visits: visits() };
}

export class TreeCopier<D, T> {
  readonly report = emptyReport();
  private readonly destDirs = new Set<string>();
  private readonly buf = Buffer.allocUnsafe(CHUNK);
  private lastBreath = Date.now();

  constructor(
    private readonly src: TreeSource<D>,
    private readonly dst: TreeDest<T>,
    private readonly opts: CopyOptions,
  ) {}

  private skip(path: string, reason: string): void {
    const s = { path, reason };
    this.report.skipped.push(s);
    this.opts.onSkip?.(s);
  }

  private progress(): void {
    this.opts.onProgress?.(this.report);
  }

  /** Yields to the event loop now and then (SIGINT's handler runs between two entries); stops here on an abort. */
  private async breathe(): Promise<void> {
    this.opts.signal?.throwIfAborted();
    const now = Date.now();
    if (now - this.lastBreath < BREATHE_MS) return;
    await new Promise<void>((done) => setImmediate(done));
    this.lastBreath = Date.now();
  }

  /** Remembers a destination directory, so the walk never enters it as a source. */
  noteDest(dir: T): void {
    this.destDirs.add(this.dst.identity(dir));
  }

  /** Copies the source entry `e` (in srcDir) to NAME in dstDir, recursively. */
  async copyEntry(
    srcDir: D,
    e: SourceEntry,
    dstDir: T,
    name: string,
    rules: IgnoreRules,
    rel: string,
  ): Promise<void> {
    await this.breathe();
    const refused = this.src.refuse?.(srcDir, e) ?? this.dst.refuseName?.(name);
    if (refused !== undefined) {
      this.skip(e.shown, refused);
      return;
    }
    const st = e.st;
    try {
      if (st.isFile()) {
        this.mustNotBeDir(dstDir, name, "a file");
        let fd: number;
        try {
          fd = this.src.openFile(srcDir, e);
        } catch (err) {
          const c = errCode(err);
          if (c !== "ECHANGED" && c !== "EACCES") throw err;
          this.skip(
            e.shown,
            c === "EACCES" ? "permission denied: not copied" : "it changed while being copied",
          );
          return;
        }
        try {
          await this.dst.writeFile(dstDir, name, (out) => this.pump(fd, out), st);
        } finally {
          closeSync(fd);
        }
        this.report.files++;
      } else if (st.isSymbolicLink()) {
        this.mustNotBeDir(dstDir, name, "a symlink");
        this.dst.writeSymlink(dstDir, name, this.src.readlink(srcDir, e), st);
        this.report.symlinks++;
      } else if (st.isDirectory()) {
        if (this.destDirs.has(identity(st))) {
          this.skip(e.shown, "it is the destination of this copy (not copied into itself)");
          return;
        }
        const there = this.dst.lookup(dstDir, name);
        if (there !== undefined && !there.isDirectory()) {
          const what = there.isSymbolicLink() ? "the symlink" : "the non-directory";
          throw new CopyError(
            `cannot copy the directory ${e.shown} over ${what} ${this.dst.shown(dstDir, name)}` +
              (there.isSymbolicLink() ? " (symlinks at the destination are never followed)" : ""),
          );
        }
        let srcChild: D;
        try {
          srcChild = this.src.openDir(srcDir, e);
        } catch (err) {
          if (errCode(err) !== "EACCES") throw err;
          this.skip(e.shown, "permission denied: not copied");
          return;
        }
        try {
          const made = there === undefined;
          const child = made ? this.dst.makeDir(dstDir, name) : this.dst.openDir(dstDir, name);
          try {
            this.noteDest(child);
            await this.copyContents(srcChild, child, rules, rel);
            if (made) this.dst.finishDir(child, st);
          } finally {
            this.dst.closeDir(child);
          }
        } finally {
          this.src.closeDir(srcChild);
        }
        this.report.dirs++;
      } else {
        this.skip(e.shown, `${specialKind(st)}: not copied`);
        return;
      }
    } catch (err) {
      if (err instanceof CvisorError) throw err;
      throw new CopyError(`${e.shown}: ${fsErrorText(err)}`, errCode(err) ?? "ECP", {
        cause: err,
      });
    }
    this.progress();
  }

  /** Copies what the source directory holds into the destination directory. */
  async copyContents(srcDir: D, dstDir: T, rules: IgnoreRules, rel: string): Promise<void> {
    const shown = this.src.shown(srcDir);
    let listed;
    try {
      listed = this.src.list(srcDir);
    } catch (err) {
      if (errCode(err) !== "EACCES") throw err;
      this.skip(shown, "permission denied: its entries are not copied");
      return;
    }
    const { rules: here, visits } = walkDir(this.src, srcDir, listed, rules, rel, {
      ignore: this.opts.ignore,
      skip: (name, why) =>
        why === "undecodable"
          ? this.skip(`${shown}/${name}`, "its name is not valid UTF-8: not copied")
          : this.skip(`${shown === "/" ? "" : shown}/${name}`, "permission denied: not copied"),
      ignored: () => this.report.ignored++,
    });
    for (const v of visits) await this.copyEntry(srcDir, v.e, dstDir, v.name, here, v.rel);
  }

  private mustNotBeDir(dstDir: T, name: string, what: string): void {
    if (this.dst.lookup(dstDir, name)?.isDirectory()) {
      throw new CopyError(
        `cannot overwrite the directory ${this.dst.shown(dstDir, name)} with ${what}`,
      );
    }
  }

  private async pump(from: number, to: number): Promise<void> {
    for (;;) {
      const n = readSync(from, this.buf, 0, CHUNK, null);
      if (n === 0) return;
      for (let done = 0; done < n;) done += writeSync(to, this.buf, done, n - done);
      this.report.bytes += n;
      this.progress();
      await this.breathe();
    }
  }
}

/** A source operand as the user wrote it, split the way docker cp reads it. */
export interface SourceSpec {
  /** The path as written. */
  text: string;
  /** Ends in `/.` (or is `.`): the directory's contents go, not the directory itself. */
  contentsOnly: boolean;
  /** Ends in `/`: it must be a directory. */
  trailingSlash: boolean;
}

export function sourceSpec(text: string): SourceSpec {
  const last = text
    .split("/")
    .filter((c) => c !== "")
    .pop();
  return { text, contentsOnly: last === "." || text === "/", trailingSlash: text.endsWith("/") };
}

/** What the destination operand is, as looked up (following symlinks: the user named it). */
export type DestState = "dir" | "other" | "missing";

/**
 * Where one source lands, by docker cp's rules:
 *  - "into": inside the destination directory, under the source's own name;
 *  - "as": the destination itself (made, replaced by a file, or merged into by `SRC/.`);
 * or an error message. `several`: more than one source (the destination must be a directory).
 */
export function placement(
  src: SourceSpec,
  srcIsDir: boolean,
  dstText: string,
  dst: DestState,
  several: boolean,
): { kind: "into" | "as" } | { error: string } {
  if (several && dst !== "dir") {
    return { error: `${dstText}: with several sources the destination must be a directory` };
  }
  if (!srcIsDir) {
    if (src.contentsOnly || src.trailingSlash) return { error: `${src.text}: not a directory` };
    if (dst === "dir") return { kind: "into" };
    if (dst === "missing" && /\/\.?$/.test(dstText)) {
      return { error: `${dstText}: no such directory` };
    }
    return { kind: "as" };
  }
  if (dst === "other")
    return { error: `cannot copy the directory ${src.text} to the file ${dstText}` };
  if (src.contentsOnly) return { kind: "as" };
  return { kind: dst === "dir" ? "into" : "as" };
}
