// The one layer a stack of layers amounts to (the upper over the read-only snapshot layers, or
// the layers a squash merges), walked without writing anything: what `diff`, `export` and
// `squashLayers` compute. Lookup in a stack (docs/ARCHITECTURE.md, "The overlay"): a name is
// looked up layer by layer, top first; the first layer that has the object answers; a whiteout
// `.wh.NAME` in a layer hides NAME of every layer below (and of the host); a directory merges
// with its twins below while they are directories and neither an opaque marker `.wh..wh..opq`
// in it nor a whiteout of its name beside it stops it. Names starting with `.wh.` never show.
//
// Layers are a guest's work (the upper, frozen former uppers), so they are read as untrusted:
// every directory is opened from its parent's fd with O_NOFOLLOW, every object is lstat'ed,
// nothing is followed. Names are raw bytes: they need not be UTF-8. Inside the walk a path is a
// "byte string" (latin1: one char per byte), so names compare and sort as bytes.
import {
  chmodSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  type Stats,
} from "node:fs";
import { StoreError } from "../core/errors.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";
import { at, closeQuietly, errCode, fdPath } from "../store/fd-path.js";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = constants;

/** One entry of the effective layer, in walk order: a directory, its entries, then its "leave". */
export interface EffectiveEntry {
  /**
   * "object": a file, symlink, directory (... then its entries, then "leave"), FIFO, ...;
   * "whiteout": the name is deleted (only reported where the host below may have it);
   * "leave": the end of a directory's entries.
   */
  kind: "object" | "whiteout" | "leave";
  /** Byte-string path below the roots, no leading slash; "" for the root. */
  rel: string;
  /** Byte-string name ("" for the root). */
  name: string;
  /** Index in the stack of the layer the object (or whiteout) comes from. */
  layer: number;
  /** lstat of the object (of the whiteout's own file for a whiteout). */
  st: Stats;
  /** The object (or the whiteout file), named relative to its open directory: valid during the walk. */
  path: Buffer;
  /**
   * Directories: whether what lies below the stack (the host) still shows through here. When it
   * does not while it does through the parent (or this is the root), the layer needs an opaque
   * marker here: `opaque`.
   */
  below: boolean;
  opaque: boolean;
}

export interface WalkOptions {
  /**
   * Directories the owner cannot list or search (a guest's `chmod 0`) are given u+rx for the
   * walk and their mode restored after; for immutable layers only (the squash): the upper may
   * change under the walk. Without it their entries are left out.
   */
  widen?: boolean;
}

/** The byte string of a name or path as UTF-8 text (lossy when it is not UTF-8). */
export function shownText(bytes: string): string {
  return Buffer.from(bytes, "latin1").toString("utf8");
}

/** NAME (a byte string) in the directory open as fd, as a raw path. */
export function rawAt(fd: number, name: string): Buffer {
  return Buffer.from(at(fd, name), "latin1");
}

/** A layer's directory of one path, open and listed. */
interface LayerDir {
  layer: number;
  fd: number;
  /** Objects (byte-string names, not reserved). */
  names: Set<string>;
  /** Names whited out here. */
  whiteouts: Set<string>;
  opaque: boolean;
  /** The mode to give back when the walk widened it. */
  restore?: { path: Buffer; mode: number };
}

const WH = WHITEOUT_PREFIX;

/** Root searches and lists any directory: nothing to widen (or to change the ctime of). */
const asRoot = process.getuid?.() === 0;

function lstatMaybe(path: Buffer): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    const c = errCode(err);
    // EACCES: in a directory that is listable but not searchable (the walk widens those it may).
    if (c === "ENOENT" || c === "ENOTDIR" || c === "ENAMETOOLONG" || c === "EACCES") {
      return undefined;
    }
    throw err;
  }
}

function listDir(layer: number, fd: number, restore?: LayerDir["restore"]): LayerDir {
  const d: LayerDir = {
    layer,
    fd,
    names: new Set(),
    whiteouts: new Set(),
    opaque: false,
    restore,
  };
  for (const raw of readdirSync(fdPath(fd), { encoding: "buffer" })) {
    const key = raw.toString("latin1");
    if (key === OPAQUE_MARKER) {
      d.opaque = lstatMaybe(rawAt(fd, key))?.isFile() === true;
    } else if (key.startsWith(WH)) {
      const target = key.slice(WH.length);
      // A whiteout of a reserved name hides nothing that could show.
      if (target !== "" && !target.startsWith(WH)) d.whiteouts.add(target);
    } else {
      d.names.add(key);
    }
  }
  return d;
}

function closeDir(d: LayerDir): void {
  closeQuietly(d.fd);
  if (d.restore) chmodSync(d.restore.path, d.restore.mode);
}

/**
 * Opens and lists the directory at path (st: its lstat). undefined when it is gone or cannot be
 * read (without `widen`).
 */
