// The programs in examples/ run as a user would run them (their imports of "cvisor" resolve to
// this package), and do what their headers say. Their types are checked by the build.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { repoRoot, runProcess, show } from "../helpers/repo.js";

const example = (name: string): string => join(repoRoot, "dist", "examples", `${name}.js`);

gtest("examples/agent-tool: copy in, test, diff, roll back", async (fx) => {
  const project = join(fx.scratch, "project");
  mkdirSync(project);
  writeFileSync(join(project, "test.sh"), "echo testing\necho result > out.txt\nexit 0\n");
  const env = { CVISOR_HOME: join(fx.scratch, "home") };
  const r = await runProcess(process.execPath, [example("agent-tool"), project], {
    extraEnv: env,
    timeoutMs: 60_000,
  });
  assert.equal(r.code, 0, show(r));
  const out = JSON.parse(r.out) as {
    exitCode: number;
    output: string;
    changes: { kind: string; path: string }[];
    afterRollback: string[];
  };
  assert.equal(out.exitCode, 0);
  assert.match(out.output, /testing/);
  // Against the host, which has neither: the copied project and what its test wrote.
  assert.deepEqual(out.changes, [
    { kind: "A", path: "/project/out.txt" },
    { kind: "A", path: "/project/test.sh" },
  ]);
  assert.deepEqual(out.afterRollback, ["test.sh"]);
  assert.deepEqual(readFileSync(join(project, "test.sh"), "utf8").split("\n")[0], "echo testing");
});

gtest("examples/ci-cache: a miss builds and saves, then exact and prefix hits", async (fx) => {
  const env = { CVISOR_HOME: join(fx.scratch, "home"), CVISOR_CACHE_DIR: join(fx.scratch, "c") };
  const job = async (dir: string, key: string): Promise<unknown> => {
    mkdirSync(dir, { recursive: true });
    const r = await runProcess(process.execPath, [example("ci-cache"), dir, key], {
      extraEnv: env,
      timeoutMs: 60_000,
    });
    assert.equal(r.code, 0, show(r));
    return JSON.parse(r.out);
  };
  const a = join(fx.scratch, "a");
  assert.deepEqual(await job(a, "deps-v1"), { hit: "miss", matched: null, saved: true });
  assert.equal(readFileSync(join(a, "deps", "lib.txt"), "utf8"), "built for deps-v1\n");
  const b = join(fx.scratch, "b");
  assert.deepEqual(await job(b, "deps-v1"), { hit: "exact", matched: "deps-v1", saved: false });
  assert.equal(readFileSync(join(b, "deps", "lib.txt"), "utf8"), "built for deps-v1\n");
  const c = join(fx.scratch, "c2");
  assert.deepEqual(await job(c, "deps-v2"), { hit: "prefix", matched: "deps-v1", saved: true });
  assert.equal(readFileSync(join(c, "deps", "lib.txt"), "utf8"), "built for deps-v2\n");
});

gtest(
  "examples/strace: prints the calls of the syscalls named, passes the command through",
  async (fx) => {
    const r = await runProcess(
      process.execPath,
      [example("strace"), "openat,execve", "--", "cat", fx.p("hello.txt")],
      { extraEnv: { CVISOR_HOME: join(fx.scratch, "home") }, timeoutMs: 60_000 },
    );
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, readFileSync(fx.p("hello.txt"), "utf8"));
    assert.match(r.err, new RegExp(`^\\d+ execve\\("[^"]*cat", \\["cat",`, "m"));
    assert.match(
      r.err,
      new RegExp(
        `^\\d+ openat\\(${JSON.stringify(fx.p("hello.txt")).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}, O_RDONLY\\)$`,
        "m",
      ),
    );
  },
);

gtest("examples/allowlist: what the policy does not allow is denied and listed", async (fx) => {
  const policy = join(fx.scratch, "policy.json");
  writeFileSync(
    policy,
    JSON.stringify({
      syscalls: ["openat", "execve"],
      paths: ["/usr/", "/lib", "/etc/", fx.p("sub")],
    }),
  );
  const r = await runProcess(
    process.execPath,
    [
      example("allowlist"),
      policy,
      "--",
      "sh",
      "-c",
      // The third names hello.txt through an allowed prefix: judged where it leads.
      'cat "$0"; cat "$1"; cat "$2"; mkdir "$1.d"',
      fx.p("sub", "nested.txt"),
      fx.p("hello.txt"),
      `${fx.p("sub")}/../hello.txt`,
    ],
    { extraEnv: { CVISOR_HOME: join(fx.scratch, "home") }, timeoutMs: 60_000 },
  );
  assert.equal(r.code, 1, show(r));
  assert.equal(r.out, readFileSync(fx.p("sub", "nested.txt"), "utf8"));
  assert.match(r.err, /hello\.txt: Permission denied/);
  assert.match(
    r.err,
    new RegExp(
      `^denied: openat ${fx.p("hello.txt").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} \\(2x\\)$`,
      "m",
    ),
  );
  assert.match(r.err, /^denied: mkdir$/m);
});
