// Everything the CLI does, through the library (issue 14), with real guests: copies in and out,
// diff, export to a file and to a stream, snapshots, rollback, branch, list and remove, runCmd
// and `reject`, Cache on a host directory and a sandbox's, and spawn's streams (stdin, stdout,
// stderr, kill, backpressure). Runs use this process's environment, pointed at a private store.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import {
  AbortedError,
  Cache,
  NotFoundError,
  RunFailedError,
  Sandbox,
  UsageError,
  type Change,
} from "../../src/index.js";
import { gtest } from "../helpers/guard.js";
import { NESTED_TEXT } from "../helpers/fixture.js";
import { tempRoot } from "../helpers/repo.js";

const store = mkdtempSync(join(tempRoot(), "cvisor-e2e-libops-"));
process.env.CVISOR_HOME = join(store, "home");
process.env.XDG_RUNTIME_DIR = store;
delete process.env.CVISOR_CACHE_BACKEND;
delete process.env.CVISOR_CACHE_DIR;
process.on("exit", () => rmSync(store, { recursive: true, force: true }));

/** The names in a tar archive, as tar lists them. */
function tarNames(file: string): string[] {
  const r = spawnSync("tar", ["-tf", file], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.split("\n").filter(Boolean).sort();
}

gtest("library: cp in and out, diff, export to a file and to a stream", async (fx) => {
  const sb = new Sandbox({ sandbox: "ops-cp" });
  // A directory the host does not have: the copy makes it (docker cp's rules).
  const work = fx.p("work");
  const into = await sb.cp(fx.p("sub"), work, { direction: "in" });
  assert.equal(into.files, 2);
  assert.equal(into.dirs, 2);
  const inside = await sb.run(["sh", "-c", 'cat "$0/nested.txt" && echo new > "$0/new.txt"', work]);
  assert.equal(inside.exitCode, 0, inside.stderr);
  assert.equal(inside.stdout, NESTED_TEXT);

  const changes: Change[] = await sb.diff();
  const paths = changes.map((c) => `${c.kind} ${c.path}`);
  assert.ok(paths.includes(`A ${work}/new.txt`), paths.join("\n"));
  assert.ok(paths.includes(`A ${work}/deeper/leaf.txt`), paths.join("\n"));

  const out = join(fx.scratch, "out");
  mkdirSync(out); // several sources go into an existing directory
  const back = await sb.cp([`${work}/new.txt`, `${work}/nested.txt`], out, { direction: "out" });
  assert.equal(back.files, 2);
  assert.equal(readFileSync(join(out, "new.txt"), "utf8"), "new\n");
  assert.equal(readFileSync(join(out, "nested.txt"), "utf8"), NESTED_TEXT);

  const tarFile = join(fx.scratch, "layer.tar");
  const summary = await sb.export(tarFile);
  assert.ok(summary.entries >= 4 && summary.bytes > 0, JSON.stringify(summary));
  const names = tarNames(tarFile);
  assert.ok(names.includes(`${work.slice(1)}/new.txt`), names.join("\n"));
  assert.deepEqual(
    readdirSync(fx.scratch).filter((n) => n.includes(".tmp~")),
    [],
    "no temp file is left beside the export",
  );
  const chunks: Buffer[] = [];
  const stream = new PassThrough();
  stream.on("data", (c: Buffer) => chunks.push(c));
  const streamed = await sb.export(stream);
  assert.deepEqual(streamed, summary);
  assert.ok(Buffer.concat(chunks).equals(readFileSync(tarFile)), "the same tar to a stream");

  // The host is untouched (the guard checks the fixture too); a bad operand is a UsageError.
  await assert.rejects(sb.cp(fx.p("hello.txt"), "relative", { direction: "in" }), UsageError);
  await assert.rejects(sb.cp(fx.p("missing"), "/x", { direction: "in" }), NotFoundError);
  await assert.rejects(new Sandbox().diff(), /diff needs a named sandbox/);
  await assert.rejects(new Sandbox({ sandbox: "never-made" }).diff(), {
    name: "NotFoundError",
    code: "ENOSANDBOX",
  });
});

gtest("library: snapshot, rollback, branch, list, snapshots, removeSnapshot, remove", async () => {
  const sb = new Sandbox({ sandbox: "ops-snap" });
  await sb.runCmd("echo one > /tmp/state", { reject: true });
  const snap = await sb.snapshot("lib-one");
  assert.equal(snap.id, "lib-one");
  assert.equal(snap.sandbox, "ops-snap");
  await sb.runCmd("echo two > /tmp/state", { reject: true });
  assert.equal((await sb.runCmd("cat /tmp/state")).stdout, "two\n");
  const back = await sb.rollback("lib-one");
  assert.equal(back.id, "lib-one");
  assert.equal((await sb.runCmd("cat /tmp/state")).stdout, "one\n");

  const made = await sb.branch("ops-branch", "lib-one");
  assert.equal(made.created, true);
  const branch = new Sandbox({ sandbox: "ops-branch" });
  assert.equal((await branch.runCmd("cat /tmp/state")).stdout, "one\n");

  const names = (await Sandbox.list()).map((s) => s.name);
  assert.ok(names.includes("ops-snap") && names.includes("ops-branch"), names.join(" "));
  const snaps = await Sandbox.snapshots();
  assert.deepEqual(
    snaps.filter((s) => s.id === "lib-one").map((s) => [s.sandbox, s.layers]),
    [["ops-snap", 1]],
  );
  await assert.rejects(Sandbox.removeSnapshot("lib-one"), { name: "ConflictError" });
  await Sandbox.remove("ops-branch");
  await Sandbox.remove("ops-snap");
  assert.deepEqual((await Sandbox.removeSnapshot("lib-one")).id, "lib-one");
  assert.ok(!(await Sandbox.snapshots()).some((s) => s.id === "lib-one"));
  await assert.rejects(Sandbox.remove("ops-snap"), { name: "NotFoundError" });
});

gtest(
  "library: runCmd runs a shell line; reject makes a failed guest a RunFailedError",
  async () => {
    const sb = new Sandbox();
    const ok = await sb.runCmd('echo "$((6 * 7))"');
    assert.equal(ok.stdout, "42\n");
    const failed = await sb.runCmd("echo partial; echo why >&2; exit 3");
    assert.equal(failed.exitCode, 3, "without reject a failure resolves");
    const err = await sb.runCmd("echo partial; echo why >&2; exit 3", { reject: true }).then(
      () => assert.fail("should reject"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof RunFailedError);
    assert.equal(err.exitCode, 3);
    assert.equal(err.result.stdout, "partial\n");
    assert.match(err.message, /^command failed with exit code 3: \/bin\/sh -c .*\nwhy$/);
    const strict = new Sandbox({ reject: true });
    await assert.rejects(strict.run(["false"]), RunFailedError);
    assert.equal((await strict.run(["false"], { reject: false })).exitCode, 1);
    await assert.rejects(sb.runCmd(""), UsageError);
  },
);

gtest("library: Cache saves and restores a host directory and a sandbox's", async (fx) => {
  const cache = new Cache({ backend: `disk:${join(store, "cache")}` });
  const saved = await cache.save("lib-k1", fx.p("sub"), { format: "zstd" });
  assert.ok(saved.saved);
  assert.equal(saved.entry.format, "zstd");
  assert.equal(saved.report.files, 2);
  const again = await cache.save("lib-k1", fx.p("sub"));
  assert.equal(again.saved, false, "an entry is never replaced without force");

  const target = join(fx.scratch, "restored");
  const progress: number[] = [];
  const hit = await cache.restore("lib-k1", target, { onProgress: (read) => progress.push(read) });
  assert.equal(hit.hit, "exact");
  assert.equal(readFileSync(join(target, "nested.txt"), "utf8"), NESTED_TEXT);
  assert.ok(progress.length > 0, "progress arrives as events");
  const prefix = await cache.restore("lib-k2", target, { restoreKeys: ["lib-"] });
  assert.deepEqual(
    [prefix.hit, prefix.entry?.key, prefix.matchedPrefix],
    ["prefix", "lib-k1", "lib-"],
  );
  const miss = await cache.restore("other", target);
  assert.equal(miss.hit, "miss");

  // A sandbox's directory: saved from its view, restored into its upper.
  const sb = new Sandbox({ sandbox: "ops-cache" });
  await sb.runCmd("mkdir -p /tmp/deps && echo dep > /tmp/deps/a", { reject: true });
  const fromSb = await cache.save("lib-sb", { sandbox: "ops-cache", path: "/tmp/deps" });
  assert.ok(fromSb.saved);
  await sb.runCmd("rm -r /tmp/deps", { reject: true });
  assert.equal(
    (await cache.restore("lib-sb", { sandbox: "ops-cache", path: "/tmp/deps" })).hit,
    "exact",
  );
  assert.equal((await sb.runCmd("cat /tmp/deps/a")).stdout, "dep\n");

  const listed = await cache.list("lib-");
  assert.deepEqual(listed.entries.map((e) => e.key).sort(), ["lib-k1", "lib-sb"]);
  assert.deepEqual(listed.damaged, []);
  await cache.remove("lib-k1");
  await assert.rejects(cache.remove("lib-k1"), NotFoundError);
  assert.deepEqual(await cache.removeAll(), { removed: ["lib-sb"], damaged: 0 });
  await assert.rejects(cache.save("k", fx.p("sub"), { format: "rar" as "gzip" }), UsageError);
  const readOnly = new Cache({ backend: `disk:${join(store, "cache")}`, readOnly: true });
  await assert.rejects(readOnly.save("k", fx.p("sub")), /read-only/);
  await Sandbox.remove("ops-cache");
  assert.deepEqual(
    readdirSync(fx.scratch).filter((n) => n.startsWith(".cvisor-restore~")),
    [],
    "no restore staging is left beside the restored directory",
  );
});

gtest(
  "library: spawn streams stdout and stderr, takes stdin as a stream, kill ends the tree",
  async () => {
    const sb = new Sandbox();
    const cat = sb.spawn(["sh", "-c", "tr a-z A-Z; echo done >&2"]);
    assert.ok(cat.stdin && cat.stdout && cat.stderr);
    cat.stdin.write("hello ");
    cat.stdin.end("world\n");
    const lines: string[] = [];
    for await (const chunk of cat.stdout) lines.push(String(chunk));
    let err = "";
    for await (const chunk of cat.stderr) err += String(chunk);
    const r = await cat.result;
    assert.equal(lines.join(""), "HELLO WORLD\n");
    assert.equal(err, "done\n");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "", "streamed output is not also held in the result");

    const forever = sb.spawn(["sh", "-c", "echo started; sleep 60 & wait"], { stdin: "ignore" });
    assert.equal(forever.stdin, null);
    const first = await new Promise<string>((resolve) =>
      forever.stdout?.once("data", (c: Buffer) => resolve(String(c))),
    );
    assert.equal(first, "started\n");
    forever.kill();
    const killed = await forever.result;
    assert.equal(killed.signal, "SIGKILL");

    // A signal other than SIGKILL goes to the main process only, which may handle it.
    const trapped = sb.spawn(
      ["sh", "-c", 'trap "echo got TERM; exit 7" TERM; echo ready; while :; do sleep 0.05; done'],
      { stdin: "ignore" },
    );
    let said = "";
    await new Promise<void>((resolve) =>
      trapped.stdout?.on("data", (c: Buffer) => {
        said += String(c);
        if (said.includes("ready")) resolve();
      }),
    );
    trapped.kill("SIGTERM");
    const termed = await trapped.result;
    assert.equal(termed.exitCode, 7);
    assert.match(said, /got TERM/);
    assert.throws(() => trapped.kill("SIGNOPE" as NodeJS.Signals), UsageError);

    const failing = sb.spawn(["sh", "-c", "exit 4"], { reject: true, stdout: "ignore" });
    assert.equal(failing.stdout, null);
    await assert.rejects(failing.result, RunFailedError);
  },
);

// A long run's output is never held whole: a consumer that reads slowly holds the guest back
// (the pipe fills and its writes wait), and memory stays bounded. CVISOR_SPAWN_STREAM_MB sets the
// size (default 1024: 1 GiB).
gtest(
  "library: spawn streams 1 GiB to a slow consumer with bounded memory",
  async () => {
    const mb = Number(process.env.CVISOR_SPAWN_STREAM_MB ?? "1024");
    const proc = new Sandbox().spawn(["head", "-c", `${mb}M`, "/dev/zero"], { stdin: "ignore" });
    assert.ok(proc.stdout);
    const rss0 = process.memoryUsage().rss;
    let peak = rss0;
    let total = 0;
    for await (const chunk of proc.stdout) {
      total += (chunk as Buffer).length;
      peak = Math.max(peak, process.memoryUsage().rss);
      // The slow part: every 128 MiB the consumer stops reading for 200 ms, long enough for
      // the guest to write hundreds of MiB more were nothing holding it back.
      if (
        Math.floor(total / (128 << 20)) >
        Math.floor((total - (chunk as Buffer).length) / (128 << 20))
      ) {
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    const r = await proc.result;
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "");
    assert.equal(total, mb * 1024 * 1024);
    const grew = (peak - rss0) / (1 << 20);
    assert.ok(grew < 64, `memory grew by ${grew.toFixed(1)} MiB while streaming ${mb} MiB`);
  },
  { timeout: 300_000 },
);

gtest("library: the host directory a restore replaces is the one named", async (fx) => {
  // The restore replaces the directory itself, never its parent's other entries.
  const cache = new Cache({ backend: `disk:${join(store, "cache2")}` });
  assert.ok((await cache.save("k", fx.p("sub"))).saved);
  const parent = join(fx.scratch, "parent");
  mkdirSync(join(parent, "dir"), { recursive: true });
  writeFileSync(join(parent, "keep.txt"), "kept");
  writeFileSync(join(parent, "dir", "stale.txt"), "stale");
  await cache.restore("k", join(parent, "dir"));
  assert.deepEqual(readdirSync(parent).sort(), ["dir", "keep.txt"]);
  assert.deepEqual(readdirSync(join(parent, "dir")).sort(), ["deeper", "nested.txt"]);
  assert.equal(readFileSync(join(parent, "keep.txt"), "utf8"), "kept");
});

/** Every path under dir with its size, sorted: what an aborted operation must leave as it was. */
function tree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string, rel: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const r = `${rel}${e.name}`;
      if (e.isDirectory()) {
        out.push(`${r}/`);
        walk(p, `${r}/`);
      } else out.push(`${r} ${e.isFile() ? readFileSync(p).length : "-"}`);
    }
  };
  walk(dir, "");
  return out.sort();
}

