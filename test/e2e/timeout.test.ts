// --timeout (and the library's timeout and AbortSignal) kill the whole guest tree: a setsid
// grandchild, a double-forked daemon, processes that ignore SIGTERM/SIGHUP. Afterwards nothing
// carrying the test's unique marker in its argv is left running.
import assert from "node:assert/strict";
import { Sandbox } from "../../src/index.js";
import { sleeper } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import {
  cvisor,
  killAllWith,
  processesWith,
  show,
  sleep,
  uniqueToken,
  waitFor,
  type ProcInfo,
} from "../helpers/repo.js";

/** A guest tree that is hard to kill; every process in it carries `marker` in its argv. */
function stubbornTree(marker: string): string[] {
  const s = sleeper();
  const script = [
    // a setsid grandchild (new session, new process group)
    `setsid "$0" 300 ${marker}-setsid &`,
    // a double fork: the subshell exits, its child is orphaned
    `( "$0" 300 ${marker}-orphan & ) &`,
    // a classic daemon: fork, setsid, fork, the middle exits
    `"$0" --daemon 300 ${marker}-daemon`,
    // a shell grandchild in its own session that forks again
    `setsid sh -c '"$0" 300 ${marker}-deep & wait' "$0" &`,
    // a stopped process (SIGKILL must still end it)
    `( "$0" 300 ${marker}-stopped & p=$!; sleep 0.3; kill -STOP $p; wait ) &`,
    // a tree that keeps growing while it is being killed
    `( while :; do "$0" 300 ${marker}-spawned & sleep 0.05; done ) &`,
    // the foreground: a sleeper the shell waits on
    `"$0" 300 ${marker}-main`,
  ].join("\n");
  return ["sh", "-c", script, s];
}

const EXPECTED_KINDS = ["setsid", "orphan", "daemon", "deep", "stopped", "spawned", "main"];

/** Which kinds of sleeper are running (the shells' own argv mention every kind: skipped). */
function kinds(procs: ProcInfo[], marker: string): string[] {
  const seen = new Set<string>();
  const bin = sleeper();
  for (const p of procs) {
    if (!p.cmdline.startsWith(`${bin} `)) continue;
    for (const k of EXPECTED_KINDS) if (p.cmdline.includes(`${marker}-${k}`)) seen.add(k);
  }
  return [...seen].sort();
}

/** Watches for the tree while `run` goes; returns the kinds seen running. */
async function watchWhile<T>(
  marker: string,
  run: Promise<T>,
): Promise<{ value: T; seen: string[] }> {
  const seen = new Set<string>();
  let done = false;
  const watcher = (async () => {
    while (!done) {
      for (const k of kinds(processesWith(marker), marker)) seen.add(k);
      await sleep(50);
    }
  })();
  try {
    const value = await run;
    return { value, seen: [...seen].sort() };
  } finally {
    done = true;
    await watcher;
  }
}

async function assertNothingLeft(marker: string): Promise<void> {
  // SIGKILL is asynchronous; give the kernel a moment to finish the exits.
  await waitFor(() => processesWith(marker).length === 0, 1000);
  const left = processesWith(marker);
  killAllWith(marker);
  assert.deepEqual(
    left.map((p) => `${p.pid}: ${p.cmdline}`),
    [],
    "processes of the guest tree are still running after the run ended",
  );
}

gtest(
  "--timeout kills a tree with setsid grandchildren and double-forked daemons: exit 124",
  async () => {
    const marker = uniqueToken("cvisor-e2e-tree");
    try {
      const { value: r, seen } = await watchWhile(
        marker,
        cvisor(["--timeout", "2s"], stubbornTree(marker), { timeoutMs: 30_000 }),
      );
      assert.deepEqual(
        seen,
        [...EXPECTED_KINDS].sort(),
        "the whole tree was running before the deadline",
      );
      assert.equal(r.code, 124, show(r));
      assert.ok(r.durationMs >= 1900, `ended before the deadline: ${Math.round(r.durationMs)} ms`);
      assert.ok(r.durationMs < 12_000, `took ${Math.round(r.durationMs)} ms for a 2 s deadline`);
      assert.equal(
        r.stdioLeftOpen,
        false,
        `something still holds the guest's stdout/stderr\n${show(r)}`,
      );
      assert.match(r.err, /^cvisor: .*tim/m, `a one-line timeout message\n${show(r)}`);
      assert.doesNotMatch(r.err, /^\s+at /m, show(r));
      await assertNothingLeft(marker);
    } finally {
      killAllWith(marker);
    }
  },
);

gtest("--timeout units: 500ms, a bare number of ms, 1m not reached", async () => {
  const short = await cvisor(["--timeout", "500ms"], ["sleep", "30"]);
  assert.equal(short.code, 124, show(short));
  assert.ok(short.durationMs < 10_000, show(short));

  const bare = await cvisor(["--timeout", "700"], ["sleep", "30"]);
  assert.equal(bare.code, 124, show(bare));
  assert.ok(bare.durationMs < 10_000, show(bare));
  // The message says the unit a bare number means (issue 13, item 7).
  assert.equal(bare.err, "cvisor: timed out after 700ms\n", show(bare));

  // 0 is not "no timeout" in disguise: refused, one line.
  const zero = await cvisor(["--timeout", "0"], ["true"]);
  assert.equal(zero.code, 125, show(zero));
  assert.match(zero.err, /^cvisor: invalid duration: 0 \(.*leave --timeout out.*\)\n$/);

  const long = await cvisor(["--timeout", "1m"], ["sh", "-c", "sleep 0.2; echo done"]);
  assert.equal(long.code, 0, show(long));
  assert.equal(long.out, "done\n", show(long));
});

gtest("library timeout kills the tree: timedOut, exit 124", async () => {
  const marker = uniqueToken("cvisor-e2e-libtree");
  try {
    const { value: result, seen } = await watchWhile(
      marker,
      new Sandbox({ timeout: "2s" }).run(stubbornTree(marker)),
    );
    assert.deepEqual(
      seen,
      [...EXPECTED_KINDS].sort(),
      "the whole tree was running before the deadline",
    );
    assert.equal(result.timedOut, true);
    assert.equal(result.exitCode, 124);
    assert.ok(result.durationMs < 12_000, `durationMs ${result.durationMs}`);
    await assertNothingLeft(marker);
  } finally {
    killAllWith(marker);
  }
});

gtest("library AbortSignal kills the tree and the run still resolves", async () => {
  const marker = uniqueToken("cvisor-e2e-abort");
  try {
    const controller = new AbortController();
    const run = new Sandbox().run(stubbornTree(marker), { signal: controller.signal });
    const started = await waitFor(
      () => kinds(processesWith(marker), marker).length === EXPECTED_KINDS.length,
      10_000,
    );
    assert.ok(started, `the tree did not start: ${JSON.stringify(processesWith(marker))}`);
    const t0 = Date.now();
    controller.abort();
    const result = await run;
    assert.ok(Date.now() - t0 < 5000, "resolved promptly after abort");
    assert.equal(result.timedOut, false);
    assert.notEqual(result.exitCode, 0);
    await assertNothingLeft(marker);
  } finally {
    killAllWith(marker);
  }
});
