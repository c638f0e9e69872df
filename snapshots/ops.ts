// Snapshots of named sandboxes: snapshot, rollback, branch, list, remove (issue 4). Each is
// O(1) in the sandbox's size: a snapshot renames the upper into a new layer and starts a fresh
// one; rollback and branch point the sandbox at a snapshot's chain with a fresh upper and leave
// the old upper to a background reaper. snapshot, rollback and branch onto an existing sandbox
// go through the sandbox's journal (../src/store/journal.ts); a new branch sandbox is built aside and
// renamed into place; snapshots rm renames the layer away first. Every entry a killed process
// can leave is named after its owner record, so the next command tells leftovers from live work.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  CvisorError,
  ConflictError,
  NotFoundError,
  StoreError,
  UsageError,
} from "../src/core/errors.js";
import { ownerRecord, ownerRecordAlive } from "../src/store/owner.js";
import { liveRuns } from "../src/store/runs.js";
import { settleUpper } from "../src/sandbox/upper-writer.js";
import { removeTree } from "../src/store/remove-tree.js";
import { diskUsage, problemDetail, type StoreProblem } from "../src/sandbox/manage.js";
import {
  DAMAGED,
  placeSandboxDir,
  chainTrees,
  isSandboxName,
  layersDir,
  readMeta,
  sandboxesDir,
  validateSandboxName,
  writeMeta,
  type SandboxMeta,
} from "../src/store/sandboxes.js";
import {
  acquireJournal,
  crashAt,
  readJournal,
  recover,
  releaseJournal,
  settleJournal,
  type Journal,
  type JournalOp,
} from "../src/store/journal.js";
import {
  layerIds,
  newSnapshotId,
  newSquashId,
  readLayerMeta,
  SQUASH_THRESHOLD,
  validateSnapshotId,
  writeLayerMeta,
  type LayerMeta,
} from "../src/store/layer-meta.js";
import { squashLayers } from "./squash.js";
import { errCode } from "../src/store/fd-path.js";
import { makeDirs } from "../src/store/make-dirs.js";

/** squash.ts's squashLayers: merges trees (top first) into out, a directory it creates. */
export type SquashFn = (trees: readonly string[], out: string) => void;

export interface OpOptions {
  env?: NodeJS.ProcessEnv;
  /** The merge used for long chains (default: snapshots/squash.ts). */
  squash?: SquashFn;
  /** Remove a dropped upper in this process instead of a background one (tests, benchmarks). */
  reapInline?: boolean;
}

function noSandbox(name: string): CvisorError {
  return new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
}

function sandboxDir(name: string, env: NodeJS.ProcessEnv): string {
  return `${sandboxesDir(env)}/${validateSandboxName(name)}`;
}

/** The sandbox's meta.json once no operation is under way on it. */
function settledMeta(dir: string, name: string, env: NodeJS.ProcessEnv): SandboxMeta {
  settleJournal(dir, name, env);
  const meta = readMeta(dir, name);
  if (meta === undefined) throw noSandbox(name);
  return meta;
}

function refuseIfRunning(dir: string, name: string, what: string): void {
  const live = liveRuns(dir);
  if (live.length > 0) {
    const pids = live.map((r) => r.split("-")[0]).join(", ");
    throw new ConflictError(
      `sandbox ${name} is running (pid ${pids}): ${what} refused; wait for the run to end`,
      "EBUSY",
    );
  }
}

/** Takes the journal j and checks that meta.json is still what j was computed from. */
function lock(dir: string, j: Journal, seen: SandboxMeta, env: NodeJS.ProcessEnv): boolean {
  acquireJournal(dir, j, env);
  const now = readMeta(dir, j.sandbox);
  const same =
    now !== undefined &&
    now.base === seen.base &&
    now.chain.length === seen.chain.length &&
    now.chain.every((x, i) => x === seen.chain[i]);
  if (!same) releaseJournal(dir);
  return same;
}

export interface SnapshotResult {
  id: string;
  sandbox: string;
  /** The new chain (top first): the sandbox's layers under its fresh upper. */
  chain: string[];
  /** A squash layer was made for it. */
  squashed: boolean;
}

/**
 * Freezes the sandbox's upper into a read-only layer (the snapshot, id given or generated) and
 * gives the sandbox a fresh upper over it. Refused while the sandbox runs.
 */
