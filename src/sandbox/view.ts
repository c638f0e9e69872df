// A small reader of a sandbox's merged view from outside any run: the upper layer over the host
// root, as the guest sees it (docs/ARCHITECTURE.md, "The overlay"). A name is looked up in the
// upper directory first, then a whiteout `.wh.NAME` there hides the host's NAME, then the host
// directory (unless an opaque marker `.wh..wh..opq` in the upper directory, or in one above it,
// stops the host from showing through). Names starting with `.wh.` are never shown; host paths
// in `hidden` (the credentials and cvisor's own storage every guest is denied by default) do not
// exist here either.
//
// The upper layer is the guest's work, so it is read as untrusted: every upper directory is
// opened from its parent's fd with O_NOFOLLOW (./fd-path.ts), files are opened O_NOFOLLOW and
// checked against what lstat said, nothing in the upper is ever followed by the kernel.
// Symlinks of the view are followed only by resolve(), textually through the view itself, as
// the supervisor does (40 hops, `..` on the symlink-free path, stopping at `/`).
//
// Limits: the view reads the upper layer and the host as they are when it looks; a run changing
// the sandbox meanwhile may make it see a mix (never a file outside the layers). `--hide` and
// `--expose` of past runs are not known here: only the default hidden paths are applied.
import { lstatSync, readlinkSync, realpathSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./changes.js";
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
} from "./fd-path.js";

/** A directory of the merged view, held open. */
export interface ViewDir {
  /** Its virtual path, without symlinks: "/" or "/a/b". */
  vpath: string;
  /** Its name in its parent ("" for the root). */
  name: string;
  parent: ViewDir | undefined;
  /** The upper layer's directory of this path, open (O_NOFOLLOW), if there is one. */
  upperFd: number | undefined;
  /** The host directory whose entries show here, if any ("" is the host root). */
  host: string | undefined;
  /** Its stats in the view (the upper directory's, else the host's). */
  st: Stats;
}

/** One entry of a view directory. */
export interface ViewEntry {
  name: string;
  vpath: string;
  /** lstat of the object the view shows (never followed). */
  st: Stats;
  layer: "upper" | "host";
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
  /** The host root the upper lies over (tests); "" (the real root) by default. */
  host?: string;
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
    const opaque = lstatAt(upperFd, OPAQUE_MARKER)?.isFile() === true;
    this.root = {
      vpath: "/",
      name: "",
      parent: undefined,
      upperFd,
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
      if (this.whiteout(dir, name)) return undefined;
    }
    if (dir.host === undefined) return undefined;
    const path = `${dir.host}/${name}`;
    if (this.hidden.has(path)) return undefined;
    const st = lstatHost(path);
    return st ? { name, vpath, st, layer: "host" } : undefined;
  }

  /** Is there a whiteout for NAME in dir's upper directory? */
  whiteout(dir: ViewDir, name: string): boolean {
    if (dir.upperFd === undefined) return false;
    try {
      return lstatAt(dir.upperFd, `${WHITEOUT_PREFIX}${name}`) !== undefined;
    } catch (err) {
      if (errCode(err) === "ENAMETOOLONG") return false;
      throw err;
    }
  }

  /**
   * The names of a directory, sorted (no `.`, `..`, `.wh.*`, whited-out or hidden names), and
   * the names that are not valid UTF-8 (shown with replacement characters), which are left out.
   */
  list(dir: ViewDir): { names: string[]; undecodable: string[] } {
    const names = new Set<string>();
    const gone = new Set<string>();
    const undecodable: string[] = [];
    if (dir.upperFd !== undefined) {
      for (const raw of listRaw(fdPath(dir.upperFd))) {
        const name = decodeName(raw);
        if (name === undefined) {
          undecodable.push(raw.toString("utf8"));
        } else if (name.startsWith(WHITEOUT_PREFIX)) {
          if (name !== OPAQUE_MARKER) gone.add(name.slice(WHITEOUT_PREFIX.length));
        } else {
          names.add(name);
        }
      }
    }
    if (dir.host !== undefined) {
      for (const raw of listRaw(dir.host || "/")) {
        const name = decodeName(raw);
        if (name === undefined) {
          const shown = raw.toString("utf8");
          if (!undecodable.includes(shown)) undecodable.push(shown);
        } else if (
          !name.startsWith(WHITEOUT_PREFIX) &&
          !gone.has(name) &&
          !this.hidden.has(`${dir.host}/${name}`)
        ) {
          names.add(name);
        }
      }
    }
    return { names: [...names].sort(), undecodable };
  }

  /** Opens a directory entry of dir (close it with close()). */
  openDir(dir: ViewDir, entry: ViewEntry): ViewDir {
    if (entry.open) return entry.open;
    if (!entry.st.isDirectory()) throw new ViewError("ENOTDIR", entry.vpath);
    let upperFd: number | undefined;
    let host: string | undefined;
    if (entry.layer === "upper") {
      if (dir.upperFd === undefined) throw new ViewError("ENOENT", entry.vpath);
      upperFd = this.own(openDirAt(dir.upperFd, entry.name));
      const st = lstatAt(upperFd, OPAQUE_MARKER);
      const opaque = st?.isFile() === true;
      if (!opaque && dir.host !== undefined && !this.whiteout(dir, entry.name)) {
        const path = `${dir.host}/${entry.name}`;
        if (!this.hidden.has(path) && lstatHost(path)?.isDirectory()) host = path;
      }
    } else {
      host = `${dir.host ?? ""}/${entry.name}`;
    }
    return { vpath: entry.vpath, name: entry.name, parent: dir, upperFd, host, st: entry.st };
  }

  /** Releases a directory from openDir() or resolve() (the root stays open until dispose()). */
  close(dir: ViewDir): void {
    if (dir === this.root || dir.upperFd === undefined) return;
    if (this.owned.delete(dir.upperFd)) closeQuietly(dir.upperFd);
    dir.upperFd = undefined;
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

  /** The path to open an entry of dir by (an fd-relative one in the upper). */
  realPath(dir: ViewDir, entry: ViewEntry): string {
    if (entry.layer === "upper") {
      if (dir.upperFd === undefined) throw new ViewError("ENOENT", entry.vpath);
      return at(dir.upperFd, entry.name);
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
    return {
      name: dir.name,
      vpath: dir.vpath,
      st: dir.st,
      layer: dir.upperFd !== undefined ? "upper" : "host",
      open: dir,
    };
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
