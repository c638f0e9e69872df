// Interrupted cache commands leave nothing half-done (issue 13, item 2): SIGINT at points spread
// over a save and a restore ends them with the destination as it was or complete and no
// temporary files; what a kill -9 leaves is removed by the next command. Tries per command:
// $CVISOR_INTERRUPT_TRIES (default 8; the full run is 50).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { cliPath, runCli, show } from "../helpers/repo.js";

const TRIES = Number(process.env.CVISOR_INTERRUPT_TRIES ?? 8);

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  err: string;
  ms: number;
}

/** The CLI, sent `signal` after `afterMs` (never, when undefined). */
function interrupted(
  args: string[],
  env: Record<string, string>,
  cwd: string,
  signal?: NodeJS.Signals,
  afterMs = 0,
): Promise<Ended> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, [cliPath, ...args], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    const timer = signal ? setTimeout(() => child.kill(signal), afterMs) : undefined;
    child.on("error", reject);
    child.on("close", (code, sig) => {
      clearTimeout(timer);
      resolve({ code, signal: sig, err, ms: Date.now() - t0 });
    });
  });
}

/** A tree that takes a while to compress and extract: incompressible files. */
function bigTree(dir: string, files = 24): void {
  mkdirSync(dir);
  for (let i = 0; i < files; i++) writeFileSync(join(dir, `f${i}`), randomBytes(512 << 10));
}

/** The i-th of TRIES moments over a command that took fullMs, past Node's start. */
function moment(i: number, fullMs: number): number {
  return Math.round(fullMs * (0.25 + (0.75 * (i + 0.5)) / TRIES));
}

function ended(r: Ended, what: string): void {
  const ok = r.code === 0 || r.signal === "SIGINT" || r.signal === "SIGKILL";
  assert.ok(ok, `${what}: code ${r.code} signal ${r.signal}\n${r.err}`);
  assert.doesNotMatch(r.err, /^\s+at /m, `${what}: a stack trace\n${r.err}`);
}

gtest(
  "cache save interrupted at points spread over it: no temp file, the entry whole or absent",
  async (fx) => {
    const home = join(fx.scratch, "home");
    const env = { CVISOR_HOME: home };
    const tree = join(fx.scratch, "tree");
    bigTree(tree);
    const full = await interrupted(["cache", "save", "full", tree], env, fx.scratch);
    assert.equal(full.code, 0, full.err);
    const tmp = join(home, "cache", "tmp");
    for (let i = 0; i < TRIES; i++) {
      const r = await interrupted(
        ["cache", "save", `k${i}`, tree],
        env,
        fx.scratch,
        "SIGINT",
        moment(i, full.ms),
      );
      ended(r, `save k${i}`);
      assert.deepEqual(readdirSync(tmp), [], `save k${i} (${r.signal ?? r.code}) left a temp file`);
      const listed = await runCli(["cache", "ls", `k${i}`, "--json"], { extraEnv: env });
      const keys = (JSON.parse(listed.out) as { key: string }[]).map((e) => e.key);
      assert.deepEqual(keys, r.code === 0 ? [`k${i}`] : keys, show(listed));
      if (keys.length > 0) {
        const out = join(fx.scratch, `out${i}`);
        const back = await runCli(["cache", "restore", `k${i}`, out], { extraEnv: env });
        assert.equal(back.code, 0, show(back));
        assert.deepEqual(readdirSync(out).sort(), readdirSync(tree).sort());
      }
    }
    // kill -9 leaves its temp file; the next save removes it.
    const killed = await interrupted(
      ["cache", "save", "killed", tree],
      env,
      fx.scratch,
      "SIGKILL",
      Math.round(full.ms / 2),
    );
    ended(killed, "save killed");
    const next = await runCli(["cache", "save", "next", join(fx.scratch, "tree")], {
      extraEnv: env,
    });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(readdirSync(tmp), []);
  },
  { timeout: 600_000 },
);

gtest(
  "cache restore interrupted at points spread over it: the directory old or new, no temp dir",
  async (fx) => {
    const home = join(fx.scratch, "home");
    const env = { CVISOR_HOME: home };
    const tree = join(fx.scratch, "tree");
    bigTree(tree, 64);
    const saved = await runCli(["cache", "save", "k", tree], { extraEnv: env, timeoutMs: 120_000 });
    assert.equal(saved.code, 0, show(saved));
    const parent = join(fx.scratch, "work");
    mkdirSync(parent);
    const full = await interrupted(
      ["cache", "restore", "k", join(parent, "probe")],
      env,
      fx.scratch,
    );
    assert.equal(full.code, 0, full.err);
    /** A directory the restore would replace: one file, old.txt. */
    const oldDir = (name: string): string => {
      const dir = join(parent, name);
      mkdirSync(dir);
      writeFileSync(join(dir, "old.txt"), "old\n");
      return dir;
    };
    const state = (dir: string): "old" | "new" => {
      const names = readdirSync(dir).sort();
      if (names.length === 1 && readFileSync(join(dir, "old.txt"), "utf8") === "old\n")
        return "old";
      assert.deepEqual(
        names,
        readdirSync(tree).sort(),
        `${dir}: neither the old directory nor the new`,
      );
      return "new";
    };
    const leftovers = () => readdirSync(parent).filter((n) => n.startsWith(".cvisor-"));
    for (let i = 0; i < TRIES; i++) {
      const dest = oldDir(`deps${i}`);
      const r = await interrupted(
        ["cache", "restore", "k", dest],
        env,
        fx.scratch,
        "SIGINT",
        moment(i, full.ms),
      );
      ended(r, `restore ${i}`);
      const now = state(dest);
      if (r.code === 0) assert.equal(now, "new");
      assert.deepEqual(leftovers(), [], `restore ${i} (${r.signal ?? r.code}) left a temp dir`);
    }
    // kill -9 may leave its extraction directory; the next restore beside it removes it.
    const victim = oldDir("killed");
    const killed = await interrupted(
      ["cache", "restore", "k", victim],
      env,
      fx.scratch,
      "SIGKILL",
      Math.round(full.ms / 3),
    );
    ended(killed, "restore killed");
    state(victim);
    const next = await runCli(["cache", "restore", "k", join(parent, "other")], { extraEnv: env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(leftovers(), []);
    assert.ok(existsSync(join(parent, "other", "f0")));
  },
  { timeout: 600_000 },
);