export async function snapshot(
  name: string,
  id?: string,
  opts: OpOptions = {},
): Promise<SnapshotResult> {
  const env = opts.env ?? process.env;
  const dir = sandboxDir(name, env);
  const lid = id === undefined ? newSnapshotId() : validateSnapshotId(id);
  const base = layersDir(env);
  makeDirs(base, 0o700);
  const taken = (): CvisorError =>
    new ConflictError(`snapshot id ${lid} is taken (cvisor snapshots ls lists them)`);
  for (;;) {
    const meta = settledMeta(dir, name, env);
    if (existsSync(`${base}/${lid}`)) throw taken();
    const missing = meta.chain.find((l) => !existsSync(`${base}/${l}/tree`));
    if (missing !== undefined) {
      throw new StoreError(
        `sandbox ${name}: its layer ${missing} is missing (removed with snapshots rm --force): ` +
          `reset it with cvisor --sandbox ${name} branch ID, or rm it`,
      );
    }
    const squash =
      meta.chain.length + 1 > SQUASH_THRESHOLD
        ? { id: newSquashId(), tmp: `.tmp~${ownerRecord()}` }
        : undefined;
    const squashFn = squash ? (opts.squash ?? squashLayers) : undefined;
    const owner = ownerRecord();
    const j: Journal = {
      version: 2,
      op: "snapshot",
      owner,
      sandbox: name,
      id: lid,
      created: new Date().toISOString(),
      base: lid,
      chain: [lid, ...(squash ? [squash.id] : meta.chain)],
      before: meta.chain,
      tmp: `.tmp~${owner}`,
      parent: meta.base,
      ...(squash ? { squash } : {}),
    };
    if (!lock(dir, j, meta, env)) continue;
    try {
      crashAt("snapshot:journal");
      refuseIfRunning(dir, name, "snapshot");
      settleUpper({ upper: `${dir}/upper`, work: `${dir}/work` }); // a killed cp's, into this upper
      if (squash && squashFn) {
        const sq = `${base}/${squash.tmp}`;
        mkdirSync(sq, { mode: 0o700 });
        squashFn(chainTrees(meta.chain, env), `${sq}/tree`);
        writeLayerMeta(sq, {
          id: squash.id,
          kind: "squash",
          sandbox: name,
          created: j.created,
          parent: null,
          chain: [squash.id],
        });
        crashAt("snapshot:squash-built");
        renameSync(sq, `${base}/${squash.id}`);
        crashAt("snapshot:squash-placed");
      }
      const tmp = `${base}/${j.tmp}`;
      mkdirSync(tmp, { mode: 0o700 });
      writeLayerMeta(tmp, {
        id: lid,
        kind: "snapshot",
        sandbox: name,
        created: j.created,
        parent: meta.base,
        chain: j.chain,
      });
      crashAt("snapshot:layer-made");
      renameSync(`${dir}/upper`, `${tmp}/tree`);
      crashAt("snapshot:upper-moved");
      mkdirSync(`${dir}/upper`, { mode: 0o700 });
      crashAt("snapshot:upper-fresh");
      try {
        renameSync(tmp, `${base}/${lid}`);
      } catch (err) {
        const c = errCode(err);
        if (c === "EEXIST" || c === "ENOTEMPTY") {
          recover(dir, j, env); // the id was taken meanwhile: puts the upper back
          throw taken();
        }
        throw err;
      }
      crashAt("snapshot:layer-placed");
      writeMeta(dir, { ...meta, base: lid, chain: j.chain });
      crashAt("snapshot:meta-written");
    } catch (err) {
      undo(dir, j, env);
      throw err;
    } finally {
      releaseJournal(dir);
    }
    return { id: lid, sandbox: name, chain: j.chain, squashed: squash !== undefined };
  }
}

/** After a failed step: back to the before state (or on to the after state); never throws. */
function undo(dir: string, j: Journal, env: NodeJS.ProcessEnv): void {
  try {
    if (readJournal(dir, j.sandbox)?.owner === j.owner) recover(dir, j, env);
  } catch {
    // The journal stays for the next command to finish.
    return;
  }
}

