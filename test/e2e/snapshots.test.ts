// Snapshots with real guests and the real CLI (issue 4): snapshot freezes the upper into
// layers/<id>/tree and starts a fresh upper; rollback and branch put a sandbox on a snapshot's
// chain (layers shared, never copied); snapshots ls/rm; refusals while running; the store
// versions; and kill -9 at every step (CVISOR_TEST_CRASH_AT) leaving the before or the after
// state, which the next command reports and cleans. Each test has its own $CVISOR_HOME.
//
// Tests marked todo read a snapshot's files through a run: they need the C resolver to read
// the lowers (cv_run_add_lower), which lands separately; drop the todo marks once it has.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import test from "node:test";
import { sleeper, treeDumper } from "../helpers/cc.js";
import type { Fixture } from "../helpers/fixture.js";
import { gtest, guarded } from "../helpers/guard.js";
import { assertOneLineError, storeHome as home, type Home } from "../helpers/store.js";
import {
  cvisor,
  killAllWith,
  repoRoot,
  runCli,
  runProcess,
  show,
  uniqueToken,
  waitFor,
  type CliResult,
} from "../helpers/repo.js";

function cli(h: Home, args: string[], extra: Record<string, string> = {}): Promise<CliResult> {
  return runCli(args, { extraEnv: { ...h.env, ...extra } });
}

async function ok(h: Home, args: string[]): Promise<CliResult> {
  const r = await cli(h, args);
  assert.equal(r.code, 0, `${args.join(" ")}\n${show(r)}`);
  return r;
}

/** Runs a shell script in sandbox name with $1 = the fixture root. */
async function guest(h: Home, fx: Fixture, name: string, script: string): Promise<CliResult> {
  const r = await cvisor(["--sandbox", name], ["sh", "-c", `cd "$1" && ${script}`, "sh", fx.root], {
    extraEnv: h.env,
  });
  assert.equal(r.code, 0, show(r));
  return r;
}

/** The fixture tree as a guest of sandbox name sees it (tree-dump lines). */
async function guestTree(h: Home, fx: Fixture, name: string): Promise<string> {
  const r = await cvisor(["--sandbox", name], [treeDumper(), fx.root], { extraEnv: h.env });
  assert.equal(r.code, 0, show(r));
  return r.out;
}

