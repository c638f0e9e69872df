// The library API with real guests: results, exit codes, never throwing for a guest failure,
// stdin, env and cwd, output modes, stats, and a hundred concurrent runs in one process.
import assert from "node:assert/strict";
import { Sandbox } from "../../src/index.js";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT } from "../helpers/fixture.js";

gtest("run() resolves with exit code, output and stats", async (fx) => {
  const result = await new Sandbox().run([
    "sh",
    "-c",
    'cat "$0"; echo err >&2; exit 3',
    fx.p("hello.txt"),
  ]);
  assert.equal(result.exitCode, 3);
  assert.equal(result.signal, null);
  assert.equal(result.timedOut, false);
  assert.equal(result.stdout, HELLO_TEXT);
  assert.equal(result.stderr, "err\n");
  assert.equal(result.execError, undefined);
  assert.ok(result.durationMs > 0 && result.durationMs < 30_000, `durationMs ${result.durationMs}`);
  const { stats } = result;
  assert.ok(stats.totalNotifications > 0, "a shell exec'ing cat is notified at least once");
  const sum = Object.values(stats.notifications).reduce((a, b) => a + b, 0);
  assert.equal(stats.totalNotifications, sum);
  for (const key of ["userMs", "systemMs", "maxRssKb"] as const) {
    assert.ok(Number.isFinite(stats[key]) && stats[key] >= 0, `${key}: ${stats[key]}`);
  }
  assert.ok(stats.maxRssKb > 0, "the guest used some memory");
});

gtest("guest failures resolve, never throw: signal, not found, not executable", async (fx) => {
  const sandbox = new Sandbox();
  const term = await sandbox.run(["sh", "-c", "kill -TERM $$"]);
  assert.equal(term.exitCode, 143);
  assert.equal(term.signal, "SIGTERM");

  const missing = await sandbox.run(["/nonexistent/cvisor-e2e-prog"]);
  assert.equal(missing.exitCode, 127);
  assert.equal(missing.execError, "ENOENT");

  const noexec = await sandbox.run([fx.p("noexec.sh")]);
  assert.equal(noexec.exitCode, 126);
  assert.equal(noexec.execError, "EACCES");

  const fail = await sandbox.run(["false"]);
  assert.equal(fail.exitCode, 1);
  assert.equal(fail.execError, undefined);
});

gtest("stdin: a string, bytes, and ignore (EOF)", async () => {
  const sandbox = new Sandbox();
  const text = await sandbox.run(["cat"], { stdin: "some text\nmore\n" });
  assert.equal(text.stdout, "some text\nmore\n");

  const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
  const hex = await sandbox.run(["od", "-An", "-v", "-tx1"], { stdin: bytes });
  assert.equal(hex.stdout.replace(/\s+/g, ""), Buffer.from(bytes).toString("hex"));

  const none = await sandbox.run(["sh", "-c", "cat; echo eof"]);
  assert.equal(none.stdout, "eof\n");
});

gtest("env and cwd: sandbox defaults, per-run overrides, undefined removes", async (fx) => {
  const sandbox = new Sandbox({ env: { A: "from-sandbox", B: "b" }, cwd: fx.p("sub") });
  const r = await sandbox.run(["sh", "-c", 'echo "$A ${B-unset} $C"; pwd; cat nested.txt'], {
    env: { C: "from-run", B: undefined },
  });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, `from-sandbox unset from-run\n${fx.p("sub")}\n${NESTED_TEXT}`);

  const other = await sandbox.run(["pwd"], { cwd: fx.p("sub", "deeper") });
  assert.equal(other.stdout, `${fx.p("sub", "deeper")}\n`);
});

gtest("output modes: ignore drops a stream, pipe captures it", async () => {
  const r = await new Sandbox().run(["sh", "-c", "echo out; echo err >&2"], {
    stdout: "ignore",
    stderr: "pipe",
  });
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "");
  assert.equal(r.stderr, "err\n");
});

gtest(
  "100 concurrent runs in one process all complete with the right output",
  async (fx) => {
    const sandbox = new Sandbox();
    const started = Date.now();
    const runs = Array.from({ length: 100 }, (_, i) =>
      i % 4 === 3
        ? sandbox.run(["cat", fx.p("hello.txt")])
        : sandbox.run(
            ["sh", "-c", 'echo "run-$0"; echo "err-$0" >&2; exit $(($0 % 7))', String(i)],
            {
              ...(i % 5 === 0 ? { stdin: `input-${i}\n` } : {}),
            },
          ),
    );
    const results = await Promise.all(runs);
    const wrong: string[] = [];
    results.forEach((r, i) => {
      if (i % 4 === 3) {
        if (r.exitCode !== 0 || r.stdout !== HELLO_TEXT) wrong.push(`#${i}: ${JSON.stringify(r)}`);
      } else if (r.exitCode !== i % 7 || r.stdout !== `run-${i}\n` || r.stderr !== `err-${i}\n`) {
        wrong.push(
          `#${i}: exit ${r.exitCode} stdout ${JSON.stringify(r.stdout)} stderr ${JSON.stringify(r.stderr)}`,
        );
      }
    });
    assert.deepEqual(wrong, [], "runs with a wrong result");
    console.log(`# 100 concurrent runs took ${Date.now() - started} ms`);
  },
  { timeout: 120_000 },
);

// run("echo hi") is a shell line where an argv belongs: the error says what to pass instead
// (issue 13, item 7), and nothing runs.
gtest("run() given a string says it takes an argv array", async () => {
  const sb = new Sandbox();
  await assert.rejects(sb.run("echo hi" as unknown as string[]), (err: Error) => {
    assert.equal(err.name, "UsageError");
    assert.match(err.message, /argv array, such as \["echo","hi"\]/);
    assert.match(err.message, /\["\/bin\/sh", "-c", "echo hi"\]/);
    return true;
  });
  await assert.rejects(sb.run([]), /empty command/);
});