/** The snapshot's meta, checked: a snapshot (not a squash layer) whose layers are all there. */
function snapshotMeta(id: string, env: NodeJS.ProcessEnv): LayerMeta {
  const lid = validateSnapshotId(id);
  const lm = readLayerMeta(lid, env);
  if (lm === undefined || lm.kind !== "snapshot") {
    throw new NotFoundError(
      `no snapshot named ${lid} (cvisor snapshots ls lists them)`,
      "ENOSNAPSHOT",
    );
  }
  const base = layersDir(env);
  for (const l of lm.chain) {
    if (!existsSync(`${base}/${l}/tree`)) {
      throw new StoreError(
        `snapshot ${lid} is broken: its layer ${l} was removed (snapshots rm --force)`,
      );
    }
  }
  return lm;
}

/** Is snapshot id in the sandbox's history (its base or an ancestor, or taken from it)? */
function inHistory(
  name: string,
  meta: SandboxMeta,
  snap: LayerMeta,
  env: NodeJS.ProcessEnv,
): boolean {
  if (snap.sandbox === name) return true;
  const seen = new Set<string>();
  for (let at = meta.base; at !== null && !seen.has(at);) {
    if (at === snap.id) return true;
    seen.add(at);
    at = readLayerMeta(at, env)?.parent ?? null;
  }
  return false;
}

export interface ResetResult {
  sandbox: string;
  id: string;
  chain: string[];
  /** The sandbox was made by this branch (else an existing one was reset). */
  created: boolean;
}

/**
 * Drops everything the sandbox changed after snapshot id: its upper starts empty over the
 * snapshot's chain. The snapshot must be in the sandbox's history. Refused while it runs.
 */
export function rollback(name: string, id: string, opts: OpOptions = {}): ResetResult {
  return reset(name, id, "rollback", opts);
}

function reset(name: string, id: string, op: JournalOp, opts: OpOptions): ResetResult {
  const env = opts.env ?? process.env;
  const dir = sandboxDir(name, env);
  const snap = snapshotMeta(id, env);
  for (;;) {
    const meta = settledMeta(dir, name, env);
    if (op === "rollback" && !inHistory(name, meta, snap, env)) {
      throw new UsageError(
        `snapshot ${snap.id} is not in the history of sandbox ${name} (to put it on that ` +
          `snapshot anyway: cvisor --sandbox ${name} branch ${snap.id})`,
        "CV_ERR_INVALID",
      );
    }
    const owner = ownerRecord();
    const j: Journal = {
      version: 2,
      op,
      owner,
      sandbox: name,
      id: snap.id,
      created: new Date().toISOString(),
      base: snap.id,
      chain: snap.chain,
      before: meta.chain,
      tmp: `.upper~${owner}`,
      trash: `.trash~${owner}`,
    };
    if (!lock(dir, j, meta, env)) continue;
    const trash = `${dir}/${j.trash ?? ""}`;
    try {
      crashAt("reset:journal");
      refuseIfRunning(dir, name, op);
      settleUpper({ upper: `${dir}/upper`, work: `${dir}/work` }); // before, not into, the fresh upper
      mkdirSync(`${dir}/${j.tmp}`, { mode: 0o700 });
      crashAt("reset:upper-made");
      try {
        renameSync(`${dir}/upper`, trash);
      } catch (err) {
        if (errCode(err) !== "ENOENT") throw err;
        mkdirSync(trash, { mode: 0o700 }); // no upper (made by hand?): the trash says "done"
      }
      crashAt("reset:upper-trashed");
      renameSync(`${dir}/${j.tmp}`, `${dir}/upper`);
      crashAt("reset:upper-placed");
      writeMeta(dir, { ...meta, base: snap.id, chain: snap.chain });
      crashAt("reset:meta-written");
    } catch (err) {
      undo(dir, j, env);
      throw err;
    } finally {
      releaseJournal(dir);
    }
    reap(trash, opts);
    return { sandbox: name, id: snap.id, chain: snap.chain, created: false };
  }
}

/**
 * Makes sandbox name a branch of snapshot id: a new sandbox on the snapshot's chain (its layers
 * shared, not copied), or, when name exists, that sandbox reset onto it (refused while it runs).
 */