function openLayerDir(
  layer: number,
  path: Buffer,
  st: Stats,
  opts: WalkOptions,
): LayerDir | undefined {
  const open = (): number => openSync(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  let fd: number;
  let restore: LayerDir["restore"];
  try {
    fd = open();
  } catch (err) {
    const c = errCode(err);
    if (c === "EACCES" && opts.widen) {
      // An immutable layer: the directory lstat saw is still the one at path.
      chmodSync(path, (st.mode & 0o7777) | 0o500);
      restore = { path, mode: st.mode & 0o7777 };
      try {
        fd = open();
      } catch (err2) {
        chmodSync(path, restore.mode);
        throw err2;
      }
    } else if (c === "ENOENT" || c === "ENOTDIR" || c === "ELOOP" || c === "EACCES") {
      return undefined;
    } else {
      throw err;
    }
  }
  if (restore === undefined && opts.widen && !asRoot && (st.mode & 0o500) !== 0o500) {
    // Readable but not searchable: lstat of its entries would fail.
    chmodSync(path, (st.mode & 0o7777) | 0o500);
    restore = { path, mode: st.mode & 0o7777 };
  }
  try {
    return listDir(layer, fd, restore);
  } catch (err) {
    const d: LayerDir = { layer, fd, names: new Set(), whiteouts: new Set(), opaque: false };
    d.restore = restore;
    closeDir(d);
    if (!opts.widen && errCode(err) === "EACCES") return undefined;
    throw err;
  }
}

/**
 * The effective layer of a stack (absolute layer roots, top first), depth first, names sorted
 * as bytes. The first entry is the root (rel ""), the last its "leave". Throws CvisorError when
 * a root cannot be opened.
 */
export function* walkEffective(
  roots: readonly string[],
  opts: WalkOptions = {},
): Generator<EffectiveEntry> {
  const dirs: LayerDir[] = [];
  try {
    let stop = false;
    for (let i = 0; i < roots.length && !stop; i++) {
      const root = roots[i] as string;
      let st: Stats;
      try {
        st = lstatSync(root);
        if (!st.isDirectory())
          throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
      } catch (err) {
        throw new StoreError(`layer ${root}: ${errCode(err) ?? String(err)}`, "ELAYER", {
          cause: err,
        });
      }
      const d = openLayerDir(i, Buffer.from(root), st, opts);
      if (d === undefined) throw new StoreError(`layer ${root}: cannot be read`, "ELAYER");
      dirs.push(d);
      stop = d.opaque;
    }
    const top = dirs[0];
    if (top === undefined) return;
    const st = fstatSync(top.fd);
    const root: EffectiveEntry = {
      kind: "object",
      rel: "",
      name: "",
      layer: 0,
      st,
      path: Buffer.from(fdPath(top.fd)),
      below: !stop,
      opaque: stop,
    };
    yield root;
    yield* walkDir(dirs, !stop, "", opts);
    yield { ...root, kind: "leave" };
  } finally {
    for (const d of dirs) closeDir(d);
  }
}

function* walkDir(
  dirs: readonly LayerDir[],
  below: boolean,
  rel: string,
  opts: WalkOptions,
): Generator<EffectiveEntry> {
  // The first layer that has each name (as an object, or as a whiteout) decides it.
  const decided = new Map<string, { at: number; whiteout: boolean }>();
  dirs.forEach((d, at) => {
    for (const n of d.names) if (!decided.has(n)) decided.set(n, { at, whiteout: false });
    for (const n of d.whiteouts) if (!decided.has(n)) decided.set(n, { at, whiteout: true });
  });
  const keys = [...decided.keys()].sort();
  for (const name of keys) {
    const { at, whiteout } = decided.get(name) as { at: number; whiteout: boolean };
    const d = dirs[at] as LayerDir;
    const childRel = rel === "" ? name : `${rel}/${name}`;
    if (whiteout) {
      if (!below) continue; // nothing below shows here anyway
      const path = rawAt(d.fd, `${WH}${name}`);
      const st = lstatMaybe(path);
      if (st === undefined) continue;
      yield {
        kind: "whiteout",
        rel: childRel,
        name,
        layer: d.layer,
        st,
        path,
        below,
        opaque: false,
      };
      continue;
    }
    const path = rawAt(d.fd, name);
    const st = lstatMaybe(path);
    if (st === undefined) continue; // gone meanwhile (the upper of a running sandbox)
    const entry: EffectiveEntry = {
      kind: "object",
      rel: childRel,
      name,
      layer: d.layer,
      st,
      path,
      below: false,
      opaque: false,
    };
    if (!st.isDirectory()) {
      yield entry;
      continue;
    }
    const children: LayerDir[] = [];
    try {
      const first = openLayerDir(d.layer, path, st, opts);
      if (first === undefined) {
        // Unreadable (or gone): shown empty, as it is, claiming nothing about what is below.
        entry.below = below;
        yield entry;
        yield { ...entry, kind: "leave" };
        continue;
      }
      children.push(first);
      let stop = first.opaque || d.whiteouts.has(name);
      for (let j = at + 1; j < dirs.length && !stop; j++) {
        const m = dirs[j] as LayerDir;
        if (m.names.has(name)) {
          const twin = rawAt(m.fd, name);
          const tst = lstatMaybe(twin);
          if (tst?.isDirectory()) {
            const t = openLayerDir(m.layer, twin, tst, opts);
            if (t === undefined) break;
            children.push(t);
            stop = t.opaque || m.whiteouts.has(name);
          } else {
            stop = true;
          }
        } else if (m.whiteouts.has(name)) {
          stop = true;
        }
      }
      entry.below = below && !stop;
      entry.opaque = below && stop;
      yield entry;
      yield* walkDir(children, entry.below, childRel, opts);
      yield { ...entry, kind: "leave" };
    } finally {
      for (const c of children) closeDir(c);
    }
  }
}
