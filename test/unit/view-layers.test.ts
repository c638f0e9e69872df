// The merged view over a chain of read-only layers: upper, then lower 0, 1, ..., then the host
// (a temp dir standing for the root). Layer trees are built by hand: whiteouts at each depth,
// opaque directories in middle layers, a directory replaced by a file and again by a directory
// across layers, symlinks in lowers pointing out of the tree, `..`. The whole view is dumped and
// compared with the expected tree.
import assert from "node:assert/strict";
import { closeSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { MergedView, ViewError } from "../../src/sandbox/view.js";
import { build, dumpLayers, type Spec } from "../helpers/layers.js";
import { tempRoot } from "../helpers/repo.js";

interface Stack {
  host: string;
  upper: string;
  lowers: string[];
  dir: string;
}

function stack(t: TestContext, host: Spec, upper: Spec, ...lowers: Spec[]): Stack {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-layers-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const s: Stack = { dir, host: join(dir, "host"), upper: join(dir, "upper"), lowers: [] };
  build(s.host, host);
  build(s.upper, upper);
  lowers.forEach((spec, i) => {
    const l = join(dir, `layer${i}`);
    build(l, spec);
    s.lowers.push(l);
  });
  return s;
}

function open(t: TestContext, s: Stack): MergedView {
  const view = new MergedView(s.upper, { host: s.host, lowers: s.lowers });
  t.after(() => view.dispose());
  return view;
}

function dump(s: Stack): Record<string, string> {
  return dumpLayers(s.upper, s.lowers, s.host);
}

test("whiteouts at each depth hide the layers below them and the host", (t) => {
  const s = stack(
    t,
    {
      "a/h1": "host h1",
      "a/h2": "host h2",
      "a/h3": "host h3",
      "a/h4": "host h4",
      "a/h5": "host h5",
      "a/.wh.h5": "", // the host's .wh. names are not whiteouts, and never shown
      top: "host top",
    },
    { "a/.wh.h4": "", "a/.wh.l1": "", "a/u": "u" },
    { "a/.wh.h2": "", "a/.wh.gone2": "", "a/l1": "l1", "a/h3": "lower h3" },
    { "a/.wh.h1": "", "a/l2": "l2", "a/gone2": "g2" },
  );
  assert.deepEqual(dump(s), {
    "/a": "dir",
    "/a/h3": "file:lower h3",
    "/a/h5": "file:host h5",
    "/a/l2": "file:l2",
    "/a/u": "file:u",
    "/top": "file:host top",
  });
  const view = open(t, s);
  const a = view.openDir(view.root, view.lookup(view.root, "a") ?? assert.fail("no /a"));
  assert.deepEqual(
    ["h1", "h2", "h3", "h4", "h5", "l1", "l2", "u", "gone2", ".wh.h5"].map((n) => {
      const e = view.lookup(a, n);
      return e && `${e.layer}${e.lower ?? ""}`;
    }),
    [
      undefined,
      undefined,
      "lower0",
      undefined,
      "host",
      undefined,
      "lower1",
      "upper",
      undefined,
      undefined,
    ],
  );
  // The directory itself comes from the top layer that has it: the upper's twin.
  assert.equal(view.resolve("/a/.", true).entry?.layer, "upper");
  const fd = view.openFile(a, view.lookup(a, "l2") ?? assert.fail("no l2"));
  try {
    assert.equal(readFileSync(fd, "utf8"), "l2");
  } finally {
    closeSync(fd);
  }
});

test("an opaque directory in a middle layer hides the layers below it and the host", (t) => {
  const s = stack(
    t,
    { "d/x": "hx", "d/y": "hy", "e/h": "he" },
    { "d/u": "u" },
    { "d/.wh..wh..opq": "", "d/w": "w" },
    { "d/z": "z", "e/deep/f": "f", "e/.wh..wh..opq": "" },
  );
  assert.deepEqual(dump(s), {
    "/d": "dir",
    "/d/u": "file:u",
    "/d/w": "file:w",
    "/e": "dir",
    "/e/deep": "dir",
    "/e/deep/f": "file:f",
  });
  // An opaque marker that is not a regular file is no marker (and still never shown).
  mkdirSync(join(s.lowers[0] as string, "e", ".wh..wh..opq"), { recursive: true });
  assert.equal(dump(s)["/e/h"], undefined, "still opaque in layer 1");
  rmSync(join(s.lowers[1] as string, "e", ".wh..wh..opq"));
  assert.equal(dump(s)["/e/h"], "file:he");
});

test("an opaque root in a lower hides everything below it, the host too", (t) => {
  const s = stack(
    t,
    { h: "h", "d/hd": "hd" },
    { u: "u" },
    { ".wh..wh..opq": "", l0: "l0", "d/l0": "l0" },
    { l1: "l1" },
  );
  assert.deepEqual(dump(s), { "/d": "dir", "/d/l0": "file:l0", "/l0": "file:l0", "/u": "file:u" });
});

test("a directory replaced by a file and by a directory again across layers", (t) => {
  const s = stack(
    t,
    { "p/hostfile": "h", q: "host q file", "r/h": "rh", "s/h": "sh", "t/ht": "ht" },
    { "q/b": "qb" },
    // layer 0: p a directory again, q deleted, r a file, s a directory deleted and made again
    // (its whiteout beside it: nothing below merges), t a directory
    { "p/l1": "l1 in p", ".wh.q": "", r: "r file", "s/l1": "s l1", ".wh.s": "", "t/x1": "x1" },
    // layer 1: p a file, q a directory, s and t: directories, t deleted
    { p: "file in l2", "q/a": "qa", "s/l2": "s l2", ".wh.t": "" },
  );
  assert.deepEqual(dump(s), {
    "/p": "dir",
    "/p/l1": "file:l1 in p",
    "/q": "dir",
    "/q/b": "file:qb",
    "/r": "file:r file",
    "/s": "dir",
    "/s/l1": "file:s l1",
    "/t": "dir",
    "/t/x1": "file:x1",
  });
});

test("symlinks in lowers are followed through the view, never by the kernel; `..` stops at /", (t) => {
  const base = mkdtempSync(join(tempRoot(), "cvisor-unit-layers-out-"));
  t.after(() => rmSync(base, { recursive: true, force: true }));
  writeFileSync(join(base, "secret"), "outside");
  const s = stack(
    t,
    { "target/t": "host target", "lib/real": "real" },
    {},
    {
      esc: { link: "../../../../../../target" },
      abs: { link: "/lib" },
      out: { link: base },
      up: { link: ".." },
      "m/own": "own",
    },
    { m: { link: base }, chain: { link: "esc/t" }, "lib/l1": "l1 lib" },
  );
  const view = open(t, s);
  assert.equal(view.resolve("/esc/t", true).entry?.vpath, "/target/t");
  assert.equal(view.resolve("/abs/real", true).entry?.vpath, "/lib/real");
  assert.equal(view.resolve("/chain", true).entry?.vpath, "/target/t");
  assert.equal(view.resolve("/up/up/lib/l1", true).entry?.layer, "lower");
  assert.equal(view.resolve("/m/../lib/./real", false).entry?.layer, "host");
  // The absolute target means a path of the view (where nothing is), not of the machine.
  assert.throws(
    () => view.resolve("/out/secret", true),
    (e: unknown) => e instanceof ViewError,
  );
  const esc = view.lookup(view.root, "esc") ?? assert.fail("no /esc");
  assert.equal(esc.layer, "lower");
  assert.equal(view.readlink(view.root, esc), "../../../../../../target");
  assert.throws(() => view.openDir(view.root, esc), { code: "ENOTDIR" });
  // A symlink twin below a directory stops the merge: the directory it points to never shows.
  assert.deepEqual(dump(s)["/m/secret"], undefined);
  assert.equal(dump(s)["/m/own"], "file:own");
  assert.equal(dump(s)["/out"], `link:${base}`);
  assert.deepEqual(
    Object.keys(dump(s)).filter((p) => p.startsWith("/lib")),
    ["/lib", "/lib/l1", "/lib/real"],
  );
});

test("the upper over lowers: an empty layer changes nothing; a directory's own entry names its top layer", (t) => {
  const s = stack(
    t,
    { "a/h": "h", "b/h": "bh" },
    { "a/.wh..wh..opq": "", "a/u": "u" },
    { "a/l0": "l0", "b/l0": "bl0", "c/l0": "cl0" },
    {},
  );
  assert.deepEqual(dump(s), {
    "/a": "dir",
    "/a/u": "file:u",
    "/b": "dir",
    "/b/h": "file:bh",
    "/b/l0": "file:bl0",
    "/c": "dir",
    "/c/l0": "file:cl0",
  });
  const view = open(t, s);
  const c = view.resolve("/c/.", true).entry;
  assert.equal(c?.layer, "lower");
  assert.equal(c?.lower, 0);
  assert.equal(view.resolve("/a/l0", false).entry, undefined);
});
