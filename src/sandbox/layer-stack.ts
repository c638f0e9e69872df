// The one reader of a stack of layers (the upper over the read-only snapshot layers, or the
// layers a squash merges): how a name is decided and how a directory merges with its twins
// below. The merged view (./view.ts) and the effective-layer walk (./effective-layer.ts) are
// both built on it. The rules (docs/ARCHITECTURE.md, "The overlay"): a name is looked up layer
// by layer, top first; the first layer that has the object answers; a whiteout `.wh.NAME` in a
// layer hides NAME of every layer below (and of the host); a directory merges with its twins
// below while they are directories and neither an opaque marker `.wh..wh..opq` in it nor a
// whiteout of its name beside it stops it. Names starting with `.wh.` never show.
//
// Layers are a guest's work, so they are read as untrusted: every directory is opened from its
// parent's fd with O_NOFOLLOW, every object is lstat'ed, nothing is followed. Names are raw
// bytes: they need not be UTF-8. Here a name is a "key": its bytes as a latin1 string (one char
// per byte), so names compare and sort as bytes.
import { chmodSync, constants, lstatSync, openSync, readdirSync, type Stats } from "node:fs";
import { StoreError } from "../core/errors.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";
import { at, closeQuietly, errCode, fdPath } from "../store/fd-path.js";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = constants;
const WH = WHITEOUT_PREFIX;

/** Root searches and lists any directory: nothing to widen (or to change the ctime of). */
const asRoot = process.getuid?.() === 0;

/** The key of a name given as text. */
export function keyOf(name: string): string {
  return Buffer.from(name, "utf8").toString("latin1");
}

/** A key as UTF-8 text (lossy when it is not UTF-8). */
export function shownText(key: string): string {
  return Buffer.from(key, "latin1").toString("utf8");
}

/** The key NAME in the directory open as fd, as a raw path. */
export function rawAt(fd: number, key: string): Buffer {
  return Buffer.from(at(fd, key), "latin1");
}

/** A layer directory's names, read at once. */
interface Listing {
  /** Objects (not reserved names). */
  names: Set<string>;
  /** Names whited out here. */
  whiteouts: Set<string>;
  opaque: boolean;
}

export interface OpenOptions {
  /**
   * Listed: the directory's names are read once, when it is opened (a walk, which visits them
   * all). Otherwise each name is asked when it is looked up (a view over an upper that changes
   * while it is read, and of which only a few names are looked up).
   */
  listed?: boolean;
  /**
   * Directories the owner cannot list or search (a guest's `chmod 0`) are given u+rx while they
   * are open and their mode restored by close(); for immutable layers only (the squash): the
   * upper may change under the walk. Without it such a directory is left out (listed) or fails.
   */
  widen?: boolean;
}

/** A layer's directory of one path, open (O_NOFOLLOW). */
export class LayerDir {
  readonly opaque: boolean;
  private readonly listed: Listing | undefined;

  /**
   * @param layer its index in the stack (0: the top)
   * @param restore the mode to give back on close, when opening widened it
   */
  constructor(
    readonly layer: number,
    readonly fd: number,
    listed: boolean,
    private readonly restore?: { path: Buffer; mode: number },
  ) {
    this.listed = listed ? readListing(fd) : undefined;
    this.opaque = this.listed?.opaque ?? this.lstat(OPAQUE_MARKER)?.isFile() === true;
  }

  /** lstat of the object KEY here (never a reserved name), or undefined. */
  object(key: string): Stats | undefined {
    if (this.listed && !this.listed.names.has(key)) return undefined;
    return this.lstat(key);
  }

  /** Is KEY whited out here? */
  whitedOut(key: string): boolean {
    if (this.listed) return this.listed.whiteouts.has(key);
    return this.lstat(`${WH}${key}`) !== undefined;
  }

  /** The names and whiteouts here (read now unless listed at open). */
  listing(): Listing {
    return this.listed ?? readListing(this.fd);
  }

  /** lstat of KEY in this directory, raw (whiteout files too); undefined when it is not there. */
  lstat(key: string): Stats | undefined {
    try {
      return lstatSync(rawAt(this.fd, key));
    } catch (err) {
      const c = errCode(err);
      if (c === "ENOENT" || c === "ENOTDIR" || c === "ENAMETOOLONG") return undefined;
      // Listable but not searchable: a walk leaves its entries out (it widens those it may).
      if (c === "EACCES" && this.listed) return undefined;
      throw err;
    }
  }

  /** The object KEY here as a raw path, valid while this directory is open. */
  path(key: string): Buffer {
    return rawAt(this.fd, key);
  }

  close(): void {
    closeQuietly(this.fd);
    if (this.restore) chmodSync(this.restore.path, this.restore.mode);
  }
}

