// The per-sandbox journal that makes snapshot, rollback and branch (onto an existing sandbox)
// atomic: <sandbox>/journal.json says what is being done, with every name the operation will
// make, before anything is changed. It is also the sandbox's lock: made with link() (fails if
// one exists), removed last. A process killed at any step leaves it behind; the next command or
// run that meets it with a dead owner takes it over and rolls the operation forward (or back,
// when it had not moved anything yet) from what is on disk, each step idempotent, and says so
// in one line on stderr. Runs of the sandbox wait while a live process holds it.
//
// Test hook: CVISOR_TEST_CRASH_AT=<step> makes the process SIGKILL itself at that step
// (steps are listed in CRASH_STEPS).
import {
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { writeStderr } from "../core/stderr.js";
import { crashAt as crashAtStep } from "./crash-at.js";
import { ConflictError, NotFoundError, StoreError } from "../core/errors.js";
import { ownerRecord, ownerRecordAlive } from "./owner.js";
import { removeTree } from "./remove-tree.js";
import { DAMAGED, layersDir, readMeta, writeMeta } from "./sandboxes.js";
import { readLayerMeta } from "./layer-meta.js";
import { errCode } from "./fd-path.js";

/** The steps CVISOR_TEST_CRASH_AT can name, in the order each operation reaches them. */
export const CRASH_STEPS = [
  // snapshot
  "snapshot:journal", // journal written, nothing else
  "snapshot:squash-built", // squash layer built in layers/.tmp~ (only when squashing)
  "snapshot:squash-placed", // squash layer renamed into place
  "snapshot:layer-made", // layers/.tmp~<owner>/meta.json written
  "snapshot:upper-moved", // upper/ renamed to the new layer's tree/
  "snapshot:upper-fresh", // a new empty upper/ made
  "snapshot:layer-placed", // the layer renamed to layers/<id>
  "snapshot:meta-written", // the sandbox's meta.json names the new chain
  // rollback, and branch onto an existing sandbox (reset)
  "reset:journal",
  "reset:upper-made", // the fresh upper made beside the old one
  "reset:upper-trashed", // the old upper renamed to .trash~
  "reset:upper-placed", // the fresh upper renamed to upper/
  "reset:meta-written",
  // branch to a new sandbox
  "branch:built", // the new sandbox complete in sandboxes/.tmp~<owner>
  "branch:placed", // renamed into place, layers not checked yet
  // snapshots rm
  "rm:trashed", // the layer renamed to layers/.trash~<owner>
] as const;

export type CrashStep = (typeof CRASH_STEPS)[number];

/** SIGKILLs this process when CVISOR_TEST_CRASH_AT names this step (tests only). */
export function crashAt(step: CrashStep): void {
  crashAtStep(step);
}

export type JournalOp = "snapshot" | "rollback" | "branch";

export interface Journal {
  version: 2;
  op: JournalOp;
  /** The owner record (pid-start-tag) of the process doing it. */
  owner: string;
  sandbox: string;
  /** The snapshot taken (snapshot) or gone back to (rollback, branch). */
  id: string;
  /** ISO 8601: the new layer's "created" (snapshot), when the operation started (others). */
  created: string;
  /** The sandbox's base and chain once done. */
  base: string;
  chain: string[];
  /** The chain before (a snapshot's parent chain, for squash). */
  before: string[];
  /** snapshot: layers/<tmp>, the new layer being made; reset: <sandbox>/<tmp>, the fresh upper. */
  tmp: string;
  /** reset: <sandbox>/<trash>, where the old upper goes. */
  trash?: string;
  /** snapshot over a long chain: the squash layer made for it (layers/<tmp> until in place). */
  squash?: { id: string; tmp: string };
  /** snapshot: the new layer's parent. */
  parent?: string | null;
}

/** How long a command or run waits for another process's journal (operations take ms). */
const WAIT_MS = 10_000;
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

function journalPath(dir: string): string {
  return `${dir}/journal.json`;
}

/** Creates path with content, or fails with EEXIST; never shows a half-written file. */
function createExclusive(path: string, content: string): boolean {
  const tmp = `${path.slice(0, path.lastIndexOf("/"))}/.journal~${ownerRecord()}`;
  writeFileSync(tmp, content, { mode: 0o600, flag: "wx" });
  try {
    linkSync(tmp, path);
    return true;
  } catch (err) {
    if (errCode(err) === "EEXIST") return false;
    throw err;
  } finally {
    unlinkSync(tmp);
  }
}

/** Replaces path with content atomically. */
function replaceFile(path: string, content: string): void {
  const tmp = `${path.slice(0, path.lastIndexOf("/"))}/.journal~${ownerRecord()}`;
  writeFileSync(tmp, content, { mode: 0o600, flag: "wx" });
  renameSync(tmp, path);
}

/** The journal of a sandbox directory; undefined when there is none. */
export function readJournal(dir: string, name: string): Journal | undefined {
  let text: string;
  try {
    text = readFileSync(journalPath(dir), "utf8");
  } catch (err) {
    if (errCode(err) === "ENOENT") return undefined;
    throw new StoreError(
      `sandbox ${name}: cannot read ${journalPath(dir)} (${errCode(err) ?? String(err)})`,
    );
  }
  let j: Partial<Journal>;
  try {
    j = JSON.parse(text) as Partial<Journal>;
  } catch {
    j = {};
  }
  if (typeof j.version === "number" && j.version > 2) {
    throw new StoreError(
      `sandbox ${name} has an operation of a newer cvisor in progress (journal version ` +
        `${j.version}): upgrade cvisor to use it`,
      "ESTORE_VERSION",
    );
  }
  if (
    j.version !== 2 ||
    typeof j.owner !== "string" ||
    typeof j.id !== "string" ||
    typeof j.tmp !== "string" ||
    !Array.isArray(j.chain) ||
    (j.op !== "snapshot" && j.op !== "rollback" && j.op !== "branch")
  ) {
    throw new StoreError(
      `sandbox ${name}: ${journalPath(dir)} is damaged; cvisor rm ${name} removes it`,
      DAMAGED,
    );
  }
  return j as Journal;
}

function describe(op: JournalOp): string {
  return op === "snapshot"
    ? "taking a snapshot of"
    : op === "rollback"
      ? "rolling back"
      : "resetting";
}

/**
 * Takes the sandbox's journal for an operation (its lock). Waits for a live holder, and takes
 * over and finishes what a dead one left; throws when the sandbox stays busy.
 */
export function acquireJournal(
  dir: string,
  j: Journal,
  env: NodeJS.ProcessEnv = process.env,
): void {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    let made: boolean;
    try {
      made = createExclusive(journalPath(dir), `${JSON.stringify(j)}\n`);
    } catch (err) {
      if (errCode(err) === "ENOENT") {
        throw new NotFoundError(
          `no sandbox named ${j.sandbox} (cvisor ls lists them)`,
          "ENOSANDBOX",
        );
      }
      throw err;
    }
    if (made) return;
    settleJournal(dir, j.sandbox, env, deadline);
  }
}

