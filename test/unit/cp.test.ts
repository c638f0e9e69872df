// The pieces of `cvisor cp` without a guest: the operands, docker cp's placement rules, the
// ignore rules (nested files the way git reads them), the merged view over a fake host root
// (whiteouts, opaque directories, symlinks resolved through the view), and copy-in's layer
// format (whiteout removed, opaque directory, nothing left in work/).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { cpOperands } from "../../src/cli/commands/cp.js";
import { CvisorError } from "../../src/core/errors.js";
import { copyIn } from "../../src/sandbox/copy-in.js";
import { copyOut } from "../../src/sandbox/copy-out.js";
import { placement, sourceSpec } from "../../src/sandbox/copy-tree.js";
import { IgnoreRules } from "../../src/sandbox/ignore-rules.js";
import { MergedView, ViewError } from "../../src/sandbox/view.js";
import { build } from "../helpers/layers.js";
import { tempRoot } from "../helpers/repo.js";

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-cp-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("cp operands: exactly one sb: side, absolute sandbox paths", () => {
  assert.deepEqual(cpOperands(["a", "b/", "sb:/x"]), {
    direction: "in",
    sources: ["a", "b/"],
    dst: "/x",
  });
  assert.deepEqual(cpOperands(["sb:/a/.", "sb:/b", "out"]), {
    direction: "out",
    sources: ["/a/.", "/b"],
    dst: "out",
  });
  for (const bad of [
    ["a"],
    ["a", "b"],
    ["sb:/a", "sb:/b"],
    ["sb:/a", "b", "c"],
    ["a", "sb:x"],
    ["-", "sb:/x"],
    ["", "sb:/x"],
  ]) {
    assert.throws(
      () => cpOperands(bad),
      (err: unknown) => err instanceof CvisorError && !err.message.includes("\n"),
      JSON.stringify(bad),
    );
  }
});

test("placement follows docker cp's table", () => {
  const f = sourceSpec("f");
  const d = sourceSpec("d");
  const dc = sourceSpec("d/.");
  assert.deepEqual(placement(f, false, "x", "missing", false), { kind: "as" });
  assert.match(JSON.stringify(placement(f, false, "x/", "missing", false)), /no such directory/);
  assert.deepEqual(placement(f, false, "x", "dir", false), { kind: "into" });
  assert.deepEqual(placement(f, false, "x", "other", false), { kind: "as" });
  assert.deepEqual(placement(d, true, "x", "missing", false), { kind: "as" });
  assert.deepEqual(placement(d, true, "x", "dir", false), { kind: "into" });
  assert.match(JSON.stringify(placement(d, true, "x", "other", false)), /to the file/);
  assert.deepEqual(placement(dc, true, "x", "dir", false), { kind: "as" });
  assert.deepEqual(placement(dc, true, "x", "missing", false), { kind: "as" });
  assert.match(JSON.stringify(placement(sourceSpec("f/"), false, "x", "dir", false)), /not a dir/);
  assert.match(JSON.stringify(placement(f, false, "x", "missing", true)), /several/);
  assert.deepEqual(placement(f, false, "x", "dir", true), { kind: "into" });
  assert.equal(sourceSpec(".").contentsOnly, true);
  assert.equal(sourceSpec("/").contentsOnly, true);
  assert.equal(sourceSpec("a/..").contentsOnly, false);
});

test("ignore rules: nested files, deeper wins, .dockerignore over .gitignore", () => {
  const root = IgnoreRules.none().enter("", ["*.log\nbuild/\n!important.log\n", "secret\n"]);
  const sub = root.enter("sub", ["!keep.log\n", undefined]);
  assert.equal(root.ignores("a.log", false), true);
  assert.equal(root.ignores("important.log", false), false);
  assert.equal(root.ignores("build", true), true);
  assert.equal(root.ignores("build", false), false, "build/ matches directories only");
  assert.equal(root.ignores("x/secret", false), true, "a pattern without / matches at any depth");
  assert.equal(sub.ignores("sub/keep.log", false), false, "re-included by the deeper file");
  assert.equal(sub.ignores("sub/other.log", false), true);
  assert.equal(sub.ignores("sub/a.txt", false), false);
  const anchored = IgnoreRules.none().enter("", ["/top.txt\n"]).enter("d", ["/x\n"]);
  assert.equal(anchored.ignores("top.txt", false), true);
  assert.equal(anchored.ignores("d/top.txt", false), false);
  assert.equal(anchored.ignores("d/x", false), true);
  assert.equal(anchored.ignores("x", false), false);
  const docker = IgnoreRules.none().enter("", ["a.txt\n", "!a.txt\n"]);
  assert.equal(docker.ignores("a.txt", false), false);
  assert.equal(IgnoreRules.none().enter("", [undefined, "  \n"]).ignores("a", false), false);
});

