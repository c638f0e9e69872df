// Snapshots in the store, without guests: meta.json versions, the lowers a run gets, ids,
// squashing of long chains (with the stand-in merge until snapshots/squash.ts lands), squash
// layers collected with the last snapshot that needs them, the journal as a lock.
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { CvisorError } from "../../src/core/errors.js";
import "../../src/index.js"; // tells the core where the package is (runSpec names the helper)
import { ownerRecord } from "../../src/store/owner.js";
import { hiddenPaths, runSpec } from "../../src/sandbox/native-run.js";
import { removeTree } from "../../src/store/remove-tree.js";
import { closeLayer, openLayer } from "../../src/sandbox/open-layer.js";
import { metaText, openNamed, readMeta } from "../../src/store/sandboxes.js";
import { settleJournal } from "../../src/store/journal.js";
import { newSnapshotId, SQUASH_THRESHOLD, validateSnapshotId } from "../../src/store/layer-meta.js";
import { branch, listSnapshots, removeSnapshot, rollback, snapshot } from "../../snapshots/ops.js";
import { tempRoot } from "../helpers/repo.js";
import { squashLayers } from "../../snapshots/squash.js";

function store(t: TestContext): { home: string; env: NodeJS.ProcessEnv } {
  const home = mkdtempSync(join(tempRoot(), "cvisor-unit-snap-"));
  t.after(() => {
    removeTree(home);
    rmSync(home, { recursive: true, force: true });
  });
  return { home, env: { ...process.env, CVISOR_HOME: home } };
}

function put(upper: string, rel: string, text: string): void {
  mkdirSync(join(upper, rel, ".."), { recursive: true });
  writeFileSync(join(upper, rel), text);
}

test("meta.json: version 1 without snapshot layers, version 2 with; v1 reads as no chain", (t) => {
  const { env } = store(t);
  const sb = openNamed("s", env);
  const m = readMeta(sb.dir, "s");
  assert.equal(m?.version, 1);
  assert.equal(m?.base, null);
  assert.deepEqual(m?.chain, []);
  const v1 = JSON.parse(readFileSync(join(sb.dir, "meta.json"), "utf8")) as object;
  assert.deepEqual(Object.keys(v1), ["version", "name", "created", "lastRun"]);
  const text = metaText({ name: "s", created: "c", lastRun: null, base: "x", chain: ["x"] });
  assert.deepEqual(JSON.parse(text), {
    version: 2,
    name: "s",
    created: "c",
    lastRun: null,
    base: "x",
    chain: ["x"],
  });
  writeFileSync(join(sb.dir, "meta.json"), `{"version":2,"name":"s","chain":["../x"]}`);
  assert.throws(() => readMeta(sb.dir, "s"), /meta\.json is damaged/);
});

test("a run's layer gets the chain's trees as lowers and the layers dir as hidden storage", async (t) => {
  const { home, env } = store(t);
  const sb = openNamed("s", env);
  put(sb.upper, "a", "1");
  await snapshot("s", "one", { env });
  put(sb.upper, "b", "2");
  await snapshot("s", "two", { env });
  const layer = openLayer("s", env);
  try {
    assert.deepEqual(layer.lowers, [`${home}/layers/two/tree`, `${home}/layers/one/tree`]);
    assert.ok(layer.storage.includes(`${home}/layers`));
    const spec = runSpec(["true"], { expose: [home] }, {}, layer);
    assert.deepEqual(spec.lowers, layer.lowers);
    assert.ok(spec.hide.includes(`${home}/layers`), "hidden even when the home is exposed");
    assert.ok(hiddenPaths({}, {}, layer.storage).includes(`${home}/layers`));
  } finally {
    closeLayer(layer);
  }
  const eph = openLayer(undefined, env);
  try {
    assert.deepEqual(eph.lowers, []);
    assert.ok(eph.storage.includes(`${home}/layers`));
    assert.equal(runSpec(["true"], {}, {}, eph).lowers, undefined);
  } finally {
    closeLayer(eph);
  }
});

test("snapshot ids: user ids follow the name rules, generated ones are unique", () => {
  assert.equal(validateSnapshotId("v1.2_rc-3"), "v1.2_rc-3");
  for (const bad of ["", ".", "..", "a/b", "sq~x", "~x", "x".repeat(65)]) {
    assert.throws(() => validateSnapshotId(bad), /invalid snapshot id/, bad);
  }
  const ids = new Set(Array.from({ length: 200 }, () => newSnapshotId()));
  assert.equal(ids.size, 200);
  for (const id of ids) assert.equal(validateSnapshotId(id), id);
});

