// The TypeScript mirror of the C ABI must not drift from native/include/cvisor.h; the error
// vocabulary the library and the CLI share.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { CV_ERROR, CvisorError, cvErrorName, restated } from "../../src/core/errors.js";
import {
  ABI_VERSION,
  PROBE_RESULT_LAYOUT,
  RUN_RESULT_LAYOUT,
  RUN_STATE,
} from "../../src/core/native.js";
import { repoRoot } from "../helpers/repo.js";

const header = readFileSync(join(repoRoot, "native", "include", "cvisor.h"), "utf8");

function enumOf(name: string): Record<string, number> {
  const body = new RegExp(`enum\\s+${name}\\s*\\{([^}]*)\\}`).exec(header)?.[1];
  assert.ok(body, `enum ${name} not found in cvisor.h`);
  const entries: Record<string, number> = {};
  for (const m of body.replace(/\/\*[\s\S]*?\*\//g, "").matchAll(/(\w+)\s*=\s*(-?\d+)/g)) {
    entries[m[1] as string] = Number(m[2]);
  }
  return entries;
}

function structOf(name: string): [string, string][] {
  const body = new RegExp(`struct\\s+${name}\\s*\\{([^}]*)\\}`).exec(header)?.[1];
  assert.ok(body, `struct ${name} not found in cvisor.h`);
  const fields: [string, string][] = [];
  for (const decl of body.replace(/\/\*[\s\S]*?\*\//g, "").split(";")) {
    const m = /^\s*(\w+)\s+(\w+)\s*(\[\s*(\d+)\s*\])?\s*$/.exec(decl);
    if (m) fields.push([m[2] as string, m[3] ? `${m[1]}[${m[4]}]` : (m[1] as string)]);
  }
  return fields;
}

test("CV_ERROR mirrors enum cv_error exactly", () => {
  assert.deepEqual({ ...CV_ERROR }, enumOf("cv_error"));
});

test("RUN_STATE mirrors enum cv_run_state", () => {
  const states = Object.fromEntries(
    Object.entries(RUN_STATE).map(([key, value]) => [`CV_RUN_${key}`, value]),
  );
  assert.deepEqual(states, enumOf("cv_run_state"));
});

test("struct layouts match the header field by field", () => {
  assert.deepEqual(RUN_RESULT_LAYOUT, structOf("cv_run_result"));
  assert.deepEqual(PROBE_RESULT_LAYOUT, structOf("cv_probe_result"));
});

test("ABI version matches CV_ABI_VERSION", () => {
  assert.equal(ABI_VERSION, Number(/#define\s+CV_ABI_VERSION\s+(\d+)/.exec(header)?.[1]));
});

test("cvErrorName and CvisorError", () => {
  assert.equal(cvErrorName(-1004), "CV_ERR_HELPER");
  assert.equal(cvErrorName(-2), undefined);
  const err = new CvisorError("helper missing", "CV_ERR_HELPER");
  assert.ok(err instanceof Error);
  assert.equal(err.code, "CV_ERR_HELPER");
  assert.equal(err.exitCode, 125);
  assert.equal(err.message, "helper missing");
});

test("the error vocabulary: one class per kind, each a CvisorError with exit 125", async () => {
  const lib = await import("../../src/index.js");
  const kinds = [
    [lib.UsageError, "usage", "EUSAGE"],
    [lib.NotFoundError, "not-found", "ENOENT"],
    [lib.ConflictError, "conflict", "EEXIST"],
    [lib.StoreError, "store", "ESTORE"],
    [lib.CacheError, "cache", "ECACHE"],
    [lib.CopyError, "copy", "ECP"],
    [lib.SetupError, "setup", "ESETUP"],
  ] as const;
  for (const [Kind, kind, code] of kinds) {
    const err = new Kind("what went wrong");
    assert.ok(err instanceof lib.CvisorError);
    assert.equal(err.kind, kind);
    assert.equal(err.code, code);
    assert.equal(err.exitCode, 125);
    assert.equal(err.name, Kind.name);
    // Said again with a command's prefix, it stays what it was.
    const again = restated(new Kind("x", "EDETAIL"), "cp: x");
    assert.ok(again instanceof Kind);
    assert.deepEqual([again.kind, again.code, again.message], [kind, "EDETAIL", "cp: x"]);
  }
  // What the library throws is one of them: a bad sandbox name is bad input.
  assert.throws(
    () => new lib.Sandbox({ sandbox: "../up" }),
    (err: unknown) => err instanceof lib.UsageError && err.kind === "usage",
  );
});