export function branch(name: string, id: string, opts: OpOptions = {}): ResetResult {
  const env = opts.env ?? process.env;
  const dir = sandboxDir(name, env);
  const snap = snapshotMeta(id, env);
  if (readMeta(dir, name) !== undefined) return reset(name, id, "branch", opts);
  const from = { base: snap.id, chain: snap.chain };
  if (!placeSandboxDir(sandboxesDir(env), dir, name, from, () => crashAt("branch:built"))) {
    return reset(name, id, "branch", opts); // made meanwhile by another process
  }
  crashAt("branch:placed");
  // snapshots rm renames a layer away and then looks for sandboxes using it: either it sees
  // this one, or this sees the layer gone.
  const base = layersDir(env);
  const gone = snap.chain.find((l) => !existsSync(`${base}/${l}`));
  if (gone !== undefined) {
    removeTree(dir);
    throw new NotFoundError(
      `snapshot ${snap.id} was removed while branching from it`,
      "ENOSNAPSHOT",
    );
  }
  return { sandbox: name, id: snap.id, chain: snap.chain, created: true };
}

/** Removes a dropped upper: in a detached background process unless opts.reapInline. */
function reap(path: string, opts: OpOptions): void {
  if (opts.reapInline) {
    removeTree(path);
    return;
  }
  try {
    const script = fileURLToPath(new URL("./reap.js", import.meta.url));
    spawn(process.execPath, [script, path], { detached: true, stdio: "ignore" }).unref();
  } catch {
    // The next command's sweep hands it to a reaper.
  }
}

/** One snapshot, as `cvisor snapshots ls` shows it. */
export interface SnapshotInfo {
  id: string;
  sandbox: string;
  created: string;
  /** Bytes its own layer takes on disk (the layers below it are counted with their snapshots). */
  sizeBytes: number;
  parent: string | null;
  /** Layers in its chain (itself included). */
  layers: number;
  /** Why its record cannot be read (then sandbox and created are "", layers 0): rm removes it. */
  damaged?: string;
}

/** A layer's record, or the error that says it is damaged (any other failure is thrown). */
function layerMetaOrDamage(
  lid: string,
  env: NodeJS.ProcessEnv,
): LayerMeta | CvisorError | undefined {
  try {
    return readLayerMeta(lid, env);
  } catch (err) {
    if (err instanceof CvisorError && err.code === DAMAGED) return err;
    throw err;
  }
}

/** The command that removes layer lid: with --force when something uses it (which then breaks). */
function layerFix(lid: string, env: NodeJS.ProcessEnv): string {
  const used = Object.values(dependents(lid, env)).some((d) => d.length > 0);
  return `cvisor snapshots rm ${used ? "--force " : ""}${lid}`;
}

/** Every snapshot, oldest first; a layer whose record is damaged is listed as such. */
export function listSnapshots(env: NodeJS.ProcessEnv = process.env): SnapshotInfo[] {
  const base = layersDir(env);
  const out: SnapshotInfo[] = [];
  for (const lid of layerIds(env)) {
    const lm = layerMetaOrDamage(lid, env);
    const sizeBytes = diskUsage(`${base}/${lid}`);
    if (lm instanceof CvisorError) {
      const info = { id: lid, sandbox: "", created: "", sizeBytes, parent: null, layers: 0 };
      out.push({
        ...info,
        damaged: `layer ${lid}: ${problemDetail(lm.message)}; ${layerFix(lid, env)} removes it`,
      });
      continue;
    }
    if (lm?.kind !== "snapshot") continue;
    out.push({
      id: lid,
      sandbox: lm.sandbox,
      created: lm.created,
      sizeBytes,
      parent: lm.parent,
      layers: lm.chain.length,
    });
  }
  return out.sort((a, b) => a.created.localeCompare(b.created) || a.id.localeCompare(b.id));
}

/**
 * Every layer checked: its meta.json, and that each layer a snapshot's chain names is there.
 * Reads only.
 */
export function auditLayers(env: NodeJS.ProcessEnv = process.env): {
  checked: number;
  problems: StoreProblem[];
} {
  const problems: StoreProblem[] = [];
  const ids = layerIds(env);
  for (const lid of ids) {
    const lm = layerMetaOrDamage(lid, env);
    const problem = (detail: string): void => {
      problems.push({ subject: `snapshot ${lid}`, detail, fix: layerFix(lid, env) });
    };
    if (lm instanceof CvisorError) {
      problem(problemDetail(lm.message));
    } else if (lm?.kind === "snapshot") {
      const gone = lm.chain.find((l) => !existsSync(`${layersDir(env)}/${l}/tree`));
      if (gone !== undefined) problem(`its chain names layer ${gone}, which is gone`);
    }
  }
  return { checked: ids.length, problems };
}

