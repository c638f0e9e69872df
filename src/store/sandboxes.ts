// The sandbox store on disk. A named sandbox keeps the guest's changes between runs:
//   $CVISOR_HOME/sandboxes/<name>/upper/     the changes, as real files at their virtual paths
//                                             (whiteout: empty file .wh.<name>; opaque directory:
//                                             holds .wh..wh..opq)
//   $CVISOR_HOME/sandboxes/<name>/work/      private temp dir for atomic copy-ups (same filesystem)
//   $CVISOR_HOME/sandboxes/<name>/meta.json  {"version":1|2,"name":...,"created":ISO,
//                                             "lastRun":ISO|null, v2: "base":id|null,"chain":[lid...]}
//   $CVISOR_HOME/sandboxes/<name>/runs/      the run records of runs using it (./runs.ts)
//   $CVISOR_HOME/sandboxes/<name>/journal.json  an operation under way (./journal.ts)
//   $CVISOR_HOME/layers/<lid>/{tree,meta.json} read-only snapshot layers (./layer-meta.ts)
// A run without a name is ephemeral (../sandbox/ephemeral.ts); what a run opens is
// ../sandbox/open-layer.ts.
import { lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { CvisorError, StoreError, UsageError } from "../core/errors.js";
import { cvisorHome } from "../paths.js";
import { errCode } from "./fd-path.js";
import { makeDirs } from "./make-dirs.js";
import { ownerRecord } from "./owner.js";
import { removeTree } from "./remove-tree.js";

/** The sandbox the management commands (cp, diff, export) use without --sandbox, as cVisor does. */
export const DEFAULT_NAMED_SANDBOX = "default";

/**
 * The newest store format this cvisor reads (meta.json "version"). Version 1: no snapshot
 * layers; version 2 adds base and chain. A sandbox without a chain is still written as version 1,
 * so an older cvisor keeps using it; one with a chain as version 2, which an older one refuses.
 */
export const STORE_VERSION = 2;

/** meta.json of a named sandbox. */
export interface SandboxMeta {
  version: number;
  name: string;
  /** ISO 8601. */
  created: string;
  /** ISO 8601 end of the last run, or null before the first one ended. */
  lastRun: string | null;
  /** The snapshot the sandbox was last set on (snapshot, rollback, branch), or null. */
  base: string | null;
  /** The read-only layers under the upper ($CVISOR_HOME/layers/<lid>/tree), top first. */
  chain: string[];
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
const NAME_RULES = "1 to 64 letters, digits, '-', '_' or '.', and not '.' or '..'";

/** name is a valid sandbox name (no exception). */
export function isSandboxName(name: string): boolean {
  return NAME.test(name) && name !== "." && name !== "..";
}

/** Returns name if it is a valid sandbox name, else throws a CvisorError (CV_ERR_INVALID). */
export function validateSandboxName(name: unknown): string {
  if (typeof name === "string" && NAME.test(name) && name !== "." && name !== "..") return name;
  const shown = typeof name === "string" ? JSON.stringify(name.slice(0, 80)) : String(name);
  const clipped = typeof name === "string" && name.length > 80 ? `${shown}...` : shown;
  throw new UsageError(`invalid sandbox name ${clipped}: use ${NAME_RULES}`, "CV_ERR_INVALID");
}

/** $CVISOR_HOME/sandboxes */
export function sandboxesDir(env: NodeJS.ProcessEnv = process.env): string {
  return `${cvisorHome(env)}/sandboxes`;
}

/** $CVISOR_HOME/layers: snapshot layers, shared by the sandboxes whose chain names them. */
export function layersDir(env: NodeJS.ProcessEnv = process.env): string {
  return `${cvisorHome(env)}/layers`;
}

/** The tree directories of a chain (what a run mounts under the upper), top first. */
export function chainTrees(
  chain: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  const base = layersDir(env);
  return chain.map((lid) => `${base}/${lid}/tree`);
}

/** A layer id as stored: a snapshot id (a sandbox name) or a squash layer's "sq~..." id. */
const LAYER_ID = /^(?:sq~)?[A-Za-z0-9._-]{1,64}$/;

/** lid can name a directory in layers/ (not ".", "..", a temp or trash name). */
export function isLayerId(lid: unknown): lid is string {
  return typeof lid === "string" && LAYER_ID.test(lid) && lid !== "." && lid !== "..";
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
  const sandbox = namedPaths(name, env);
  for (let tries = 0; tries < 3; tries++) {
    if (readMeta(sandbox.dir, name) !== undefined) return sandbox;
    create(sandboxesDir(env), sandbox.dir, name);
  }
  throw new StoreError(`sandbox ${name}: cannot create ${sandbox.dir}`);
}

/** Where the named sandbox's directories are (whether or not it exists); the name is checked. */
export function namedPaths(name: string, env: NodeJS.ProcessEnv = process.env): NamedSandbox {
  const dir = `${sandboxesDir(env)}/${validateSandboxName(name)}`;
  return { dir, upper: `${dir}/upper`, work: `${dir}/work` };
}

/** The code of a sandbox whose record is damaged or missing: listed as such, and `rm` removes it. */
export const DAMAGED = "ESTORE_DAMAGED";

/** The sandbox's meta.json, checked; undefined when the sandbox directory does not exist. */
export function readMeta(dir: string, name: string): SandboxMeta | undefined {
  let text: string;
  try {
    try {
      text = readFileSync(`${dir}/meta.json`, "utf8");
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
      // Whether the sandbox exists is decided once, here: another process may rename its new
      // sandbox into place (meta.json included) at any moment, so a directory seen now is read
      // again, and one not seen is no sandbox yet.
      if (!exists(dir)) return undefined;
      text = readFileSync(`${dir}/meta.json`, "utf8");
    }
  } catch (err) {
    const c = errCode(err);
    const why =
      c === "ENOENT"
        ? "it has no meta.json (not a cvisor sandbox; move it away)"
        : c === "ENOTDIR"
          ? "it is not a directory"
          : `cannot read its meta.json (${c ?? String(err)})`;
    throw new StoreError(`sandbox ${name}: ${dir}: ${why}`, c === "ENOENT" ? DAMAGED : "ESTORE");
  }
  const damaged = (): CvisorError =>
    new StoreError(
      `sandbox ${name}: ${dir}/meta.json is damaged; cvisor rm ${name} removes it`,
      DAMAGED,
    );
  const { version, meta: m } = parseVersioned<SandboxMeta>(text, damaged, {
    what: `sandbox ${name}`,
    versionName: "store version",
    min: 1,
    max: STORE_VERSION,
  });
  let chain: string[] = [];
  let base: string | null = null;
  if (version >= 2) {
    if (!Array.isArray(m.chain) || !m.chain.every(isLayerId)) throw damaged();
    if (m.base !== null && m.base !== undefined && !isLayerId(m.base)) throw damaged();
    chain = [...m.chain];
    base = m.base ?? null;
  }
  return {
    version,
    name: typeof m.name === "string" ? m.name : name,
    created: typeof m.created === "string" ? m.created : "",
    lastRun: typeof m.lastRun === "string" ? m.lastRun : null,
    base,
    chain,
  };
}

/** meta.json's text: version 1 while the sandbox has no snapshot layers, else version 2. */
export function metaText(meta: Omit<SandboxMeta, "version">): string {
  const { name, created, lastRun, base, chain } = meta;
  const v1 = base === null && chain.length === 0;
  const out = v1
    ? { version: 1, name, created, lastRun }
    : { version: 2, name, created, lastRun, base, chain };
  return `${JSON.stringify(out)}\n`;
}

/** Replaces meta.json atomically (a temp file renamed over it). */
export function writeMeta(dir: string, meta: Omit<SandboxMeta, "version">): void {
  const tmp = `${dir}/.meta.json.${tag()}`;
  try {
    writeFileSync(tmp, metaText(meta), { mode: 0o600, flag: "wx" });
    renameSync(tmp, `${dir}/meta.json`);
  } catch (err) {
    removeTree(tmp);
    throw err;
  }
}

function exists(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
}

/** Builds a sandbox in a temp dir and renames it into place (losing a race is fine). */
function create(base: string, dir: string, name: string): void {
  placeSandboxDir(base, dir, name, { base: null, chain: [] });
}

/**
 * Builds a new sandbox (on the snapshot chain `from`) in a temp dir under base and renames it
 * to dir. False when another process made dir first (a non-empty directory is never replaced).
 * beforeRename: the crash tests' hook.
 */
export function placeSandboxDir(
  base: string,
  dir: string,
  name: string,
  from: Pick<SandboxMeta, "base" | "chain">,
  beforeRename?: () => void,
): boolean {
  makeDirs(base, 0o700);
  // The owner record in the name: a leftover of a killed process is told from one being made.
  const tmp = `${base}/.tmp~${ownerRecord()}`;
  try {
    buildSandboxDir(tmp, { name, created: new Date().toISOString(), lastRun: null, ...from });
    beforeRename?.();
    renameSync(tmp, dir);
    return true;
  } catch (err) {
    removeTree(tmp);
    const c = errCode(err);
    if (c === "ENOTEMPTY" || c === "EEXIST") return false;
    throw new StoreError(`sandbox ${name}: cannot create ${dir} (${c ?? String(err)})`, "ESTORE", {
      cause: err,
    });
  }
}

/**
 * A store file's JSON object with its integer `version` (≥ min); `damaged()` is thrown for
 * anything else, and a version above max (a newer cvisor's file) is refused with ESTORE_VERSION.
 */
export function parseVersioned<T>(
  text: string,
  damaged: () => Error,
  v: { what: string; versionName: string; min: number; max: number },
): { version: number; meta: Partial<T> } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw damaged();
  }
  if (typeof raw !== "object" || raw === null || !("version" in raw)) throw damaged();
  const { version } = raw;
  if (typeof version !== "number" || !Number.isInteger(version) || version < v.min) {
    throw damaged();
  }
  if (version > v.max) {
    throw new StoreError(
      `${v.what} was made by a newer cvisor (${v.versionName} ${version}; this one reads up ` +
        `to version ${v.max}): upgrade cvisor to use it`,
      "ESTORE_VERSION",
    );
  }
  return { version, meta: raw as Partial<T> };
}

/** Makes a complete sandbox directory at path (upper/, work/, meta.json); path must not exist. */
function buildSandboxDir(path: string, meta: Omit<SandboxMeta, "version">): void {
  mkdirSync(path, { mode: 0o700 });
  mkdirSync(`${path}/upper`, { mode: 0o700 });
  mkdirSync(`${path}/work`, { mode: 0o700 });
  writeFileSync(`${path}/meta.json`, metaText(meta), { mode: 0o600, flag: "wx" });
}

/** Sets meta.json's lastRun (write a temp file, rename it over); a newer store is left alone. */
export function touchLastRun(dir: string, name: string, when: Date = new Date()): void {
  const meta = readMeta(dir, name);
  if (meta === undefined) return; // removed meanwhile
  meta.lastRun = when.toISOString();
  writeMeta(dir, meta);
}
