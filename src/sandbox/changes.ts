// What a sandbox changed against the host, read from its upper layer on disk (the format is in
// docs/ARCHITECTURE.md, "The overlay"): a whiteout `.wh.NAME` deletes NAME, a directory holding
// `.wh..wh..opq` replaces the host's directory of that path, anything else is added (nothing
// at that path on the host) or changed (the host has something there). Used by `cvisor diff`
// and `cvisor export`.
import { lstatSync, readdirSync, type Stats } from "node:fs";

export const WHITEOUT_PREFIX = ".wh.";
export const OPAQUE_MARKER = ".wh..wh..opq";

/** One changed path, as `docker diff` reports it. */
export interface Change {
  kind: "A" | "C" | "D";
  /** Absolute, in the sandbox's view. */
  path: string;
}

/** One entry of the upper layer, in walk order (a directory before what it holds). */
export interface UpperEntry {
  /** Relative to the upper root, no leading slash ("home/u/x", ".wh.gone"). */
  rel: string;
  /** The real path under the upper root. */
  real: string;
  st: Stats;
}

/** Every entry below the upper root, depth first, names sorted; symlinks are never followed. */
export function* walkUpper(upper: string, rel = ""): Generator<UpperEntry> {
  let names: string[];
  try {
    names = readdirSync(rel ? `${upper}/${rel}` : upper);
  } catch {
    return;
  }
  for (const name of names.sort()) {
    const r = rel ? `${rel}/${name}` : name;
    const real = `${upper}/${r}`;
    let st: Stats;
    try {
      st = lstatSync(real);
    } catch {
      continue; // removed meanwhile
    }
    yield { rel: r, real, st };
    if (st.isDirectory()) yield* walkUpper(upper, r);
  }
}

function hostHas(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The changes of an upper layer against the host root, sorted by path. */
export function upperChanges(upper: string, host = ""): Change[] {
  const out = new Map<string, Change["kind"]>();
  for (const e of walkUpper(upper)) {
    const slash = e.rel.lastIndexOf("/");
    const dir = slash < 0 ? "" : e.rel.slice(0, slash);
    const name = e.rel.slice(slash + 1);
    if (name === OPAQUE_MARKER) {
      // The host directory's own entries are gone, unless the upper has them again.
      let hostNames: string[] = [];
      try {
        hostNames = readdirSync(`${host}/${dir}`);
      } catch {
        // no host directory there: nothing was deleted
      }
      for (const n of hostNames) {
        const p = `/${dir}/${n}`;
        if (!hostHas(`${upper}/${dir}/${n}`) && !out.has(p)) out.set(p, "D");
      }
      continue;
    }
    if (name.startsWith(WHITEOUT_PREFIX)) {
      const p = `/${dir ? `${dir}/` : ""}${name.slice(WHITEOUT_PREFIX.length)}`;
      if (!out.has(p)) out.set(p, "D");
      continue;
    }
    out.set(`/${e.rel}`, hostHas(`${host}/${e.rel}`) ? "C" : "A");
  }
  return [...out]
    .map(([path, kind]) => ({ kind, path }))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
