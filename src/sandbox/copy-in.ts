// `cvisor cp HOST... sb:/PATH`: host files into a named sandbox, written only into its upper
// layer, in the layer's format (docs/ARCHITECTURE.md, "The overlay"), as the guest's own writes
// would be:
//  - every new object is made in the sandbox's work/ directory and renamed into place, so a
//    crash never leaves half a file in the upper (a run using the sandbox sees the old object or
//    the new one);
//  - upper directories missing on the way (the twin of a directory of a lower layer or of the
//    host) are made with that directory's mode and times;
//  - a name the sandbox had deleted (a whiteout `.wh.NAME`) is created, then its whiteout is
//    removed; a directory made where a lower layer or the host has a directory the guest cannot
//    see (deleted, or hidden) is made opaque (`.wh..wh..opq` inside it before it appears), so
//    none of the old entries come back; an object made in the upper hides whatever the lower
//    layers have at its name, so nothing else is needed;
//  - names starting with `.wh.` are reserved by the format: skipped with a warning.
// The destination path is resolved in the sandbox's merged view (./view.ts): its symlinks are
// followed through the view, never by the kernel in the upper, and every upper directory is
// held by an fd opened with O_NOFOLLOW, so a symlink the guest planted cannot lead a write out
// of the upper layer. The host side is the user's own: its paths are used as given.
import {
  chmodSync,
  closeSync,
  fchmodSync,
  fstatSync,
  futimesSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readlinkSync,
  renameSync,
  rmdirSync,
  statSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
  type Stats,
} from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { CvisorError } from "../core/errors.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";
import {
  placement,
  sourceSpec,
  TreeCopier,
  fileTimes,
  fsErrorText,
  type CopyOptions,
  type CopyReport,
  type SourceEntry,
  type SourceSpec,
  type TreeDest,
  type TreeSource,
} from "./copy-tree.js";
import {
  at,
  listDirNames,
  errCode,
  identity,
  lstatAt,
  openDirAt,
  openFileChecked,
} from "./fd-path.js";
import { IgnoreRules } from "./ignore-rules.js";
import { removeTree } from "./remove-tree.js";
import { MergedView, ViewError, type ViewDir, type ViewOptions } from "./view.js";

/**
 * hidden: host paths guests must not read (the default hidden credentials, cvisor's storage):
 * left out, with a warning, when a directory copy comes across them (naming one as a source
 * copies it); also hidden in the view the destination is resolved in. lowers are never written.
 */
export interface CopyInOptions extends CopyOptions, ViewOptions {}

interface HostEntry extends SourceEntry {
  /** Its host path. */
  path: string;
  /** A source operand itself (never refused as hidden: the user named it). */
  top?: boolean;
}

/**
 * The upper layer's directory of a view directory, made where missing (up from the nearest
 * one that exists) with the mode and times the view shows: each built in work/ and renamed in,
 * so a run sees it whole; one a run made meanwhile is used as it is. Held by the view after.
 */
export function upperDirOf(view: MergedView, dir: ViewDir, work: string): number {
  if (dir.upperFd !== undefined) return dir.upperFd;
  if (dir.parent === undefined) throw new CvisorError("the sandbox has no upper layer", "ESTORE");
  const parentFd = upperDirOf(view, dir.parent, work);
  const tmp = `${work}/dir~${tag()}`;
  mkdirSync(tmp, { mode: 0o700 });
  try {
    chmodSync(tmp, dir.st.mode & 0o7777);
    utimesSync(tmp, ...fileTimes(dir.st));
    renameSync(tmp, at(parentFd, dir.name));
  } catch (err) {
    rmdirSync(tmp);
    // A run made it meanwhile: use theirs.
    const c = errCode(err);
    if (c !== "ENOTEMPTY" && c !== "EEXIST") throw err;
  }
  const fd = openDirAt(parentFd, dir.name);
  view.adopt(dir, fd);
  return fd;
}

/** A host source operand, checked: what is there (lstat, or stat when it ends in / or /.). */
export interface HostSource {
  spec: SourceSpec;
  entry: HostEntry;
}