function readListing(fd: number): Listing {
  const d: Listing = { names: new Set(), whiteouts: new Set(), opaque: false };
  for (const raw of readdirSync(fdPath(fd), { encoding: "buffer" })) {
    const key = raw.toString("latin1");
    if (key === OPAQUE_MARKER) {
      try {
        d.opaque = lstatSync(rawAt(fd, key)).isFile();
      } catch {
        d.opaque = false; // gone meanwhile
      }
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

/**
 * Opens the layer directory at path (st: its lstat, for `widen`). undefined when it is gone or
 * cannot be read and the directory is listed; otherwise such errors are thrown.
 */
export function openLayerDir(
  layer: number,
  path: Buffer,
  st: Stats,
  opts: OpenOptions,
): LayerDir | undefined {
  const listed = opts.listed === true;
  const open = (): number => openSync(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  let fd: number;
  let restore: { path: Buffer; mode: number } | undefined;
  const mode = st.mode & 0o7777;
  try {
    fd = open();
  } catch (err) {
    const c = errCode(err);
    if (c === "EACCES" && opts.widen) {
      // An immutable layer: the directory lstat saw is still the one at path.
      chmodSync(path, mode | 0o500);
      restore = { path, mode };
      try {
        fd = open();
      } catch (err2) {
        chmodSync(path, mode);
        throw err2;
      }
    } else if (listed && (c === "ENOENT" || c === "ENOTDIR" || c === "ELOOP" || c === "EACCES")) {
      return undefined;
    } else {
      throw err;
    }
  }
  if (restore === undefined && opts.widen && !asRoot && (mode & 0o500) !== 0o500) {
    // Readable but not searchable: lstat of its entries would fail.
    chmodSync(path, mode | 0o500);
    restore = { path, mode };
  }
  try {
    return new LayerDir(layer, fd, listed, restore);
  } catch (err) {
    closeQuietly(fd);
    if (restore) chmodSync(path, restore.mode);
    if (listed && !opts.widen && errCode(err) === "EACCES") return undefined;
    throw err;
  }
}

/** A path's directories in a stack, top first, and whether what lies below the stack shows. */
export interface StackDir {
  layers: LayerDir[];
  below: boolean;
}

/**
 * Opens the roots of a stack (absolute layer roots, top first) down to the first opaque one:
 * the layers below an opaque root do not show. Throws StoreError when a root cannot be opened.
 */
export function openStack(roots: readonly string[], opts: OpenOptions): StackDir {
  const layers: LayerDir[] = [];
  try {
    for (const [i, root] of roots.entries()) {
      let d: LayerDir | undefined;
      try {
        const st = lstatSync(root);
        if (!st.isDirectory()) {
          throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
        }
        d = openLayerDir(i, Buffer.from(root), st, opts);
      } catch (err) {
        throw new StoreError(`layer ${root}: ${errCode(err) ?? String(err)}`, "ELAYER", {
          cause: err,
        });
      }
      if (d === undefined) throw new StoreError(`layer ${root}: cannot be read`, "ELAYER");
      layers.push(d);
      if (d.opaque) return { layers, below: false };
    }
    return { layers, below: true };
  } catch (err) {
    for (const d of layers) d.close();
    throw err;
  }
}

/** What decides a name in a stack directory: the object of a layer, or its whiteout. */
export interface Decision {
  /** The deciding layer's position in the directory's layers. */
  at: number;
  whiteout: boolean;
}

/**
 * What decides KEY in layers (top first), with the object's lstat; undefined when no layer has
 * it (the host may).
 */
export function decide(
  layers: readonly LayerDir[],
  key: string,
): (Decision & { st?: Stats }) | undefined {
  for (const [at, d] of layers.entries()) {
    const st = d.object(key);
    if (st !== undefined) return { at, whiteout: false, st };
    if (d.whitedOut(key)) return { at, whiteout: true };
  }
  return undefined;
}

/** Every name the layers decide, sorted as bytes. */
export function decideAll(layers: readonly LayerDir[]): [string, Decision][] {
  const decided = new Map<string, Decision>();
  layers.forEach((d, at) => {
    const { names, whiteouts } = d.listing();
    for (const n of names) if (!decided.has(n)) decided.set(n, { at, whiteout: false });
    for (const n of whiteouts) if (!decided.has(n)) decided.set(n, { at, whiteout: true });
  });
  return [...decided.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * The layers of the directory KEY, decided as an object by layers[at], whose own directory is
 * `first` (already open): first and its twins below while they merge. `stopped`: something in
 * the stack stops the merge (what lies below the stack does not show through). A twin that
 * cannot be opened (listed only) ends the merge without claiming anything about what is below.
 */
export function mergeTwins(
  layers: readonly LayerDir[],
  at: number,
  key: string,
  first: LayerDir,
  opts: OpenOptions,
): { layers: LayerDir[]; stopped: boolean } {
  const merged = [first];
  try {
    let stopped = first.opaque || (layers[at] as LayerDir).whitedOut(key);
    for (const m of layers.slice(at + 1)) {
      if (stopped) break;
      const st = m.object(key);
      if (st?.isDirectory()) {
        const twin = openLayerDir(m.layer, m.path(key), st, opts);
        if (twin === undefined) break;
        merged.push(twin);
        stopped = twin.opaque || m.whitedOut(key);
      } else {
        stopped = st !== undefined || m.whitedOut(key);
      }
    }
    return { layers: merged, stopped };
  } catch (err) {
    for (const d of merged.slice(1)) d.close();
    throw err;
  }
}
