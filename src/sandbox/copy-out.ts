// `cvisor cp sb:/PATH... HOST`: files out of a named sandbox's merged view (./view.ts: the upper
// over its read-only snapshot layers over the host root) onto the host. The sandbox is untrusted (a guest made it), so nothing it holds may lead a write
// outside the destination:
//  - nothing of the sandbox is followed: symlinks are copied as symlinks with the same target
//    text (absolute, `..`, dangling: as they are), FIFOs, sockets and device nodes are skipped
//    with a warning, names that are not UTF-8 too;
//  - below the destination every directory is held by an fd and every name is made relative
//    to it (./fd-path.ts): directories are opened with O_NOFOLLOW, files are written under a
//    temp name made with O_CREAT|O_EXCL and renamed over the name, so a symlink already on the
//    host below the destination is replaced or refused, never written through;
//  - setuid and setgid bits are dropped from files (a guest's file must not become a privileged
//    program of whoever copies it out);
//  - a host directory of the view that is the destination itself is not entered (no copy into
//    itself), and the host paths hidden from guests are not in the view.
// The destination path itself is the user's: it is followed as given.
import {
  closeSync,
  fchmodSync,
  fstatSync,
  futimesSync,
  lutimesSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  symlinkSync,
  unlinkSync,
  type Stats,
} from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { CvisorError } from "../core/errors.js";
import {
  fileTimes,
  fsErrorText,
  placement,
  sourceSpec,
  TreeCopier,
  type CopyOptions,
  type CopyReport,
  type SourceEntry,
  type SourceSpec,
  type TreeDest,
  type TreeSource,
} from "./copy-tree.js";
import { at, closeQuietly, errCode, identity, lstatAt, openDirAt, openDirPath } from "./fd-path.js";
import { IgnoreRules } from "./ignore-rules.js";
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

/** A host directory below the destination, held open. */
interface HostDir {
  fd: number;
  /** Its host path, for messages. */
  path: string;
}

function tag(): string {
  return `${process.pid.toString(36)}${Math.random().toString(36).slice(2, 10)}`;
}

class HostDest implements TreeDest<HostDir> {
  lookup(dir: HostDir, name: string): Stats | undefined {
    return lstatAt(dir.fd, name);
  }

  /** Renames the finished temp object over NAME (a symlink there is replaced, not followed). */
  private place(dir: HostDir, tmp: string, name: string): void {
    try {
      renameSync(at(dir.fd, tmp), at(dir.fd, name));
    } catch (err) {
      try {
        unlinkSync(at(dir.fd, tmp));
      } catch {
        // Already gone.
      }
      throw err;
    }
  }

  writeFile(dir: HostDir, name: string, write: (fd: number) => void, st: Stats): void {
    const tmp = `.cvisor-cp~${tag()}`;
    // O_CREAT|O_EXCL: a new file, never an existing one or a symlink's target.
    const fd = openSync(at(dir.fd, tmp), "wx", 0o600);
    try {
      write(fd);
      fchmodSync(fd, st.mode & 0o1777); // no setuid, no setgid
      futimesSync(fd, ...fileTimes(st));
    } catch (err) {
      closeSync(fd);
      unlinkSync(at(dir.fd, tmp));
      throw err;
    }
    closeSync(fd);
    this.place(dir, tmp, name);
  }

  writeSymlink(dir: HostDir, name: string, target: string, st: Stats): void {
    const tmp = `.cvisor-cp~${tag()}`;
    symlinkSync(target, at(dir.fd, tmp));
    try {
      lutimesSync(at(dir.fd, tmp), ...fileTimes(st));
    } catch (err) {
      unlinkSync(at(dir.fd, tmp));
      throw err;
    }
    this.place(dir, tmp, name);
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
  }

  identity(dir: HostDir): string {
    return identity(fstatSync(dir.fd));
  }

  shown(dir: HostDir, name?: string): string {
    if (name === undefined) return dir.path;
    return dir.path === "/" ? `/${name}` : `${dir.path}/${name}`;
  }
}

function resolveSource(view: MergedView, text: string): { spec: SourceSpec; r: Resolved } {
  const spec = sourceSpec(text);
  const follow = spec.contentsOnly || spec.trailingSlash;
  let r: Resolved;
  try {
    r = view.resolve(text, follow);
  } catch (err) {
    if (err instanceof ViewError) throw new CvisorError(`sb:${err.message}`, err.code);
    throw err;
  }
  if (r.entry === undefined) {
    throw new CvisorError(`sb:${text}: no such file or directory`, "ENOENT");
  }
  if (follow && !r.entry.st.isDirectory()) {
    throw new CvisorError(`sb:${text}: not a directory`, "ENOTDIR");
  }
  return { spec, r };
}

/**
 * Copies sandbox sources (virtual paths as the user wrote them, without `sb:`; a trailing `/.`
 * copies a directory's contents) out of the sandbox whose upper layer is `upper` to the host
 * path dst, by docker cp's rules. Throws CvisorError (nothing copied) when the operands do not
 * fit, or when copying fails part way (what was copied stays).
 */
export function copyOut(
  upper: string,
  sources: readonly string[],
  dst: string,
  opts: CopyOutOptions = {},
): CopyReport {
  const view = new MergedView(upper, opts);
  const open: number[] = [];
  try {
    const srcs = sources.map((text) => resolveSource(view, text));
    const abs = resolve(dst);
    let there: Stats | undefined;
    try {
      there = statSync(abs, { throwIfNoEntry: false });
    } catch (err) {
      if (errCode(err) !== "ENOTDIR") throw err;
      throw new CvisorError(`${dst}: no such directory`, "ENOTDIR");
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
      if ("error" in p) throw new CvisorError(p.error, "EUSAGE");
      return { ...s, kind: p.kind };
    });
    const dest = new HostDest();
    const copier = new TreeCopier(new ViewTree(view), dest, opts);
    const none = IgnoreRules.none();
    let dstDir: HostDir | undefined;
    let parentDir: HostDir | undefined;
    try {
      if (state === "dir") {
        dstDir = { fd: openDirPath(abs), path: abs };
        open.push(dstDir.fd);
        copier.noteDest(dstDir);
      } else {
        parentDir = { fd: openDirPath(dirname(abs)), path: dirname(abs) };
        open.push(parentDir.fd);
      }
    } catch (err) {
      const c = errCode(err);
      const why = c === "ENOENT" || c === "ENOTDIR" ? "no such directory" : fsErrorText(err);
      throw new CvisorError(`${dirname(abs)}: ${why}`, c ?? "ENOENT", { cause: err });
    }
    for (const s of plans) {
      const entry = s.r.entry as ViewEntry;
      const src = { name: entry.name, shown: `sb:${entry.vpath}`, st: entry.st, entry };
      if (s.kind === "into" && dstDir) {
        copier.copyEntry(s.r.parent, src, dstDir, entry.name, none, "");
      } else if (dstDir) {
        // SRC/. into an existing directory: the contents, merged.
        const srcDir = view.openDir(s.r.parent, entry);
        try {
          copier.copyContents(srcDir, dstDir, none, "");
        } finally {
          view.close(srcDir);
        }
        copier.report.dirs++;
      } else if (parentDir) {
        copier.copyEntry(s.r.parent, src, parentDir, basename(abs), none, "");
      }
    }
    return copier.report;
  } finally {
    for (const fd of open) closeQuietly(fd);
    view.dispose();
  }
}