/** A directory as tree-dump sees it natively (the host side of a layer tree). */
function hostTree(dir: string): string {
  const r = spawnSync(treeDumper(), [dir], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

/** Everything below dir (relative paths), sorted; [] when it does not exist. */
function entries(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return (readdirSync(dir, { recursive: true }) as string[]).sort();
}

/** No journal, temp, takeover or half-made entry anywhere in the store; every chain complete. */
function assertConsistent(h: Home): void {
  const sandboxes = join(h.dir, "sandboxes");
  const layers = join(h.dir, "layers");
  for (const e of existsSync(sandboxes) ? readdirSync(sandboxes) : []) {
    assert.ok(!e.startsWith(".tmp~"), `leftover sandboxes/${e}`);
    if (e.startsWith(".")) continue;
    for (const inner of readdirSync(join(sandboxes, e))) {
      assert.ok(
        !/^(journal\.json|\.journal~|\.takeover~|\.upper~)/.test(inner),
        `leftover sandboxes/${e}/${inner}`,
      );
    }
    assert.ok(statSync(join(sandboxes, e, "upper")).isDirectory(), `sandbox ${e} has its upper`);
    for (const lid of h.meta(e).chain ?? []) {
      assert.ok(existsSync(join(layers, lid, "tree")), `sandbox ${e}: layer ${lid} is there`);
    }
  }
  for (const e of existsSync(layers) ? readdirSync(layers) : []) {
    assert.ok(!e.startsWith(".tmp~") && !e.startsWith(".trash~"), `leftover layers/${e}`);
    const m = h.layerMeta(e);
    for (const lid of m.chain) assert.ok(existsSync(join(layers, lid, "tree")), `${e}: ${lid}`);
  }
}

/** Fixture changes of the "A" state: content, modes, a deletion, a new directory, a symlink. */
const STATE_A = [
  "echo A > a.txt",
  "chmod 600 a.txt",
  "mkdir -p d/e && echo in > d/e/f && chmod 750 d",
  "rm data.bin",
  "echo more >> hello.txt",
  "ln -s a.txt la",
  "chmod 700 sub",
].join(" && ");

/** Then the "B" changes over A: rewrites, mode changes, deletions of A's and of host files. */
const STATE_B = [
  "echo B > a.txt",
  "chmod 644 a.txt",
  "rm -r d",
  "echo new > b.txt",
  "rm hello.txt sub/nested.txt",
  "chmod 755 sub",
  "rm la && ln -s b.txt la",
].join(" && ");

gtest(
  "snapshot moves the upper into layers/ID/tree and starts a fresh one; ls shows layers",
  async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", STATE_A);
    const upperBefore = hostTree(join(h.sandbox("s"), "upper"));
    const upperIno = statSync(join(h.sandbox("s"), "upper", fx.root.slice(1), "a.txt")).ino;
    const r = await ok(h, ["--sandbox", "s", "snapshot", "snap1"]);
    assert.equal(r.out, "snap1\n");
    assert.equal(r.err, "");
    // The very files, renamed (same inode): nothing was copied.
    const tree = join(h.layer("snap1"), "tree");
    assert.equal(statSync(join(tree, fx.root.slice(1), "a.txt")).ino, upperIno);
    assert.equal(hostTree(tree), upperBefore);
    assert.equal(readFileSync(join(tree, fx.root.slice(1), "a.txt"), "utf8"), "A\n");
    assert.equal(lstatSync(join(tree, fx.root.slice(1), "a.txt")).mode & 0o777, 0o600);
    assert.ok(existsSync(join(tree, fx.root.slice(1), ".wh.data.bin")), "the deletion is kept");
    assert.deepEqual(readdirSync(join(h.sandbox("s"), "upper")), [], "a fresh upper");
    assert.equal(statSync(join(h.sandbox("s"), "upper")).mode & 0o777, 0o700);
    const m = h.meta("s");
    assert.equal(m.version, 2);
    assert.equal(m.base, "snap1");
    assert.deepEqual(m.chain, ["snap1"]);
    const lm = h.layerMeta("snap1");
    assert.deepEqual(
      { ...lm, created: "" },
      {
        version: 2,
        id: "snap1",
        kind: "snapshot",
        sandbox: "s",
        created: "",
        parent: null,
        chain: ["snap1"],
      },
    );
    assert.ok(!Number.isNaN(Date.parse(lm.created)));

    // A generated id, on top: its parent is snap1 and its chain holds both.
    await guest(h, fx, "s", "echo two > two.txt");
    const gen = (await ok(h, ["--sandbox", "s", "snapshot"])).out.trim();
    assert.match(gen, /^s-[0-9a-z]+-[0-9a-z]+$/);
    assert.deepEqual(h.layerMeta(gen).chain, [gen, "snap1"]);
    assert.equal(h.layerMeta(gen).parent, "snap1");
    const third = (await ok(h, ["--sandbox", "s", "snapshot", "--json"])).out;
    const t = JSON.parse(third) as { id: string; chain: string[]; layers: number };
    assert.equal(t.layers, 4);
    assert.notEqual(t.id, gen, "generated ids are unique");

    const ls = JSON.parse((await ok(h, ["ls", "--json"])).out) as {
      name: string;
      layers: number;
      base: string;
    }[];
    assert.deepEqual(
      ls.map((s) => [s.name, s.layers, s.base]),
      [["s", 4, t.id]],
    );
    assert.match((await ok(h, ["ls"])).out, /^s\s+\S+ \S+\s+4\s/m);
    const snaps = JSON.parse((await ok(h, ["snapshots", "ls", "--json"])).out) as {
      id: string;
      sandbox: string;
      parent: string | null;
      sizeBytes: number;
      layers: number;
      created: string;
    }[];
    assert.deepEqual(
      snaps.map((s) => [s.id, s.sandbox, s.parent, s.layers]),
      [
        ["snap1", "s", null, 1],
        [gen, "s", "snap1", 2],
        [t.id, "s", gen, 3],
      ],
    );
    assert.ok(snaps.every((s) => s.sizeBytes > 0));
    const table = (await ok(h, ["snapshots"])).out;
    assert.match(table, /^ID\s+SANDBOX\s+CREATED\s+SIZE\s+PARENT\s+LAYERS$/m);
    assert.match(table, /^snap1\s+s\s+\S+ \S+\s+\S+ \S+\s+-\s+1$/m);
    assertConsistent(h);
  },
);

gtest(
  "rollback drops what changed after the snapshot: the layer and the meta, on disk",
  async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", STATE_A);
    await ok(h, ["--sandbox", "s", "snapshot", "snap1"]);
    const layerTree = hostTree(join(h.layer("snap1"), "tree"));
    await guest(h, fx, "s", "echo B > b.txt && rm -f a.txt");
    assert.notDeepEqual(entries(join(h.sandbox("s"), "upper")), []);
    await ok(h, ["--sandbox", "s", "snapshot", "snap2"]);
    await guest(h, fx, "s", "echo C > c.txt");
    const r = await ok(h, ["--sandbox", "s", "rollback", "snap1"]);
    assert.equal(r.out, "sandbox s rolled back to snap1\n");
    assert.deepEqual(readdirSync(join(h.sandbox("s"), "upper")), []);
    assert.deepEqual(h.meta("s").chain, ["snap1"]);
    assert.equal(h.meta("s").base, "snap1");
    assert.equal(hostTree(join(h.layer("snap1"), "tree")), layerTree, "the snapshot is untouched");
    assert.ok(existsSync(h.layer("snap2")), "later snapshots stay");
    // The old upper is removed in the background.
    const sb = h.sandbox("s");
    assert.ok(
      await waitFor(() => readdirSync(sb).every((e) => !/^\.(trash|reap)~/.test(e)), 10_000),
      readdirSync(sb).join(" "),
    );
    // Forward again to a later snapshot of the same sandbox.
    await ok(h, ["--sandbox", "s", "rollback", "snap2"]);
    assert.deepEqual(h.meta("s").chain, ["snap2", "snap1"]);
    assertConsistent(h);
  },
);

