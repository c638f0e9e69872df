// The one layer a stack of layers amounts to (the upper over the read-only snapshot layers, or
// the layers a squash merges), walked without writing anything: what `diff`, `export` and
// `squashLayers` compute. How the stack is read (and why as untrusted): ./layer-stack.ts. A
// path here is a byte string (latin1: one char per byte), so names compare and sort as bytes.
import { fstatSync, type Stats } from "node:fs";
import { fdPath } from "../store/fd-path.js";
import { WHITEOUT_PREFIX } from "./layer-names.js";
import {
  decideAll,
  mergeTwins,
  openLayerDir,
  openStack,
  type LayerDir,
  type OpenOptions,
} from "./layer-stack.js";

export { rawAt, shownText } from "./layer-stack.js";

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
  /** Widen directories the owner cannot read (immutable layers only): see OpenOptions. */
  widen?: boolean;
}

/**
 * The effective layer of a stack (absolute layer roots, top first), depth first, names sorted
 * as bytes. The first entry is the root (rel ""), the last its "leave". Throws StoreError when
 * a root cannot be opened.
 */
export function* walkEffective(
  roots: readonly string[],
  opts: WalkOptions = {},
): Generator<EffectiveEntry> {
  const open: OpenOptions = { listed: true, widen: opts.widen };
  const stack = openStack(roots, open);
  try {
    const top = stack.layers[0];
    if (top === undefined) return;
    const root: EffectiveEntry = {
      kind: "object",
      rel: "",
      name: "",
      layer: 0,
      st: fstatSync(top.fd),
      path: Buffer.from(fdPath(top.fd)),
      below: stack.below,
      opaque: !stack.below,
    };
    yield root;
    yield* walkDir(stack.layers, stack.below, "", open);
    yield { ...root, kind: "leave" };
  } finally {
    for (const d of stack.layers) d.close();
  }
}

function* walkDir(
  dirs: readonly LayerDir[],
  below: boolean,
  rel: string,
  open: OpenOptions,
): Generator<EffectiveEntry> {
  for (const [name, { at, whiteout }] of decideAll(dirs)) {
    const d = dirs[at] as LayerDir;
    const childRel = rel === "" ? name : `${rel}/${name}`;
    if (whiteout) {
      if (!below) continue; // nothing below shows here anyway
      const st = d.lstat(`${WHITEOUT_PREFIX}${name}`);
      if (st === undefined) continue;
      const path = d.path(`${WHITEOUT_PREFIX}${name}`);
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
    const st = d.object(name);
    if (st === undefined) continue; // gone meanwhile (the upper of a running sandbox)
    const path = d.path(name);
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
    const first = openLayerDir(d.layer, path, st, open);
    if (first === undefined) {
      // Unreadable (or gone): shown empty, as it is, claiming nothing about what is below.
      entry.below = below;
      yield entry;
      yield { ...entry, kind: "leave" };
      continue;
    }
    let children: LayerDir[] = [first];
    try {
      const merged = mergeTwins(dirs, at, name, first, open);
      children = merged.layers;
      entry.below = below && !merged.stopped;
      entry.opaque = below && merged.stopped;
      yield entry;
      yield* walkDir(children, entry.below, childRel, open);
      yield { ...entry, kind: "leave" };
    } finally {
      for (const c of children) c.close();
    }
  }
}