/** Looks up the host sources; a missing one is an error (before anything is copied). */
export function checkHostSources(texts: readonly string[]): HostSource[] {
  return texts.map((text) => {
    const spec = sourceSpec(text);
    const path = resolve(text);
    let st: Stats;
    try {
      st = spec.contentsOnly || spec.trailingSlash ? statSync(path) : lstatSync(path);
    } catch (err) {
      const c = errCode(err);
      const why =
        c === "ENOENT"
          ? "no such file or directory"
          : c === "ENOTDIR"
            ? "not a directory"
            : fsErrorText(err);
      throw new CvisorError(`${text}: ${why}`, c ?? "ENOENT");
    }
    if ((spec.contentsOnly || spec.trailingSlash) && !st.isDirectory()) {
      throw new CvisorError(`${text}: not a directory`, "ENOTDIR");
    }
    return { spec, entry: { name: basename(path), shown: path, st, path, top: true } };
  });
}

function tag(): string {
  return `${process.pid.toString(36)}${Math.random().toString(36).slice(2, 10)}`;
}

class HostTree implements TreeSource<string> {
  /** "dev:ino" of the hidden paths that exist (so another path to one is caught too). */
  private readonly refused = new Set<string>();

  constructor(hidden: readonly string[]) {
    for (const p of hidden) {
      const st = lstatSync(p, { throwIfNoEntry: false });
      if (st) this.refused.add(identity(st));
    }
  }

  list(dir: string): { names: string[]; undecodable: string[] } {
    return listDirNames(dir);
  }

  lookup(dir: string, name: string): HostEntry | undefined {
    const path = `${dir}/${name}`;
    const st = lstatSync(path, { throwIfNoEntry: false });
    return st ? { name, shown: path, st, path } : undefined;
  }

  openDir(_parent: string, entry: SourceEntry): string {
    const path = (entry as HostEntry).path;
    return path === "/" ? "" : path;
  }

  closeDir(): void {}

  openFile(_parent: string, entry: SourceEntry): number {
    return openFileChecked((entry as HostEntry).path, entry.st);
  }

  readlink(_parent: string, entry: SourceEntry): string {
    return readlinkSync((entry as HostEntry).path);
  }

  refuse(_parent: string, entry: SourceEntry): string | undefined {
    if ((entry as HostEntry).top) return undefined;
    return this.refused.has(identity(entry.st))
      ? "hidden from guests by default (name it as a source to copy it)"
      : undefined;
  }

  shown(dir: string): string {
    return dir || "/";
  }
}

/** The sandbox's upper layer as a copy's destination; directories are directories of the view. */
class UpperTree implements TreeDest<ViewDir> {
  constructor(
    private readonly view: MergedView,
    private readonly work: string,
  ) {}

  lookup(dir: ViewDir, name: string): Stats | undefined {
    return this.view.lookup(dir, name)?.st;
  }

  refuseName(name: string): string | undefined {
    return name.startsWith(WHITEOUT_PREFIX)
      ? "names starting with .wh. are reserved in the sandbox's layer: not copied"
      : undefined;
  }

  /** The upper directory of dir, made (with the mode and times it shows) if missing. */
  private upperOf(dir: ViewDir): number {
    return upperDirOf(this.view, dir, this.work);
  }

  /** Renames the finished object tmp (in work/) to NAME in dir's upper directory. */
  private place(dir: ViewDir, name: string, tmp: string): void {
    try {
      renameSync(tmp, at(this.upperOf(dir), name));
    } catch (err) {
      removeTree(tmp);
      throw err;
    }
    this.removeWhiteout(dir, name);
  }

  /** After NAME was made: its whiteout goes (the new object already hides it meanwhile). */
  private removeWhiteout(dir: ViewDir, name: string): void {
    if (dir.upperFd === undefined) return;
    try {
      unlinkSync(at(dir.upperFd, `${WHITEOUT_PREFIX}${name}`));
    } catch (err) {
      const c = errCode(err);
      if (c !== "ENOENT" && c !== "ENAMETOOLONG") throw err;
    }
  }

  writeFile(dir: ViewDir, name: string, write: (fd: number) => void, st: Stats): void {
    const tmp = `${this.work}/cp~${tag()}`;
    const fd = openSync(tmp, "wx", 0o600);
    try {
      write(fd);
      fchmodSync(fd, st.mode & 0o7777);
      futimesSync(fd, ...fileTimes(st));
    } catch (err) {
      closeSync(fd);
      unlinkSync(tmp);
      throw err;
    }
    closeSync(fd);
    this.place(dir, name, tmp);
  }

  writeSymlink(dir: ViewDir, name: string, target: string, st: Stats): void {
    const tmp = `${this.work}/cp~${tag()}`;
    symlinkSync(target, tmp);
    try {
      lutimesSync(tmp, ...fileTimes(st));
    } catch (err) {
      unlinkSync(tmp);
      throw err;
    }
    this.place(dir, name, tmp);
  }

