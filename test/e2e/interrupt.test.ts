// Interrupted commands that write leave nothing half-done (issue 13, item 2): SIGINT at points
// spread over a cache save, a cache restore and an export ends each with its destination as it
// was or complete and no temporary file; a kill -9 while its temporary file exists leaves that
// file, and the next command removes it. Tries per command: $CVISOR_INTERRUPT_TRIES (default
// 8; the full run is 50).
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { cliPath, cvisor, runCli, show } from "../helpers/repo.js";

const TRIES = Number(process.env.CVISOR_INTERRUPT_TRIES ?? 8);

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  err: string;
  ms: number;
}

/**
 * The CLI, sent `signal` after `when` ms, or as soon as `when()` holds (polled every 2 ms); never
 * when no signal is given.
 */
function interrupted(
  args: string[],
  env: Record<string, string>,
  cwd: string,
  signal?: NodeJS.Signals,
  when: number | (() => boolean) = 0,
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
    let timer: NodeJS.Timeout | undefined;
    if (signal && typeof when === "number") timer = setTimeout(() => child.kill(signal), when);
    if (signal && typeof when === "function") {
      timer = setInterval(() => {
        if (!when()) return;
        clearInterval(timer);
        child.kill(signal);
      }, 2);
    }
    child.on("error", reject);
    child.on("close", (code, sig) => {
      clearInterval(timer);
      resolve({ code, signal: sig, err, ms: Date.now() - t0 });
    });
  });
}

/** A tree that takes a while to compress and extract: incompressible files. */
function bigTree(dir: string, files = 24): void {
  mkdirSync(dir);
  for (let i = 0; i < files; i++) writeFileSync(join(dir, `f${i}`), randomBytes(512 << 10));
}

/** It finished, or the signal sent ended it; never a stack trace. */
function ended(r: Ended, sent: NodeJS.Signals, what: string): void {
  assert.ok(
    r.code === 0 || r.signal === sent,
    `${what}: code ${r.code} signal ${r.signal}\n${r.err}`,
  );
  assert.doesNotMatch(r.err, /^\s+at /m, `${what}: a stack trace\n${r.err}`);
}

/**
 * Runs `start(i)` TRIES times, SIGINT at moments spread over fullMs (past Node's start), each
 * followed by check(i, how it ended); at least one try must really have been interrupted.
 */
async function spreadInterrupts(
  fullMs: number,
  start: (i: number, at: number) => Promise<Ended>,
  check: (i: number, r: Ended) => void,
): Promise<void> {
  let cut = 0;
  for (let i = 0; i < TRIES; i++) {
    const r = await start(i, Math.round(fullMs * (0.25 + (0.75 * (i + 0.5)) / TRIES)));
    ended(r, "SIGINT", `try ${i}`);
    if (r.signal === "SIGINT") cut++;
    check(i, r);
  }
  assert.ok(cut > 0, "no try was interrupted before it finished");
}

/** Entries of dir whose names start with prefix. */
function named(dir: string, prefix: string): string[] {
  return readdirSync(dir).filter((n) => n.startsWith(prefix));
}

function cacheEnv(fx: Fixture): Record<string, string> {
  return { CVISOR_HOME: join(fx.scratch, "home") };
}

