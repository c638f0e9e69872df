// The one writer of a sandbox's upper layer from outside a run (cp in: ./copy-in.ts; cache
// restore into sb:, cache/place.ts): the rules of the layer format for a new object, and what
// a killed writer leaves in work/.
//  - an object is built in work/ and renamed (or exchanged) into its upper directory, which is
//    made first where missing (upperDirOf: the twin of a snapshot layer's or the host's
//    directory, with its mode and times);
//  - a directory made where a snapshot layer or the host has a directory the guest does not see
//    gets `.wh..wh..opq` before it appears (makeOpaqueIfNeeded);
//  - after NAME appears, its whiteout goes (NAME hides it meanwhile: removeWhiteoutAt);
//  - leftovers: a copy's staging directory cp~<owner> and its record cp~<owner>.json
//    (./staged-dest.ts), a restore's cache~<owner>, an upper directory being made dir~<owner>.
//    Every user of a named sandbox settles them first: runs and copies (./open-layer.ts),
//    snapshot and rollback under the sandbox's journal (snapshots/ops.ts).
import {
  chmodSync,
  readdirSync,
  fchmodSync,
  fstatSync,
  futimesSync,
  mkdirSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { StoreError } from "../core/errors.js";
import { at, errCode, openDirAt } from "../store/fd-path.js";
import { ownerRecord, removeDeadLeftovers } from "../store/owner.js";
import { fileTimes } from "./copy-tree.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "./layer-names.js";
import { settleStaged } from "./staged-dest.js";
import { upperFd, type MergedView, type ViewDir } from "./view.js";

/** Prefix of a copy's staging directory and record in a sandbox's work/. */
export const UPPER_STAGING = "cp~";

/** Prefix of an upper directory being made in work/ (upperDirOf). */
export const UPPER_DIR_STAGING = "dir~";

/** Prefix of a cache entry being restored into the sandbox (cache/place.ts). */
export const UPPER_RESTORE_STAGING = "cache~";

/**
 * The upper layer's directory of a view directory, made where missing (up from the nearest
 * one that exists) with the mode and times the view shows: each built in work/ and renamed in,
 * so a run sees it whole; one a run made meanwhile is used as it is. Held by the view after.
 */
export function upperDirOf(view: MergedView, dir: ViewDir, work: string): number {
  const existing = upperFd(dir);
  if (existing !== undefined) return existing;
  if (dir.parent === undefined) throw new StoreError("the sandbox has no upper layer");
  const parentFd = upperDirOf(view, dir.parent, work);
  const tmp = `${work}/${UPPER_DIR_STAGING}${ownerRecord()}`;
  mkdirSync(tmp, { mode: 0o700 });
  try {
    chmodSync(tmp, dir.st.mode & 0o7777);
    utimesSync(tmp, ...fileTimes(dir.st));
    renameSync(tmp, at(parentFd, dir.name));
  } catch (err) {
    rmdirSync(tmp);
    // A run made it meanwhile: use theirs.
    const c = errCode(err);
    if (c !== "ENOTEMPTY" && c !== "EEXIST") throw err;
  }
  const fd = openDirAt(parentFd, dir.name);
  view.adopt(dir, fd);
  return fd;
}

/**
 * Before the directory staged (open as stagedFd) becomes NAME in dir: a snapshot layer or the
 * host has a directory there that the guest does not see (whited out, or hidden), and the new
 * one must not let its entries show through.
 */
export function makeOpaqueIfNeeded(
  view: MergedView,
  dir: ViewDir,
  name: string,
  stagedFd: number,
): void {
  if (!view.dirBelowUpper(dir, name)) return;
  const st = fstatSync(stagedFd);
  if ((st.mode & 0o300) !== 0o300) fchmodSync(stagedFd, st.mode | 0o300); // a read-only copy
  writeFileSync(at(stagedFd, OPAQUE_MARKER), "", { flag: "wx", mode: 0o600 });
  if ((st.mode & 0o300) !== 0o300) fchmodSync(stagedFd, st.mode & 0o7777);
  futimesSync(stagedFd, ...fileTimes(st));
}

/** After NAME was made in an upper directory: its whiteout goes (NAME hides it meanwhile). */
export function removeWhiteoutAt(fd: number, name: string): void {
  try {
    unlinkSync(at(fd, `${WHITEOUT_PREFIX}${name}`));
  } catch (err) {
    const c = errCode(err);
    if (c !== "ENOENT" && c !== "ENAMETOOLONG") throw err;
  }
}

/** Is path an empty directory, or not there at all? */
function isEmptyDir(path: string): boolean {
  try {
    return readdirSync(path).length === 0;
  } catch {
    return true;
  }
}

/**
 * Finishes the recorded copies killed processes left in the sandbox's work/ (renamed into the
 * upper) and removes the rest of what they left. Returns how many copies it finished.
 */
export function settleUpper(layer: { upper: string; work: string }): number {
  // Every named run starts here: one listing when there is nothing to settle (the usual case).
  if (isEmptyDir(layer.work)) return 0;
  const finished = settleStaged(layer.work, UPPER_STAGING, layer.upper, removeWhiteoutAt);
  removeDeadLeftovers(layer.work, UPPER_DIR_STAGING);
  removeDeadLeftovers(layer.work, UPPER_RESTORE_STAGING);
  return finished;
}
