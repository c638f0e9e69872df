// `cvisor cp sb:/PATH... HOST`: files out of a named sandbox's merged view (./view.ts: the upper
// over its read-only snapshot layers over the host root) onto the host. The sandbox is untrusted (a guest made it), so nothing it holds may lead a write
// outside the destination:
//  - nothing of the sandbox is followed: symlinks are copied as symlinks with the same target
//    text (absolute, `..`, dangling: as they are), FIFOs, sockets and device nodes are skipped
//    with a warning, names that are not UTF-8 too;
//  - below the destination every directory is held by an fd and every name is made relative
//    to it (../store/fd-path.ts): directories are opened with O_NOFOLLOW, files are written under a
//    temp name made with O_CREAT|O_EXCL and renamed over the name, so a symlink already on the
//    host below the destination is replaced or refused, never written through;
//  - setuid and setgid bits are dropped from files (a guest's file must not become a privileged
//    program of whoever copies it out);
//  - a host directory of the view that is the destination itself is not entered (no copy into
//    itself), and the host paths hidden from guests are not in the view.
// The destination path itself is the user's: it is followed as given.
import {
  fchmodSync,
  fstatSync,
  futimesSync,
  mkdirSync,
  readFileSync,
  statSync,
  type Stats,
} from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { NotFoundError, UsageError } from "../core/errors.js";
import {
  fileTimes,
  fsErrorText,
  placement,
  sourceSpec,
  TreeCopier,
  writeStagedFile,
  writeStagedSymlink,
  type CopyOptions,
  type CopyReport,
  type SourceEntry,
  type SourceSpec,
  type TreeDest,
  type TreeSource,
} from "./copy-tree.js";
import {
  at,
  closeQuietly,
  errCode,
  identity,
  listDirNames,
  lstatAt,
  openDirAt,
  openDirPath,
} from "../store/fd-path.js";
import { ownerRecord, removeDeadLeftovers } from "../store/owner.js";
import { IgnoreRules } from "./ignore-rules.js";
import { cleanedUpOnSignal } from "./interrupt.js";
import { removeTree } from "../store/remove-tree.js";
import { settleStaged, StagedDest, type Stager } from "./staged-dest.js";
import {
  MergedView,
  ViewError,
  type Resolved,
  type ViewDir,
  type ViewEntry,
  type ViewOptions,
} from "./view.js";

/** hidden: host paths guests do not see (the default hidden credentials, cvisor's storage). */
export interface CopyOutOptions extends CopyOptions, ViewOptions {}

interface ViewSourceEntry extends SourceEntry {
  entry: ViewEntry;
}

function shownV(vpath: string): string {
  return `sb:${vpath}`;
}

class ViewTree implements TreeSource<ViewDir> {
  constructor(private readonly view: MergedView) {}

  list(dir: ViewDir): { names: string[]; undecodable: string[] } {
    return this.view.list(dir);
  }

  lookup(dir: ViewDir, name: string): ViewSourceEntry | undefined {
    const entry = this.view.lookup(dir, name);
    return entry && { name, shown: shownV(entry.vpath), st: entry.st, entry };
  }

  openDir(parent: ViewDir, e: SourceEntry): ViewDir {
    return this.view.openDir(parent, (e as ViewSourceEntry).entry);
  }

  closeDir(dir: ViewDir): void {
    this.view.close(dir);
  }

  openFile(parent: ViewDir, e: SourceEntry): number {
    return this.view.openFile(parent, (e as ViewSourceEntry).entry);
  }

  readlink(parent: ViewDir, e: SourceEntry): string {
    return this.view.readlink(parent, (e as ViewSourceEntry).entry);
  }

  shown(dir: ViewDir): string {
    return shownV(dir.vpath);
  }
}

/** A host directory below the destination, held open (-1 once closed). */
interface HostDir {
  fd: number;
  /** Its host path, for messages. */
  path: string;
}

/** Written only inside this copy's staging directories (a StagedDest wraps it). */
class HostDest implements TreeDest<HostDir> {
  lookup(dir: HostDir, name: string): Stats | undefined {
    return lstatAt(dir.fd, name);
  }

