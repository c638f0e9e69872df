// Managing named sandboxes (cvisor ls, rm, doctor --store): listing, disk usage, live runs,
// removal, the check of their records. Not on the run path (kept out of ./open-layer.ts, which
// is, so the CLI bundle stays small).
import { existsSync, lstatSync, readdirSync, renameSync } from "node:fs";
import { sandboxLowers } from "./lowers.js";
import { CvisorError, ConflictError, NotFoundError, StoreError } from "../core/errors.js";
import { liveRuns } from "../store/runs.js";
import { removeTree } from "../store/remove-tree.js";
import { readJournal, settleJournal } from "../store/journal.js";
import {
  DAMAGED,
  isSandboxName,
  layersDir,
  readMeta,
  sandboxesDir,
  tag,
  validateSandboxName,
} from "../store/sandboxes.js";
import { errCode } from "../store/fd-path.js";

/** One named sandbox, as `cvisor ls` shows it. */
export interface SandboxInfo {
  name: string;
  /** Bytes its files take on disk (allocated blocks). */
  sizeBytes: number;
  /** Layers: its upper and the snapshot layers under it. */
  layers: number;
  /** The snapshot it was last set on (snapshot, rollback, branch), or null. */
  base: string | null;
  created: string;
  lastRun: string | null;
  /** Runs using it now. */
  running: number;
  /** Why its record cannot be read (then layers is 0 and created ""): `rm` removes it. */
  damaged?: string;
}

/** The named sandbox's directory; NotFoundError (ENOSANDBOX) when there is no such sandbox. */
export function existingSandbox(name: string, env: NodeJS.ProcessEnv = process.env): string {
  validateSandboxName(name);
  const dir = `${sandboxesDir(env)}/${name}`;
  if (readMeta(dir, name) === undefined) {
    throw new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
  }
  return dir;
}

/** The named sandbox's layers, top first: its upper over its snapshot layers' trees. */
export function sandboxLayers(name: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const dir = existingSandbox(name, env);
  const upper = `${dir}/upper`;
  return [...(existsSync(upper) ? [upper] : []), ...sandboxLowers({ dir })];
}

/** Every named sandbox, by name. Directories that are not complete sandboxes are left out. */
export function listSandboxes(env: NodeJS.ProcessEnv = process.env): SandboxInfo[] {
  const base = sandboxesDir(env);
  let names: string[];
  try {
    names = readdirSync(base);
  } catch (err) {
    if (errCode(err) === "ENOENT") return [];
    throw new StoreError(`cannot list ${base}: ${errCode(err) ?? String(err)}`);
  }
  const out: SandboxInfo[] = [];
  for (const name of names.sort()) {
    if (!isSandboxName(name)) continue; // .tmp~ (being made), .trash~ (being removed), not ours
    const dir = `${base}/${name}`;
    let meta;
    try {
      meta = readMeta(dir, name);
    } catch (err) {
      if (!(err instanceof CvisorError && err.code === DAMAGED)) throw err;
      const info = { name, sizeBytes: diskUsage(dir), layers: 0, base: null, created: "" };
      out.push({ ...info, lastRun: null, running: liveRuns(dir).length, damaged: err.message });
      continue;
    }
    if (meta === undefined) continue;
    out.push({
      name,
      sizeBytes: diskUsage(dir),
      layers: 1 + meta.chain.length,
      base: meta.base,
      created: meta.created,
      lastRun: meta.lastRun,
      running: liveRuns(dir).length,
    });
  }
  return out;
}

/** Bytes allocated below path (each inode counted once), never following symlinks. */
export function diskUsage(path: string): number {
  const seen = new Set<string>();
  let total = 0;
  const walk = (p: string): void => {
    let st;
    try {
      st = lstatSync(p, { bigint: false });
    } catch {
      return;
    }
    const id = `${st.dev}:${st.ino}`;
    if (seen.has(id)) return;
    seen.add(id);
    total += st.blocks * 512;
    if (st.isDirectory()) {
      let names: string[];
      try {
        names = readdirSync(p);
      } catch {
        return;
      }
      for (const n of names) walk(`${p}/${n}`);
    }
  };
  walk(path);
  return total;
}

