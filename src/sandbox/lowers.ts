// Where `diff`, `export` and `cp` get a named sandbox's read-only snapshot layers from: its
// meta.json's chain (snapshots/ops.ts keeps it), as the tree directories a run mounts.
import { basename, dirname } from "node:path";
import { chainTrees, readMeta } from "../store/sandboxes.js";

/** The read-only layers under a named sandbox's upper, top first (absolute tree directories). */
export function sandboxLowers(sandbox: { dir: string }): string[] {
  const meta = readMeta(sandbox.dir, basename(sandbox.dir));
  if (meta === undefined) return [];
  // The store this sandbox belongs to: $CVISOR_HOME/sandboxes/<name>.
  const home = dirname(dirname(sandbox.dir));
  return chainTrees(meta.chain, { CVISOR_HOME: home });
}