  async writeFile(
    dir: HostDir,
    name: string,
    write: (fd: number) => Promise<void>,
    st: Stats,
  ): Promise<void> {
    await writeStagedFile(dir.fd, name, write, st.mode & 0o1777, st); // no setuid, no setgid
  }

  writeSymlink(dir: HostDir, name: string, target: string, st: Stats): void {
    writeStagedSymlink(dir.fd, name, target, st);
  }

  makeDir(dir: HostDir, name: string): HostDir {
    mkdirSync(at(dir.fd, name), { mode: 0o700 }); // fails on anything there, a symlink too
    return { fd: openDirAt(dir.fd, name), path: this.shown(dir, name) };
  }

  openDir(dir: HostDir, name: string): HostDir {
    return { fd: openDirAt(dir.fd, name), path: this.shown(dir, name) };
  }

  finishDir(dir: HostDir, st: Stats): void {
    fchmodSync(dir.fd, st.mode & 0o1777);
    futimesSync(dir.fd, ...fileTimes(st));
  }

  closeDir(dir: HostDir): void {
    closeQuietly(dir.fd);
    dir.fd = -1; // closing twice closes nothing
  }

  identity(dir: HostDir): string {
    return identity(fstatSync(dir.fd));
  }

  shown(dir: HostDir, name?: string): string {
    if (name === undefined) return dir.path;
    return dir.path === "/" ? `/${name}` : `${dir.path}/${name}`;
  }
}

/** Prefix of a copy's staging directories and record on the host. */
const STAGING = ".cvisor-cp~";

/** The mount a directory is on (renames cannot cross one). */
function mountOf(fd: number): string {
  return /^mnt_id:\s*(\d+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1] ?? "";
}

/**
 * One copy's staging next to its destination: a directory .cvisor-cp~<owner> in the directory
 * the copy lands in (the root), and one more in the first directory below it on another mount
 * (renames stay on one mount); the record .cvisor-cp~<owner>.json in the root.
 */
class HostStager implements Stager<HostDir> {
  readonly record: string;
  private readonly name = `${STAGING}${ownerRecord()}`;
  private readonly byMount = new Map<string, HostDir>();
  private readonly made: string[] = [];
  private readonly rootMount: string;

  constructor(private readonly root: HostDir) {
    this.record = `${root.path === "/" ? "" : root.path}/${this.name}.json`;
    this.rootMount = mountOf(root.fd);
  }

  private rel(dir: HostDir): string {
    if (dir.path === this.root.path) return "";
    return dir.path.slice(this.root.path === "/" ? 1 : this.root.path.length + 1);
  }

  area(live: HostDir): HostDir {
    const mount = mountOf(live.fd);
    let area = this.byMount.get(mount);
    if (area === undefined) {
      const home = mount === this.rootMount ? this.root : live;
      // What a killed copy left on that mount, unless a record in the root (being finished by
      // someone) may still name it.
      if (home !== this.root && !this.recordsInRoot()) removeDeadLeftovers(home.path, STAGING);
      mkdirSync(at(home.fd, this.name), { mode: 0o700 });
      area = { fd: openDirAt(home.fd, this.name), path: `${home.path}/${this.name}` };
      this.made.push(this.rel(area));
      this.byMount.set(mount, area);
    }
    return area;
  }

  private recordsInRoot(): boolean {
    return listDirNames(this.root.path).names.some(
      (n) => n.startsWith(STAGING) && n.endsWith(".json"),
    );
  }

  fd(dir: HostDir): number {
    return dir.fd;
  }

  livePath(live: HostDir): string {
    return this.rel(live);
  }

  objPath(area: HostDir, obj: string): string {
    return `${this.rel(area)}/${obj}`;
  }

  areas(): string[] {
    return [...this.made];
  }

  discard(): void {
    for (const area of this.byMount.values()) closeQuietly(area.fd);
    this.byMount.clear();
    const base = this.root.path === "/" ? "" : this.root.path;
    for (const rel of this.made) removeTree(`${base}/${rel}`);
    this.made.length = 0;
    removeTree(`${this.record}.tmp`);
  }
}

