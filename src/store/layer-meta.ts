// Snapshot layers on disk: $CVISOR_HOME/layers/<lid>/tree/ (read-only, the upper format) and
// layers/<lid>/meta.json. A snapshot's id is its layer id; squash layers (the merge of a chain's
// lower part) have ids starting with "sq~", which no user id can ("~" is not allowed in names).
// Entries being made are layers/.tmp~<owner record>, being removed layers/.trash~<owner record>.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { CvisorError, StoreError, UsageError } from "../core/errors.js";
import { DAMAGED, isLayerId, layersDir, parseVersioned, validateSandboxName } from "./sandboxes.js";
import { errCode } from "./fd-path.js";

/** The newest layer meta.json version this cvisor reads. */
const LAYER_VERSION = 2;

/** A chain longer than this is squashed when a snapshot would make it longer. */
export const SQUASH_THRESHOLD = 8;

export interface LayerMeta {
  version: number;
  id: string;
  kind: "snapshot" | "squash";
  /** The sandbox it was taken from. */
  sandbox: string;
  /** ISO 8601. */
  created: string;
  /** The snapshot the sandbox was on when this one was taken, or null. */
  parent: string | null;
  /** The layer trees to mount for this snapshot, top first, itself first. */
  chain: string[];
}

/** A user-given snapshot id: the sandbox name rules (the message says "snapshot id"). */
export function validateSnapshotId(id: unknown): string {
  try {
    return validateSandboxName(id);
  } catch (err) {
    throw new UsageError(
      (err as Error).message.replace("invalid sandbox name", "invalid snapshot id"),
      "CV_ERR_INVALID",
    );
  }
}

function stamp(): string {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** A generated snapshot id: s-<time base 36>-<random>. */
export function newSnapshotId(): string {
  return `s-${stamp()}`;
}

/** A squash layer id, which the name rules refuse for user ids. */
export function newSquashId(): string {
  return `sq~${stamp()}`;
}

/** The layer's meta.json, checked; undefined when there is no such layer. */
export function readLayerMeta(
  lid: string,
  env: NodeJS.ProcessEnv = process.env,
): LayerMeta | undefined {
  const dir = `${layersDir(env)}/${lid}`;
  let text: string;
  try {
    text = readFileSync(`${dir}/meta.json`, "utf8");
  } catch (err) {
    if (errCode(err) === "ENOENT" || errCode(err) === "ENOTDIR") return undefined;
    throw new StoreError(
      `layer ${lid}: cannot read ${dir}/meta.json (${errCode(err) ?? String(err)})`,
    );
  }
  const damaged = (): CvisorError =>
    new StoreError(
      `layer ${lid}: ${dir}/meta.json is damaged; cvisor snapshots rm ${lid} removes it`,
      DAMAGED,
    );
  const { version, meta: m } = parseVersioned<LayerMeta>(text, damaged, {
    what: `layer ${lid}`,
    versionName: "layer version",
    min: 2,
    max: LAYER_VERSION,
  });
  if (
    m.id !== lid ||
    (m.kind !== "snapshot" && m.kind !== "squash") ||
    !Array.isArray(m.chain) ||
    !m.chain.every(isLayerId) ||
    m.chain[0] !== lid
  ) {
    throw damaged();
  }
  return {
    version,
    id: lid,
    kind: m.kind,
    sandbox: typeof m.sandbox === "string" ? m.sandbox : "",
    created: typeof m.created === "string" ? m.created : "",
    parent: isLayerId(m.parent) ? m.parent : null,
    chain: [...m.chain],
  };
}

/** Writes meta.json into a layer directory that is not in place yet (a .tmp~ one). */
export function writeLayerMeta(dir: string, meta: Omit<LayerMeta, "version">): void {
  const out: LayerMeta = { version: LAYER_VERSION, ...meta };
  writeFileSync(`${dir}/meta.json`, `${JSON.stringify(out)}\n`, { mode: 0o600, flag: "wx" });
}

/** The ids of every layer in place (not temp or trash entries). */
export function layerIds(env: NodeJS.ProcessEnv = process.env): string[] {
  try {
    return readdirSync(layersDir(env)).filter(isLayerId).sort();
  } catch (err) {
    if (errCode(err) === "ENOENT") return [];
    throw new StoreError(`cannot list ${layersDir(env)}: ${errCode(err) ?? String(err)}`);
  }
}
