// Removes a dropped upper in the background (node reap.js DIR), so that rollback and branch stay
// O(1) for the user however many files the old upper held. It first renames DIR to
// .reap~<its own owner record> beside it, so sweeps see a live remover and leave it alone; a
// reaper killed half-way leaves an entry whose owner is dead, which the next sweep hands to a new
// reaper.
import { renameSync } from "node:fs";
import { dirname } from "node:path";
import { ownerRecord } from "../src/store/owner.js";
import { removeTree } from "../src/store/remove-tree.js";

const target = process.argv[2];
if (target !== undefined) {
  const mine = `${dirname(target)}/.reap~${ownerRecord()}`;
  try {
    renameSync(target, mine);
    removeTree(mine);
  } catch {
    // Taken by another reaper, or gone: nothing to do.
  }
}