/** The names of the named sandboxes (complete ones). */
function sandboxNames(env: NodeJS.ProcessEnv): string[] {
  try {
    return readdirSync(sandboxesDir(env)).filter(isSandboxName).sort();
  } catch {
    return [];
  }
}

/**
 * What uses layer lid: sandboxes and other layers whose chain names it. Records that cannot be
 * read are passed over: what they would name is unknown.
 */
function dependents(
  lid: string,
  env: NodeJS.ProcessEnv,
): { sandboxes: string[]; snapshots: string[] } {
  const sandboxes: string[] = [];
  for (const name of sandboxNames(env)) {
    if (readable(() => readMeta(`${sandboxesDir(env)}/${name}`, name))?.chain.includes(lid)) {
      sandboxes.push(name);
    }
  }
  const snapshots: string[] = [];
  for (const other of layerIds(env)) {
    if (other === lid) continue;
    if (readable(() => readLayerMeta(other, env))?.chain.includes(lid)) snapshots.push(other);
  }
  return { sandboxes, snapshots };
}

/** A record read, or undefined when it is damaged (any other failure is thrown). */
function readable<T>(read: () => T | undefined): T | undefined {
  try {
    return read();
  } catch (err) {
    if (err instanceof CvisorError && err.code === DAMAGED) return undefined;
    throw err;
  }
}

function listWords(what: { sandboxes: string[]; snapshots: string[] }): string {
  const parts: string[] = [];
  if (what.sandboxes.length > 0) {
    parts.push(`sandbox${what.sandboxes.length > 1 ? "es" : ""} ${what.sandboxes.join(", ")}`);
  }
  if (what.snapshots.length > 0) {
    parts.push(`snapshot${what.snapshots.length > 1 ? "s" : ""} ${what.snapshots.join(", ")}`);
  }
  return parts.join(" and ");
}

export interface RemoveResult {
  id: string;
  /** What lost a layer (only with force). */
  broken: { sandboxes: string[]; snapshots: string[] };
  /** Squash layers no chain needed any more, removed with it. */
  squashRemoved: string[];
}

/**
 * Removes a snapshot's layer. Refused while a sandbox or another snapshot's chain uses it,
 * unless force (those then break: they say so when used); refused with or without force while
 * a sandbox using it runs. Squash layers nothing needs any more go with it.
 */
export function removeSnapshot(
  id: string,
  force = false,
  env: NodeJS.ProcessEnv = process.env,
): RemoveResult {
  const lid = validateSnapshotId(id);
  // A layer whose record is damaged is removed like a snapshot: nothing else can.
  const lm = layerMetaOrDamage(lid, env);
  if (!(lm instanceof CvisorError) && lm?.kind !== "snapshot") {
    throw new NotFoundError(
      `no snapshot named ${lid} (cvisor snapshots ls lists them)`,
      "ENOSNAPSHOT",
    );
  }
  const deps = dependents(lid, env);
  for (const name of deps.sandboxes) {
    refuseIfRunning(`${sandboxesDir(env)}/${name}`, name, `removing snapshot ${lid}`);
  }
  if (!force && deps.sandboxes.length + deps.snapshots.length > 0) {
    throw new ConflictError(
      `snapshot ${lid} is used by ${listWords(deps)}: remove ${deps.sandboxes.length + deps.snapshots.length > 1 ? "them" : "it"} first, or use snapshots rm --force ${lid} (${deps.sandboxes.length + deps.snapshots.length > 1 ? "they break" : "it breaks"})`,
      "EBUSY",
    );
  }
  const base = layersDir(env);
  const trash = `${base}/.trash~${ownerRecord()}`;
  renameSync(`${base}/${lid}`, trash);
  crashAt("rm:trashed");
  const after = dependents(lid, env);
  if (!force && after.sandboxes.length + after.snapshots.length > 0) {
    renameSync(trash, `${base}/${lid}`); // a branch was made from it meanwhile
    throw new ConflictError(`snapshot ${lid} is used by ${listWords(after)} now`, "EBUSY");
  }
  removeTree(trash);
  return {
    id: lid,
    broken: force ? after : { sandboxes: [], snapshots: [] },
    squashRemoved: gcSquash(env),
  };
}

