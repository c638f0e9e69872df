// Named and ephemeral sandboxes with real guests: the store layout and meta.json, the name the
// guest sees, ephemeral directories removed however a run ends (exit, --timeout, abort, a
// SIGKILLed CLI whose orphan the next run sweeps), the storage hidden from guests, bad names.
// Each test has its own $CVISOR_HOME and $XDG_RUNTIME_DIR (the ephemeral root) in its scratch dir.
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../../src/index.js";
import { sleeper } from "../helpers/cc.js";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { assertOneLineError, storeHome, type Home } from "../helpers/store.js";
import {
  cvisor,
  killAllWith,
  runCli,
  show,
  tempRoot,
  uniqueToken,
  waitFor,
} from "../helpers/repo.js";

interface Store extends Home {
  runtime: string;
  /** The entries of $CVISOR_HOME/ephemeral ([] when it does not exist). */
  ephemeral(): string[];
}

/** The test's $CVISOR_HOME, and its $XDG_RUNTIME_DIR (the ephemeral root). */
function store(fx: Fixture): Store {
  const home = storeHome(fx);
  const runtime = join(fx.scratch, "runtime");
  mkdirSync(runtime, { mode: 0o700 });
  const base = join(home.dir, "ephemeral");
  return {
    ...home,
    runtime,
    env: { ...home.env, XDG_RUNTIME_DIR: runtime },
    ephemeral: () => (existsSync(base) ? readdirSync(base) : []),
  };
}

gtest(
  "--sandbox NAME: created with upper/, work/, meta.json; lastRun set by each run",
  async (fx) => {
    const s = store(fx);
    const script = 'echo "$CVISOR_SANDBOX"; uname -n; cat /proc/sys/kernel/hostname';
    const first = await cvisor(["--sandbox", "e2e.box_1"], ["sh", "-c", script], {
      extraEnv: s.env,
    });
    assert.equal(first.code, 0, show(first));
    assert.equal(first.out, "e2e.box_1\ne2e.box_1\ne2e.box_1\n", show(first));
    const dir = join(s.dir, "sandboxes", "e2e.box_1");
    assert.deepEqual(readdirSync(dir).sort(), ["meta.json", "runs", "upper", "work"]);
    assert.deepEqual(readdirSync(join(dir, "runs")), [], "no run left its record");
    for (const d of [dir, join(dir, "upper"), join(dir, "work")]) {
      assert.equal(statSync(d).mode & 0o777, 0o700, d);
    }
    const m1 = s.meta("e2e.box_1");
    assert.equal(m1.version, 1);
    assert.equal(m1.name, "e2e.box_1");
    assert.ok(m1.lastRun !== null && m1.lastRun >= m1.created, JSON.stringify(m1));
    assert.deepEqual(s.ephemeral(), [], "a named run makes no ephemeral sandbox");

    const second = await cvisor(["--sandbox", "e2e.box_1"], ["true"], { extraEnv: s.env });
    assert.equal(second.code, 0, show(second));
    const m2 = s.meta("e2e.box_1");
    assert.equal(m2.created, m1.created);
    assert.ok(m2.lastRun !== null && m2.lastRun > (m1.lastRun ?? ""), JSON.stringify([m1, m2]));
    assert.deepEqual(readdirSync(join(s.dir, "sandboxes")), ["e2e.box_1"]);
  },
);

gtest("without --sandbox the guest is in an ephemeral sandbox named cvisor", async (fx) => {
  const s = store(fx);
  const r = await cvisor([], ["sh", "-c", 'echo "$CVISOR_SANDBOX"; uname -n'], {
    extraEnv: s.env,
  });
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "cvisor\ncvisor\n", show(r));
  assert.ok(!existsSync(join(s.dir, "sandboxes")), "no named sandbox was made");
  assert.deepEqual(s.ephemeral(), []);
});

gtest("a run that changes nothing leaves nothing on disk", async (fx) => {
  const s = store(fx);
  const run = cvisor([], ["sh", "-c", "cat /etc/hostname >/dev/null; sleep 1"], {
    extraEnv: s.env,
  });
  const seen = await waitFor(() => s.ephemeral().length > 0, 800);
  const r = await run;
  assert.equal(r.code, 0, show(r));
  assert.ok(!seen, "no ephemeral directory for a guest that wrote nothing");
  assert.deepEqual(s.ephemeral(), []);
});

