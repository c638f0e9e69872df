// squashLayers, property-style: random stacks of layers (files, directories, symlinks,
// whiteouts, opaque markers, modes and times per layer) over a random small host and under a
// random upper; the merged view over the squashed layer must equal the merged view over the
// stack for every path (deletions included), and so must diff's changes. Then: objects are
// hard-linked when they can be, copied when they cannot (another filesystem), and a failure
// leaves no `out` and no temp directory.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { test, type TestContext } from "node:test";
import { squashLayers } from "../../snapshots/squash.js";
import { CvisorError } from "../../src/core/errors.js";
import { layerChanges } from "../../src/sandbox/changes.js";
import { removeTree } from "../../src/store/remove-tree.js";
import { build, dumpLayers, T0 } from "../helpers/layers.js";
import { tempRoot } from "../helpers/repo.js";

function tempDir(t: TestContext, base = tempRoot()): string {
  const dir = mkdtempSync(join(base, "cvisor-unit-squash-"));
  t.after(() => removeTree(dir)); // guests' modes (0555, 0000 directories) as another user
  return dir;
}

/** mulberry32: a small seeded generator, so a failing case can be replayed by its seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const NAMES = ["a", "b", "c"];
const LINKS = ["a", "../b", "/a/b", "c/..", "/", "../../../.."];

/**
 * A random layer tree under root: objects at random paths (made where the path allows), with
 * random modes, all with the time `time`. Layers get whiteouts and opaque markers too.
 */
function randomTree(root: string, rand: () => number, time: number, layer: boolean): void {
  mkdirSync(root, { recursive: true });
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const ops = Math.floor(rand() * 10);
  const dirs: string[] = [];
  for (let i = 0; i < ops; i++) {
    const depth = 1 + Math.floor(rand() * 3);
    const parts = Array.from({ length: depth }, () => pick(NAMES));
    const rel = parts.join("/");
    const p = join(root, rel);
    const r = rand();
    // The trees hold symlinks to "/" and above: never create through one (as root, that wrote
    // into the host's /).
    if (throughLink(root, parts)) continue;
    try {
      mkdirSync(dirname(p), { recursive: true });
      if (r < 0.3) {
        writeFileSync(p, `${rel}@${time}`, { flag: "wx" });
        chmodSync(p, pick([0o600, 0o644, 0o755]));
      } else if (r < 0.5) {
        mkdirSync(p);
        dirs.push(p);
      } else if (r < 0.6) {
        symlinkSync(pick(LINKS), p);
      } else if (r < 0.8 && layer) {
        writeFileSync(join(dirname(p), `.wh.${parts[parts.length - 1]}`), "", { flag: "wx" });
      } else if (layer) {
        mkdirSync(p, { recursive: true });
        writeFileSync(join(p, ".wh..wh..opq"), "", { flag: "wx" });
      }
    } catch {
      // The path is taken by something else (a file where a directory goes): skip it.
    }
  }
  for (const d of dirs) {
    try {
      chmodSync(d, pick([0o755, 0o700, 0o555]));
    } catch {
      // Replaced meanwhile.
    }
  }
  setTimes(root, time);
}

/** Is any existing prefix of root/parts (the last part included) a symlink or not a directory? */
function throughLink(root: string, parts: readonly string[]): boolean {
  let p = root;
  for (const [i, part] of parts.entries()) {
    p = join(p, part);
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return false; // missing: made below, as a real directory or the new object
    }
    if (st.isSymbolicLink()) return true;
    if (!st.isDirectory() && i < parts.length - 1) return true;
  }
  return false;
}

function setTimes(p: string, time: number): void {
  const st = lstatSync(p);
  if (st.isDirectory()) for (const n of readdirSync(p)) setTimes(join(p, n), time);
  if (st.isSymbolicLink()) lutimesSync(p, time, time);
  else utimesSync(p, time, time);
}

test("a squashed stack shows what the stack shows, under any upper, for every path", (t) => {
  const base = tempDir(t);
  const cases = 150;
  for (let seed = 1; seed <= cases; seed++) {
    const rand = rng(seed);
    const dir = join(base, `case${seed}`);
    const host = join(dir, "host");
    const upper = join(dir, "upper");
    randomTree(host, rand, T0, false);
    randomTree(upper, rand, T0 + 999, true);
    const n = 1 + Math.floor(rand() * 4);
    const trees = Array.from({ length: n }, (_, i) => {
      const tree = join(dir, `layer${i}`);
      randomTree(tree, rand, T0 + 100 * (i + 1), true);
      return tree;
    });
    const out = join(dir, "squashed");
    squashLayers(trees, out);
    const want = dumpLayers(upper, trees, host, { modes: true });
    const got = dumpLayers(upper, [out], host, { modes: true });
    assert.deepEqual(got, want, `seed ${seed}`);
    // Without the upper too (what the squashed layer shows by itself over the host).
    const empty = join(dir, "empty");
    mkdirSync(empty);
    assert.deepEqual(
      dumpLayers(empty, [out], host, { modes: true }),
      dumpLayers(empty, trees, host, { modes: true }),
      `seed ${seed}, no upper`,
    );
    assert.deepEqual(
      layerChanges([upper, out], host),
      layerChanges([upper, ...trees], host),
      `seed ${seed}: diff`,
    );
    removeTree(dir);
  }
});