/**
 * Removes a named sandbox (never the snapshot layers it uses: snapshots rm removes those).
 * Refused while a run uses it. Atomic for everyone else: the directory
 * is first renamed to sandboxes/.trash~<random> ("~" is not allowed in names), so the sandbox is
 * there whole or not at all, then deleted; leftovers of an interrupted removal are deleted by
 * the next one.
 */
export function removeSandbox(name: string, env: NodeJS.ProcessEnv = process.env): void {
  validateSandboxName(name);
  const base = sandboxesDir(env);
  const dir = `${base}/${name}`;
  let exists: boolean;
  try {
    exists = readMeta(dir, name) !== undefined;
  } catch (err) {
    if (!(err instanceof CvisorError && err.code === DAMAGED)) throw err;
    exists = true; // a damaged record is removed like any other: nothing else can
  }
  if (!exists) {
    throw new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
  }
  // A snapshot, rollback or branch under way: wait for it (or finish a killed one's). A damaged
  // journal cannot be finished: the sandbox goes with it.
  try {
    settleJournal(dir, name, env);
  } catch (err) {
    if (!(err instanceof CvisorError && err.code === DAMAGED)) throw err;
  }
  const live = liveRuns(dir);
  if (live.length > 0) {
    const pids = live.map((r) => r.split("-")[0]).join(", ");
    throw new ConflictError(
      `sandbox ${name} is in use by a run (pid ${pids}): wait for it to end, then remove it`,
      "EBUSY",
    );
  }
  const trash = `${base}/.trash~${tag()}`;
  try {
    renameSync(dir, trash);
  } catch (err) {
    throw new StoreError(`cannot remove sandbox ${name}: ${errCode(err) ?? String(err)}`);
  }
  removeTree(trash);
  sweepTrash(base);
}

/** Deletes what interrupted removals left (sandboxes/.trash~*). Never throws. */
function sweepTrash(base: string): void {
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return;
  }
  for (const n of names) {
    if (!n.startsWith(".trash~")) continue;
    try {
      removeTree(`${base}/${n}`);
    } catch {
      // Next time.
    }
  }
}

/** A record of the store that cannot be used as it is, and the command that removes it. */
export interface StoreProblem {
  /** "sandbox NAME", "snapshot ID". */
  subject: string;
  detail: string;
  fix: string;
}

/** What a damaged record's error says, without the subject and the way out (said apart). */
export function problemDetail(message: string): string {
  return message.replace(/^(sandbox|layer) [^:]+: /, "").replace(/; cvisor .* removes it$/, "");
}

/**
 * Every named sandbox checked: its meta.json, its journal, and that each layer its chain names
 * is there. Reads only (nothing is settled or repaired).
 */
export function auditSandboxes(env: NodeJS.ProcessEnv = process.env): {
  checked: number;
  problems: StoreProblem[];
} {
  const problems: StoreProblem[] = [];
  let checked = 0;
  for (const { name, damaged } of listSandboxes(env)) {
    checked++;
    const dir = `${sandboxesDir(env)}/${name}`;
    const problem = (detail: string): void => {
      problems.push({ subject: `sandbox ${name}`, detail, fix: `cvisor rm ${name}` });
    };
    if (damaged !== undefined) {
      problem(problemDetail(damaged));
      continue;
    }
    try {
      readJournal(dir, name);
    } catch (err) {
      if (!(err instanceof CvisorError && err.code === DAMAGED)) throw err;
      problem(problemDetail(err.message));
      continue;
    }
    const meta = readMeta(dir, name);
    const gone = meta?.chain.find((lid) => !isDir(`${layersDir(env)}/${lid}/tree`));
    if (gone !== undefined) problem(`its chain names layer ${gone}, which is gone`);
  }
  return { checked, problems };
}

function isDir(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
}