gtest(
  "cache save interrupted at points spread over it: no temp file, the entry whole or absent",
  async (fx) => {
    const env = cacheEnv(fx);
    const tree = join(fx.scratch, "tree");
    bigTree(tree);
    const full = await interrupted(["cache", "save", "full", tree], env, fx.scratch);
    assert.equal(full.code, 0, full.err);
    const tmp = join(env.CVISOR_HOME ?? "", "cache", "tmp");
    await spreadInterrupts(
      full.ms,
      (i, at) => interrupted(["cache", "save", `k${i}`, tree], env, fx.scratch, "SIGINT", at),
      (i, r) => {
        assert.deepEqual(
          readdirSync(tmp),
          [],
          `save k${i} (${r.signal ?? r.code}) left a temp file`,
        );
        const listed = spawnSync(process.execPath, [cliPath, "cache", "ls", `k${i}`, "--json"], {
          env: { ...process.env, ...env },
          encoding: "utf8",
        });
        const keys = (JSON.parse(listed.stdout) as { key: string }[]).map((e) => e.key);
        if (r.code === 0) assert.deepEqual(keys, [`k${i}`]);
        else
          assert.ok(keys.length === 0 || (keys.length === 1 && keys[0] === `k${i}`), listed.stdout);
        if (keys.length > 0) {
          // Whole: it restores, with every file.
          const out = join(fx.scratch, `out${i}`);
          const back = spawnSync(process.execPath, [cliPath, "cache", "restore", `k${i}`, out], {
            env: { ...process.env, ...env },
            encoding: "utf8",
          });
          assert.equal(back.status, 0, back.stderr);
          assert.deepEqual(readdirSync(out).sort(), readdirSync(tree).sort());
        }
      },
    );
    // kill -9 while its temp file exists: left; the next save removes it.
    const killed = await interrupted(
      ["cache", "save", "killed", tree],
      env,
      fx.scratch,
      "SIGKILL",
      () => existsSync(tmp) && readdirSync(tmp).length > 0,
    );
    assert.equal(killed.signal, "SIGKILL", killed.err);
    assert.equal(readdirSync(tmp).length, 1, "the killed save's temp file");
    const next = await runCli(["cache", "save", "next", tree], { extraEnv: env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(readdirSync(tmp), []);
  },
  { timeout: 600_000 },
);

gtest(
  "cache restore interrupted at points spread over it: the directory old or new, no temp dir",
  async (fx) => {
    const env = cacheEnv(fx);
    const tree = join(fx.scratch, "tree");
    bigTree(tree, 64);
    const saved = await runCli(["cache", "save", "k", tree], { extraEnv: env, timeoutMs: 120_000 });
    assert.equal(saved.code, 0, show(saved));
    const parent = join(fx.scratch, "work");
    mkdirSync(parent);
    const probe = join(parent, "probe");
    const full = await interrupted(["cache", "restore", "k", probe], env, fx.scratch);
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
    await spreadInterrupts(
      full.ms,
      (i, at) =>
        interrupted(["cache", "restore", "k", oldDir(`deps${i}`)], env, fx.scratch, "SIGINT", at),
      (i, r) => {
        const now = state(join(parent, `deps${i}`));
        if (r.code === 0) assert.equal(now, "new");
        assert.deepEqual(
          named(parent, ".cvisor-"),
          [],
          `restore ${i} (${r.signal ?? r.code}) left a temp dir`,
        );
      },
    );
    // kill -9 while it extracts: its directory is left; the next restore beside it removes it.
    const victim = oldDir("killed");
    const killed = await interrupted(
      ["cache", "restore", "k", victim],
      env,
      fx.scratch,
      "SIGKILL",
      () => named(parent, ".cvisor-restore~").length > 0,
    );
    assert.equal(killed.signal, "SIGKILL", killed.err);
    assert.equal(state(victim), "old");
    assert.equal(named(parent, ".cvisor-restore~").length, 1, "the killed restore's directory");
    const next = await runCli(["cache", "restore", "k", join(parent, "other")], { extraEnv: env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(named(parent, ".cvisor-"), []);
    assert.ok(existsSync(join(parent, "other", "f0")));
  },
  { timeout: 600_000 },
);

gtest(
  "export interrupted at points spread over it: the tarball whole or absent, no temp file",
  async (fx) => {
    const env = cacheEnv(fx);
    const made = await cvisor(
      ["--sandbox", "s"],
      [
        "sh",
        "-c",
        `head -c 24000000 /dev/urandom > ${fx.p("big.bin")}; seq 1 3000 > ${fx.p("n.txt")}`,
      ],
      { extraEnv: env, cwd: fx.root },
    );
    assert.equal(made.code, 0, show(made));
    const out = join(fx.scratch, "out");
    mkdirSync(out);
    const full = await interrupted(
      ["--sandbox", "s", "export", join(out, "full.tar")],
      env,
      fx.scratch,
    );
    assert.equal(full.code, 0, full.err);
    const whole = (file: string): void => {
      const listed = spawnSync("tar", ["-tf", file], { encoding: "utf8" });
      assert.equal(listed.status, 0, `${file}: ${listed.stderr}`);
      assert.match(listed.stdout, /big\.bin\n/);
    };
    await spreadInterrupts(
      full.ms,
      (i, at) =>
        interrupted(
          ["--sandbox", "s", "export", join(out, `x${i}.tar`)],
          env,
          fx.scratch,
          "SIGINT",
          at,
        ),
      (i, r) => {
        assert.deepEqual(
          named(out, `x${i}.tar.tmp~`),
          [],
          `export ${i} (${r.signal ?? r.code}) left a temp file`,
        );
        if (r.code === 0 || existsSync(join(out, `x${i}.tar`))) whole(join(out, `x${i}.tar`));
      },
    );
    // kill -9 while it writes: its temp file is left; the next export to that name removes it.
    const killed = await interrupted(
      ["--sandbox", "s", "export", join(out, "k.tar")],
      env,
      fx.scratch,
      "SIGKILL",
      () => named(out, "k.tar.tmp~").length > 0,
    );
    assert.equal(killed.signal, "SIGKILL", killed.err);
    assert.ok(!existsSync(join(out, "k.tar")));
    assert.equal(named(out, "k.tar.tmp~").length, 1, "the killed export's temp file");
    const next = await runCli(["--sandbox", "s", "export", join(out, "k.tar")], { extraEnv: env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(named(out, "k.tar.tmp~"), []);
    whole(join(out, "k.tar"));
  },
  { timeout: 600_000 },
);

/** A tree of many small files in nested directories (a copy of it takes a while), content v. */
function manyFiles(dir: string, v: string, dirs = 40, per = 50): void {
  for (let d = 0; d < dirs; d++) {
    mkdirSync(join(dir, `d${d}`), { recursive: true });
    for (let f = 0; f < per; f++) writeFileSync(join(dir, `d${d}`, `f${f}`), `${v}\n`);
  }
}

/** Every file below dir (paths relative to it) with its content, sorted. */
function contents(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const name of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${name.name}` : name.name;
      if (name.isDirectory()) walk(r);
      else out.push(`${r}=${readFileSync(join(dir, r), "utf8").trim()}`);
    }
  };
  walk("");
  return out.sort();
}

/** The state of a copy destination: absent, exactly the old tree, or exactly the new one. */
function oldOrNew(dir: string, old: string[] | undefined, now: string[], what: string): string {
  if (!existsSync(dir)) {
    assert.equal(old, undefined, `${what}: the destination is gone`);
    return "old";
  }
  const seen = contents(dir);
  if (old !== undefined && seen.join("\n") === old.join("\n")) return "old";
  assert.deepEqual(seen, now, `${what}: neither the old tree nor the new (${seen.length} files)`);
  return "new";
}

function sbEnv(fx: Fixture): Record<string, string> {
  return { CVISOR_HOME: join(fx.scratch, "home") };
}

gtest(
  "cp into a sandbox interrupted at points spread over it: new trees and merges whole or absent",
  async (fx) => {
    const env = sbEnv(fx);
    const v1 = join(fx.scratch, "v1");
    const v2 = join(fx.scratch, "v2");
    manyFiles(v1, "1");
    manyFiles(v2, "2", 48); // the same names and eight more directories
    const upper = join(env.CVISOR_HOME ?? "", "sandboxes", "s", "upper");
    const work = join(env.CVISOR_HOME ?? "", "sandboxes", "s", "work");
    const full = await interrupted(["--sandbox", "s", "cp", v1, "sb:/full"], env, fx.scratch);
    assert.equal(full.code, 0, full.err);
    const want1 = contents(v1);
    const want2 = contents(v2);
    await spreadInterrupts(
      full.ms,
      async (i, at) => {
        // A merge into a directory that holds the old tree.
        const first = await runCli(["--sandbox", "s", "cp", v1, `sb:/m${i}`], { extraEnv: env });
        assert.equal(first.code, 0, show(first));
        const r = await interrupted(
          ["--sandbox", "s", "cp", `${v2}/.`, `sb:/m${i}`],
          env,
          fx.scratch,
          "SIGINT",
          at,
        );
        return r;
      },
      (i, r) => {
        const now = oldOrNew(join(upper, `m${i}`), want1, want2, `merge ${i}`);
        if (r.code === 0) assert.equal(now, "new");
        assert.deepEqual(
          named(work, "cp~"),
          [],
          `cp ${i} (${r.signal ?? r.code}) left its staging`,
        );
      },
    );
    const absent: number[] = [];
    await spreadInterrupts(
      full.ms,
      (i, at) =>
        interrupted(["--sandbox", "s", "cp", v1, `sb:/n${i}`], env, fx.scratch, "SIGINT", at),
      (i, r) => {
        const now = oldOrNew(join(upper, `n${i}`), undefined, want1, `new tree ${i}`);
        if (r.code === 0) assert.equal(now, "new");
        if (!existsSync(join(upper, `n${i}`))) absent.push(i);
        assert.deepEqual(
          named(work, "cp~"),
          [],
          `cp ${i} (${r.signal ?? r.code}) left its staging`,
        );
      },
    );
    // The same copy again lands where it should, not nested into what an interrupt left.
    assert.ok(absent.length > 0, "no interrupted copy left its destination absent");
    const again = await runCli(["--sandbox", "s", "cp", v1, `sb:/n${absent[0]}`], {
      extraEnv: env,
    });
    assert.equal(again.code, 0, show(again));
    assert.deepEqual(contents(join(upper, `n${absent[0]}`)), want1);
  },
  { timeout: 900_000 },
);

// kill -9 at each step of a copy's publishing: the next command finds the sandbox's tree old or
// new (finishing what was recorded), and no staging left behind.
for (const [step, after] of [
  ["cp:staged", false],
  ["cp:recorded", true],
  ["cp:published-one", true],
] as const) {
  gtest(
    `kill -9 at ${step} of a cp into a sandbox: the next run sees it ${after ? "whole" : "not at all"}`,
    async (fx) => {
      const env = sbEnv(fx);
      const v1 = join(fx.scratch, "v1");
      const v2 = join(fx.scratch, "v2");
      manyFiles(v1, "1", 4, 5);
      manyFiles(v2, "2", 6, 5);
      const work = join(env.CVISOR_HOME ?? "", "sandboxes", "s", "work");
      const upper = join(env.CVISOR_HOME ?? "", "sandboxes", "s", "upper");
      const first = await runCli(["--sandbox", "s", "cp", v1, "sb:/m"], { extraEnv: env });
      assert.equal(first.code, 0, show(first));
      const killed = await interrupted(
        ["--sandbox", "s", "cp", `${v2}/.`, "sb:/m"],
        {
          ...env,
          CVISOR_TEST_CRASH_AT: step,
        },
        fx.scratch,
      );
      assert.equal(killed.signal, "SIGKILL", `not killed at ${step}\n${killed.err}`);
      const next = await cvisor(["--sandbox", "s"], ["sh", "-c", "find /m -type f | wc -l"], {
        extraEnv: env,
      });
      assert.equal(next.code, 0, show(next));
      assert.equal(next.out.trim(), String(after ? 30 : 20));
      assert.equal(
        oldOrNew(join(upper, "m"), contents(v1), contents(v2), step),
        after ? "new" : "old",
      );
      assert.deepEqual(
        readdirSync(work).filter((n) => n.startsWith("cp~")),
        [],
      );
    },
  );
}

gtest(
  "cp out of a sandbox interrupted at points spread over it: the host tree whole or absent",
  async (fx) => {
    const env = sbEnv(fx);
    const v1 = join(fx.scratch, "v1");
    const v2 = join(fx.scratch, "v2");
    manyFiles(v1, "1");
    manyFiles(v2, "2", 48);
    for (const [src, to] of [
      [v1, "sb:/v1"],
      [v2, "sb:/v2"],
    ] as const) {
      const r = await runCli(["--sandbox", "s", "cp", src, to], { extraEnv: env });
      assert.equal(r.code, 0, show(r));
    }
    const out = join(fx.scratch, "out");
    mkdirSync(out);
    const full = await interrupted(["--sandbox", "s", "cp", "sb:/v1", join(out, "full")], env, out);
    assert.equal(full.code, 0, full.err);
    const want1 = contents(v1);
    const want2 = contents(v2);
    await spreadInterrupts(
      full.ms,
      (i, at) =>
        interrupted(["--sandbox", "s", "cp", "sb:/v1", join(out, `n${i}`)], env, out, "SIGINT", at),
      (i, r) => {
        const now = oldOrNew(join(out, `n${i}`), undefined, want1, `new tree ${i}`);
        if (r.code === 0) assert.equal(now, "new");
        assert.deepEqual(named(out, ".cvisor-"), [], `cp ${i} (${r.signal ?? r.code}) left a temp`);
      },
    );
    await spreadInterrupts(
      full.ms,
      async (i, at) => {
        const first = await runCli(["--sandbox", "s", "cp", "sb:/v1", join(out, `m${i}`)], {
          extraEnv: env,
        });
        assert.equal(first.code, 0, show(first));
        return interrupted(
          ["--sandbox", "s", "cp", "sb:/v2/.", join(out, `m${i}`)],
          env,
          out,
          "SIGINT",
          at,
        );
      },
      (i, r) => {
        const now = oldOrNew(join(out, `m${i}`), want1, want2, `merge ${i}`);
        if (r.code === 0) assert.equal(now, "new");
        assert.deepEqual(named(join(out, `m${i}`), ".cvisor-"), [], `cp ${i} left a temp`);
      },
    );
  },
  { timeout: 900_000 },
);

// The same for a copy out merging into a host directory: the next copy to that destination
// finishes a recorded one, or removes what an unrecorded one staged.
for (const [step, after] of [
  ["cp:staged", false],
  ["cp:recorded", true],
  ["cp:published-one", true],
] as const) {
  gtest(
    `kill -9 at ${step} of a cp out of a sandbox: the next cp there finds it ${after ? "whole" : "not done"}`,
    async (fx) => {
      const env = sbEnv(fx);
      const v1 = join(fx.scratch, "v1");
      const v2 = join(fx.scratch, "v2");
      manyFiles(v1, "1", 4, 5);
      manyFiles(v2, "2", 6, 5);
      const put = await runCli(["--sandbox", "s", "cp", v2, "sb:/v2"], { extraEnv: env });
      assert.equal(put.code, 0, show(put));
      const out = join(fx.scratch, "out");
      mkdirSync(out);
      const m = join(out, "m");
      assert.equal(spawnSync("cp", ["-a", v1, m]).status, 0);
      const killed = await interrupted(
        ["--sandbox", "s", "cp", "sb:/v2/.", m],
        { ...env, CVISOR_TEST_CRASH_AT: step },
        out,
      );
      assert.equal(killed.signal, "SIGKILL", `not killed at ${step}\n${killed.err}`);
      if (step !== "cp:staged") assert.equal(named(m, ".cvisor-cp~").length, 2, "record and area");
      const next = await runCli(["--sandbox", "s", "cp", "sb:/v2/d0/f0", join(m, "f0")], {
        extraEnv: env,
      });
      assert.equal(next.code, 0, show(next));
      assert.deepEqual(named(m, ".cvisor-"), [], "the killed copy's staging");
      const now = contents(m).filter((f) => f !== "f0=2");
      assert.deepEqual(now, after ? contents(v2) : contents(v1));
    },
  );
}

gtest(
  "kill -9 between a restore's swap and its cleanup: the directory is new, the next command sweeps",
  async (fx) => {
    const env = cacheEnv(fx);
    const tree = join(fx.scratch, "tree");
    bigTree(tree, 3);
    const saved = await runCli(["cache", "save", "k", tree], { extraEnv: env });
    assert.equal(saved.code, 0, show(saved));
    // Host: the old directory is replaced in one step; killed after, the new one is there.
    const parent = join(fx.scratch, "work");
    const deps = join(parent, "deps");
    mkdirSync(deps, { recursive: true });
    writeFileSync(join(deps, "old.txt"), "old\n");
    const killed = await interrupted(
      ["cache", "restore", "k", deps],
      { ...env, CVISOR_TEST_CRASH_AT: "restore:swapped" },
      fx.scratch,
    );
    assert.equal(killed.signal, "SIGKILL", killed.err);
    assert.deepEqual(readdirSync(deps).sort(), readdirSync(tree).sort());
    assert.equal(named(parent, ".cvisor-restore~").length, 1, "the old directory, to sweep");
    const next = await runCli(["cache", "restore", "k", join(parent, "other")], { extraEnv: env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(named(parent, ".cvisor-"), []);
    // Sandbox: the same, and the next run sweeps.
    const made = await cvisor(
      ["--sandbox", "s"],
      ["sh", "-c", "mkdir -p /tmp/d && echo old > /tmp/d/old.txt"],
      {
        extraEnv: env,
      },
    );
    assert.equal(made.code, 0, show(made));
    const inSb = await interrupted(
      ["--sandbox", "s", "cache", "restore", "k", "sb:/tmp/d"],
      { ...env, CVISOR_TEST_CRASH_AT: "restore:swapped" },
      fx.scratch,
    );
    assert.equal(inSb.signal, "SIGKILL", inSb.err);
    const work = join(env.CVISOR_HOME ?? "", "sandboxes", "s", "work");
    assert.equal(named(work, "cache~").length, 1, "the old directory, to sweep");
    const seen = await cvisor(["--sandbox", "s"], ["ls", "/tmp/d"], { extraEnv: env });
    assert.equal(seen.code, 0, show(seen));
    assert.deepEqual(seen.out.trim().split("\n").sort(), readdirSync(tree).sort());
    assert.deepEqual(named(work, "cache~"), []);
  },
);