test("squash keeps whiteouts only where something below may show, and marks opaque directories", (t) => {
  const dir = tempDir(t);
  const [l0, l1, l2] = ["l0", "l1", "l2"].map((n) => join(dir, n)) as [string, string, string];
  build(l0, { "d/.wh..wh..opq": "", "d/new": "n", ".wh.x": "", keep: "k", "e/.wh.f": "" });
  build(l1, { x: "x in l1", "d/old": "o", "d/.wh.h": "", "e/f": "f", ".wh.y": "" });
  build(l2, { keep: "older", "gone/.wh.z": "" });
  chmodSync(l0, 0o751);
  utimesSync(l0, T0, T0);
  const out = join(dir, "out");
  squashLayers([l0, l1, l2], out);
  // The root gets the top layer's root's mode and times.
  assert.equal(statSync(out).mode & 0o7777, 0o751);
  assert.equal(statSync(out).mtimeMs, T0 * 1000);
  const list = (rel: string): string[] => readdirSync(join(out, rel)).sort();
  assert.deepEqual(list(""), [".wh.x", ".wh.y", "d", "e", "gone", "keep"]);
  // d is opaque in l0: l1's d/old and its whiteout d/.wh.h are gone, the marker stays.
  assert.deepEqual(list("d"), [".wh..wh..opq", "new"]);
  // e merges with the host's e: the whiteout of f (made in l1) is needed still.
  assert.deepEqual(list("e"), [".wh.f"]);
  assert.deepEqual(list("gone"), [".wh.z"]);
  // The top layer's keep, hard-linked from it.
  assert.equal(statSync(join(out, "keep")).ino, statSync(join(l0, "keep")).ino);
});

test("squash copies what it cannot link (another filesystem), the same view", (t) => {
  const shm = "/dev/shm";
  const dir = tempDir(t);
  if (!existsSync(shm) || statSync(shm).dev === statSync(dir).dev) {
    t.skip("no second filesystem at /dev/shm");
    return;
  }
  const far = tempDir(t, shm);
  const host = join(dir, "host");
  build(host, { "a/h": "h" });
  const l0 = join(dir, "l0");
  const l1 = join(dir, "l1");
  build(l0, { "a/f": "f0", "a/link": { link: "../a/h" }, ".wh.z": "" });
  build(l1, { "a/g": "g1", "b/.wh..wh..opq": "", "b/x": "x" });
  chmodSync(join(l0, "a", "f"), 0o751);
  setTimes(l0, T0);
  setTimes(l1, T0 + 5);
  const out = join(far, "out");
  squashLayers([l0, l1], out);
  const empty = join(dir, "empty");
  mkdirSync(empty);
  assert.deepEqual(
    dumpLayers(empty, [out], host, { modes: true }),
    dumpLayers(empty, [l0, l1], host, { modes: true }),
  );
  assert.notEqual(statSync(join(out, "a", "f")).ino, statSync(join(l0, "a", "f")).ino);
});

function leftovers(dir: string): string[] {
  return readdirSync(dir).filter((n) => n.includes("squash~") || n === "out");
}

test("squash fails whole: no out, no temp directory; an existing out is refused", (t) => {
  const dir = tempDir(t);
  const l0 = join(dir, "l0");
  build(l0, { "a/f": "f" });
  const out = join(dir, "out");
  // A missing layer.
  assert.throws(
    () => squashLayers([l0, join(dir, "missing")], out),
    (e: unknown) => e instanceof CvisorError && !e.message.includes("\n"),
  );
  assert.deepEqual(leftovers(dir), []);
  // An existing out (even an empty directory) is refused and left alone.
  mkdirSync(out);
  assert.throws(() => squashLayers([l0], out), { code: "EEXIST" });
  assert.deepEqual(readdirSync(out), []);
  rmSync(out, { recursive: true });
  // A failure half-way: on another filesystem nothing links, and a FIFO cannot be copied.
  const shm = "/dev/shm";
  if (existsSync(shm) && statSync(shm).dev !== statSync(dir).dev) {
    const far = tempDir(t, shm);
    build(l0, { "b/many/1": "1", "b/many/2": "2" });
    execFileSync("mkfifo", [join(l0, "z-fifo")]);
    assert.throws(
      () => squashLayers([l0], join(far, "out")),
      (e: unknown) => e instanceof CvisorError && /z-fifo/.test(e.message),
    );
    assert.deepEqual(leftovers(far), []);
  }
  // And the working case, for contrast: out appears whole.
  rmSync(join(l0, "z-fifo"), { force: true });
  squashLayers([l0], out);
  assert.deepEqual(readdirSync(out).sort(), ["a", "b"]);
  assert.deepEqual(leftovers(dir), ["out"]);
});

test("squash reads a layer's directories the owner cannot list, and gives their mode back", (t) => {
  if (process.getuid?.() === 0) {
    t.skip("root lists any directory: run as another user to check this");
    return;
  }
  const dir = tempDir(t);
  const l0 = join(dir, "l0");
  build(l0, { "closed/f": "f", "noexec/g": "g" });
  chmodSync(join(l0, "closed"), 0o000);
  chmodSync(join(l0, "noexec"), 0o600);
  const out = join(dir, "out");
  squashLayers([l0], out);
  assert.equal(lstatSync(join(l0, "closed")).mode & 0o7777, 0o000, "given back");
  assert.equal(lstatSync(join(l0, "noexec")).mode & 0o7777, 0o600, "given back");
  assert.equal(lstatSync(join(out, "closed")).mode & 0o7777, 0o000);
  chmodSync(join(out, "closed"), 0o700);
  chmodSync(join(out, "noexec"), 0o700);
  assert.deepEqual(readdirSync(join(out, "closed")), ["f"]);
  assert.deepEqual(readdirSync(join(out, "noexec")), ["g"]);
});