test("rollback restores the exact tree a guest saw: content, modes, deletions", () =>
  guarded(async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", STATE_A);
    const before = await guestTree(h, fx, "s");
    await ok(h, ["--sandbox", "s", "snapshot", "snap1"]);
    assert.equal(await guestTree(h, fx, "s"), before, "the same tree over the snapshot");
    await guest(h, fx, "s", STATE_B);
    assert.notEqual(await guestTree(h, fx, "s"), before);
    await ok(h, ["--sandbox", "s", "rollback", "snap1"]);
    assert.equal(await guestTree(h, fx, "s"), before);
  }));

gtest("branch twice from one snapshot: the branches diverge and share the layer", async (fx) => {
  const h = home(fx);
  await guest(h, fx, "s", STATE_A);
  await ok(h, ["--sandbox", "s", "snapshot", "base"]);
  assert.equal(
    (await ok(h, ["--sandbox", "b1", "branch", "base"])).out,
    "sandbox b1 made on snapshot base\n",
  );
  await ok(h, ["--sandbox", "b2", "branch", "base"]);
  for (const b of ["b1", "b2"]) {
    assert.deepEqual(h.meta(b).chain, ["base"]);
    assert.equal(h.meta(b).base, "base");
    assert.deepEqual(readdirSync(join(h.sandbox(b), "upper")), []);
  }
  // One copy of the layer on disk: the sandboxes hold no files of it.
  assert.deepEqual(readdirSync(join(h.dir, "layers")), ["base"]);
  await guest(h, fx, "b1", "echo one > x.txt");
  await guest(h, fx, "b2", "echo two > x.txt && rm hello.txt");
  const x = (b: string): string => join(h.sandbox(b), "upper", fx.root.slice(1), "x.txt");
  assert.equal(readFileSync(x("b1"), "utf8"), "one\n");
  assert.equal(readFileSync(x("b2"), "utf8"), "two\n");
  const r1 = await guest(h, fx, "b1", "cat x.txt; test -e hello.txt && echo has-hello");
  const r2 = await guest(h, fx, "b2", "cat x.txt; test -e hello.txt || echo no-hello");
  assert.equal(r1.out, "one\nhas-hello\n");
  assert.equal(r2.out, "two\nno-hello\n");
  // The source sandbox is not changed by its branches.
  assert.deepEqual(readdirSync(join(h.sandbox("s"), "upper")), []);
  // Branching again onto an existing branch resets it.
  const again = await ok(h, ["--sandbox", "b1", "branch", "base"]);
  assert.equal(again.out, "sandbox b1 reset on snapshot base\n");
  assert.deepEqual(readdirSync(join(h.sandbox("b1"), "upper")), []);
  const ls = JSON.parse((await ok(h, ["ls", "--json"])).out) as { name: string; layers: number }[];
  assert.deepEqual(
    ls.map((s) => [s.name, s.layers]),
    [
      ["b1", 2],
      ["b2", 2],
      ["s", 2],
    ],
  );
  // rm of a branch leaves the shared layer.
  await ok(h, ["rm", "b2"]);
  assert.ok(existsSync(join(h.layer("base"), "tree", fx.root.slice(1), "a.txt")));
  assertConsistent(h);
});

