// `cvisor ui`'s pieces, drawn by ink-testing-library: the snapshot tree of a sandbox, the list
// and details within narrow widths, the confirm line and the actions behind it, the diff view,
// (NO_COLOR: ./tui-color.test.tsx). The whole screen against a real store is test/e2e/ui.test.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Box } from "ink";
import { render } from "ink-testing-library";
import { App } from "../../src/tui/app.js";
import { snapshotTree, type UiSource, type UiState } from "../../src/tui/model.js";
import { Details, SandboxList } from "../../src/tui/view.js";
import type { SandboxInfo } from "../../src/sandbox/manage.js";
import type { SnapshotInfo } from "../../snapshots/ops.js";

const now = new Date().toISOString();
const sb = (name: string, more: Partial<SandboxInfo> = {}): SandboxInfo => ({
  name,
  sizeBytes: 20_480,
  layers: 2,
  base: null,
  created: now,
  lastRun: now,
  running: 0,
  ...more,
});
const snap = (
  id: string,
  sandbox: string,
  parent: string | null,
  created: string,
): SnapshotInfo => ({
  id,
  sandbox,
  parent,
  created,
  sizeBytes: 4096,
  layers: 1,
});
const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");
const plain = (s: string | undefined): string => (s ?? "").replace(ANSI, "");
const tick = (ms = 30): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test("the snapshot tree: the base's chain, the sandbox's own, and branches off them", () => {
  const all = [
    snap("s1", "dev", null, "2026-01-01T00:00:00Z"),
    snap("s2", "dev", "s1", "2026-01-02T00:00:00Z"),
    snap("b1", "exp", "s1", "2026-01-03T00:00:00Z"), // another sandbox branched off s1
    snap("z1", "other", null, "2026-01-01T00:00:00Z"), // unrelated
  ];
  const rows = snapshotTree(all, sb("dev", { base: "s2" }));
  assert.deepEqual(
    rows.map((r) => [r.id, r.depth, r.base, r.from]),
    [
      ["s1", 0, false, "dev"],
      ["s2", 1, true, "dev"],
      ["b1", 1, false, "exp"],
    ],
  );
  // A sandbox branched from s2 sees the chain it stands on.
  assert.deepEqual(
    snapshotTree(all, sb("exp2", { base: "s2" })).map((r) => r.id),
    ["s1", "s2", "b1"],
  );
});

test("the list and the details fit 40 columns; the selected one is marked", () => {
  const list = [
    sb("a-very-long-sandbox-name-that-goes-on"),
    sb("b"),
    sb("c", { damaged: "meta.json: bad" }),
  ];
  const { lastFrame } = render(<SandboxList list={list} selected={1} width={40} height={10} />);
  const lines = plain(lastFrame()).split("\n");
  assert.equal(lines.length, 3);
  assert.ok(
    lines.every((l) => l.length <= 40),
    lines.join("\n"),
  );
  assert.match(lines[0] ?? "", /^ {2}a-very-long-sandbox-name-.*…/);
  assert.match(lines[1] ?? "", /^› b\s+20K$/);
  assert.match(lines[2] ?? "", /damaged$/);
  const tree = snapshotTree([snap("s1", "b", null, now)], sb("b", { base: "s1" }));
  // In a column of 40, as the screen places it.
  const details = render(
    <Box width={40} flexDirection="column">
      <Details
        sandbox={sb("b", { base: "s1" })}
        tree={tree}
        changes={[{ kind: "A", path: "/x" }]}
        width={40}
      />
    </Box>,
  );
  const text = plain(details.lastFrame());
  assert.ok(
    text.split("\n").every((l) => l.length <= 40),
    text,
  );
  assert.match(text, /changes: A 1 {2}C 0 {2}D 0/);
  assert.match(text, /^s1 ← base$/m);
});

