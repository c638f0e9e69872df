// A small reader of a sandbox's merged view from outside any run: the upper layer over the
// read-only snapshot layers ("lowers", top first) over the host root, as the guest sees it
// (docs/ARCHITECTURE.md, "The overlay"). A name is looked up layer by layer, upper first: the
// first layer that has it answers; a whiteout `.wh.NAME` in a layer hides NAME of every layer
// below and of the host; a directory merges with its twins below while they are directories and
// no opaque marker `.wh..wh..opq` in it (or whiteout of its name beside it) stops it. Names
// starting with `.wh.` are never shown (the host's neither); host paths in `hidden` (the
// credentials and cvisor's own storage every guest is denied by default) do not exist here.
//
// The layers are a guest's work, so they are read as untrusted: every layer directory is opened
// from its parent's fd with O_NOFOLLOW (../store/fd-path.ts), files are opened O_NOFOLLOW and checked
// against what lstat said, nothing in a layer is ever followed by the kernel.
// Symlinks of the view are followed only by resolve(), textually through the view itself, as
// the supervisor does (40 hops, `..` on the symlink-free path, stopping at `/`).
//
// Limits: the view reads the upper layer and the host as they are when it looks; a run changing
// the sandbox meanwhile may make it see a mix (never a file outside the layers). `--hide` and
// `--expose` of past runs are not known here: only the default hidden paths are applied.
import { lstatSync, readlinkSync, realpathSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";
import {
  at,
  closeQuietly,
  decodeName,
  errCode,
  fdPath,
  listRaw,
  lstatAt,
  openDirAt,
  openDirPath,
  openFileChecked,
} from "../store/fd-path.js";

/** A directory of the merged view, held open. */
export interface ViewDir {
  /** Its virtual path, without symlinks: "/" or "/a/b". */
  vpath: string;
  /** Its name in its parent ("" for the root). */
  name: string;
  parent: ViewDir | undefined;
  /** The upper layer's directory of this path, open (O_NOFOLLOW), if there is one. */
  upperFd: number | undefined;
  /** The lower layers' directories of this path whose entries show here, top first, open. */
  lowers: LowerDir[];
  /** The host directory whose entries show here, if any ("" is the host root). */
  host: string | undefined;
  /** Its stats in the view (its top layer's directory's; the root: the host root's). */
  st: Stats;
}

/** A lower layer's directory, open (O_NOFOLLOW). */
export interface LowerDir {
  /** The layer: its index in the view's lowers. */
  index: number;
  fd: number;
}

/** One entry of a view directory. */
export interface ViewEntry {
  name: string;
  vpath: string;
  /** lstat of the object the view shows (never followed). */
  st: Stats;
  layer: "upper" | "lower" | "host";
  /** The lower layer's index, when layer is "lower". */
  lower?: number;
  /** Set when the entry is a directory the view already holds open (the root, a resolve's end). */
  open?: ViewDir;
}

/** The last component of a resolved path: its directory, its name, and what is there (if any). */
export interface Resolved {
  parent: ViewDir;
  name: string;
  entry: ViewEntry | undefined;
}

export interface ViewOptions {
  /** Absolute host paths that do not exist in the view (compared after realpath). */
  hidden?: readonly string[];
  /** The host root the layers lie over (tests); "" (the real root) by default. */
  host?: string;
  /** The read-only layers between the upper and the host: absolute tree directories, top first. */
  lowers?: readonly string[];
}

/** Thrown by resolve(): `code` is ENOENT, ENOTDIR or ELOOP, `vpath` where it happened. */
export class ViewError extends Error {
  constructor(
    readonly code: "ENOENT" | "ENOTDIR" | "ELOOP",
    readonly vpath: string,
  ) {
    const why = {
      ENOENT: "no such file or directory",
      ENOTDIR: "not a directory",
      ELOOP: "too many levels of symbolic links",
    }[code];
    super(`${vpath}: ${why}`);
    this.name = "ViewError";
  }
}

const MAX_HOPS = 40;

function join(dir: string, name: string): string {
  return dir === "/" ? `/${name}` : `${dir}/${name}`;
}

function isOpaque(fd: number): boolean {
  return lstatAt(fd, OPAQUE_MARKER)?.isFile() === true;
}

/** Is there a whiteout for NAME in the layer directory fd? */
function whiteoutAt(fd: number, name: string): boolean {
  try {
    return lstatAt(fd, `${WHITEOUT_PREFIX}${name}`) !== undefined;
  } catch (err) {
    if (errCode(err) === "ENAMETOOLONG") return false;
    throw err;
  }
}

function lstatHost(path: string): Stats | undefined {
  try {
    return lstatSync(path || "/");
  } catch (err) {
    const c = errCode(err);
    if (c === "ENOENT" || c === "ENOTDIR" || c === "ENAMETOOLONG") return undefined;
    throw err;
  }
}

/** A hidden path as the view compares it: its real path (its parent's, when it is missing). */
function realHidden(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    try {
      return `${realpathSync(dirname(path))}/${basename(path)}`;
    } catch {
      return path;
    }
  }
}