test("branches read the snapshot's files through a run", () =>
  guarded(async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", STATE_A);
    await ok(h, ["--sandbox", "s", "snapshot", "base"]);
    await ok(h, ["--sandbox", "b1", "branch", "base"]);
    await ok(h, ["--sandbox", "b2", "branch", "base"]);
    await guest(h, fx, "b1", "echo one >> a.txt");
    const r1 = await guest(h, fx, "b1", "cat a.txt; test -e data.bin || echo gone");
    const r2 = await guest(h, fx, "b2", "cat a.txt; test -e data.bin || echo gone");
    assert.equal(r1.out, "A\none\ngone\n");
    assert.equal(r2.out, "A\ngone\n");
  }));

gtest("refusals: bad ids, unknown snapshots, taken ids, history, a running sandbox", async (fx) => {
  const h = home(fx);
  assertOneLineError(await cli(h, ["--sandbox", "nope", "snapshot"]), /no sandbox named nope/);
  await guest(h, fx, "s", "echo A > a.txt");
  assertOneLineError(
    await cli(h, ["--sandbox", "s", "snapshot", "bad/id"]),
    /invalid snapshot id "bad\/id"/,
  );
  assertOneLineError(await cli(h, ["--sandbox", "s", "snapshot", "~x"]), /invalid snapshot id/);
  await ok(h, ["--sandbox", "s", "snapshot", "one"]);
  assertOneLineError(
    await cli(h, ["--sandbox", "s", "snapshot", "one"]),
    /snapshot id one is taken/,
  );
  assertOneLineError(
    await cli(h, ["--sandbox", "s", "rollback", "missing"]),
    /no snapshot named missing/,
  );
  assertOneLineError(
    await cli(h, ["--sandbox", "t", "branch", "missing"]),
    /no snapshot named missing/,
  );
  assertOneLineError(await cli(h, ["branch", "one"]), /branch needs the new sandbox's name/);
  assertOneLineError(await cli(h, ["snapshots", "frob"]), /unknown snapshots action 'frob'/);
  assertOneLineError(await cli(h, ["snapshots", "rm"]), /needs the IDs/);
  // Another sandbox's snapshot is not in s2's history: rollback says to branch.
  await guest(h, fx, "s2", "true");
  assertOneLineError(
    await cli(h, ["--sandbox", "s2", "rollback", "one"]),
    /not in the history of sandbox s2.*branch one/,
  );

  const marker = uniqueToken("cvisor-e2e-snap");
  try {
    const busy = runCli(["--sandbox", "s", "--", sleeper(), "30", marker], { extraEnv: h.env });
    const runs = join(h.sandbox("s"), "runs");
    assert.ok(await waitFor(() => existsSync(runs) && readdirSync(runs).length === 1, 10_000));
    const upper = entries(join(h.sandbox("s"), "upper"));
    const meta = readFileSync(join(h.sandbox("s"), "meta.json"), "utf8");
    assertOneLineError(
      await cli(h, ["--sandbox", "s", "snapshot", "two"]),
      /sandbox s is running \(pid \d+\): snapshot refused/,
    );
    assertOneLineError(
      await cli(h, ["--sandbox", "s", "rollback", "one"]),
      /sandbox s is running.*rollback refused/,
    );
    assertOneLineError(
      await cli(h, ["--sandbox", "s", "branch", "one"]),
      /sandbox s is running.*branch refused/,
    );
    assertOneLineError(await cli(h, ["snapshots", "rm", "--force", "one"]), /sandbox s is running/);
    assert.equal(readFileSync(join(h.sandbox("s"), "meta.json"), "utf8"), meta, "meta untouched");
    assert.deepEqual(entries(join(h.sandbox("s"), "upper")), upper, "upper untouched");
    assert.ok(!existsSync(h.layer("two")));
    killAllWith(marker);
    await busy;
  } finally {
    killAllWith(marker);
  }
  assertConsistent(h);
});

gtest(
  "snapshots rm: refused while used, --force says what breaks; rm NAME keeps layers",
  async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", "echo A > a.txt");
    await ok(h, ["--sandbox", "s", "snapshot", "one"]);
    await guest(h, fx, "s", "echo B > b.txt");
    await ok(h, ["--sandbox", "s", "snapshot", "two"]);
    await ok(h, ["--sandbox", "br", "branch", "one"]);
    const refused = await cli(h, ["snapshots", "rm", "one"]);
    assertOneLineError(
      refused,
      /snapshot one is used by sandboxes br, s and snapshot two: .*--force/,
    );
    assert.ok(existsSync(h.layer("one")));
    // rm of the sandboxes leaves both layers; then one is still used by snapshot two.
    await ok(h, ["rm", "s", "br"]);
    assert.deepEqual(readdirSync(join(h.dir, "layers")).sort(), ["one", "two"]);
    assertOneLineError(await cli(h, ["snapshots", "rm", "one"]), /used by snapshot two/);
    await ok(h, ["--sandbox", "c", "branch", "two"]);
    const forced = await cli(h, ["snapshots", "rm", "--force", "one"]);
    assert.equal(forced.code, 0, show(forced));
    assert.equal(forced.out, "one\n");
    assert.match(
      forced.err,
      /^cvisor: removed snapshot one, which sandbox c, snapshot two used: they can no longer be used/,
    );
    assert.ok(!existsSync(h.layer("one")));
    // What broke says so when used, and can be reset.
    assertOneLineError(
      await cli(h, ["--sandbox", "c", "snapshot"]),
      /sandbox c: its layer one is missing/,
    );
    assertOneLineError(
      await cvisor(["--sandbox", "c"], ["true"], { extraEnv: h.env }),
      /sandbox c: its layer one is missing/,
    );
    assertOneLineError(
      await cli(h, ["--sandbox", "d", "branch", "two"]),
      /snapshot two is broken: its layer one was removed/,
    );
    await guest(h, fx, "e", "true");
    await ok(h, ["--sandbox", "e", "snapshot", "three"]);
    await ok(h, ["--sandbox", "c", "branch", "three"]);
    const fixed = await cvisor(["--sandbox", "c"], ["true"], { extraEnv: h.env });
    assert.equal(fixed.code, 0, show(fixed));
    const json = JSON.parse((await ok(h, ["snapshots", "rm", "--json", "two"])).out) as {
      removed: { id: string }[];
      failed: unknown[];
    };
    assert.deepEqual(
      json.removed.map((r) => r.id),
      ["two"],
    );
    assert.deepEqual(json.failed, []);
    const ls = JSON.parse((await ok(h, ["snapshots", "ls", "--json"])).out) as { id: string }[];
    assert.deepEqual(
      ls.map((s) => s.id),
      ["three"],
    );
  },
);

