// Ephemeral sandboxes: a run without a name gets its own directory under the ephemeral root,
//   <root>/ephemeral/<pid>-<start>-<tag>/{upper,work}
// made by the core on the guest's first change (cv_run_set_upper with paths that do not exist
// yet: a run that changes nothing costs no mkdir), removed when the run ends. The directory's name is its owner record: the pid and the start
// time of the process that made it (/proc/<pid>/stat field 22, so a reused pid is told apart).
// Being part of the name, it exists as soon as the directory does, so a sweeper never meets a
// directory whose owner it cannot tell. Each run first lists ephemeral/ and removes what dead
// processes left behind (a CLI that was SIGKILLed, a library process that exited mid-run).
import {
  chmodSync,
  constants,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  rmdirSync,
} from "node:fs";
import { SetupError } from "../core/errors.js";
import { ephemeralRootCandidates } from "../paths.js";
import { removeTree } from "../store/remove-tree.js";
import { errCode } from "../store/fd-path.js";
import { makeDirs } from "../store/make-dirs.js";
import { ownerAlive, ownerRecord, parseOwnerRecord } from "../store/owner.js";

/** The directories of one ephemeral run. */
export interface EphemeralSandbox {
  /** The ephemeral root (hidden from every guest). */
  root: string;
  /** <root>/ephemeral/<id>: removed when the run ends. */
  dir: string;
  upper: string;
  work: string;
}

let verified: { key: string; root: string } | undefined;

function uid(): number {
  return process.getuid?.() ?? 0;
}

/**
 * The ephemeral root: cvisor's state directory (src/paths.ts says why); created mode 0700 with
 * its parents, refused when it is not a directory owned by this user. Checked once per process.
 */
export function ephemeralRoot(env: NodeJS.ProcessEnv = process.env): string {
  const candidates = ephemeralRootCandidates(env);
  const key = candidates.join("\0");
  if (verified?.key === key) return verified.root;
  for (const [i, dir] of candidates.entries()) {
    const problem = claimDir(dir);
    if (problem === null) {
      verified = { key, root: dir };
      return dir;
    }
    if (i === candidates.length - 1) {
      throw new SetupError(
        `cannot keep ephemeral sandboxes in ${dir}: ${problem} (fix it, or set CVISOR_HOME)`,
        "EEPHEMERAL",
      );
    }
  }
  throw new SetupError("no place for ephemeral sandboxes", "EEPHEMERAL");
}

/** Makes sure dir is a directory of ours, mode 0700; null when it is, else what is wrong. */
function claimDir(dir: string): string | null {
  for (let tries = 0; tries < 3; tries++) {
    let st;
    try {
      st = lstatSync(dir);
    } catch (err) {
      if (errCode(err) !== "ENOENT") return errCode(err) ?? String(err);
      try {
        makeDirs(dir, 0o700);
      } catch (mkErr) {
        if (errCode(mkErr) !== "EEXIST") return errCode(mkErr) ?? String(mkErr);
      }
      continue; // look again: whoever made it, it must pass the checks below
    }
    const type = st.mode & constants.S_IFMT;
    if (type === constants.S_IFLNK) return "it is a symbolic link";
    if (type !== constants.S_IFDIR) return "it is not a directory";
    if (st.uid !== uid()) return `it belongs to uid ${st.uid}, not to uid ${uid()}`;
    // Ours (just checked without following links): no one else may list or enter it.
    if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
    return null;
  }
  return "it keeps changing";
}

/**
 * Removes the ephemeral sandboxes whose owner process is gone. One lstat when there is nothing
 * to do; never fails a run (what cannot be removed now is tried again next time). Returns
 * whether <root>/ephemeral exists.
 */
export function sweepOrphans(root: string): boolean {
  const base = `${root}/ephemeral`;
  let names: string[];
  try {
    // Entries are directories: a link count of 2 means none (where the filesystem counts them,
    // ext4 and tmpfs do; btrfs says 1), and the listing is skipped. On the CLI's path an lstat
    // is already warm, and a first readdirSync costs a noticeable part of `cvisor -- true`.
    if (lstatSync(base).nlink === 2) return true;
    names = readdirSync(base);
  } catch {
    return false; // not there yet: nothing to sweep
  }
  const alive = new Map<string, boolean>(); // one /proc read per owner, however many entries
  for (const name of names) {
    const rec = parseOwnerRecord(name);
    if (!rec) continue;
    const owner = `${rec.pid}-${rec.start}`;
    let live = alive.get(owner);
    if (live === undefined) alive.set(owner, (live = ownerAlive(rec.pid, rec.start)));
    if (live) continue;
    try {
      removeTree(`${base}/${name}`);
    } catch {
      // Next time.
    }
  }
  return true;
}

/**
 * Names the directories of a new ephemeral run (after sweeping orphans) and makes sure their
 * parent, <root>/ephemeral, exists; the run's own directories are made by the core on the
 * guest's first change.
 */
export function openEphemeral(env: NodeJS.ProcessEnv = process.env): EphemeralSandbox {
  for (let tries = 0; ; tries++) {
    const root = ephemeralRoot(env);
    const base = `${root}/ephemeral`;
    try {
      if (!sweepOrphans(root)) mkdirSync(base, 0o700);
    } catch (err) {
      // The root went away since this process checked it: check (and make) it again.
      if (errCode(err) === "ENOENT" && tries < 2) {
        verified = undefined;
        continue;
      }
      if (errCode(err) !== "EEXIST") {
        throw new SetupError(
          `cannot create an ephemeral sandbox in ${base}: ${errCode(err) ?? String(err)}`,
          "EEPHEMERAL",
          { cause: err },
        );
      }
    }
    const dir = `${base}/${ownerRecord()}`;
    return { root, dir, upper: `${dir}/upper`, work: `${dir}/work` };
  }
}

/** Removes an ephemeral run's directory, if the guest made it; never throws (an orphan is swept later). */
export function closeEphemeral(sb: EphemeralSandbox): void {
  // The usual case, a guest that changed nothing: the directory was never made. existsSync
  // answers without an exception (a thrown ENOENT costs more than the syscall).
  if (!existsSync(sb.dir)) return;
  try {
    rmdirSync(sb.upper);
    rmdirSync(sb.work);
    rmdirSync(sb.dir);
  } catch {
    removeQuietly(sb.dir); // half made, or holding the guest's files
  }
}

function removeQuietly(dir: string): void {
  try {
    removeTree(dir);
  } catch {
    // Left for the next sweep.
  }
}