gtest("the ephemeral sandbox exists once the guest writes, and is gone after", async (fx) => {
  const s = store(fx);
  const run = cvisor([], ["sh", "-c", `: > "${fx.p("made-in-sandbox")}"; sleep 1.5`], {
    extraEnv: s.env,
  });
  const seen = await waitFor(() => s.ephemeral().length === 1, 10_000);
  const during = s.ephemeral();
  const r = await run;
  assert.ok(seen, `no ephemeral sandbox appeared during the run\n${show(r)}`);
  assert.match(during[0] ?? "", /^\d+-\d+-[0-9a-z]+$/);
  const entry = join(s.dir, "ephemeral", during[0] ?? "");
  assert.equal(r.code, 0, show(r));
  assert.ok(!existsSync(entry), "removed after the run");
  assert.deepEqual(s.ephemeral(), []);
  assert.equal(statSync(s.dir).mode & 0o777, 0o700);
});

gtest("the ephemeral sandbox is removed after a --timeout kill", async (fx) => {
  const s = store(fx);
  const run = cvisor(["--timeout", "700ms"], ["sh", "-c", `: > "${fx.p("w")}"; sleep 30`], {
    extraEnv: s.env,
  });
  const seen = await waitFor(() => s.ephemeral().length === 1, 10_000);
  const r = await run;
  assert.ok(seen, show(r));
  assert.equal(r.code, 124, show(r));
  assert.deepEqual(s.ephemeral(), []);
});

gtest("a SIGKILLed CLI leaves an orphan that the next run removes", async (fx) => {
  const s = store(fx);
  const marker = uniqueToken("cvisor-e2e-orphan");
  try {
    let pid = 0;
    const run = runCli(["--", "sh", "-c", `: > "${fx.p("w")}"; exec "${sleeper()}" 30 ${marker}`], {
      extraEnv: s.env,
      onSpawn: (p) => (pid = p),
    });
    const seen = await waitFor(() => s.ephemeral().length === 1, 10_000);
    assert.ok(seen, "no ephemeral sandbox appeared");
    const orphan = s.ephemeral()[0] ?? "";
    process.kill(pid, "SIGKILL");
    const killed = await run;
    assert.equal(killed.signal, "SIGKILL", show(killed));
    assert.deepEqual(s.ephemeral(), [orphan], "nothing could remove it yet");
    assert.match(orphan, new RegExp(`^${pid}-`), "its name records the CLI's pid");

    const next = await cvisor([], ["true"], { extraEnv: s.env });
    assert.equal(next.code, 0, show(next));
    assert.deepEqual(s.ephemeral(), [], "the next run swept the orphan");
  } finally {
    killAllWith(marker);
  }
});

gtest("a named run sweeps orphans too, and leaves live runs alone", async (fx) => {
  const s = store(fx);
  const base = join(s.dir, "ephemeral");
  const live = cvisor([], ["sh", "-c", `: > "${fx.p("w")}"; sleep 2`], { extraEnv: s.env });
  assert.ok(await waitFor(() => s.ephemeral().length === 1, 10_000));
  // An orphan (made after the live run's own sweep): pid 1 exists, but did not start at tick 1.
  mkdirSync(join(base, "1-1-dead", "upper", "deep"), { recursive: true });
  mkdirSync(join(base, "1-1-dead", "work"));
  const r = await cvisor(["--sandbox", "sweeper"], ["true"], { extraEnv: s.env });
  assert.equal(r.code, 0, show(r));
  const left = s.ephemeral();
  assert.ok(!left.includes("1-1-dead"), JSON.stringify(left));
  assert.equal(left.length, 1, "the live run's sandbox stays");
  const l = await live;
  assert.equal(l.code, 0, show(l));
  assert.deepEqual(s.ephemeral(), []);
});

gtest("the sandbox storage is hidden from the guest, even with --expose", async (fx) => {
  const s = store(fx);
  const made = await cvisor(["--sandbox", "hid"], ["true"], { extraEnv: s.env });
  assert.equal(made.code, 0, show(made));
  const meta = join(s.dir, "sandboxes", "hid", "meta.json");
  mkdirSync(join(s.dir, "ephemeral"), { recursive: true });
  const canary = join(s.dir, "ephemeral", "canary");
  writeFileSync(canary, "secret\n");
  for (const opts of [
    [],
    ["--expose", s.dir],
    ["--expose", join(s.dir, "ephemeral")],
    ["--sandbox", "hid", "--expose", s.dir],
  ]) {
    for (const file of [meta, canary]) {
      const r = await cvisor(opts, ["cat", file], { extraEnv: s.env });
      assert.notEqual(r.code, 0, `${opts.join(" ")} cat ${file}\n${show(r)}`);
      assert.equal(r.out, "", show(r));
    }
  }
  // --expose of the state dir still gives back the rest of it.
  writeFileSync(join(s.dir, "other.txt"), "visible\n");
  const other = await cvisor(["--expose", s.dir], ["cat", join(s.dir, "other.txt")], {
    extraEnv: s.env,
  });
  assert.equal(other.code, 0, show(other));
  assert.equal(other.out, "visible\n");
});