function resolveSource(view: MergedView, text: string): { spec: SourceSpec; r: Resolved } {
  const spec = sourceSpec(text);
  const follow = spec.contentsOnly || spec.trailingSlash;
  let r: Resolved;
  try {
    r = view.resolve(text, follow);
  } catch (err) {
    if (err instanceof ViewError) throw new NotFoundError(`sb:${err.message}`, err.code);
    throw err;
  }
  if (r.entry === undefined) {
    throw new NotFoundError(`sb:${text}: no such file or directory`);
  }
  if (follow && !r.entry.st.isDirectory()) {
    throw new NotFoundError(`sb:${text}: not a directory`, "ENOTDIR");
  }
  return { spec, r };
}

/**
 * Copies sandbox sources (virtual paths as the user wrote them, without `sb:`; a trailing `/.`
 * copies a directory's contents) out of the sandbox whose upper layer is `upper` to the host
 * path dst, by docker cp's rules. All or nothing (./staged-dest.ts): throws CvisorError with
 * nothing copied when the operands do not fit or copying fails part way; SIGINT, SIGTERM or
 * SIGHUP during the copy removes what was staged and ends the process as the signal would.
 */
export async function copyOut(
  upper: string,
  sources: readonly string[],
  dst: string,
  opts: CopyOutOptions = {},
): Promise<CopyReport> {
  const view = new MergedView(upper, opts);
  const inner = new HostDest();
  let root: HostDir | undefined;
  let dest: StagedDest<HostDir> | undefined;
  try {
    const srcs = sources.map((text) => resolveSource(view, text));
    const abs = resolve(dst);
    let there: Stats | undefined;
    try {
      there = statSync(abs, { throwIfNoEntry: false });
    } catch (err) {
      if (errCode(err) !== "ENOTDIR") throw err;
      throw new NotFoundError(`${dst}: no such directory`, "ENOTDIR");
    }
    const state = there === undefined ? "missing" : there.isDirectory() ? "dir" : "other";
    const plans = srcs.map((s) => {
      const isDir = s.r.entry?.st.isDirectory() === true;
      const p = placement(
        { ...s.spec, text: `sb:${s.spec.text}` },
        isDir,
        dst,
        state,
        srcs.length > 1,
      );
      if ("error" in p) throw new UsageError(p.error);
      return { ...s, kind: p.kind };
    });
    // The directory the copy lands in: the destination, or the one that will hold it.
    const rootPath = state === "dir" ? abs : dirname(abs);
    try {
      root = { fd: openDirPath(rootPath), path: rootPath };
    } catch (err) {
      const c = errCode(err);
      const why = c === "ENOENT" || c === "ENOTDIR" ? "no such directory" : fsErrorText(err);
      throw new NotFoundError(`${dirname(abs)}: ${why}`, c ?? "ENOENT", { cause: err });
    }
    settleStaged(rootPath, STAGING, rootPath);
    const staged = new StagedDest(inner, new HostStager(root));
    dest = staged;
    const copier = new TreeCopier(new ViewTree(view), staged, opts);
    const none = IgnoreRules.none();
    const top = staged.live(root);
    if (state === "dir") copier.noteDest(top);
    await cleanedUpOnSignal(
      () => staged.discard(),
      async () => {
        for (const s of plans) {
          const entry = s.r.entry as ViewEntry;
          const src = { name: entry.name, shown: `sb:${entry.vpath}`, st: entry.st, entry };
          if (s.kind === "into" && state === "dir") {
            await copier.copyEntry(s.r.parent, src, top, entry.name, none, "");
          } else if (state === "dir") {
            // SRC/. into an existing directory: the contents, merged.
            const srcDir = view.openDir(s.r.parent, entry);
            try {
              await copier.copyContents(srcDir, top, none, "");
            } finally {
              view.close(srcDir);
            }
            copier.report.dirs++;
          } else {
            await copier.copyEntry(s.r.parent, src, top, basename(abs), none, "");
          }
        }
        staged.publish();
      },
      opts.signal,
    );
    return copier.report;
  } finally {
    dest?.discard();
    if (root) inner.closeDir(root);
    view.dispose();
  }
}
