// A small reader of a sandbox's merged view from outside any run: the upper layer over the
// read-only snapshot layers ("lowers", top first) over the host root, as the guest sees it
// (docs/ARCHITECTURE.md, "The overlay"). The layers are read by ./layer-stack.ts (the rules,
// and why as untrusted); where no layer decides a name and the stack lets it show, the host
// answers. Names starting with `.wh.` are never shown (the host's neither); host paths in
// `hidden` (the credentials and cvisor's own storage every guest is denied by default) do not
// exist here. Files are opened O_NOFOLLOW and checked against what lstat said; nothing in a
// layer is ever followed by the kernel.
// Symlinks of the view are followed only by resolve(), textually through the view itself, as
// the supervisor does (40 hops, `..` on the symlink-free path, stopping at `/`).
//
// Limits: the view reads the upper layer and the host as they are when it looks; a run changing
// the sandbox meanwhile may make it see a mix (never a file outside the layers). `--hide` and
// `--expose` of past runs are not known here: only the default hidden paths are applied.
import { lstatSync, readlinkSync, realpathSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { WHITEOUT_PREFIX } from "./layer-names.js";
import {
  decide,
  decideAll,
  keyOf,
  LayerDir,
  mergeTwins,
  openLayerDir,
  openStack,
} from "./layer-stack.js";
import { decodeName, errCode, listRaw, openFileChecked } from "../store/fd-path.js";

/** A directory of the merged view, held open. */
export interface ViewDir {
  /** Its virtual path, without symlinks: "/" or "/a/b". */
  vpath: string;
  /** Its name in its parent ("" for the root). */
  name: string;
  parent: ViewDir | undefined;
  /**
   * The layers' directories of this path whose entries show here, top first, open; the upper
   * layer's is the one with `layer` 0 (see upperFd()).
   */
  layers: LayerDir[];
  /** The host directory whose entries show here, if any ("" is the host root). */
  host: string | undefined;
  /** Its stats in the view (its top layer's directory's; the root: the host root's). */
  st: Stats;
}

/** The upper layer's directory of dir, open, if there is one. */
export function upperFd(dir: ViewDir): number | undefined {
  const top = dir.layers[0];
  return top?.layer === UPPER ? top.fd : undefined;
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

/** The upper's index in the view's stack; lower layer i is UPPER + 1 + i. */
const UPPER = 0;

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

/** Where an entry of the view comes from, from its layer's index in the stack. */
function origin(layer: number): Pick<ViewEntry, "layer" | "lower"> {
  return layer === UPPER ? { layer: "upper" } : { layer: "lower", lower: layer - UPPER - 1 };
}

export class MergedView {
  readonly root: ViewDir;
  private readonly hidden: Set<string>;
  private readonly owned = new Set<LayerDir>();

  constructor(
    readonly upper: string,
    opts: ViewOptions = {},
  ) {
    const host = opts.host ?? "";
    this.hidden = new Set((opts.hidden ?? []).map(realHidden));
    const stack = openStack([upper, ...(opts.lowers ?? [])], {});
    for (const d of stack.layers) this.owned.add(d);
    this.root = {
      vpath: "/",
      name: "",
      parent: undefined,
      layers: stack.layers,
      host: stack.below ? host : undefined,
      st: lstatSync(host || "/"),
    };
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
    const key = keyOf(name);
    const d = decide(dir.layers, key);
    if (d !== undefined) {
      const layer = (dir.layers[d.at] as LayerDir).layer;
      return d.st && { name, vpath, st: d.st, ...origin(layer) };
    }
    if (dir.host === undefined) return undefined;
    const path = `${dir.host}/${name}`;
    if (this.hidden.has(path)) return undefined;
    const st = lstatHost(path);
    return st ? { name, vpath, st, layer: "host" } : undefined;
  }

  /** Is there a whiteout for NAME in dir's upper directory? */
  whiteout(dir: ViewDir, name: string): boolean {
    const top = dir.layers[0];
    return top?.layer === UPPER && top.whitedOut(keyOf(name));
  }

  /**
   * What lies under the upper for NAME in dir, were the upper's own NAME and whiteout gone: a
   * directory (a new upper directory NAME would merge with it: it must be made opaque), or not.
   * Host directories hidden from the view count: their entries must not show either.
   */
  dirBelowUpper(dir: ViewDir, name: string): boolean {
    const d = decide(
      dir.layers.filter((l) => l.layer !== UPPER),
      keyOf(name),
    );
    if (d !== undefined) return d.st?.isDirectory() === true;
    if (dir.host === undefined) return false;
    return lstatHost(`${dir.host}/${name}`)?.isDirectory() === true;
  }

  /**
   * The names of a directory, sorted (no `.`, `..`, `.wh.*`, whited-out or hidden names), and
   * the names that are not valid UTF-8 (shown with replacement characters), which are left out.
   */
  list(dir: ViewDir): { names: string[]; undecodable: string[] } {
    const decided = new Map(decideAll(dir.layers));
    const names: string[] = [];
    const undecodable: string[] = [];
    const take = (raw: Buffer): void => {
      const name = decodeName(raw);
      if (name !== undefined) names.push(name);
      else undecodable.push(raw.toString("utf8"));
    };
    for (const [key, d] of decided) if (!d.whiteout) take(Buffer.from(key, "latin1"));
    if (dir.host !== undefined) {
      for (const raw of listRaw(dir.host || "/")) {
        const key = raw.toString("latin1");
        if (key.startsWith(WHITEOUT_PREFIX) || decided.has(key)) continue;
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
    const parts = { vpath: entry.vpath, name, parent: dir, st: entry.st };
    if (entry.layer === "host") {
      return { ...parts, layers: [], host: `${dir.host ?? ""}/${name}` };
    }
    const key = keyOf(name);
    const at = dir.layers.findIndex((l) =>
      entry.layer === "upper" ? l.layer === UPPER : l.layer === UPPER + 1 + (entry.lower ?? -1),
    );
    const from = dir.layers[at];
    if (from === undefined) throw new ViewError("ENOENT", entry.vpath);
    const first = openLayerDir(from.layer, from.path(key), entry.st, {}) as LayerDir;
    const { layers, stopped } = mergeTwins(dir.layers, at, key, first, {});
    for (const l of layers) this.owned.add(l);
    let host: string | undefined;
    if (!stopped && dir.host !== undefined) {
      const path = `${dir.host}/${name}`;
      if (!this.hidden.has(path) && lstatHost(path)?.isDirectory()) host = path;
    }
    return { ...parts, layers, host };
  }

  /** Releases a directory from openDir() or resolve() (the root stays open until dispose()). */
  close(dir: ViewDir): void {
    if (dir === this.root) return;
    for (const l of dir.layers) if (this.owned.delete(l)) l.close();
    dir.layers = [];
  }

  /**
   * Gives dir (which has none) the upper directory open as fd, taken into the view's care
   * (closed by close() or dispose()). A directory made in the upper starts with no layers.
   */
  adopt(dir: ViewDir, fd: number): void {
    if (upperFd(dir) !== undefined) throw new Error(`${dir.vpath}: already has an upper`);
    const upper = new LayerDir(UPPER, fd, false);
    this.owned.add(upper);
    dir.layers = [upper, ...dir.layers];
  }

  /** A directory of the upper only (made by a copy, or a staging area), not yet open. */
  static detached(vpath: string, name: string, parent: ViewDir | undefined, st: Stats): ViewDir {
    return { vpath, name, parent, layers: [], host: undefined, st };
  }

  /** Closes everything the view holds open. */
  dispose(): void {
    for (const l of this.owned) l.close();
    this.owned.clear();
  }

  /** The path to open an entry of dir by (an fd-relative one in a layer). */
  realPath(dir: ViewDir, entry: ViewEntry): string | Buffer {
    if (entry.layer === "host") return `${dir.host ?? ""}/${entry.name}`;
    const want = entry.layer === "upper" ? UPPER : UPPER + 1 + (entry.lower ?? -1);
    const l = dir.layers.find((d) => d.layer === want);
    if (l === undefined) throw new ViewError("ENOENT", entry.vpath);
    return l.path(keyOf(entry.name));
  }

  /** A symlink's target, as written (never followed here). */
  readlink(dir: ViewDir, entry: ViewEntry): string {
    return readlinkSync(this.realPath(dir, entry), "utf8");
  }

  /** Opens a regular file entry for reading (O_NOFOLLOW, checked to be the file lstat saw). */
  openFile(dir: ViewDir, entry: ViewEntry): number {
    return openFileChecked(this.realPath(dir, entry), entry.st);
  }

  /** An entry for a directory the view holds open (the root, the end of a resolve). */
  private selfEntry(dir: ViewDir): ViewEntry {
    const top = dir.layers[0];
    const where = top !== undefined ? origin(top.layer) : { layer: "host" as const };
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