/** A source over state in memory that records what the screen asked of it. */
function memorySource(state: UiState): UiSource & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    load: async () => state,
    diff: async (name) => (name === "dev" ? [{ kind: "A", path: "/work/new.txt" }] : []),
    create: async (name) => void calls.push(`create ${name}`),
    snapshot: async (name) => (calls.push(`snapshot ${name}`), "s-new"),
    rollback: async (name, id) => void calls.push(`rollback ${name} ${id}`),
    branch: async (name, to, id) => void calls.push(`branch ${name} ${to} ${id}`),
    remove: async (name) => {
      calls.push(`remove ${name}`);
      throw new Error(`${name} is in use by a run`);
    },
  };
}

test("keys: select, confirm a snapshot, refuse a remove, a typed branch name, the diff view", async () => {
  const state: UiState = {
    sandboxes: [sb("alpha"), sb("dev", { base: "s1" })],
    snapshots: [snap("s1", "dev", null, now)],
    caches: [],
    doctor: "ok",
  };
  const source = memorySource(state);
  const shells: string[] = [];
  const ui = render(<App source={source} onShell={(n) => shells.push(n)} refreshMs={60_000} />);
  try {
    await keys(ui, source);
  } finally {
    ui.unmount();
  }
  assert.deepEqual(shells, []);
});

async function keys(
  ui: ReturnType<typeof render>,
  source: ReturnType<typeof memorySource>,
): Promise<void> {
  await tick(80);
  assert.match(plain(ui.lastFrame()), /› alpha/);
  ui.stdin.write("j");
  await tick();
  assert.match(plain(ui.lastFrame()), /› dev/);
  assert.match(plain(ui.lastFrame()), /s1 ← base/);

  ui.stdin.write("s");
  await tick();
  assert.match(plain(ui.lastFrame()), /snapshot dev\? \(y\/n\)/);
  ui.stdin.write("n"); // anything but y: no
  await tick();
  assert.deepEqual(source.calls, []);
  ui.stdin.write("s");
  await tick();
  ui.stdin.write("y");
  await tick(80);
  assert.deepEqual(source.calls, ["snapshot dev"]);
  assert.match(plain(ui.lastFrame()), /snapshot s-new taken/);

  ui.stdin.write("x");
  await tick();
  ui.stdin.write("y");
  await tick(80);
  assert.match(plain(ui.lastFrame()), /dev is in use by a run/, "a failure is a line, not a crash");

  ui.stdin.write("b");
  for (const c of "dev2") ui.stdin.write(c); // typed at once: every key reaches the question
  await tick();
  assert.match(plain(ui.lastFrame()), /branch s1 as: dev2/);
  ui.stdin.write("\r");
  await tick(80);
  assert.equal(source.calls.at(-1), "branch dev dev2 s1");
  // dev2 is not in this source's list: the selection falls back to the first; back to dev.
  ui.stdin.write("j");
  await tick();

  ui.stdin.write("d");
  await tick(80);
  assert.match(plain(ui.lastFrame()), /changes in dev[\s\S]*A \/work\/new\.txt/);
  ui.stdin.write("\x1b");
  await tick(80);
  ui.stdin.write("?");
  await tick();
  assert.match(plain(ui.lastFrame()), /enter +open a shell/);
}

test("the list is read again and again; a sandbox's changes only when it changed", async () => {
  const state: UiState = { sandboxes: [sb("dev")], snapshots: [], caches: [], doctor: "ok" };
  let loads = 0;
  let diffs = 0;
  const source: UiSource = {
    ...memorySource(state),
    load: async () => (loads++, { ...state, sandboxes: state.sandboxes.map((s) => ({ ...s })) }),
    diff: async () => (diffs++, []),
  };
  const ui = render(<App source={source} onShell={() => undefined} refreshMs={20} />);
  try {
    await tick(300);
    assert.ok(loads >= 5, `the list was read ${loads} times`);
    assert.equal(diffs, 1, "one diff while nothing changed");
    state.sandboxes = [sb("dev", { lastRun: new Date(Date.now() + 1000).toISOString() })];
    await tick(200);
    assert.equal(diffs, 2, "read again once after a run");
  } finally {
    ui.unmount();
  }
});