export class MergedView {
  readonly root: ViewDir;
  private readonly hidden: Set<string>;
  private readonly owned = new Set<number>();

  constructor(
    readonly upper: string,
    opts: ViewOptions = {},
  ) {
    const host = opts.host ?? "";
    this.hidden = new Set((opts.hidden ?? []).map(realHidden));
    const upperFd = this.own(openDirPath(upper));
    let opaque = isOpaque(upperFd);
    const lowers: LowerDir[] = [];
    for (const [index, tree] of (opts.lowers ?? []).entries()) {
      if (opaque) break; // layers below an opaque root do not show
      const fd = this.own(openDirPath(tree));
      lowers.push({ index, fd });
      opaque = isOpaque(fd);
    }
    this.root = {
      vpath: "/",
      name: "",
      parent: undefined,
      upperFd,
      lowers,
      host: opaque ? undefined : host,
      st: lstatSync(host || "/"),
    };
  }

  private own(fd: number): number {
    this.owned.add(fd);
    return fd;
  }

  /** Is this host path hidden from the view? */
  isHidden(hostPath: string): boolean {
    return this.hidden.has(hostPath);
  }

  /** NAME in dir, as the guest would see it; undefined when there is none. */
  lookup(dir: ViewDir, name: string): ViewEntry | undefined {
    if (name.startsWith(WHITEOUT_PREFIX) || name === "" || name === "." || name === "..") {
      return undefined;
    }
    const vpath = join(dir.vpath, name);
    if (dir.upperFd !== undefined) {
      const st = lstatAt(dir.upperFd, name);
      if (st) return { name, vpath, st, layer: "upper" };
      if (whiteoutAt(dir.upperFd, name)) return undefined;
    }
    for (const l of dir.lowers) {
      const st = lstatAt(l.fd, name);
      if (st) return { name, vpath, st, layer: "lower", lower: l.index };
      if (whiteoutAt(l.fd, name)) return undefined;
    }
    if (dir.host === undefined) return undefined;
    const path = `${dir.host}/${name}`;
    if (this.hidden.has(path)) return undefined;
    const st = lstatHost(path);
    return st ? { name, vpath, st, layer: "host" } : undefined;
  }

  /** Is there a whiteout for NAME in dir's upper directory? */
  whiteout(dir: ViewDir, name: string): boolean {
    return dir.upperFd !== undefined && whiteoutAt(dir.upperFd, name);
  }

  /**
   * What lies under the upper for NAME in dir, were the upper's own NAME and whiteout gone: a
   * directory (a new upper directory NAME would merge with it: it must be made opaque), or not.
   * Host directories hidden from the view count: their entries must not show either.
   */
  dirBelowUpper(dir: ViewDir, name: string): boolean {
    for (const l of dir.lowers) {
      const st = lstatAt(l.fd, name);
      if (st) return st.isDirectory();
      if (whiteoutAt(l.fd, name)) return false;
    }
    if (dir.host === undefined) return false;
    return lstatHost(`${dir.host}/${name}`)?.isDirectory() === true;
  }