gtest(
  "store versions: a version-1 sandbox keeps working; newer versions are refused untouched",
  async (fx) => {
    const h = home(fx);
    // A version-1 sandbox as the previous cvisor wrote it.
    const dir = h.sandbox("old");
    mkdirSync(join(dir, "upper", fx.root.slice(1)), { recursive: true, mode: 0o700 });
    mkdirSync(join(dir, "work"), { mode: 0o700 });
    writeFileSync(join(dir, "upper", fx.root.slice(1), "v1.txt"), "from v1\n");
    const v1 = { version: 1, name: "old", created: "2026-01-01T00:00:00.000Z", lastRun: null };
    writeFileSync(join(dir, "meta.json"), `${JSON.stringify(v1)}\n`, { mode: 0o600 });
    const r = await guest(h, fx, "old", "cat v1.txt");
    assert.equal(r.out, "from v1\n");
    assert.equal(h.meta("old").version, 1, "still version 1 without snapshots");
    const ls = JSON.parse((await ok(h, ["ls", "--json"])).out) as { layers: number; base: null }[];
    assert.deepEqual(
      ls.map((s) => [s.layers, s.base]),
      [[1, null]],
    );
    await ok(h, ["--sandbox", "old", "snapshot", "v1snap"]);
    assert.equal(h.meta("old").version, 2);

    // Newer versions: a sandbox, a layer, a journal.
    const future = h.sandbox("future");
    mkdirSync(join(future, "upper"), { recursive: true });
    const text = `${JSON.stringify({ version: 3, name: "future", chain: ["x"] })}\n`;
    writeFileSync(join(future, "meta.json"), text);
    assertOneLineError(
      await cli(h, ["--sandbox", "future", "snapshot"]),
      /sandbox future was made by a newer cvisor \(store version 3/,
    );
    assertOneLineError(await cli(h, ["ls"]), /newer cvisor/);
    assert.equal(readFileSync(join(future, "meta.json"), "utf8"), text, "left untouched");
    assertOneLineError(await cli(h, ["rm", "future"]), /newer cvisor/);
    assert.equal(readFileSync(join(future, "meta.json"), "utf8"), text, "left untouched");
    const layerText = `${JSON.stringify({ version: 3, id: "v1snap", kind: "snapshot", chain: ["v1snap"] })}\n`;
    writeFileSync(join(h.layer("v1snap"), "meta.json"), layerText);
    const snaps = await cli(h, ["snapshots"]);
    assertOneLineError(snaps, /layer v1snap was made by a newer cvisor \(layer version 3/);
    assert.equal(readFileSync(join(h.layer("v1snap"), "meta.json"), "utf8"), layerText);
  },
);

// ------------------------------------------------------------------ kill -9 at every step

interface CrashCase {
  step: string;
  /** What to run (the CLI, killed at step). */
  args: string[];
  /** The state the store must be in after the next command. */
  after: boolean;
  /** What the next command says on stderr ("" for nothing). */
  says: RegExp | null;
}

const CRASHES: CrashCase[] = [
  ...(
    [
      ["snapshot:journal", false],
      ["snapshot:layer-made", false],
      ["snapshot:upper-moved", true],
      ["snapshot:upper-fresh", true],
      ["snapshot:layer-placed", true],
      ["snapshot:meta-written", true],
    ] as const
  ).map(([step, after]) => ({
    step,
    args: ["--sandbox", "s", "snapshot", "snap2"],
    after,
    says: after
      ? /^cvisor: finished an interrupted snapshot of sandbox s \(snap2\)\n$/
      : /^cvisor: removed the leftovers of an interrupted snapshot of sandbox s \(nothing changed\)\n$/,
  })),
  ...(
    [
      ["reset:journal", false],
      ["reset:upper-made", false],
      ["reset:upper-trashed", true],
      ["reset:upper-placed", true],
      ["reset:meta-written", true],
    ] as const
  ).map(([step, after]) => ({
    step,
    args: ["--sandbox", "s", "rollback", "snap1"],
    after,
    says: after
      ? /^cvisor: finished an interrupted rollback of sandbox s to snap1\n$/
      : /^cvisor: removed the leftovers of an interrupted rollback of sandbox s \(nothing changed\)\n$/,
  })),
  {
    step: "reset:upper-trashed",
    args: ["--sandbox", "s", "branch", "snap1"],
    after: true,
    says: /^cvisor: finished an interrupted branch of sandbox s to snap1\n$/,
  },
  {
    step: "branch:built",
    args: ["--sandbox", "nb", "branch", "snap1"],
    after: false,
    says: /^cvisor: removed the leftovers of an interrupted branch or sandbox creation \(\.tmp~[0-9a-z-]+\)\n$/,
  },
  { step: "branch:placed", args: ["--sandbox", "nb", "branch", "snap1"], after: true, says: null },
  {
    step: "rm:trashed",
    args: ["snapshots", "rm", "lone"],
    after: true,
    says: /^cvisor: removed the leftovers of an interrupted snapshots rm\n$/,
  },
];

for (const c of CRASHES) {
  const label = `${c.args.filter((a) => !a.startsWith("-") && !["s", "nb"].includes(a)).join(" ")}`;
  gtest(
    `kill -9 at ${c.step} (${label}): the next command reports and cleans; ${c.after ? "after" : "before"} state`,
    async (fx) => {
      const h = home(fx);
      const rel = fx.root.slice(1);
      await guest(h, fx, "s", "echo A > a.txt");
      await ok(h, ["--sandbox", "s", "snapshot", "snap1"]);
      await guest(h, fx, "lone", "true");
      await ok(h, ["--sandbox", "lone", "snapshot", "lone"]);
      await ok(h, ["rm", "lone"]);
      await guest(h, fx, "s", "echo B > b.txt");
      const metaBefore = readFileSync(join(h.sandbox("s"), "meta.json"), "utf8");
      const killed = await cli(h, c.args, { CVISOR_TEST_CRASH_AT: c.step });
      assert.equal(killed.signal, "SIGKILL", `not killed at ${c.step}\n${show(killed)}`);
      const next = await cli(h, ["snapshots", "ls", "--json"]);
      assert.equal(next.code, 0, show(next));
      if (c.says) assert.match(next.err, c.says, show(next));
      else assert.equal(next.err, "", show(next));
      assertConsistent(h);
      const upper = join(h.sandbox("s"), "upper", rel);
      const ids = (JSON.parse(next.out) as { id: string }[]).map((s) => s.id);
      if (c.args.includes("snapshot")) {
        if (c.after) {
          assert.deepEqual(h.meta("s").chain, ["snap2", "snap1"]);
          assert.deepEqual(entries(join(h.sandbox("s"), "upper")), []);
          assert.equal(readFileSync(join(h.layer("snap2"), "tree", rel, "b.txt"), "utf8"), "B\n");
          assert.deepEqual(ids, ["snap1", "lone", "snap2"]);
        } else {
          assert.equal(readFileSync(join(h.sandbox("s"), "meta.json"), "utf8"), metaBefore);
          assert.equal(readFileSync(join(upper, "b.txt"), "utf8"), "B\n");
          assert.ok(!existsSync(h.layer("snap2")));
          assert.ok(!ids.includes("snap2"));
        }
      } else if (c.args.includes("rollback") || (c.args.includes("branch") && c.args[1] === "s")) {
        assert.deepEqual(h.meta("s").chain, ["snap1"]);
        if (c.after) assert.deepEqual(entries(join(h.sandbox("s"), "upper")), []);
        else assert.equal(readFileSync(join(upper, "b.txt"), "utf8"), "B\n");
      } else if (c.args.includes("branch")) {
        assert.equal(existsSync(h.sandbox("nb")), c.after);
        if (c.after) assert.deepEqual(h.meta("nb").chain, ["snap1"]);
      } else {
        assert.equal(existsSync(h.layer("lone")), !c.after);
        assert.ok(!ids.includes("lone"));
      }
      // The layer of snap1 is whole whatever happened.
      assert.equal(readFileSync(join(h.layer("snap1"), "tree", rel, "a.txt"), "utf8"), "A\n");
      // And the command itself works now.
      if (!c.after) {
        const again = await cli(h, c.args);
        assert.equal(again.code, 0, show(again));
        assertConsistent(h);
      }
    },
  );
}

gtest("a run that meets a killed snapshot's journal finishes it first and says so", async (fx) => {
  const h = home(fx);
  await guest(h, fx, "s", "echo A > a.txt");
  const killed = await cli(h, ["--sandbox", "s", "snapshot", "k"], {
    CVISOR_TEST_CRASH_AT: "snapshot:upper-moved",
  });
  assert.equal(killed.signal, "SIGKILL", show(killed));
  assert.ok(existsSync(join(h.sandbox("s"), "journal.json")));
  const r = await cvisor(["--sandbox", "s"], ["sh", "-c", "echo ran"], { extraEnv: h.env });
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "ran\n");
  assert.equal(r.err, "cvisor: finished an interrupted snapshot of sandbox s (k)\n");
  assert.deepEqual(h.meta("s").chain, ["k"]);
  assertConsistent(h);
});

// The squash steps run the library in a child process (killed at the step).
for (const [step, after] of [
  ["snapshot:squash-built", false],
  ["snapshot:squash-placed", false],
  ["snapshot:meta-written", true],
] as const) {
  gtest(
    `kill -9 at ${step} of a squashing snapshot: before/after state, squash layer cleaned`,
    async (fx) => {
      const h = home(fx);
      await guest(h, fx, "s", "echo 0 > f0");
      for (let i = 1; i <= 8; i++) {
        await ok(h, ["--sandbox", "s", "snapshot", `n${i}`]);
        writeFileSync(join(h.sandbox("s"), "upper", "f"), `${i}\n`); // the upper needs no guest
      }
      assert.equal(h.meta("s").chain?.length, 8);
      const child = `
      const { snapshot } = await import(${JSON.stringify(join(repoRoot, "dist/snapshots/ops.js"))});
      await snapshot("s", "n9");
    `;
      const killed = await runProcess(process.execPath, ["--input-type=module", "-e", child], {
        extraEnv: { ...h.env, CVISOR_TEST_CRASH_AT: step },
      });
      assert.equal(killed.signal, "SIGKILL", show(killed));
      const next = await cli(h, ["snapshots", "ls"]);
      assert.equal(next.code, 0, show(next));
      assert.match(next.err, after ? /finished an interrupted snapshot/ : /removed the leftovers/);
      assertConsistent(h);
      const squashes = readdirSync(join(h.dir, "layers")).filter((l) => l.startsWith("sq~"));
      if (after) {
        assert.equal(squashes.length, 1);
        assert.deepEqual(h.meta("s").chain, ["n9", squashes[0]]);
      } else {
        assert.deepEqual(squashes, [], "no squash layer left");
        assert.equal(h.meta("s").chain?.length, 8);
        assert.equal(readFileSync(join(h.sandbox("s"), "upper", "f"), "utf8"), "8\n");
      }
    },
  );
}

gtest(
  "concurrent snapshots of one sandbox serialize: every one lands, once, in one chain",
  async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", "echo A > a.txt");
    const ids = ["c1", "c2", "c3", "c4"];
    const results = await Promise.all(ids.map((id) => cli(h, ["--sandbox", "s", "snapshot", id])));
    for (const r of results) assert.equal(r.code, 0, show(r));
    const chain = h.meta("s").chain ?? [];
    assert.deepEqual([...chain].sort(), ids);
    // Each snapshot's parent is the one below it in the chain: they went one after another.
    for (const [i, id] of chain.entries()) {
      assert.deepEqual(h.layerMeta(id).chain, chain.slice(i));
      assert.equal(h.layerMeta(id).parent, chain[i + 1] ?? null);
    }
    // The guest's file is in exactly one of them (the first to run).
    const holders = ids.filter((id) =>
      existsSync(join(h.layer(id), "tree", fx.root.slice(1), "a.txt")),
    );
    assert.deepEqual(holders, [chain[chain.length - 1]]);
    assertConsistent(h);
  },
);

