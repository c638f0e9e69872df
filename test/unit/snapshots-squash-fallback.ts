// A stand-in for snapshots/squash.ts's squashLayers (written in parallel by another part of
// issue 4), for the snapshot tests only: merges layer trees (top first) into out, keeping the
// whiteouts and opaque markers that must still hide host entries. Plain and slow; files are
// copied with their modes, symlinks as symlinks. The snapshot tests use the real one when it is
// there (squashForTests).
import {
  copyFileSync,
  chmodSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  symlinkSync,
} from "node:fs";
import { join } from "node:path";
import { removeTree } from "../../src/sandbox/remove-tree.js";

const OPAQUE = ".wh..wh..opq";

function clearDir(dir: string): void {
  for (const n of readdirSync(dir)) removeTree(join(dir, n));
}

function apply(src: string, dst: string): void {
  const names = readdirSync(src);
  if (names.includes(OPAQUE)) clearDir(dst);
  for (const name of names) {
    const s = join(src, name);
    const d = join(dst, name);
    const st = lstatSync(s);
    if (name !== OPAQUE && name.startsWith(".wh.")) {
      removeTree(join(dst, name.slice(4)));
      copyFileSync(s, d);
      continue;
    }
    if (name !== OPAQUE) removeTree(join(dst, `.wh.${name}`));
    if (st.isDirectory()) {
      const have = lstatSync(d, { throwIfNoEntry: false });
      if (have && !have.isDirectory()) removeTree(d);
      if (!have?.isDirectory()) mkdirSync(d);
      apply(s, d);
      chmodSync(d, st.mode & 0o7777);
    } else {
      removeTree(d);
      if (st.isSymbolicLink()) symlinkSync(readlinkSync(s), d);
      else {
        copyFileSync(s, d);
        chmodSync(d, st.mode & 0o7777);
      }
    }
  }
}

/** squashLayers(trees top first, out): out must not exist; no out is left on failure. */
export function fallbackSquash(trees: readonly string[], out: string): void {
  mkdirSync(out, { mode: 0o700 });
  try {
    for (const tree of [...trees].reverse()) apply(tree, out);
  } catch (err) {
    removeTree(out);
    throw err;
  }
}

/** The real squashLayers when snapshots/squash.ts is built, else the fallback above. */
export async function squashForTests(): Promise<typeof fallbackSquash> {
  const url = new URL("../../snapshots/squash.js", import.meta.url).href;
  try {
    const mod = (await import(url)) as { squashLayers?: typeof fallbackSquash };
    if (typeof mod.squashLayers === "function") return mod.squashLayers;
  } catch {
    // Not there yet.
  }
  return fallbackSquash;
}