  /**
   * The names of a directory, sorted (no `.`, `..`, `.wh.*`, whited-out or hidden names), and
   * the names that are not valid UTF-8 (shown with replacement characters), which are left out.
   */
  list(dir: ViewDir): { names: string[]; undecodable: string[] } {
    // Byte-string keys (latin1: one char per byte), so names that are not UTF-8 match too.
    const shown = new Set<string>();
    const gone = new Set<string>();
    const layerFds = [
      ...(dir.upperFd === undefined ? [] : [dir.upperFd]),
      ...dir.lowers.map((l) => l.fd),
    ];
    for (const fd of layerFds) {
      const goneHere: string[] = [];
      for (const raw of listRaw(fdPath(fd))) {
        const key = raw.toString("latin1");
        if (key.startsWith(WHITEOUT_PREFIX)) {
          if (key !== OPAQUE_MARKER) goneHere.push(key.slice(WHITEOUT_PREFIX.length));
        } else if (!gone.has(key)) {
          shown.add(key);
        }
      }
      for (const key of goneHere) gone.add(key);
    }
    const names: string[] = [];
    const undecodable: string[] = [];
    const take = (raw: Buffer): void => {
      const name = decodeName(raw);
      if (name !== undefined) names.push(name);
      else undecodable.push(raw.toString("utf8"));
    };
    for (const key of shown) take(Buffer.from(key, "latin1"));
    if (dir.host !== undefined) {
      for (const raw of listRaw(dir.host || "/")) {
        const key = raw.toString("latin1");
        if (key.startsWith(WHITEOUT_PREFIX) || gone.has(key) || shown.has(key)) continue;
        const name = decodeName(raw);
        if (name !== undefined && this.hidden.has(`${dir.host}/${name}`)) continue;
        take(raw);
      }
    }
    return { names: names.sort(), undecodable };
  }

  /** Opens a directory entry of dir (close it with close()): the entry's layer and its twins below. */
  openDir(dir: ViewDir, entry: ViewEntry): ViewDir {
    if (entry.open) return entry.open;
    if (!entry.st.isDirectory()) throw new ViewError("ENOTDIR", entry.vpath);
    const name = entry.name;
    let upperFd: number | undefined;
    const lowers: LowerDir[] = [];
    let host: string | undefined;
    let stop: boolean;
    let next = 0; // the first of dir.lowers that may merge
    if (entry.layer === "upper") {
      if (dir.upperFd === undefined) throw new ViewError("ENOENT", entry.vpath);
      upperFd = this.own(openDirAt(dir.upperFd, name));
      stop = isOpaque(upperFd) || whiteoutAt(dir.upperFd, name);
    } else if (entry.layer === "lower") {
      next = dir.lowers.findIndex((l) => l.index === entry.lower);
      const from = dir.lowers[next];
      if (from === undefined) throw new ViewError("ENOENT", entry.vpath);
      const fd = this.own(openDirAt(from.fd, name));
      lowers.push({ index: from.index, fd });
      stop = isOpaque(fd) || whiteoutAt(from.fd, name);
      next++;
    } else {
      host = `${dir.host ?? ""}/${name}`;
      stop = true;
    }
    for (const l of dir.lowers.slice(next)) {
      if (stop) break;
      const st = lstatAt(l.fd, name);
      if (st?.isDirectory()) {
        const fd = this.own(openDirAt(l.fd, name));
        lowers.push({ index: l.index, fd });
        stop = isOpaque(fd) || whiteoutAt(l.fd, name);
      } else {
        stop = st !== undefined || whiteoutAt(l.fd, name);
      }
    }
    if (!stop && dir.host !== undefined) {
      const path = `${dir.host}/${name}`;
      if (!this.hidden.has(path) && lstatHost(path)?.isDirectory()) host = path;
    }
    return { vpath: entry.vpath, name, parent: dir, upperFd, lowers, host, st: entry.st };
  }