gtest("--sandbox with a bad name: exit 125, one line, nothing created", async (fx) => {
  const s = store(fx);
  for (const name of ["bad/name", "..", "", "x".repeat(65), "a b"]) {
    const r = await cvisor(["--sandbox", name], ["true"], { extraEnv: s.env });
    assertOneLineError(r, /invalid sandbox name .*letters, digits/);
  }
  assert.ok(!existsSync(s.dir), "no state dir was made");
  assert.deepEqual(s.ephemeral(), []);
});

gtest("a sandbox from a newer cvisor: exit 125, one line, left as it was", async (fx) => {
  const s = store(fx);
  const dir = join(s.dir, "sandboxes", "future");
  mkdirSync(join(dir, "upper"), { recursive: true });
  const text = '{"version":99,"name":"future"}\n';
  writeFileSync(join(dir, "meta.json"), text);
  const before = readdirSync(dir).sort();
  const r = await cvisor(["--sandbox", "future"], ["true"], { extraEnv: s.env });
  assertOneLineError(r, /newer cvisor/);
  assert.equal(readFileSync(join(dir, "meta.json"), "utf8"), text);
  assert.deepEqual(readdirSync(dir).sort(), before);
});

// The library: these runs use this process's environment, pointed at a private store here.
const libStore = mkdtempSync(join(tempRoot(), "cvisor-e2e-libstore-"));
process.env.CVISOR_HOME = join(libStore, "home");
process.env.XDG_RUNTIME_DIR = libStore;
process.on("exit", () => rmSync(libStore, { recursive: true, force: true }));
const libEphemeral = (): string[] => {
  const base = join(libStore, "home", "ephemeral");
  return existsSync(base) ? readdirSync(base) : [];
};

gtest("library: SandboxOptions.sandbox names the sandbox; a bad name throws", async () => {
  const sb = new Sandbox({ sandbox: "lib-box" });
  const r = await sb.run(["sh", "-c", 'echo "$CVISOR_SANDBOX"; uname -n']);
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, "lib-box\nlib-box\n");
  const meta = JSON.parse(
    readFileSync(join(libStore, "home", "sandboxes", "lib-box", "meta.json"), "utf8"),
  ) as { lastRun: string | null };
  assert.ok(meta.lastRun !== null);
  assert.throws(() => new Sandbox({ sandbox: "no/slash" }), {
    name: "UsageError",
    code: "CV_ERR_INVALID",
  });
  const eph = await new Sandbox().run(["uname", "-n"]);
  assert.equal(eph.stdout, "cvisor\n");
  assert.deepEqual(libEphemeral(), []);
});

gtest(
  "library: ephemeral sandboxes are removed after exit, timeout, abort and failure",
  async () => {
    const sb = new Sandbox();
    const runs = await Promise.all(
      Array.from({ length: 10 }, (_, i) => sb.run(["sh", "-c", `exit ${i}`])),
    );
    assert.deepEqual(
      runs.map((r) => r.exitCode),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    );
    assert.deepEqual(libEphemeral(), []);

    const write = `: > /tmp/${uniqueToken("cvisor-e2e-eph")}`; // in the sandbox only
    const timedOut = sb.run(["sh", "-c", `${write}; sleep 30`], { timeout: "600ms" });
    assert.ok(await waitFor(() => libEphemeral().length === 1, 10_000));
    assert.equal((await timedOut).timedOut, true);
    assert.deepEqual(libEphemeral(), []);

    const controller = new AbortController();
    const aborted = sb.run(["sh", "-c", `${write}; sleep 30`], { signal: controller.signal });
    assert.ok(await waitFor(() => libEphemeral().length === 1, 10_000));
    controller.abort();
    assert.notEqual((await aborted).exitCode, 0);
    assert.deepEqual(libEphemeral(), []);

    await assert.rejects(sb.run(["true"], { cwd: "/nonexistent/cvisor-e2e" }), {
      name: "NotFoundError",
    });
    await assert.rejects(sb.run(["true"], { env: { "A=B": "x" } }), { name: "UsageError" });
    assert.deepEqual(libEphemeral(), []);
  },
);