gtest(
  "library: an AbortSignal stops cp, export and cache save/restore part way; nothing changes",
  async (fx) => {
    const big = join(fx.scratch, "big");
    mkdirSync(big);
    for (let i = 0; i < 300; i++) writeFileSync(join(big, `f${i}`), `file ${i}\n`.repeat(100));
    const home = process.env.CVISOR_HOME as string;
    const cache = new Cache({ backend: `disk:${join(store, "abort-cache")}` });
    const sb = new Sandbox({ sandbox: "ops-abort" });
    await sb.runCmd("mkdir -p /tmp/keep && echo kept > /tmp/keep/a", { reject: true });
    await sb.cp(big, "/tmp/data", { direction: "in" });
    assert.ok((await cache.save("abort-k", big)).saved);
    const sigint = process.listenerCount("SIGINT");
    const listeners: number[] = [];
    /** An AbortSignal that aborts once progress says the operation is under way (call `at`). */
    const abortAt = (at = 3): { signal: AbortSignal; progress: () => void } => {
      const ac = new AbortController();
      let calls = 0;
      return {
        signal: ac.signal,
        progress: () => {
          listeners.push(process.listenerCount("SIGINT"));
          if (++calls === at) ac.abort(new Error("the user cancelled"));
        },
      };
    };
    const storeBefore = tree(home);
    const sbBefore = (await sb.diff()).length;

    // cp in and out
    let a = abortAt();
    const cpIn = sb.cp(big, "/tmp/big", {
      direction: "in",
      signal: a.signal,
      onProgress: a.progress,
    });
    await assert.rejects(cpIn, (err: Error) => {
      assert.ok(err instanceof AbortedError, String(err));
      assert.equal(err.name, "AbortError");
      assert.match(err.message, /^cp: aborted \(the user cancelled\)/);
      return true;
    });
    const out = join(fx.scratch, "out");
    mkdirSync(out);
    writeFileSync(join(out, "mine"), "mine\n");
    const outBefore = tree(out);
    a = abortAt();
    await assert.rejects(
      sb.cp("/tmp/data", out, { direction: "out", signal: a.signal, onProgress: a.progress }),
      AbortedError,
    );
    assert.deepEqual(tree(out), outBefore, "a copy out aborted part way changed nothing");

    // export: to a stream nobody reads (it stalls), and to a file with an aborted signal
    const stalled = new AbortController();
    const sink = new PassThrough({ highWaterMark: 1024 });
    const exporting = sb.export(sink, { signal: stalled.signal });
    setTimeout(() => stalled.abort(new Error("stop")), 50);
    await assert.rejects(exporting, AbortedError);
    assert.ok(sink.destroyed, "the stream is destroyed");
    const tarFile = join(out, "layer.tar");
    await assert.rejects(sb.export(tarFile, { signal: AbortSignal.abort() }), AbortedError);
    assert.deepEqual(tree(out), outBefore, "no archive, no temp file");

    // cache save and restore
    a = abortAt();
    await assert.rejects(
      cache.save("abort-k2", big, { signal: a.signal, onProgress: a.progress }),
      AbortedError,
    );
    assert.deepEqual(
      (await cache.list("abort-")).entries.map((e) => e.key),
      ["abort-k"],
      "no entry was made",
    );
    a = abortAt(1); // a small archive comes in one or two reads
    await assert.rejects(
      cache.restore("abort-k", out, { signal: a.signal, onProgress: a.progress }),
      AbortedError,
    );
    assert.deepEqual(tree(out), outBefore, "the restore's destination is as it was");
    a = abortAt(1);
    await assert.rejects(
      cache.restore(
        "abort-k",
        { sandbox: "ops-abort", path: "/tmp/keep" },
        { signal: a.signal, onProgress: a.progress },
      ),
      AbortedError,
    );

    assert.equal(
      (await sb.runCmd("cat /tmp/keep/a; ls /tmp/big 2>&1 | head -1")).stdout.split("\n")[0],
      "kept",
    );
    assert.equal((await sb.diff()).length, sbBefore, "the sandbox is as it was");
    assert.deepEqual(tree(home), storeBefore, "nothing staged is left in the store");
    assert.deepEqual(readdirSync(join(store, "abort-cache", "tmp")), [], "nor in the cache");
    assert.ok(listeners.length >= 11, `progress came (${listeners.length})`);
    assert.ok(
      listeners.every((n) => n === sigint),
      "with a signal, no SIGINT listener is added",
    );
    await Sandbox.remove("ops-abort");
  },
  { timeout: 120_000 },
);
