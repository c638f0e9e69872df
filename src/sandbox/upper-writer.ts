// What a killed copy into a sandbox (./copy-in.ts) leaves in its work/: the staging directory
// cp~<owner> and, once it began to publish, the record cp~<owner>.json (./staged-dest.ts); and
// what a killed cache restore into it leaves (cache~<owner>, cache/place.ts).
// Every user of a named sandbox settles them first: runs and copies (./open-layer.ts), snapshot and
// rollback under the sandbox's journal (snapshots/ops.ts).
import { existsSync, unlinkSync } from "node:fs";
import { removeDeadLeftovers } from "../store/owner.js";
import { at, errCode } from "../store/fd-path.js";
import { WHITEOUT_PREFIX } from "./layer-names.js";
import { settleStaged } from "./staged-dest.js";

/** Prefix of a copy's staging directory and record in a sandbox's work/. */
export const UPPER_STAGING = "cp~";

/** Prefix of an upper directory being made in work/ (./copy-in.ts, upperDirOf). */
export const UPPER_DIR_STAGING = "dir~";

/** Prefix of a cache entry being restored into the sandbox (cache/place.ts). */
export const UPPER_RESTORE_STAGING = "cache~";

/** After NAME was made in an upper directory: its whiteout goes (NAME hides it meanwhile). */
export function removeWhiteoutAt(fd: number, name: string): void {
  try {
    unlinkSync(at(fd, `${WHITEOUT_PREFIX}${name}`));
  } catch (err) {
    const c = errCode(err);
    if (c !== "ENOENT" && c !== "ENAMETOOLONG") throw err;
  }
}

/**
 * Finishes the recorded copies killed processes left in the sandbox's work/ (renamed into the
 * upper) and removes the rest of what they left. Returns how many copies it finished.
 */
export function settleUpper(layer: { upper: string; work: string }): number {
  if (!existsSync(layer.work)) return 0;
  const finished = settleStaged(layer.work, UPPER_STAGING, layer.upper, removeWhiteoutAt);
  removeDeadLeftovers(layer.work, UPPER_DIR_STAGING);
  removeDeadLeftovers(layer.work, UPPER_RESTORE_STAGING);
  return finished;
}