test(`a chain longer than ${SQUASH_THRESHOLD} is squashed for the new snapshot; older ones keep theirs`, async (t) => {
  const { home, env } = store(t);
  const squash = squashLayers;
  const sb = openNamed("s", env);
  put(sb.upper, "keep", "0");
  put(sb.upper, "gone", "0");
  for (let i = 1; i <= SQUASH_THRESHOLD; i++) {
    await snapshot("s", `n${i}`, { env, squash });
    put(sb.upper, "f", String(i));
    if (i === 3) writeFileSync(join(sb.upper, ".wh.gone"), "");
  }
  const before = readMeta(sb.dir, "s")?.chain ?? [];
  assert.equal(before.length, SQUASH_THRESHOLD);
  const r = await snapshot("s", "top", { env, squash });
  assert.equal(r.squashed, true);
  assert.equal(r.chain.length, 2);
  const sq = r.chain[1] ?? "";
  assert.match(sq, /^sq~/);
  assert.deepEqual(readMeta(sb.dir, "s")?.chain, ["top", sq]);
  const tree = join(home, "layers", sq, "tree");
  assert.equal(readFileSync(join(tree, "f"), "utf8"), String(SQUASH_THRESHOLD - 1));
  assert.equal(readFileSync(join(tree, "keep"), "utf8"), "0");
  assert.ok(!existsSync(join(tree, "gone")) && existsSync(join(tree, ".wh.gone")));
  const meta = JSON.parse(readFileSync(join(home, "layers", sq, "meta.json"), "utf8")) as {
    kind: string;
    chain: string[];
  };
  assert.equal(meta.kind, "squash");
  assert.deepEqual(meta.chain, [sq]);
  // The older snapshots keep their own chains; squash layers are not listed as snapshots.
  const list = listSnapshots(env);
  assert.equal(list.find((s) => s.id === `n${SQUASH_THRESHOLD}`)?.layers, SQUASH_THRESHOLD);
  assert.ok(!list.some((s) => s.id.startsWith("sq~")));
  // Deeper still: the next snapshot does not squash again.
  assert.equal((await snapshot("s", "top2", { env, squash })).chain.length, 3);

  // The squash layer goes with the last thing that needs it.
  rollback("s", "n2", { env, reapInline: true });
  assert.throws(() => removeSnapshot("top", false, env), /used by snapshot top2/);
  removeSnapshot("top2", false, env);
  const r2 = removeSnapshot("top", false, env);
  assert.deepEqual(r2.squashRemoved, [sq]);
  assert.ok(!existsSync(join(home, "layers", sq)));
});

test("without squash.ts and no squash function, a snapshot at the threshold fails cleanly", async (t) => {
  const { env } = store(t);
  const sb = openNamed("s", env);
  for (let i = 1; i <= SQUASH_THRESHOLD; i++) await snapshot("s", `n${i}`, { env });
  put(sb.upper, "x", "1");
  const chain = readMeta(sb.dir, "s")?.chain;
  const failing = (): void => {
    throw new CvisorError("squash failed", "ESTORE");
  };
  await assert.rejects(snapshot("s", "top", { env, squash: failing }), /squash failed/);
  assert.deepEqual(readMeta(sb.dir, "s")?.chain, chain, "left as it was");
  assert.equal(readFileSync(join(sb.upper, "x"), "utf8"), "1");
  assert.ok(!existsSync(join(sb.dir, "journal.json")));
  assert.ok(readdirSync(join(sb.dir, "..", "..", "layers")).every((l) => !l.startsWith(".")));
});

test("the journal is a lock: a live holder makes others wait, then busy", (t) => {
  const { env } = store(t);
  const sb = openNamed("s", env);
  const journal = {
    version: 2,
    op: "snapshot",
    owner: ownerRecord(), // this process: alive
    sandbox: "s",
    id: "x",
    created: new Date().toISOString(),
    base: "x",
    chain: ["x"],
    before: [],
    tmp: ".tmp~none",
  };
  writeFileSync(join(sb.dir, "journal.json"), JSON.stringify(journal));
  const start = Date.now();
  assert.throws(
    () => settleJournal(sb.dir, "s", env, Date.now() + 100),
    (err: unknown) =>
      err instanceof CvisorError &&
      err.code === "EBUSY" &&
      /sandbox s is busy: pid \d+ is taking a snapshot of it/.test(err.message),
  );
  assert.ok(Date.now() - start >= 100);
  rmSync(join(sb.dir, "journal.json"));
  settleJournal(sb.dir, "s", env);
});

test("branch shares the snapshot's layer; rollback refuses snapshots outside the history", async (t) => {
  const { home, env } = store(t);
  const sb = openNamed("s", env);
  put(sb.upper, "a", "1");
  await snapshot("s", "one", { env });
  const b = branch("b", "one", { env });
  assert.equal(b.created, true);
  assert.deepEqual(readMeta(join(home, "sandboxes", "b"), "b")?.chain, ["one"]);
  openNamed("other", env);
  assert.throws(() => rollback("other", "one", { env }), /not in the history of sandbox other/);
  // A branch's own snapshots have the snapshot as parent: rollback to it works from there.
  put(join(home, "sandboxes", "b", "upper"), "c", "3");
  await snapshot("b", "bsnap", { env });
  rollback("b", "one", { env, reapInline: true });
  assert.deepEqual(readMeta(join(home, "sandboxes", "b"), "b")?.chain, ["one"]);
});
