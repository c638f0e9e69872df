// The sandbox store on disk. A named sandbox keeps the guest's changes between runs:
//   $CVISOR_HOME/sandboxes/<name>/upper/     the changes, as real files at their virtual paths
//                                             (whiteout: empty file .wh.<name>; opaque directory:
//                                             holds .wh..wh..opq)
//   $CVISOR_HOME/sandboxes/<name>/work/      private temp dir for atomic copy-ups (same filesystem)
//   $CVISOR_HOME/sandboxes/<name>/meta.json  {"version":1,"name":...,"created":ISO,"lastRun":ISO|null}
// A run without a name is ephemeral (./ephemeral.ts). openLayer/closeLayer are what a run uses.
import { lstatSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { CvisorError } from "../core/errors.js";
import { cvisorHome, ephemeralRootCandidates } from "../paths.js";
import { DEFAULT_SANDBOX_NAME } from "./env.js";
import {
  closeEphemeral,
  ephemeralRoot,
  openEphemeral,
  ownerRecord,
  sweepOrphans,
  type EphemeralSandbox,
} from "./ephemeral.js";
import { removeTree } from "./remove-tree.js";

/** The sandbox the management commands (cp, diff, export) use without --sandbox, as cVisor does. */
export const DEFAULT_NAMED_SANDBOX = "default";

/** The store format this cvisor reads and writes (meta.json "version"). */
export const STORE_VERSION = 1;

/** meta.json of a named sandbox. */
export interface SandboxMeta {
  version: number;
  name: string;
  /** ISO 8601. */
  created: string;
  /** ISO 8601 end of the last run, or null before the first one ended. */
  lastRun: string | null;
}

/** The directories of a named sandbox. */
export interface NamedSandbox {
  /** $CVISOR_HOME/sandboxes/<name> */
  dir: string;
  upper: string;
  work: string;
  /** This run's record in runs/ (see markRunning), while it runs. */
  running?: string;
}

const NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** The rules, as error messages state them. */
export const NAME_RULES = "1 to 64 letters, digits, '-', '_' or '.', and not '.' or '..'";

/** name is a valid sandbox name (no exception). */
export function isSandboxName(name: string): boolean {
  return NAME.test(name) && name !== "." && name !== "..";
}

/** Returns name if it is a valid sandbox name, else throws a CvisorError (CV_ERR_INVALID). */
export function validateSandboxName(name: unknown): string {
  if (typeof name === "string" && NAME.test(name) && name !== "." && name !== "..") return name;
  const shown = typeof name === "string" ? JSON.stringify(name.slice(0, 80)) : String(name);
  const clipped = typeof name === "string" && name.length > 80 ? `${shown}...` : shown;
  throw new CvisorError(`invalid sandbox name ${clipped}: use ${NAME_RULES}`, "CV_ERR_INVALID");
}

/** $CVISOR_HOME/sandboxes */
export function sandboxesDir(env: NodeJS.ProcessEnv = process.env): string {
  return `${cvisorHome(env)}/sandboxes`;
}

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/** A random tag for temporary names. */
export function tag(): string {
  return `${process.pid.toString(36)}${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * The named sandbox's directories; creates it when missing. Creation is atomic: the sandbox is
 * built in sandboxes/.tmp~<random> ("~" is not allowed in names) and renamed into place, so a sandbox directory is always
 * complete; when another process creates the same name at the same time, its sandbox is used.
 * A sandbox written by a newer cvisor (meta.json version above STORE_VERSION) is refused and
 * left untouched.
 */
export function openNamed(name: string, env: NodeJS.ProcessEnv = process.env): NamedSandbox {
  validateSandboxName(name);
  const base = sandboxesDir(env);
  const dir = `${base}/${name}`;
  const sandbox = { dir, upper: `${dir}/upper`, work: `${dir}/work` };
  for (let tries = 0; tries < 3; tries++) {
    if (readMeta(dir, name) !== undefined) return sandbox;
    create(base, dir, name);
  }
  throw new CvisorError(`sandbox ${name}: cannot create ${dir}`, "ESTORE");
}

/** The sandbox's meta.json, checked; undefined when the sandbox directory does not exist. */
export function readMeta(dir: string, name: string): SandboxMeta | undefined {
  let text: string;
  try {
    try {
      text = readFileSync(`${dir}/meta.json`, "utf8");
    } catch (err) {
      if (errCode(err) !== "ENOENT" || !exists(dir)) throw err;
      // The directory appeared between the two calls (another process renamed its new sandbox
      // into place, meta.json included): read again.
      text = readFileSync(`${dir}/meta.json`, "utf8");
    }
  } catch (err) {
    const c = errCode(err);
    if (c === "ENOENT" && !exists(dir)) return undefined;
    const why =
      c === "ENOENT"
        ? "it has no meta.json (not a cvisor sandbox; move it away)"
        : c === "ENOTDIR"
          ? "it is not a directory"
          : `cannot read its meta.json (${c ?? String(err)})`;
    throw new CvisorError(`sandbox ${name}: ${dir}: ${why}`, "ESTORE");
  }
  const damaged = (): CvisorError =>
    new CvisorError(`sandbox ${name}: ${dir}/meta.json is damaged`, "ESTORE");
  let meta: unknown;
  try {
    meta = JSON.parse(text);
  } catch {
    throw damaged();
  }
  if (typeof meta !== "object" || meta === null || !("version" in meta)) throw damaged();
  const { version } = meta;
  if (typeof version !== "number" || !Number.isInteger(version) || version < 1) throw damaged();
  if (version > STORE_VERSION) {
    throw new CvisorError(
      `sandbox ${name} was made by a newer cvisor (store version ${version}; this one reads ` +
        `version ${STORE_VERSION}): upgrade cvisor to use it`,
      "ESTORE_VERSION",
    );
  }
  const m = meta as Partial<SandboxMeta>;
  return {
    version,
    name: typeof m.name === "string" ? m.name : name,
    created: typeof m.created === "string" ? m.created : "",
    lastRun: typeof m.lastRun === "string" ? m.lastRun : null,
  };
}

function exists(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
}

/** Builds a sandbox in a temp dir and renames it into place (losing a race is fine). */
function create(base: string, dir: string, name: string): void {
  mkdirSync(base, { recursive: true, mode: 0o700 });
  const tmp = `${base}/.tmp~${tag()}`;
  try {
    mkdirSync(tmp, { mode: 0o700 });
    mkdirSync(`${tmp}/upper`, { mode: 0o700 });
    mkdirSync(`${tmp}/work`, { mode: 0o700 });
    const meta: SandboxMeta = {
      version: STORE_VERSION,
      name,
      created: new Date().toISOString(),
      lastRun: null,
    };
    writeFileSync(`${tmp}/meta.json`, `${JSON.stringify(meta)}\n`, { mode: 0o600, flag: "wx" });
    renameSync(tmp, dir);
  } catch (err) {
    removeTree(tmp);
    // Another process made it first (a non-empty directory is never replaced): use theirs.
    const c = errCode(err);
    if (c === "ENOTEMPTY" || c === "EEXIST") return;
    throw new CvisorError(`sandbox ${name}: cannot create ${dir} (${c ?? String(err)})`, "ESTORE", {
      cause: err,
    });
  }
}

/** Sets meta.json's lastRun (write a temp file, rename it over); a newer store is left alone. */
export function touchLastRun(dir: string, name: string, when: Date = new Date()): void {
  const meta = readMeta(dir, name);
  if (meta === undefined) return; // removed meanwhile
  meta.lastRun = when.toISOString();
  const tmp = `${dir}/.meta.json.${tag()}`;
  try {
    writeFileSync(tmp, `${JSON.stringify(meta)}\n`, { mode: 0o600, flag: "wx" });
    renameSync(tmp, `${dir}/meta.json`);
  } catch (err) {
    removeTree(tmp);
    throw err;
  }
}

/** The writable layer of one run, named or ephemeral. */
export interface SandboxLayer {
  /** The sandbox's name: the guest's nodename and CVISOR_SANDBOX ("cvisor" when ephemeral). */
  name: string;
  upper: string;
  work: string;
  /** Where every sandbox is stored: always hidden from the guest, whatever --expose says. */
  storage: string[];
  named?: NamedSandbox;
  ephemeral?: EphemeralSandbox;
}

/**
 * Opens the layer of a run: the named sandbox (created if needed), else a fresh ephemeral one.
 * Either way, ephemeral sandboxes that dead processes left behind are removed first.
 */
export function openLayer(name?: string, env: NodeJS.ProcessEnv = process.env): SandboxLayer {
  if (name !== undefined) {
    const named = openNamed(name, env);
    named.running = markRunning(named.dir);
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
      storage: [...roots.map((root) => `${root}/ephemeral`), sandboxesDir(env)],
      named,
    };
  }
  const ephemeral = openEphemeral(env);
  return {
    name: DEFAULT_SANDBOX_NAME,
    upper: ephemeral.upper,
    work: ephemeral.work,
    storage: [`${ephemeral.root}/ephemeral`, sandboxesDir(env)],
    ephemeral,
  };
}

/** Ends a run's layer: an ephemeral sandbox is removed, a named one's lastRun set. Never throws. */
export function closeLayer(layer: SandboxLayer): void {
  if (layer.ephemeral) closeEphemeral(layer.ephemeral);
  if (layer.named) {
    if (layer.named.running) rmSync(layer.named.running, { force: true });
    try {
      touchLastRun(layer.named.dir, layer.name);
    } catch {
      // The run itself went fine; a stale lastRun is not worth failing it.
    }
  }
}

/**
 * Records that a run uses the sandbox: an empty file runs/<pid>-<start>-<tag> (the owner record,
 * as for ephemeral sandboxes), removed when the run ends; `rm` refuses a sandbox with a live
 * one. Returns its path, or undefined when it cannot be made (the run goes on unprotected).
 */
function markRunning(dir: string): string | undefined {
  const path = `${dir}/runs/${ownerRecord()}`;
  try {
    try {
      writeFileSync(path, "", { mode: 0o600, flag: "wx" });
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
      mkdirSync(`${dir}/runs`, { mode: 0o700 });
      writeFileSync(path, "", { mode: 0o600, flag: "wx" });
    }
    return path;
  } catch {
    return undefined;
  }
}
