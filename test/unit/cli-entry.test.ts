// The `cvisor` bin (src/cli/bin.cts) runs a CommonJS bundle of src/cli/main.ts with V8's code
// cache (start-up time): it must carry the same grammar as the ESM build the other tests import,
// run with any cache or none, and find its package from wherever it runs.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  accessSync,
  constants,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parseCli } from "../../src/cli/parse.js";
import { CvisorError } from "../../src/core/errors.js";
import { packageRoot, setPackageAnchor } from "../../src/core/native.js";
import { cliPath, repoRoot, tempRoot } from "../helpers/repo.js";

const host = { SHELL: "/bin/sh", HOME: "/home/u" };

const bundlePath = join(repoRoot, "dist", "cli.cjs");

test("the bin is an executable CommonJS file with a node shebang, next to the CLI bundle", () => {
  assert.match(cliPath, /\.cjs$/);
  accessSync(cliPath, constants.X_OK);
  assert.ok(readFileSync(cliPath, "utf8").startsWith("#!/usr/bin/env node\n"));
  const bundle = readFileSync(bundlePath, "utf8");
  // esbuild empties import.meta in CommonJS output (with a mere warning): no module of the CLI
  // may use it (src/index.ts, the ESM library's entry, is not part of the bundle).
  assert.doesNotMatch(bundle, /import_meta/);
  // Its lazy imports go through the bin's importer (vm.Script has no import() on Node 20).
  assert.doesNotMatch(bundle, /\bimport\(/);
});

test("the build wrote the bundle's code cache, headed by the bundle's build id", () => {
  const id = readFileSync(bundlePath, "utf8").split("\n")[0] ?? "";
  assert.match(id, /^\/\/ cvisor build [0-9a-f]{32}$/);
  const cache = readFileSync(`${bundlePath}.cache`);
  assert.equal(cache.toString("latin1", 0, id.length + 1), `${id}\n`);
  assert.ok(cache.length > id.length + 1000, "a cache with V8's data after the id");
});

test("the bin runs the bundle without its cache, or with one of another build", () => {
  // A copy of the bin and the bundle in a package of links to this one.
  const dir = mkdtempSync(join(tempRoot(), "cvisor-bin-"));
  try {
    for (const name of ["package.json", "native", "node_modules"]) {
      symlinkSync(join(repoRoot, name), join(dir, name));
    }
    const dist = join(dir, "dist");
    mkdirSync(dist);
    symlinkSync(join(repoRoot, "dist", "src"), join(dist, "src"));
    copyFileSync(cliPath, join(dist, "cvisor.cjs"));
    copyFileSync(bundlePath, join(dist, "cli.cjs"));
    const cache = join(dist, "cli.cjs.cache");
    const other = Buffer.concat([
      Buffer.from(`// cvisor build ${"0".repeat(32)}\n`),
      randomBytes(4096),
    ]);
    for (const content of [undefined, randomBytes(4096), other]) {
      rmSync(cache, { force: true });
      if (content) writeFileSync(cache, content);
      for (const args of [["--version"], ["--", "sh", "-c", "exit 7"]]) {
        const r = spawnSync(process.execPath, [join(dist, "cvisor.cjs"), ...args], {
          encoding: "utf8",
        });
        const what = `${args.join(" ")} with ${content ? `${content.length} bytes` : "no"} cache`;
        assert.equal(r.stderr, "", what);
        assert.equal(r.status, args[0] === "--version" ? 0 : 7, what);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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