// A snapshot layer whose meta.json is damaged is reported the same way by every command, and
// the CLI can always remove it (issue 13, item 4, for layers): snapshots ls lists the others
// and says which one and how; a sandbox on it says so; snapshots rm removes it (--force while a
// sandbox uses it); doctor --store lists every damaged record with its fix.
gtest(
  "a damaged snapshot layer: snapshots ls lists the rest, doctor --store names it, rm removes it",
  async (fx) => {
    const h = home(fx);
    await guest(h, fx, "s", "echo A > a.txt");
    await ok(h, ["--sandbox", "s", "snapshot", "good"]);
    await guest(h, fx, "t", "echo T > t.txt");
    await ok(h, ["--sandbox", "t", "snapshot", "bad"]);
    const clean = await cli(h, ["doctor", "--store"]);
    assert.equal(clean.code, 0, show(clean));
    assert.match(clean.out, /store is sound/, show(clean));
    await guest(h, fx, "u", "true");
    writeFileSync(join(h.layer("bad"), "meta.json"), "{ not json");
    writeFileSync(join(h.sandbox("s"), "meta.json"), "[]");
    writeFileSync(join(h.sandbox("u"), "journal.json"), "{");

    const ls = await cli(h, ["snapshots", "ls"]);
    assert.equal(ls.code, 0, show(ls));
    assert.match(ls.out, /^good /m, show(ls));
    assert.match(ls.out, /^bad +.*damaged/m, show(ls));
    assert.match(
      ls.err,
      /^cvisor: layer bad: .*meta\.json is damaged; cvisor snapshots rm --force bad removes it$/m,
    );
    assert.match(
      ls.err,
      /^cvisor: sandbox u: .*journal\.json is damaged; cvisor rm u removes it$/m,
      show(ls),
    );
    assert.equal(ls.err.split("\n").filter(Boolean).length, 2, show(ls));
    const json = JSON.parse((await ok(h, ["snapshots", "ls", "--json"])).out) as {
      id: string;
      damaged?: string;
    }[];
    assert.deepEqual(Object.fromEntries(json.map((s) => [s.id, typeof s.damaged])), {
      good: "undefined",
      bad: "string",
    });

    const doctor = await cli(h, ["doctor", "--store"]);
    assert.equal(doctor.code, 1, show(doctor));
    assert.match(doctor.out, /^\[✗\] sandbox s — .*meta\.json is damaged/m, show(doctor));
    assert.match(doctor.out, /^ {2}fix: cvisor rm s$/m, show(doctor));
    assert.match(doctor.out, /^\[✗\] snapshot bad — .*meta\.json is damaged/m, show(doctor));
    assert.match(doctor.out, /^ {2}fix: cvisor snapshots rm --force bad$/m, show(doctor));
    const dj = JSON.parse((await cli(h, ["doctor", "--store", "--json"])).out) as {
      ok: boolean;
      checks: { name: string; status: string }[];
    };
    assert.equal(dj.ok, false);
    assert.deepEqual(
      dj.checks.filter((c) => c.status === "fail").map((c) => c.name),
      ["sandbox s", "sandbox u", "snapshot bad"],
    );

    // A run of t reads its chain's trees, not their records: it still runs.
    const run = await cvisor(["--sandbox", "t"], ["true"], { extraEnv: h.env });
    assert.equal(run.code, 0, show(run));

    const rm = await cli(h, ["snapshots", "rm", "bad"]);
    assert.equal(rm.code, 125, show(rm));
    assert.match(rm.err, /snapshot bad is used by sandbox t/);
    await ok(h, ["snapshots", "rm", "--force", "bad"]);
    assert.ok(!existsSync(h.layer("bad")));
    await ok(h, ["rm", "s", "u"]);
    const after = await cli(h, ["doctor", "--store"]);
    assert.equal(after.code, 1, show(after));
    // What is left: t's chain names a layer that is gone.
    assert.match(after.out, /^\[✗\] sandbox t — its chain names layer bad, which is gone/m);
    assert.match(after.out, /^ {2}fix: cvisor rm t$/m, show(after));
    await ok(h, ["rm", "t"]);
    const sound = await cli(h, ["doctor", "--store"]);
    assert.equal(sound.code, 0, show(sound));
  },
);
