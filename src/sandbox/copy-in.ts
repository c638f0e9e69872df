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
  fchmodSync,
  fstatSync,
  futimesSync,
  lstatSync,
  mkdirSync,
  readlinkSync,
  statSync,
  type Stats,
} from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { CopyError, NotFoundError, UsageError } from "../core/errors.js";
import { WHITEOUT_PREFIX } from "./layer-names.js";
import {
  placement,
  sourceSpec,
  TreeCopier,
  fileTimes,
  writeStagedFile,
  writeStagedSymlink,
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
  openDirPath,
  errCode,
  identity,
  lstatAt,
  openDirAt,
  openFileChecked,
} from "../store/fd-path.js";
import { IgnoreRules } from "./ignore-rules.js";
import { removeTree } from "../store/remove-tree.js";
import { ownerRecord } from "../store/owner.js";
import { cleanedUpOnSignal } from "./interrupt.js";
import { StagedDest, type StagedDir, type Stager } from "./staged-dest.js";
import {
  makeOpaqueIfNeeded,
  removeWhiteoutAt,
  settleUpper,
  upperDirOf,
  UPPER_STAGING,
} from "./upper-writer.js";
import { MergedView, upperFd, ViewError, type ViewDir, type ViewOptions } from "./view.js";

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
      throw new NotFoundError(`${text}: ${why}`, c ?? "ENOENT");
    }
    if ((spec.contentsOnly || spec.trailingSlash) && !st.isDirectory()) {
      throw new NotFoundError(`${text}: not a directory`, "ENOTDIR");
    }
    return { spec, entry: { name: basename(path), shown: path, st, path, top: true } };
  });
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

/**
 * The sandbox's upper layer as a copy's destination: directories are directories of the view.
 * Wrapped in a StagedDest, it only ever writes into this copy's own staging directory (in work/,
 * where no run looks); the live directories of the view are only looked up and opened.
 */
class UpperTree implements TreeDest<ViewDir> {
  constructor(private readonly view: MergedView) {}

  lookup(dir: ViewDir, name: string): Stats | undefined {
    return this.view.lookup(dir, name)?.st;
  }

  refuseName(name: string): string | undefined {
    return name.startsWith(WHITEOUT_PREFIX)
      ? "names starting with .wh. are reserved in the sandbox's layer: not copied"
      : undefined;
  }

  async writeFile(
    dir: ViewDir,
    name: string,
    write: (fd: number) => Promise<void>,
    st: Stats,
  ): Promise<void> {
    await writeStagedFile(upperFdOf(dir), name, write, st.mode & 0o7777, st);
  }

  writeSymlink(dir: ViewDir, name: string, target: string, st: Stats): void {
    writeStagedSymlink(upperFdOf(dir), name, target, st);
  }

  makeDir(dir: ViewDir, name: string): ViewDir {
    const parentFd = upperFdOf(dir);
    mkdirSync(at(parentFd, name), { mode: 0o700 });
    const made = MergedView.detached(
      dir.vpath === "/" ? `/${name}` : `${dir.vpath}/${name}`,
      name,
      dir,
      lstatAt(parentFd, name) ?? dir.st,
    );
    this.view.adopt(made, openDirAt(parentFd, name));
    return made;
  }

  openDir(dir: ViewDir, name: string): ViewDir {
    const entry = this.view.lookup(dir, name);
    if (entry === undefined) throw new ViewError("ENOENT", this.shown(dir, name));
    return this.view.openDir(dir, entry);
  }

  finishDir(dir: ViewDir, st: Stats): void {
    const fd = upperFdOf(dir);
    fchmodSync(fd, st.mode & 0o7777);
    futimesSync(fd, ...fileTimes(st));
  }

  closeDir(dir: ViewDir): void {
    this.view.close(dir);
  }

  identity(dir: ViewDir): string {
    // Only the upper is written: a host directory of the view is never a destination.
    const fd = upperFd(dir);
    return fd !== undefined ? identity(fstatSync(fd)) : `view:${dir.vpath}`;
  }

  shown(dir: ViewDir, name?: string): string {
    if (name === undefined) return `sb:${dir.vpath}`;
    return `sb:${dir.vpath === "/" ? "" : dir.vpath}/${name}`;
  }
}

function upperFdOf(dir: ViewDir): number {
  const fd = upperFd(dir);
  if (fd === undefined) throw new CopyError(`sb:${dir.vpath}: not open`);
  return fd;
}

