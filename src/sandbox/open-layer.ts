// What a run, or a command that uses a named sandbox as a run does (cp, cache save/restore of
// sb:), opens: the sandbox's layers, with its run record made and what killed operations left
// settled first. The store itself is ../store/.
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { NotFoundError, StoreError } from "../core/errors.js";
import { ephemeralRootCandidates } from "../paths.js";
import { settleJournal } from "../store/journal.js";
import { markRunning } from "../store/runs.js";
import {
  chainTrees,
  layersDir,
  namedPaths,
  openNamed,
  readMeta,
  sandboxesDir,
  touchLastRun,
  type NamedSandbox,
} from "../store/sandboxes.js";
import { DEFAULT_SANDBOX_NAME } from "./env.js";
import {
  closeEphemeral,
  ephemeralRoot,
  openEphemeral,
  sweepOrphans,
  type EphemeralSandbox,
} from "./ephemeral.js";
import { settleUpper } from "./upper-writer.js";

/** The writable layer of one run, named or ephemeral. */
export interface SandboxLayer {
  /** The sandbox's name: the guest's nodename and CVISOR_SANDBOX ("cvisor" when ephemeral). */
  name: string;
  upper: string;
  work: string;
  /** The snapshot layers' trees under the upper, top first ([] for most sandboxes). */
  lowers: string[];
  /** Where every sandbox is stored: always hidden from the guest, whatever --expose says. */
  storage: string[];
  named?: NamedSandbox;
  ephemeral?: EphemeralSandbox;
  /**
   * A new empty directory for this run alone (hidden from its guest as the ephemeral sandboxes
   * are, removed by closeLayer, or swept after a crash as they are).
   */
  scratch(): string;
  /** What scratch() made. */
  scratches: EphemeralSandbox[];
  /** Run by closeLayer, once (what a run started beside its guest: its credential broker). */
  cleanups: (() => void)[];
}

/**
 * Opens the layer of a run: the named sandbox (created if needed), else a fresh ephemeral one.
 * Either way, ephemeral sandboxes that dead processes left behind are removed first.
 */
export function openLayer(name?: string, env: NodeJS.ProcessEnv = process.env): SandboxLayer {
  if (name !== undefined) {
    const named = openNamed(name, env);
    named.running = markRunning(named.dir);
    let lowers: string[];
    try {
      lowers = namedLowers(named.dir, name, env);
      settleUpper(named); // a killed cp's renames finish before the guest looks
    } catch (err) {
      if (named.running) rmSync(named.running, { force: true });
      throw err;
    }
    // Hidden all the same; if the root cannot be used now, every place it may be is.
    let roots: string[];
    try {
      const root = ephemeralRoot(env);
      sweepOrphans(root);
      roots = [root];
    } catch {
      roots = ephemeralRootCandidates(env);
    }
    return {
      name,
      upper: named.upper,
      work: named.work,
      lowers,
      storage: [...roots.map((root) => `${root}/ephemeral`), sandboxesDir(env), layersDir(env)],
      named,
      ...scratchOf(env),
    };
  }
  const ephemeral = openEphemeral(env);
  return {
    name: DEFAULT_SANDBOX_NAME,
    upper: ephemeral.upper,
    work: ephemeral.work,
    lowers: [],
    storage: [`${ephemeral.root}/ephemeral`, sandboxesDir(env), layersDir(env)],
    ephemeral,
    ...scratchOf(env),
  };
}

/** The scratch() of a layer: directories made as ephemeral sandboxes are, and swept as them. */
function scratchOf(
  env: NodeJS.ProcessEnv,
): Pick<SandboxLayer, "scratch" | "scratches" | "cleanups"> {
  const scratches: EphemeralSandbox[] = [];
  const scratch = (): string => {
    const sb = openEphemeral(env);
    scratches.push(sb);
    mkdirSync(sb.dir, 0o700);
    mkdirSync(sb.upper, 0o755);
    return sb.upper;
  };
  return { scratch, scratches, cleanups: [] };
}

/** A named sandbox in use by a command that is not a run (cp): release() when done. */
export interface SandboxInUse {
  named: NamedSandbox;
  /** Its snapshot layers' trees, top first. */
  lowers: string[];
  release(): void;
}

/**
 * Uses the named sandbox (created if missing and `create`, else ENOSANDBOX) as a run does: its
 * run record keeps snapshots, rollbacks and rm away until release(), an operation a killed
 * process left is finished first, and so are copies into it.
 */
export function useNamed(
  name: string,
  create: boolean,
  env: NodeJS.ProcessEnv = process.env,
): SandboxInUse {
  let named: NamedSandbox;
  if (create) {
    named = openNamed(name, env);
  } else {
    named = namedPaths(name, env);
    if (readMeta(named.dir, name) === undefined) {
      throw new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
    }
  }
  named.running = markRunning(named.dir);
  const release = (): void => {
    if (named.running) rmSync(named.running, { force: true });
  };
  try {
    const lowers = namedLowers(named.dir, name, env);
    settleUpper(named);
    return { named, lowers, release };
  } catch (err) {
    release();
    throw err;
  }
}

/**
 * The lower trees of a named sandbox a run is about to use. Called after the run's record is
 * made: a snapshot, rollback or branch writes its journal before it looks for runs, so either it
 * sees this run and refuses, or this sees its journal and waits for it (or finishes what a killed
 * one left). meta.json is read after that, so the chain is the one the upper belongs to.
 */
function namedLowers(dir: string, name: string, env: NodeJS.ProcessEnv): string[] {
  if (existsSync(`${dir}/journal.json`)) settleJournal(dir, name, env);
  const meta = readMeta(dir, name);
  if (meta === undefined) {
    throw new NotFoundError(`sandbox ${name} was removed while the run started`, "ENOSANDBOX");
  }
  const trees = chainTrees(meta.chain, env);
  for (const [i, tree] of trees.entries()) {
    if (!existsSync(tree)) {
      throw new StoreError(
        `sandbox ${name}: its layer ${meta.chain[i] ?? ""} is missing (removed with ` +
          `snapshots rm --force): reset it with cvisor --sandbox ${name} branch ID, or rm it`,
      );
    }
  }
  return trees;
}

/** Ends a run's layer: an ephemeral sandbox is removed, a named one's lastRun set. Never throws. */
export function closeLayer(layer: SandboxLayer): void {
  if (layer.ephemeral) closeEphemeral(layer.ephemeral);
  for (const cleanup of layer.cleanups.splice(0)) {
    try {
      cleanup();
    } catch {
      // Never in the way of closing the rest.
    }
  }
  for (const sb of layer.scratches.splice(0)) closeEphemeral(sb);
  if (layer.named) {
    // lastRun first, while the run record still keeps snapshots out: a snapshot's meta.json
    // written between our read and our rename would be lost.
    try {
      touchLastRun(layer.named.dir, layer.name);
    } catch {
      // The run itself went fine; a stale lastRun is not worth failing it.
    }
    if (layer.named.running) rmSync(layer.named.running, { force: true });
  }
}