test("merged view: whiteouts, opaque directories, hidden paths, symlinks through the view", (t) => {
  const dir = tempDir(t);
  const host = join(dir, "host");
  const upper = join(dir, "upper");
  build(host, {
    "a/one": "host one",
    "a/two": "host two",
    "a/.wh.reserved": "",
    "b/old": "old",
    "c/secret": "s",
    "lib/real": "real",
    "link-lib": { link: "lib" },
  });
  build(upper, {
    "a/three": "upper three",
    "a/.wh.two": "",
    "b/.wh..wh..opq": "",
    "b/new": "new",
    "a/up": { link: "../link-lib/real" },
    "a/abs": { link: "/lib" },
  });
  const view = new MergedView(upper, { host, hidden: [join(host, "c", "secret")] });
  t.after(() => view.dispose());
  const r = view.resolve("/a", false);
  assert.ok(r.entry);
  const a = view.openDir(r.parent, r.entry);
  assert.deepEqual(view.list(a).names, ["abs", "one", "three", "up"]);
  assert.equal(view.lookup(a, "two"), undefined);
  assert.equal(view.lookup(a, ".wh.two"), undefined);
  assert.equal(view.lookup(a, "one")?.layer, "host");
  assert.equal(view.lookup(a, "three")?.layer, "upper");
  const b = view.resolve("/b/.", true);
  assert.ok(b.entry?.open);
  assert.deepEqual(view.list(b.entry.open).names, ["new"]);
  assert.equal(view.resolve("/b/old", false).entry, undefined);
  assert.equal(view.resolve("/c/secret", false).entry, undefined, "hidden");
  // Symlinks are followed through the view, relative and absolute, never by the kernel.
  const viaRel = view.resolve("/a/up", true);
  assert.equal(viaRel.entry?.vpath, "/lib/real");
  const viaAbs = view.resolve("/a/abs/real", false);
  assert.equal(viaAbs.entry?.vpath, "/lib/real");
  assert.equal(view.resolve("/a/up", false).entry?.st.isSymbolicLink(), true);
  assert.equal(view.resolve("/a/..", false).entry?.vpath, "/");
  assert.throws(() => view.resolve("/nope/x", false), ViewError);
  assert.throws(() => view.resolve("/a/one/x", false), { code: "ENOTDIR" });
  build(upper, { loop: { link: "loop" } });
  assert.throws(() => view.resolve("/loop/x", false), { code: "ELOOP" });
});

test("copy in writes the layer format; copy out reads it back", async (t) => {
  const dir = tempDir(t);
  const host = join(dir, "host");
  const upper = join(dir, "upper");
  const work = join(dir, "work");
  build(host, { "h/gone": "host file", "h/d/old": "old" });
  build(upper, { "h/.wh.gone": "", "h/.wh.d": "" });
  mkdirSync(work);
  const src = join(dir, "src");
  build(src, { gone: "new file", "d/fresh": "fresh", "d/.wh.x": "" });
  const skipped: string[] = [];
  const rIn = await copyIn({ upper, work }, [`${src}/.`], "/h", {
    host,
    onSkip: (s) => skipped.push(s.path),
  });
  assert.deepEqual([rIn.files, rIn.dirs, rIn.skipped.length], [2, 2, 1]);
  assert.deepEqual(skipped, [join(src, "d", ".wh.x")]);
  assert.deepEqual(readdirSync(join(upper, "h")).sort(), ["d", "gone"], "whiteouts removed");
  assert.equal(readFileSync(join(upper, "h", "gone"), "utf8"), "new file");
  assert.deepEqual(readdirSync(join(upper, "h", "d")).sort(), [".wh..wh..opq", "fresh"]);
  assert.deepEqual(readdirSync(work), [], "nothing left in work/");

  const out = join(dir, "out");
  const rOut = await copyOut(upper, ["/h"], out, { host });
  assert.deepEqual([rOut.files, rOut.dirs, rOut.skipped.length], [2, 2, 0]);
  assert.deepEqual(readdirSync(out).sort(), ["d", "gone"]);
  assert.deepEqual(readdirSync(join(out, "d")), ["fresh"], "the opaque directory hides d/old");
  assert.ok(statSync(join(out, "d")).isDirectory());
});
