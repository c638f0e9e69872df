// The cache commands' grammar, through the pure parser: subcommands, their operands and options,
// the root --sandbox and --json, and usage errors.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseCli, type Plan, type StoreCommandPlan } from "../../src/cli/parse.js";

function command(args: string[]): StoreCommandPlan {
  const plan: Plan = parseCli(args, {});
  assert.equal(plan.kind, "command", JSON.stringify(plan));
  return plan as StoreCommandPlan;
}

test("cache save / restore / ls / rm: operands and options", () => {
  const save = command([
    "--sandbox",
    "ci",
    "cache",
    "save",
    "k",
    "sb:/app",
    "--format",
    "zstd",
    "--no-ignore",
    "--force",
  ]);
  assert.equal(save.command, "cache");
  assert.deepEqual(save.operands, ["save", "k", "sb:/app"]);
  assert.equal(save.sandbox, "ci");
  assert.equal(save.options.format, "zstd");
  assert.equal(save.options.ignore, false);
  assert.equal(save.options.force, true);
  assert.equal(save.json, false);

  const restore = command([
    "cache",
    "restore",
    "npm-",
    "./node_modules",
    "--restore-key",
    "a-",
    "--restore-key",
    "b-",
    "--fail-on-miss",
    "--cache-backend",
    "disk:/c",
    "--read-only",
    "--json",
  ]);
  assert.deepEqual(restore.operands, ["restore", "npm-", "./node_modules"]);
  assert.deepEqual(restore.options.restoreKey, ["a-", "b-"]);
  assert.equal(restore.options.failOnMiss, true);
  assert.equal(restore.options.cacheBackend, "disk:/c");
  assert.equal(restore.options.readOnly, true);
  assert.equal(restore.json, true);

  assert.deepEqual(command(["cache", "ls"]).operands, ["ls"]);
  assert.deepEqual(command(["--json", "cache", "ls", "npm-"]).operands, ["ls", "npm-"]);
  assert.equal(command(["--json", "cache", "ls"]).json, true);
  assert.deepEqual(command(["cache", "rm", "k"]).operands, ["rm", "k"]);
  assert.equal(command(["cache", "rm", "--all"]).options.all, true);
});

test("cache: usage errors are one line", () => {
  for (const args of [
    ["cache", "save", "k"],
    ["cache", "restore"],
    ["cache", "frobnicate"],
    ["cache", "save", "k", "p", "--bogus"],
  ]) {
    const plan = parseCli(args, {});
    assert.equal(plan.kind, "error", `${args.join(" ")}: ${JSON.stringify(plan)}`);
    if (plan.kind === "error") assert.doesNotMatch(plan.message, /\n/);
  }
  const help = parseCli(["cache", "--help"], {});
  assert.equal(help.kind, "print");
  if (help.kind === "print") assert.match(help.text, /restore \[options\] <key> <path>/);
});