/**
 * One copy's staging in the sandbox's work/: the directory cp~<owner> holds every object, the
 * record cp~<owner>.json the renames into the upper (paths from the upper's root).
 */
class UpperStager implements Stager<ViewDir> {
  readonly record: string;
  private readonly name = `${UPPER_STAGING}${ownerRecord()}`;
  private root: ViewDir | undefined;

  constructor(
    private readonly view: MergedView,
    private readonly work: string,
  ) {
    this.record = `${work}/${this.name}.json`;
  }

  area(live: ViewDir): ViewDir {
    upperDirOf(this.view, live, this.work); // the directory the object is renamed into
    if (this.root === undefined) {
      const path = `${this.work}/${this.name}`;
      mkdirSync(path, { mode: 0o700 });
      const root = MergedView.detached("/", "", undefined, lstatSync(path));
      this.view.adopt(root, openDirPath(path));
      this.root = root;
    }
    return this.root;
  }

  fd(dir: ViewDir): number {
    return upperFdOf(dir);
  }

  livePath(live: ViewDir): string {
    return live.vpath.slice(1);
  }

  objPath(_area: ViewDir, obj: string): string {
    return `${this.name}/${obj}`;
  }

  areas(): string[] {
    return this.root ? [this.name] : [];
  }

  prepareDir(live: ViewDir, name: string, staged: ViewDir): void {
    makeOpaqueIfNeeded(this.view, live, name, upperFdOf(staged));
  }

  placed(liveFd: number, name: string): void {
    removeWhiteoutAt(liveFd, name);
  }

  discard(): void {
    if (this.root) this.view.close(this.root);
    removeTree(`${this.work}/${this.name}`);
    removeTree(`${this.record}.tmp`);
  }
}

/**
 * Copies host sources (paths as the user wrote them: a trailing `/.` copies a directory's
 * contents) to the virtual path dst of the sandbox whose layer is upper (and work/ beside it),
 * by docker cp's rules. All or nothing (./staged-dest.ts): throws CvisorError with nothing
 * copied when the operands do not fit or copying fails part way; SIGINT, SIGTERM or SIGHUP
 * during the copy removes what was staged and ends the process as the signal would.
 */
export async function copyIn(
  layer: { upper: string; work: string },
  sources: readonly string[],
  dst: string,
  opts: CopyInOptions = {},
): Promise<CopyReport> {
  const srcs = checkHostSources(sources);
  settleUpper(layer);
  const view = new MergedView(layer.upper, opts);
  const stager = new UpperStager(view, layer.work);
  const upper = new StagedDest(new UpperTree(view), stager);
  try {
    const host = new HostTree(opts.hidden ?? []);
    const copier = new TreeCopier(host, upper, opts);
    let target;
    try {
      target = view.resolve(dst, true);
    } catch (err) {
      if (err instanceof ViewError) throw new NotFoundError(`sb:${err.message}`, err.code);
      throw err;
    }
    const there = target.entry?.st;
    const state = there === undefined ? "missing" : there.isDirectory() ? "dir" : "other";
    const plans = srcs.map((s) => {
      const p = placement(s.spec, s.entry.st.isDirectory(), `sb:${dst}`, state, srcs.length > 1);
      if ("error" in p) throw new UsageError(p.error);
      return { ...s, kind: p.kind };
    });
    if (state !== "dir" && upper.refuseName(target.name) !== undefined) {
      throw new UsageError(`sb:${dst}: names starting with .wh. are reserved`);
    }
    const none = IgnoreRules.none();
    const parentDir = upper.live(target.parent);
    let dstDir: StagedDir<ViewDir> | undefined;
    if (state === "dir" && target.entry) {
      dstDir = upper.live(view.openDir(target.parent, target.entry));
      copier.noteDest(dstDir);
    }
    await cleanedUpOnSignal(
      () => upper.discard(),
      async () => {
        for (const s of plans) {
          const parent = dirname(s.entry.path);
          if (s.kind === "into" && dstDir) {
            await copier.copyEntry(parent, s.entry, dstDir, s.entry.name, none, "");
          } else if (dstDir) {
            // SRC/. into an existing directory: the contents, merged.
            const srcDir = host.openDir(parent, s.entry);
            await copier.copyContents(srcDir, dstDir, none, "");
            copier.report.dirs++;
          } else {
            await copier.copyEntry(parent, s.entry, parentDir, target.name, none, "");
          }
        }
        upper.publish();
      },
      opts.signal,
    );
    return copier.report;
  } finally {
    upper.discard();
    view.dispose();
  }
}