/**
 * Removes the squash layers that no sandbox's or snapshot's chain names. None while a record
 * cannot be read: its chain might name them.
 */
function gcSquash(env: NodeJS.ProcessEnv): string[] {
  const base = layersDir(env);
  const ids = layerIds(env);
  const used = new Set<string>();
  for (const name of sandboxNames(env)) {
    const meta = readable(() => readMeta(`${sandboxesDir(env)}/${name}`, name));
    if (meta === undefined && existsSync(`${sandboxesDir(env)}/${name}/meta.json`)) return [];
    for (const l of meta?.chain ?? []) used.add(l);
  }
  const squashes: string[] = [];
  for (const l of ids) {
    const lm = layerMetaOrDamage(l, env);
    if (lm instanceof CvisorError) return [];
    if (lm?.kind === "squash") squashes.push(l);
    else for (const c of lm?.chain ?? []) used.add(c);
  }
  const removed: string[] = [];
  for (const sq of squashes) {
    if (used.has(sq)) continue;
    const trash = `${base}/.trash~${ownerRecord()}`;
    try {
      renameSync(`${base}/${sq}`, trash);
      removeTree(trash);
      removed.push(sq);
    } catch {
      // Next time.
    }
  }
  return removed;
}

/**
 * Finds and cleans what killed processes left in the store: finishes (or undoes) interrupted
 * snapshots, rollbacks and branches, removes half-made sandboxes and layers and interrupted
 * removals, and hands abandoned dropped uppers to a reaper. Returns one line per thing done
 * (journal recoveries print their own line on stderr as they happen).
 */
export function recoverStore(opts: OpOptions = {}): string[] {
  const env = opts.env ?? process.env;
  const said: string[] = [];
  const sandboxes = sandboxesDir(env);
  const layers = layersDir(env);
  const dead = (entry: string, prefix: string): boolean =>
    entry.startsWith(prefix) && !ownerRecordAlive(entry.slice(prefix.length));
  const referenced = new Set<string>();
  let unknownRefs = false;
  let names: string[] = [];
  try {
    names = readdirSync(sandboxes);
  } catch {
    // No sandboxes yet.
  }
  for (const entry of names) {
    const path = `${sandboxes}/${entry}`;
    if (isSandboxName(entry)) {
      let live: Journal | undefined;
      try {
        if (existsSync(`${path}/journal.json`)) settleJournal(path, entry, env);
        live = readJournal(path, entry);
      } catch (err) {
        if (!(err instanceof CvisorError && err.code === DAMAGED)) throw err;
        said.push(err.message);
        unknownRefs = true; // which temp layer it names is unknown: none is swept
      }
      if (live) {
        referenced.add(live.tmp);
        if (live.squash) referenced.add(live.squash.tmp);
      }
      let inner: string[];
      try {
        inner = readdirSync(path);
      } catch {
        continue;
      }
      for (const e of inner) {
        if (dead(e, ".trash~") || dead(e, ".reap~")) reap(`${path}/${e}`, opts);
        else if (dead(e, ".journal~") || dead(e, ".upper~")) removeTree(`${path}/${e}`);
        else if (e.startsWith(".takeover~") && staleClaim(`${path}/${e}`))
          removeTree(`${path}/${e}`);
      }
    } else if (dead(entry, ".tmp~")) {
      removeTree(path);
      said.push(`removed the leftovers of an interrupted branch or sandbox creation (${entry})`);
    }
  }
  let entries: string[];
  try {
    entries = unknownRefs ? [] : readdirSync(layers);
  } catch {
    return said;
  }
  for (const entry of entries) {
    if (referenced.has(entry)) continue;
    if (dead(entry, ".trash~")) {
      removeTree(`${layers}/${entry}`);
      said.push("removed the leftovers of an interrupted snapshots rm");
    } else if (dead(entry, ".tmp~")) {
      removeTree(`${layers}/${entry}`);
      said.push(`removed the leftovers of an interrupted snapshot (layers/${entry})`);
    }
  }
  return said;
}

/** A takeover claim whose maker is dead (killed after finishing, before removing it). */
function staleClaim(path: string): boolean {
  try {
    return !ownerRecordAlive(readFileSync(path, "utf8"));
  } catch {
    return false;
  }
}