/** Removes the journal: the operation is over. */
export function releaseJournal(dir: string): void {
  try {
    unlinkSync(journalPath(dir));
  } catch (err) {
    if (errCode(err) !== "ENOENT") throw err;
  }
}

/**
 * Returns once the sandbox has no journal: waits while its owner lives, finishes (or undoes) the
 * operation of a dead owner. Throws a busy error at the deadline.
 */
export function settleJournal(
  dir: string,
  name: string,
  env: NodeJS.ProcessEnv = process.env,
  deadline = Date.now() + WAIT_MS,
): void {
  for (;;) {
    const j = readJournal(dir, name);
    if (j === undefined) return;
    if (ownerRecordAlive(j.owner)) {
      if (Date.now() > deadline) {
        throw new ConflictError(
          `sandbox ${name} is busy: pid ${j.owner.split("-")[0] ?? "?"} is ${describe(j.op)} it`,
          "EBUSY",
        );
      }
      Atomics.wait(PAUSE, 0, 0, 5);
      continue;
    }
    takeOver(dir, name, j, env);
  }
}

/**
 * Finishes a dead owner's operation. Only one process may: it makes .takeover~<dead owner> with
 * link(), checks that the journal is still that owner's, and puts its own owner record in the
 * journal (a rename, so the sandbox stays locked), then recovers under it.
 */
function takeOver(dir: string, name: string, j: Journal, env: NodeJS.ProcessEnv): void {
  const claim = `${dir}/.takeover~${j.owner}`;
  const me = ownerRecord();
  if (!createExclusive(claim, me)) {
    let holder: string;
    try {
      holder = readFileSync(claim, "utf8");
    } catch {
      return; // released meanwhile: look again
    }
    if (ownerRecordAlive(holder)) {
      Atomics.wait(PAUSE, 0, 0, 5);
      return;
    }
    // The recoverer died too. Two processes breaking the same stale claim at the same instant
    // could both go on; that needs two crashes in a row and a race, and the steps are idempotent.
    rmQuiet(claim);
    return;
  }
  try {
    const now = readJournal(dir, name);
    if (now?.owner !== j.owner) return; // someone finished it first
    const mine: Journal = { ...j, owner: me };
    replaceFile(journalPath(dir), `${JSON.stringify(mine)}\n`);
    const said = recover(dir, mine, env);
    releaseJournal(dir);
    writeStderr(`cvisor: ${said}\n`);
  } finally {
    rmQuiet(claim);
  }
}

function rmQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Gone already.
  }
}

function exists(path: string): boolean {
  return existsSync(path);
}

function sameChain(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** An empty upper/ in place (a fresh one, or left as it is). */
function ensureUpper(dir: string): void {
  try {
    mkdirSync(`${dir}/upper`, { mode: 0o700 });
  } catch (err) {
    if (errCode(err) !== "EEXIST") throw err;
  }
}

/** Points the sandbox's meta.json at the journal's chain (keeps name, created, lastRun). */
function commitMeta(dir: string, j: Journal): void {
  const meta = readMeta(dir, j.sandbox);
  if (meta === undefined) throw new NotFoundError(`sandbox ${j.sandbox} is gone`, "ENOSANDBOX");
  writeMeta(dir, { ...meta, base: j.base, chain: j.chain });
}

/** Has the sandbox's meta.json already the journal's chain? */
function committed(dir: string, j: Journal): boolean {
  const meta = readMeta(dir, j.sandbox);
  return meta !== undefined && meta.base === j.base && sameChain(meta.chain, j.chain);
}

/** Puts the store in the journal's after state (or its before state); returns what was done. */
export function recover(dir: string, j: Journal, env: NodeJS.ProcessEnv = process.env): string {
  return j.op === "snapshot" ? recoverSnapshot(dir, j, env) : recoverReset(dir, j);
}

function removeSquash(j: Journal, env: NodeJS.ProcessEnv): void {
  if (!j.squash) return;
  const base = layersDir(env);
  removeTree(`${base}/${j.squash.tmp}`);
  // In place but not named by any chain yet (the snapshot never committed): ours alone.
  if (exists(`${base}/${j.squash.id}`)) removeTree(`${base}/${j.squash.id}`);
}

function recoverSnapshot(dir: string, j: Journal, env: NodeJS.ProcessEnv): string {
  const base = layersDir(env);
  const layer = `${base}/${j.id}`;
  const tmp = `${base}/${j.tmp}`;
  const finished = `finished an interrupted snapshot of sandbox ${j.sandbox} (${j.id})`;
  if (committed(dir, j)) {
    ensureUpper(dir);
    removeTree(tmp);
    return finished;
  }
  const lm = readLayerMeta(j.id, env);
  const ours = lm !== undefined && lm.sandbox === j.sandbox && lm.created === j.created;
  if (ours) {
    ensureUpper(dir);
    commitMeta(dir, j);
    return finished;
  }
  if (exists(`${tmp}/tree`)) {
    // The upper was moved into the new layer: go forward if the id is still free.
    if (!exists(layer)) {
      ensureUpper(dir);
      renameSync(tmp, layer);
      commitMeta(dir, j);
      return finished;
    }
    // Someone took the id meanwhile: put the upper back.
    if (exists(`${dir}/upper`)) {
      try {
        rmdirSync(`${dir}/upper`);
      } catch {
        renameSync(`${dir}/upper`, `${dir}/.trash~${j.owner}`);
      }
    }
    renameSync(`${tmp}/tree`, `${dir}/upper`);
  }
  removeTree(tmp);
  removeSquash(j, env);
  ensureUpper(dir);
  return `removed the leftovers of an interrupted snapshot of sandbox ${j.sandbox} (nothing changed)`;
}

function recoverReset(dir: string, j: Journal): string {
  const fresh = `${dir}/${j.tmp}`;
  const trash = `${dir}/${j.trash ?? ".trash~none"}`;
  const what = j.op === "rollback" ? "rollback" : "branch";
  // The old upper in the trash is the point of no return (meta.json cannot tell: a rollback to
  // the snapshot the sandbox is on leaves it as it was).
  if (!exists(trash)) {
    removeTree(fresh);
    ensureUpper(dir);
    return `removed the leftovers of an interrupted ${what} of sandbox ${j.sandbox} (nothing changed)`;
  }
  if (!exists(`${dir}/upper`) && exists(fresh)) renameSync(fresh, `${dir}/upper`);
  ensureUpper(dir);
  removeTree(fresh);
  commitMeta(dir, j);
  removeTree(trash);
  return `finished an interrupted ${what} of sandbox ${j.sandbox} to ${j.id}`;
}
