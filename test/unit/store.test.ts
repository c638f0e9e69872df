// The sandbox store on disk: names, named sandboxes and meta.json, the ephemeral root and its
// orphans, and removeTree on whatever a guest can leave behind.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { pathToFileURL } from "node:url";
import { CvisorError } from "../../src/core/errors.js";
import {
  closeEphemeral,
  ephemeralRoot,
  openEphemeral,
  sweepOrphans,
} from "../../src/sandbox/ephemeral.js";
import { hiddenPaths } from "../../src/sandbox/native-run.js";
import { removeTree } from "../../src/store/remove-tree.js";
import { closeLayer, openLayer } from "../../src/sandbox/open-layer.js";
import {
  openNamed,
  readMeta,
  STORE_VERSION,
  touchLastRun,
  validateSandboxName,
  type SandboxMeta,
} from "../../src/store/sandboxes.js";
import { cvisorHome } from "../../src/paths.js";
import { repoRoot, tempRoot } from "../helpers/repo.js";

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

function tempDir(t: TestContext, prefix = "cvisor-unit-store-"): string {
  const dir = mkdtempSync(join(tempRoot(), prefix));
  t.after(() => {
    removeTree(dir);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

function mode(path: string): number {
  return lstatSync(path).mode & 0o7777;
}

function meta(dir: string): SandboxMeta {
  return JSON.parse(readFileSync(join(dir, "meta.json"), "utf8")) as SandboxMeta;
}

test("sandbox names: letters, digits, - _ . ; 1 to 64; not . or ..", () => {
  for (const ok of ["a", "Z", "0", "my-box_1.2", ".hidden", "...", "a..b", "x".repeat(64)]) {
    assert.equal(validateSandboxName(ok), ok);
  }
  const bad: unknown[] = [
    "",
    ".",
    "..",
    "a/b",
    "/abs",
    "a b",
    "tab\there",
    "new\nline",
    "x".repeat(65),
    "é",
    "a*",
    "semi;colon",
    "nul\0",
    undefined,
    42,
  ];
  for (const name of bad) {
    assert.throws(
      () => validateSandboxName(name),
      (err: unknown) => {
        assert.ok(err instanceof CvisorError, String(err));
        assert.equal(err.code, "CV_ERR_INVALID");
        assert.equal(err.exitCode, 125);
        assert.ok(!err.message.includes("\n"), JSON.stringify(err.message));
        assert.match(err.message, /letters, digits, '-', '_' or '\.'.*1 to 64|1 to 64.*letters/);
        return true;
      },
      JSON.stringify(name),
    );
  }
  // A long bad name is clipped in the message.
  assert.throws(
    () => validateSandboxName("/".repeat(5000)),
    (err: Error) => err.message.length < 300,
  );
});

test("openNamed creates the layout: upper/, work/, meta.json, all private", (t) => {
  const home = tempDir(t);
  const env = { CVISOR_HOME: home };
  const before = Date.now();
  const sb = openNamed("box", env);
  const dir = join(home, "sandboxes", "box");
  assert.deepEqual(sb, { dir, upper: join(dir, "upper"), work: join(dir, "work") });
  assert.deepEqual(readdirSync(dir).sort(), ["meta.json", "upper", "work"]);
  for (const d of [join(home, "sandboxes"), dir, sb.upper, sb.work]) {
    assert.ok(statSync(d).isDirectory(), d);
    assert.equal(mode(d), 0o700, d);
  }
  assert.equal(mode(join(dir, "meta.json")) & 0o077, 0, "meta.json is private");
  const m = meta(dir);
  assert.deepEqual(Object.keys(m).sort(), ["created", "lastRun", "name", "version"]);
  assert.equal(m.version, 1);
  assert.equal(m.name, "box");
  assert.equal(m.lastRun, null);
  assert.equal(new Date(m.created).toISOString(), m.created);
  assert.ok(Date.parse(m.created) >= before - 1000 && Date.parse(m.created) <= Date.now() + 1000);
  // No temp dir left behind; opening again changes nothing.
  assert.deepEqual(readdirSync(join(home, "sandboxes")), ["box"]);
  const text = readFileSync(join(dir, "meta.json"), "utf8");
  assert.deepEqual(openNamed("box", env), sb);
  assert.equal(readFileSync(join(dir, "meta.json"), "utf8"), text);
  assert.throws(() => openNamed("../escape", env), { code: "CV_ERR_INVALID" });
});

test("touchLastRun: lastRun set by a rename, nothing else changed, no temp file left", (t) => {
  const home = tempDir(t);
  const sb = openNamed("box", { CVISOR_HOME: home });
  const created = meta(sb.dir).created;
  const inodeBefore = statSync(join(sb.dir, "meta.json")).ino;
  touchLastRun(sb.dir, "box", new Date("2030-01-02T03:04:05.678Z"));
  const m = meta(sb.dir);
  assert.equal(m.lastRun, "2030-01-02T03:04:05.678Z");
  assert.equal(m.created, created);
  assert.equal(m.version, 1);
  assert.notEqual(statSync(join(sb.dir, "meta.json")).ino, inodeBefore, "replaced, not rewritten");
  assert.deepEqual(readdirSync(sb.dir).sort(), ["meta.json", "upper", "work"]);
});

test("openLayer/closeLayer: a named layer's lastRun is set at the end", (t) => {
  const home = tempDir(t);
  const env = { CVISOR_HOME: home };
  const layer = openLayer("named-one", env);
  assert.equal(layer.name, "named-one");
  assert.equal(layer.upper, join(home, "sandboxes", "named-one", "upper"));
  assert.deepEqual(layer.storage, [
    join(home, "ephemeral"),
    join(home, "sandboxes"),
    join(home, "layers"),
  ]);
  assert.equal(meta(join(home, "sandboxes", "named-one")).lastRun, null);
  closeLayer(layer);
  const lastRun = meta(join(home, "sandboxes", "named-one")).lastRun;
  assert.ok(lastRun !== null && Math.abs(Date.parse(lastRun) - Date.now()) < 5000, lastRun ?? "");

  const eph = openLayer(undefined, env);
  assert.equal(eph.name, "cvisor");
  assert.ok(eph.upper.startsWith(`${join(home, "ephemeral")}/`), eph.upper);
  // Made by the core on the guest's first change, not here.
  assert.ok(!existsSync(eph.upper) && !existsSync(eph.work));
  mkdirSync(eph.upper, { recursive: true }); // as the core would
  closeLayer(eph);
  assert.deepEqual(readdirSync(join(home, "ephemeral")), []);
});

test("a sandbox from a newer cvisor is refused and left untouched", (t) => {
  const home = tempDir(t);
  const dir = join(home, "sandboxes", "future");
  mkdirSync(join(dir, "upper"), { recursive: true });
  const text = `${JSON.stringify({ version: STORE_VERSION + 1, name: "future", extra: [1] })}\n`;
  writeFileSync(join(dir, "meta.json"), text);
  const listing = (): string =>
    JSON.stringify(
      readdirSync(dir).map((n) => {
        const st = lstatSync(join(dir, n));
        return [n, st.mode, st.mtimeMs, st.ino];
      }),
    );
  const before = listing();
  const dirMtime = statSync(dir).mtimeMs;
  for (const attempt of [
    () => openNamed("future", { CVISOR_HOME: home }),
    () => touchLastRun(dir, "future"),
    () => openLayer("future", { CVISOR_HOME: home, XDG_RUNTIME_DIR: home }),
  ]) {
    assert.throws(attempt, (err: unknown) => {
      assert.ok(err instanceof CvisorError);
      assert.equal(err.code, "ESTORE_VERSION");
      assert.match(err.message, /newer cvisor/);
      assert.ok(!err.message.includes("\n"));
      return true;
    });
  }
  assert.equal(readFileSync(join(dir, "meta.json"), "utf8"), text);
  assert.equal(listing(), before);
  assert.equal(statSync(dir).mtimeMs, dirMtime);
});

test("a damaged or missing meta.json is a clear error, never repaired", (t) => {
  const home = tempDir(t);
  const env = { CVISOR_HOME: home };
  const base = join(home, "sandboxes");
  mkdirSync(join(base, "nometa", "upper"), { recursive: true });
  assert.throws(() => openNamed("nometa", env), {
    code: "ESTORE_DAMAGED",
    message: /no meta\.json/,
  });
  assert.ok(!existsSync(join(base, "nometa", "meta.json")));
  for (const [name, content] of [
    ["garbage", "{not json"],
    ["noversion", "{}"],
    ["badversion", '{"version":"1"}'],
    ["zero", '{"version":0}'],
  ] as const) {
    mkdirSync(join(base, name));
    writeFileSync(join(base, name, "meta.json"), content);
    assert.throws(
      () => openNamed(name, env),
      { code: "ESTORE_DAMAGED", message: /damaged; cvisor rm \w+ removes it$/ },
      name,
    );
    assert.equal(readFileSync(join(base, name, "meta.json"), "utf8"), content);
  }
  writeFileSync(join(base, "afile"), "x");
  assert.throws(() => openNamed("afile", env), { code: "ESTORE" });
  assert.equal(readMeta(join(base, "missing"), "missing"), undefined);
});

test("concurrent creation of one name from several processes: one sandbox, all use it", async (t) => {
  const home = tempDir(t);
  const storeUrl = pathToFileURL(join(repoRoot, "dist", "src", "store", "sandboxes.js")).href;
  const go = Date.now() + 700; // all start at the same moment, after their imports
  const script = `
    const { openNamed } = await import(${JSON.stringify(storeUrl)});
    while (Date.now() < ${go}) {}
    const got = [];
    for (let i = 0; i < 5; i++) got.push(openNamed("race" + i, { CVISOR_HOME: ${JSON.stringify(home)} }));
    process.stdout.write(JSON.stringify(got));`;
  const runs = Array.from(
    { length: 8 },
    () =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const child = spawn(process.execPath, ["--input-type=module", "-e", script]);
        let out = "";
        let err = "";
        child.stdout.on("data", (d: Buffer) => (out += d.toString()));
        child.stderr.on("data", (d: Buffer) => (err += d.toString()));
        child.on("close", (code) => resolve({ code, out, err }));
      }),
  );
  const results = await Promise.all(runs);
  const names = [0, 1, 2, 3, 4].map((i) => `race${i}`);
  const dirs = names.map((n) => join(home, "sandboxes", n));
  for (const r of results) {
    assert.equal(r.code, 0, r.err);
    assert.deepEqual(
      JSON.parse(r.out),
      dirs.map((dir) => ({ dir, upper: join(dir, "upper"), work: join(dir, "work") })),
    );
  }
  assert.deepEqual(readdirSync(join(home, "sandboxes")).sort(), names, "no temp dir left behind");
  for (const dir of dirs) {
    assert.deepEqual(readdirSync(dir).sort(), ["meta.json", "upper", "work"]);
    assert.equal(meta(dir).version, 1);
  }
});

test("the ephemeral root: cvisor's state directory, made with its parents, private", (t) => {
  const base = tempDir(t, "cvisor-unit-home-");
  const home = join(base, "deep", "state");
  assert.equal(ephemeralRoot({ CVISOR_HOME: home, XDG_RUNTIME_DIR: base, TMPDIR: base }), home);
  assert.equal(mode(home), 0o700);
  // Ours but too open: tightened.
  const loose = join(tempDir(t, "cvisor-unit-home-"), "state");
  mkdirSync(loose, { mode: 0o777 });
  chmodSync(loose, 0o777);
  assert.equal(ephemeralRoot({ CVISOR_HOME: loose }), loose);
  assert.equal(mode(loose), 0o700);
});

test("the ephemeral root is refused when it is a symlink or someone else's", (t) => {
  const linked = tempDir(t, "cvisor-unit-tmp-");
  const target = tempDir(t, "cvisor-unit-target-");
  symlinkSync(target, join(linked, "state"));
  assert.throws(() => ephemeralRoot({ CVISOR_HOME: join(linked, "state") }), {
    code: "EEPHEMERAL",
    message: /symbolic link/,
  });
  assert.deepEqual(readdirSync(target), []);
  if (isRoot) {
    const foreign = tempDir(t, "cvisor-unit-tmp-");
    mkdirSync(join(foreign, "state"), { mode: 0o777 });
    chownSync(join(foreign, "state"), NOBODY, NOBODY);
    assert.throws(() => ephemeralRoot({ CVISOR_HOME: join(foreign, "state") }), {
      code: "EEPHEMERAL",
      message: new RegExp(`belongs to uid ${NOBODY}`),
    });
    assert.deepEqual(readdirSync(join(foreign, "state")), []);
  }
});

test("ephemeral sandboxes: <root>/ephemeral/<pid>-<start>-<tag>/{upper,work}, removed at close", (t) => {
  // openEphemeral only names them: the core makes them on the guest's first change (as below).
  const made = (sb: { upper: string; work: string }): void => {
    mkdirSync(sb.upper, { recursive: true, mode: 0o700 });
    mkdirSync(sb.work, { mode: 0o700 });
  };
  const runtime = tempDir(t, "cvisor-unit-home-");
  const env = { CVISOR_HOME: runtime };
  const a = openEphemeral(env);
  const b = openEphemeral(env);
  assert.notEqual(a.dir, b.dir);
  const base = join(runtime, "ephemeral");
  assert.equal(mode(base), 0o700);
  assert.deepEqual(readdirSync(base), [], "nothing made before the guest changes something");
  made(a);
  made(b);
  for (const sb of [a, b]) {
    assert.equal(sb.root, runtime);
    assert.match(sb.dir, new RegExp(`^${base}/${process.pid}-\\d+-[0-9a-z]+$`));
    for (const d of [sb.dir, sb.upper, sb.work]) assert.equal(mode(d), 0o700, d);
  }
  // The start time in the name is this process's (field 22 of /proc/self/stat).
  const stat = readFileSync("/proc/self/stat", "utf8");
  const start = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  assert.equal(a.dir.split("/").pop()?.split("-")[1], start);
  // A guest's leftovers are removed too.
  mkdirSync(join(a.upper, "etc", "deep"), { recursive: true });
  writeFileSync(join(a.upper, "etc", "deep", "f"), "x");
  chmodSync(join(a.upper, "etc"), 0o500);
  closeEphemeral(a);
  assert.deepEqual(readdirSync(base), [b.dir.split("/").pop()]);
  closeEphemeral(b);
  assert.deepEqual(readdirSync(base), []);
});

test("sweepOrphans removes what dead processes left, keeps live owners and foreign names", async (t) => {
  const runtime = tempDir(t, "cvisor-unit-home-");
  const env = { CVISOR_HOME: runtime };
  const live = openEphemeral(env);
  mkdirSync(live.upper, { recursive: true }); // as the core would on a first change
  const base = join(runtime, "ephemeral");
  // A process that has exited: its pid and start time.
  const child = spawn("sleep", ["0"]);
  const pid = child.pid ?? 0;
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const start = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
  await new Promise((resolve) => child.on("close", resolve));
  const dead = join(base, `${pid}-${start}-abc`);
  // This process's pid with another start time: a reused pid, the owner is gone.
  const reused = join(base, `${process.pid}-1-abc`);
  // pid 1 is alive, but not since tick 1: its start time differs.
  const foreignName = join(base, "not-an-entry");
  for (const d of [dead, reused]) {
    mkdirSync(join(d, "upper", "x"), { recursive: true });
    chmodSync(join(d, "upper", "x"), 0);
    mkdirSync(join(d, "work"));
  }
  mkdirSync(foreignName);
  sweepOrphans(runtime);
  const left = readdirSync(base).sort();
  assert.deepEqual(left, [live.dir.split("/").pop(), "not-an-entry"].sort());
  // The sweep happens at the start of every run.
  mkdirSync(dead);
  const next = openEphemeral(env);
  assert.ok(!existsSync(dead));
  closeEphemeral(next);
  closeEphemeral(live);
});

test("hiddenPaths: the storage is always hidden, --expose cannot take it out", () => {
  const state = cvisorHome();
  const storage = ["/run/user/1/cvisor", `${state}/sandboxes`];
  const plain = hiddenPaths({}, {}, storage);
  assert.ok(plain.includes("/run/user/1/cvisor"));
  assert.ok(plain.includes(state));
  assert.ok(!plain.includes(`${state}/sandboxes`), "inside the hidden state dir: not listed twice");
  const exposed = hiddenPaths({ expose: ["/run/user/1/cvisor", state] }, {}, storage);
  assert.ok(!exposed.includes(state), "the state dir can be exposed");
  assert.ok(exposed.includes("/run/user/1/cvisor"));
  assert.ok(exposed.includes(`${state}/sandboxes`), "but not the sandboxes in it");
  assert.deepEqual(hiddenPaths({}, {}, []), hiddenPaths({}, {}));
});

/** Builds a tree a guest could leave: modes 0000/0500, read-only files, links, odd names, depth. */
function hostileTree(root: string, outside: string): void {
  const p = (...rel: string[]): string => join(root, ...rel);
  mkdirSync(p("a", "b", "c"), { recursive: true });
  writeFileSync(p("a", "b", "c", "file"), "x");
  writeFileSync(p("a", "ro"), "read only");
  chmodSync(p("a", "ro"), 0o400);
  mkdirSync(p("closed", "inner"), { recursive: true });
  writeFileSync(p("closed", "inner", "f"), "x");
  chmodSync(p("closed", "inner"), 0);
  chmodSync(p("closed"), 0);
  mkdirSync(p("readonly-dir"));
  writeFileSync(p("readonly-dir", "f"), "x");
  chmodSync(p("readonly-dir"), 0o500);
  mkdirSync(p("noexec-dir"));
  writeFileSync(p("noexec-dir", "f"), "x");
  chmodSync(p("noexec-dir"), 0o600);
  mkdirSync(p("empty-closed"), { mode: 0 });
  chmodSync(p("empty-closed"), 0);
  symlinkSync(outside, p("link-to-outside"));
  symlinkSync(outside, p("a", "b", "dirlink"));
  symlinkSync(join(outside, "keep.txt"), p("a", "filelink"));
  symlinkSync("/nonexistent/x", p("dangling"));
  spawnSync("mkfifo", [p("fifo")]);
  writeFileSync(Buffer.from(`${root}/bad-\xff\xfe-name`, "latin1"), "not utf-8");
  // Deeper than PATH_MAX (900 × 7 bytes): built by relative mkdir and chdir in a child process.
  const deep = spawnSync(
    process.execPath,
    [
      "-e",
      `const fs = require("node:fs");
       for (let i = 0; i < 900; i++) { fs.mkdirSync("dddddd"); process.chdir("dddddd"); }
       fs.writeFileSync("f", "x"); fs.symlinkSync("/", "rootlink"); fs.chmodSync(".", 0);`,
    ],
    { cwd: root },
  );
  assert.equal(deep.status, 0, deep.stderr.toString());
}

function checkOutside(outside: string): void {
  assert.equal(readFileSync(join(outside, "keep.txt"), "utf8"), "keep me");
  assert.equal(mode(outside), 0o750, "the outside dir's mode is unchanged");
  assert.equal(mode(join(outside, "keep.txt")), 0o640);
  assert.equal(mode(join(outside, "closed")), 0o500);
  assert.equal(readFileSync(join(outside, "closed", "inner.txt"), "utf8"), "inner");
}

function makeOutside(dir: string): string {
  const outside = join(dir, "outside");
  mkdirSync(join(outside, "closed"), { recursive: true });
  writeFileSync(join(outside, "keep.txt"), "keep me");
  chmodSync(join(outside, "keep.txt"), 0o640);
  writeFileSync(join(outside, "closed", "inner.txt"), "inner");
  chmodSync(join(outside, "closed"), 0o500);
  chmodSync(outside, 0o750);
  return outside;
}

test("removeTree removes a hostile tree, follows no symlink", (t) => {
  const dir = tempDir(t);
  const outside = makeOutside(dir);
  const root = join(dir, "tree");
  mkdirSync(root);
  hostileTree(root, outside);
  chmodSync(root, 0o500);
  removeTree(root);
  assert.ok(!existsSync(root));
  checkOutside(outside);
  assert.doesNotThrow(() => removeTree(root), "a missing path is no error");
  // A symlink given as the path: the link goes, its target stays.
  symlinkSync(outside, join(dir, "top-link"));
  removeTree(join(dir, "top-link"));
  assert.ok(!existsSync(join(dir, "top-link")));
  checkOutside(outside);
});

test(
  "removeTree as an unprivileged owner: permissions are what stand in the way",
  { skip: isRoot ? false : "covered by the test above when not root" },
  (t) => {
    // Root ignores modes: run the same removal as nobody, on a tree nobody owns.
    const dir = tempDir(t);
    chmodSync(dir, 0o755);
    const work = join(dir, "work");
    mkdirSync(work);
    chownSync(work, NOBODY, NOBODY);
    // nobody may not read the checkout (a clone in root's 0700 home): the module and the one
    // it imports go beside the tree, where nobody can.
    const mod = join(dir, "mod");
    mkdirSync(mod);
    for (const file of ["remove-tree.js", "fd-path.js"]) {
      copyFileSync(join(repoRoot, "dist", "src", "store", file), join(mod, file));
    }
    const storeUrl = pathToFileURL(join(mod, "remove-tree.js")).href;
    const build = `
      import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
      const root = ${JSON.stringify(join(work, "tree"))};
      mkdirSync(root + "/closed/inner", { recursive: true });
      writeFileSync(root + "/closed/inner/f", "x");
      chmodSync(root + "/closed/inner", 0);
      chmodSync(root + "/closed", 0);
      mkdirSync(root + "/ro");
      writeFileSync(root + "/ro/f", "x");
      chmodSync(root + "/ro/f", 0o400);
      chmodSync(root + "/ro", 0o500);
      mkdirSync(root + "/noexec");
      writeFileSync(root + "/noexec/f", "x");
      chmodSync(root + "/noexec", 0o600);
      symlinkSync(${JSON.stringify(join(dir, "outside"))}, root + "/out");
      chmodSync(root, 0o500);
      const { removeTree } = await import(${JSON.stringify(storeUrl)});
      removeTree(root);`;
    makeOutside(dir);
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", build], {
      uid: NOBODY,
      gid: NOBODY,
      cwd: "/",
      encoding: "utf8",
    });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(readdirSync(work), []);
    checkOutside(join(dir, "outside"));
  },
);