  /** Releases a directory from openDir() or resolve() (the root stays open until dispose()). */
  close(dir: ViewDir): void {
    if (dir === this.root) return;
    if (dir.upperFd !== undefined && this.owned.delete(dir.upperFd)) closeQuietly(dir.upperFd);
    dir.upperFd = undefined;
    for (const l of dir.lowers) if (this.owned.delete(l.fd)) closeQuietly(l.fd);
    dir.lowers = [];
  }

  /** Takes an fd the caller opened into the view's care (closed by close() or dispose()). */
  adopt(dir: ViewDir, fd: number): void {
    dir.upperFd = this.own(fd);
  }

  /** Closes everything the view holds open. */
  dispose(): void {
    for (const fd of this.owned) closeQuietly(fd);
    this.owned.clear();
  }

  /** The path to open an entry of dir by (an fd-relative one in a layer). */
  realPath(dir: ViewDir, entry: ViewEntry): string {
    if (entry.layer === "upper") {
      if (dir.upperFd === undefined) throw new ViewError("ENOENT", entry.vpath);
      return at(dir.upperFd, entry.name);
    }
    if (entry.layer === "lower") {
      const l = dir.lowers.find((d) => d.index === entry.lower);
      if (l === undefined) throw new ViewError("ENOENT", entry.vpath);
      return at(l.fd, entry.name);
    }
    return `${dir.host ?? ""}/${entry.name}`;
  }

  /** A symlink's target, as written (never followed here). */
  readlink(dir: ViewDir, entry: ViewEntry): string {
    return readlinkSync(this.realPath(dir, entry));
  }

  /** Opens a regular file entry for reading (O_NOFOLLOW, checked to be the file lstat saw). */
  openFile(dir: ViewDir, entry: ViewEntry): number {
    return openFileChecked(this.realPath(dir, entry), entry.st);
  }

  /** An entry for a directory the view holds open (the root, the end of a resolve). */
  private selfEntry(dir: ViewDir): ViewEntry {
    const top = dir.lowers[0];
    const where: Pick<ViewEntry, "layer" | "lower"> =
      dir.upperFd !== undefined
        ? { layer: "upper" }
        : top !== undefined
          ? { layer: "lower", lower: top.index }
          : { layer: "host" };
    return { name: dir.name, vpath: dir.vpath, st: dir.st, ...where, open: dir };
  }

  /**
   * Resolves a virtual path (absolute; `.` and `..` allowed) through the view, following its
   * symlinks (and the last component's too when followLast) textually, as the guest's kernel
   * would. Returns the last component: its directory, its name and what is there. A path that
   * ends at a directory by `.`, `..` or `/` returns that directory itself (entry.open).
   * Throws ViewError when a directory on the way is missing or not a directory.
   */
  resolve(vpath: string, followLast: boolean): Resolved {
    const todo = vpath.split("/").filter((c) => c !== "");
    let dir = this.root;
    let hops = 0;
    while (todo.length > 0) {
      const name = todo.shift() as string;
      if (name === ".") continue;
      if (name === "..") {
        dir = dir.parent ?? dir;
        continue;
      }
      const last = todo.length === 0;
      const entry = this.lookup(dir, name);
      if (entry === undefined) {
        if (last) return { parent: dir, name, entry: undefined };
        throw new ViewError("ENOENT", join(dir.vpath, name));
      }
      if (entry.st.isSymbolicLink() && (!last || followLast)) {
        if (++hops > MAX_HOPS) throw new ViewError("ELOOP", entry.vpath);
        const target = this.readlink(dir, entry);
        if (target.startsWith("/")) dir = this.root;
        todo.unshift(...target.split("/").filter((c) => c !== ""));
        continue;
      }
      if (last) return { parent: dir, name, entry };
      if (!entry.st.isDirectory()) throw new ViewError("ENOTDIR", entry.vpath);
      dir = this.openDir(dir, entry);
    }
    return { parent: dir.parent ?? dir, name: dir.name, entry: this.selfEntry(dir) };
  }
}