  makeDir(dir: ViewDir, name: string): ViewDir {
    const parentFd = this.upperOf(dir);
    // A lower layer or the host has a directory here that the guest does not see (whited out,
    // or hidden): the new one must not let its entries show through.
    const opaque = this.view.dirBelowUpper(dir, name);
    const tmp = `${this.work}/cp~${tag()}`;
    mkdirSync(tmp, { mode: 0o700 });
    try {
      if (opaque) writeFileSync(`${tmp}/${OPAQUE_MARKER}`, "", { flag: "wx", mode: 0o600 });
    } catch (err) {
      removeTree(tmp);
      throw err;
    }
    this.place(dir, name, tmp);
    const made: ViewDir = {
      vpath: dir.vpath === "/" ? `/${name}` : `${dir.vpath}/${name}`,
      name,
      parent: dir,
      upperFd: undefined,
      lowers: [],
      host: undefined,
      st: lstatAt(parentFd, name) ?? dir.st,
    };
    this.view.adopt(made, openDirAt(parentFd, name));
    return made;
  }

  openDir(dir: ViewDir, name: string): ViewDir {
    const entry = this.view.lookup(dir, name);
    if (entry === undefined) throw new ViewError("ENOENT", this.shown(dir, name));
    return this.view.openDir(dir, entry);
  }

  finishDir(dir: ViewDir, st: Stats): void {
    if (dir.upperFd === undefined) return;
    fchmodSync(dir.upperFd, st.mode & 0o7777);
    futimesSync(dir.upperFd, ...fileTimes(st));
  }

  closeDir(dir: ViewDir): void {
    this.view.close(dir);
  }

  identity(dir: ViewDir): string {
    // Only the upper is written: a host directory of the view is never a destination.
    return dir.upperFd !== undefined ? identity(fstatSync(dir.upperFd)) : `view:${dir.vpath}`;
  }

  shown(dir: ViewDir, name?: string): string {
    if (name === undefined) return `sb:${dir.vpath}`;
    return `sb:${dir.vpath === "/" ? "" : dir.vpath}/${name}`;
  }
}

/**
 * Copies host sources (paths as the user wrote them: a trailing `/.` copies a directory's
 * contents) to the virtual path dst of the sandbox whose layer is upper (and work/ beside it),
 * by docker cp's rules. Throws CvisorError (nothing copied) when the operands do not fit, or
 * when copying fails part way (what was copied stays: each object whole).
 */
export function copyIn(
  layer: { upper: string; work: string },
  sources: readonly string[],
  dst: string,
  opts: CopyInOptions = {},
): CopyReport {
  const srcs = checkHostSources(sources);
  const view = new MergedView(layer.upper, opts);
  try {
    const upper = new UpperTree(view, layer.work);
    const host = new HostTree(opts.hidden ?? []);
    const copier = new TreeCopier(host, upper, opts);
    let target;
    try {
      target = view.resolve(dst, true);
    } catch (err) {
      if (err instanceof ViewError) throw new CvisorError(`sb:${err.message}`, err.code);
      throw err;
    }
    const there = target.entry?.st;
    const state = there === undefined ? "missing" : there.isDirectory() ? "dir" : "other";
    const plans = srcs.map((s) => {
      const p = placement(s.spec, s.entry.st.isDirectory(), `sb:${dst}`, state, srcs.length > 1);
      if ("error" in p) throw new CvisorError(p.error, "EUSAGE");
      return { ...s, kind: p.kind };
    });
    if (state !== "dir" && upper.refuseName(target.name) !== undefined) {
      throw new CvisorError(`sb:${dst}: names starting with .wh. are reserved`, "EUSAGE");
    }
    const none = IgnoreRules.none();
    let dstDir: ViewDir | undefined;
    if (state === "dir" && target.entry) {
      dstDir = view.openDir(target.parent, target.entry);
      copier.noteDest(dstDir);
    }
    for (const s of plans) {
      const parent = dirname(s.entry.path);
      if (s.kind === "into" && dstDir) {
        copier.copyEntry(parent, s.entry, dstDir, s.entry.name, none, "");
      } else if (dstDir) {
        // SRC/. into an existing directory: the contents, merged.
        const srcDir = host.openDir(parent, s.entry);
        copier.copyContents(srcDir, dstDir, none, "");
        copier.report.dirs++;
      } else {
        copier.copyEntry(parent, s.entry, target.parent, target.name, none, "");
      }
    }
    return copier.report;
  } finally {
    view.dispose();
  }
}
