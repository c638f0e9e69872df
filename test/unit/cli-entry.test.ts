// The `cvisor` bin is a CommonJS bundle of src/cli/main.ts (start-up time): it must carry the
// same grammar as the ESM build the other tests import, and find its package from wherever it runs.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parseCli } from "../../src/cli/parse.js";
import { CvisorError } from "../../src/core/errors.js";
import { packageRoot, setPackageAnchor } from "../../src/core/native.js";
import { cliPath, repoRoot, tempRoot } from "../helpers/repo.js";

const host = { SHELL: "/bin/sh", HOME: "/home/u" };

test("the bin is an executable CommonJS bundle with a node shebang", () => {
  assert.match(cliPath, /\.cjs$/);
  accessSync(cliPath, constants.X_OK);
  const bundle = readFileSync(cliPath, "utf8");
  assert.ok(bundle.startsWith("#!/usr/bin/env node\n"));
  // esbuild empties import.meta in CommonJS output (with a mere warning): no module of the CLI
  // may use it (src/index.ts, the ESM library's entry, is not part of the bundle).
  assert.doesNotMatch(bundle, /import_meta/);
});

test("the bundled CLI and the ESM parser agree on every line that runs no guest", () => {
  const lines = [
    ["--help"],
    ["-V"],
    ["doctor", "--help"],
    ["--frobnicate", "--", "true"],
    ["--timeout", "5x", "--", "true"],
    ["--timeout=", "--", "true"],
    ["-e"],
    ["-e", "=1", "--", "x"],
    ["ls", "-l"],
    ["doctor", "--", "x"],
    ["--sandbox", "bad/name", "--", "true"],
    ["--sandbox=..", "--", "true"],
  ];
  for (const args of lines) {
    const plan = parseCli(args, host);
    const r = spawnSync(process.execPath, [cliPath, ...args], {
      encoding: "utf8",
      env: { ...process.env, ...host },
    });
    const what = `cvisor ${args.join(" ")}: ${JSON.stringify(plan)}\n${r.stdout}${r.stderr}`;
    if (plan.kind === "print") {
      assert.equal(r.status, plan.exitCode, what);
      assert.equal(r.stdout, plan.text, what);
      assert.equal(r.stderr, "", what);
    } else {
      assert.equal(plan.kind, "error", what);
      if (plan.kind !== "error") continue;
      assert.equal(r.status, plan.exitCode, what);
      assert.equal(r.stderr, `cvisor: ${plan.message}\n`, what);
      assert.equal(r.stdout, "", what);
    }
  }
});

test("packageRoot: the nearest package.json above the anchor, through symlinks", () => {
  assert.throws(
    () => packageRoot(),
    (err: unknown) => err instanceof CvisorError,
  );
  const dir = mkdtempSync(join(tempRoot(), "cvisor-anchor-"));
  try {
    // As npm's .bin/cvisor: a symlink elsewhere to the bin inside the package.
    const link = join(dir, "cvisor");
    symlinkSync(cliPath, link);
    setPackageAnchor(link);
    assert.equal(packageRoot(), repoRoot);
    setPackageAnchor(join(repoRoot, "dist", "src", "core", "native.js"));
    assert.equal(packageRoot(), repoRoot);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
