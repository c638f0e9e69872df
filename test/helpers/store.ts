// What the store tests (e2e store, snapshots, cp, manage) share: a $CVISOR_HOME of the test's
// own in its scratch dir, with the paths and meta.json files in it, and the one-line error
// every CLI failure must be.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Fixture } from "./fixture.js";
import { show, type CliResult } from "./repo.js";

/** A sandbox's meta.json (src/store/sandboxes.ts SandboxMeta; base and chain from version 2). */
export interface StoredMeta {
  version: number;
  name: string;
  created: string;
  lastRun: string | null;
  base?: string | null;
  chain?: string[];
}

/** A snapshot layer's meta.json (src/store/layer-meta.ts). */
export interface StoredLayerMeta {
  version: number;
  id: string;
  kind: string;
  sandbox: string;
  created: string;
  parent: string | null;
  chain: string[];
}

export interface Home {
  /** $CVISOR_HOME: <scratch>/cvisor-home (made by the first command that needs it). */
  dir: string;
  /** The CLI's environment additions. */
  env: Record<string, string>;
  sandbox(name: string): string;
  layer(id: string): string;
  meta(name: string): StoredMeta;
  layerMeta(id: string): StoredLayerMeta;
}

/** The test's own $CVISOR_HOME. */
export function storeHome(fx: Fixture): Home {
  const dir = join(fx.scratch, "cvisor-home");
  const sandbox = (name: string): string => join(dir, "sandboxes", name);
  const layer = (id: string): string => join(dir, "layers", id);
  return {
    dir,
    env: { CVISOR_HOME: dir },
    sandbox,
    layer,
    meta: (name) => JSON.parse(readFileSync(join(sandbox(name), "meta.json"), "utf8")) as never,
    layerMeta: (id) => JSON.parse(readFileSync(join(layer(id), "meta.json"), "utf8")) as never,
  };
}

/** r failed as cvisor itself (125) with one line `cvisor: ...` matching pattern, no stack. */
export function assertOneLineError(r: CliResult, pattern: RegExp): void {
  assert.equal(r.code, 125, show(r));
  const lines = r.err.split("\n").filter((l) => l !== "");
  assert.equal(lines.length, 1, show(r));
  assert.match(lines[0] ?? "", /^cvisor: /, show(r));
  assert.match(r.err, pattern, show(r));
  assert.doesNotMatch(r.err, /^\s+at /m, show(r));
}
