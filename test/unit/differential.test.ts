// The differential harness must be trustworthy before it can judge the overlay: its tree
// comparison (the C dumper plus the TypeScript diff) must see a changed byte, a changed mode,
// a missing file, an extra file, a changed link target and a changed xattr, ignore what a case
// says to ignore, and its path placeholder must replace the tree's root and nothing else.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { after, describe, test } from "node:test";
import { treeDumper, xattrTool } from "../helpers/cc.js";
import {
  compareRuns,
  diffTrees,
  dumpPath,
  filterTree,
  lineDiff,
  overlayMode,
  parseDump,
  replaceRoots,
  type RunRecord,
  type Tree,
  type TreeOptions,
} from "../helpers/differential.js";
import { tempRoot } from "../helpers/repo.js";

const work = mkdtempSync(path.join(tempRoot(), "cvisor-unit-diff-"));
after(() => rmSync(work, { recursive: true, force: true }));

let trees = 0;
/** A small tree: files, a directory, a symlink, a FIFO, fixed times. */
function makeTree(): string {
  const root = path.join(work, `tree-${trees++}`);
  mkdirSync(path.join(root, "dir", "inner"), { recursive: true });
  writeFileSync(path.join(root, "a.txt"), "alpha\n");
  writeFileSync(path.join(root, "dir", "b.txt"), "bravo\n");
  writeFileSync(path.join(root, "dir", "inner", "c.bin"), Buffer.from([0, 1, 2, 255]));
  symlinkSync("a.txt", path.join(root, "link"));
  execFileSync("mkfifo", [path.join(root, "fifo")]);
  for (const rel of ["a.txt", "dir/b.txt", "dir/inner/c.bin", "dir/inner", "dir", "."]) {
    utimesSync(path.join(root, rel), 1_000_000_000, 1_000_000_000);
  }
  return root;
}

function copyTree(root: string): string {
  const copy = `${root}-copy`;
  execFileSync("cp", ["-a", "--", root, copy]);
  return copy;
}

function dump(root: string, withMtime = false, opts: TreeOptions = {}): Tree {
  const out = execFileSync(treeDumper(), withMtime ? ["-t"] : [], { cwd: root }).toString();
  return filterTree(parseDump(out), opts);
}

/** Dumps the original and a mutated copy and returns what diffTrees reports. */
function diffAfter(mutate: (copy: string) => void, withMtime = false, opts: TreeOptions = {}) {
  const root = makeTree();
  const copy = copyTree(root);
  mutate(copy);
  return diffTrees(dump(root, withMtime, opts), dump(copy, withMtime, opts));
}

describe("the tree comparison", () => {
  test("two copies of a tree compare equal; the dump lists every entry", () => {
    const root = makeTree();
    const a = dump(root);
    assert.deepEqual(diffTrees(a, dump(copyTree(root))), []);
    assert.deepEqual(
      [...a.keys()],
      [
        ".",
        "./a.txt",
        "./dir",
        "./dir/b.txt",
        "./dir/inner",
        "./dir/inner/c.bin",
        "./fifo",
        "./link",
      ],
    );
    assert.match(a.get("./link") ?? "", /^symlink\t.*\ttarget=a\.txt/);
    assert.match(a.get("./fifo") ?? "", /^fifo\tmode=/);
    assert.match(
      a.get("./a.txt") ?? "",
      /^file\tmode=0644\towner=\d+:\d+\tnlink=1\tsize=6\tfnv=[0-9a-f]{16}/,
    );
  });

  test("a changed byte (same size) is seen", () => {
    const d = diffAfter((c) => writeFileSync(path.join(c, "dir", "b.txt"), "bravO\n"));
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/dir\/b\.txt\n/);
  });

  test("a changed byte in a binary file is seen", () => {
    const d = diffAfter((c) =>
      writeFileSync(path.join(c, "dir", "inner", "c.bin"), Buffer.from([0, 1, 3, 255])),
    );
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/dir\/inner\/c\.bin\n/);
  });

  test("a changed mode is seen (file and directory)", () => {
    const d = diffAfter((c) => {
      chmodSync(path.join(c, "a.txt"), 0o600);
      chmodSync(path.join(c, "dir", "inner"), 0o700);
    });
    assert.equal(d.length, 2, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/a\.txt\n.*mode=0644.*\n.*mode=0600/);
    assert.match(d[1] ?? "", /^differs: \.\/dir\/inner\n.*mode=0755.*\n.*mode=0700/);
  });

  test("a missing file is seen", () => {
    const d = diffAfter((c) => unlinkSync(path.join(c, "dir", "b.txt")));
    assert.deepEqual(
      d.map((l) => l.split("\t")[0]),
      ["only in native: ./dir/b.txt"],
    );
  });

  test("an extra file is seen", () => {
    const d = diffAfter((c) => writeFileSync(path.join(c, "dir", "inner", "new"), ""));
    assert.deepEqual(
      d.map((l) => l.split("\t")[0]),
      ["only in sandbox: ./dir/inner/new"],
    );
  });

  test("a changed link target is seen", () => {
    const d = diffAfter((c) => {
      unlinkSync(path.join(c, "link"));
      symlinkSync("dir/b.txt", path.join(c, "link"));
    });
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/link\n.*target=a\.txt\n.*target=dir\/b\.txt/);
  });

  test("a file replaced by a directory of the same name is seen", () => {
    const d = diffAfter((c) => {
      unlinkSync(path.join(c, "a.txt"));
      mkdirSync(path.join(c, "a.txt"));
    });
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/a\.txt\n\s+native:\tfile\t.*\n\s+sandbox:\tdir\t/);
  });

  test("a changed user xattr is seen (when the filesystem has them)", (t) => {
    const d = diffAfter((c) => {
      try {
        execFileSync(xattrTool(), ["set", path.join(c, "a.txt"), "user.diff", "v"], {
          stdio: "pipe",
        });
      } catch {
        t.skip("no user xattrs on this filesystem");
      }
    });
    if (d.length === 0) return; // skipped above
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(d[0] ?? "", /^differs: \.\/a\.txt\n.*\n.*xattr:user\.diff=v/);
  });

  test("mtimes are ignored unless asked for, then compared for the listed entries only", () => {
    const touch = (c: string): void => {
      utimesSync(path.join(c, "a.txt"), 1_500_000_000, 1_500_000_000);
      utimesSync(path.join(c, "dir", "b.txt"), 1_500_000_000, 1_500_000_000);
    };
    assert.deepEqual(diffAfter(touch), []);
    assert.deepEqual(diffAfter(touch, true), []);
    const d = diffAfter(touch, true, { mtimes: ["a.txt"] });
    assert.equal(d.length, 1, d.join("\n"));
    assert.match(
      d[0] ?? "",
      /^differs: \.\/a\.txt\n.*mtime=1000000000\.0+\n.*mtime=1500000000\.0+/,
    );
  });

  test("ignore and ignoreContent leave out what a case says", () => {
    const mutate = (c: string): void => {
      writeFileSync(path.join(c, "dir", "b.txt"), "changed, and longer\n");
      writeFileSync(path.join(c, "extra"), "");
    };
    assert.equal(diffAfter(mutate).length, 2);
    assert.deepEqual(
      diffAfter(mutate, false, { ignoreContent: /^\.\/dir\/b\.txt$/, ignore: /^\.\/extra$/ }),
      [],
    );
    // ignoreContent still sees a change of mode.
    const d = diffAfter((c) => chmodSync(path.join(c, "dir", "b.txt"), 0o600), false, {
      ignoreContent: /b\.txt/,
    });
    assert.equal(d.length, 1);
  });

  test("names that are not UTF-8 or hold control characters are escaped, one line each", () => {
    const root = path.join(work, "names");
    mkdirSync(root);
    const raw = Buffer.concat([Buffer.from(`${root}/`), Buffer.from([0x62, 0xff, 0x0a, 0x5c])]);
    writeFileSync(raw, "x");
    writeFileSync(path.join(root, "ünïcödé"), "");
    const tree = dump(root);
    const names = [...tree.keys()];
    assert.ok(names.includes("./b\\xff\\x0a\\x5c"), names.join(" | "));
    assert.ok(names.includes("./ünïcödé"), names.join(" | "));
  });

  test("dumpPath spells paths as the dumper does", () => {
    assert.equal(dumpPath("a/b"), "./a/b");
    assert.equal(dumpPath("./a/b/"), "./a/b");
    assert.equal(dumpPath("."), ".");
    assert.equal(dumpPath(""), ".");
  });
});

describe("the root placeholder", () => {
  test("replaces the root as a whole path prefix, not inside a longer name", () => {
    const text =
      "/tmp/x/tree\n/tmp/x/tree/sub/a\ncd '/tmp/x/tree'\n/tmp/x/tree2/a /tmp/x/tree-b /tmp/x/tree.c\n/tmp/x/tree: oops";
    assert.equal(
      replaceRoots(text, ["/tmp/x/tree"]),
      "<ROOT>\n<ROOT>/sub/a\ncd '<ROOT>'\n/tmp/x/tree2/a /tmp/x/tree-b /tmp/x/tree.c\n<ROOT>: oops",
    );
  });

  test("several roots (given and real path), the longest first", () => {
    assert.equal(
      replaceRoots("/a/b/c /real/a/b/c/d /a/b", ["/a/b", "/real/a/b/c", "/a/b/c"]),
      "<ROOT> <ROOT>/d <ROOT>",
    );
  });

  test("regex characters in a root are literal", () => {
    assert.equal(replaceRoots("/t/a.b+c /t/aXb+c", ["/t/a.b+c"]), "<ROOT> /t/aXb+c");
  });

  test("'/' alone is never replaced", () => {
    assert.equal(replaceRoots("/ /etc", ["/"]), "/ /etc");
  });
});

describe("comparing two runs", () => {
  const base = (): RunRecord => ({
    side: "native",
    steps: [{ label: "main", code: 0, stdout: "a\nb\n", stderr: "" }],
    trees: new Map([["main", new Map([[".", "dir\tmode=0755"]])]]),
  });

  test("equal runs: no differences", () => {
    assert.deepEqual(compareRuns(base(), { ...base(), side: "sandbox" }), []);
  });

  test("exit code, stdout, stderr and trees are each reported", () => {
    const other = base();
    other.side = "sandbox";
    other.steps = [{ label: "main", code: 1, stdout: "a\nc\n", stderr: "oops\n" }];
    other.trees = new Map([["main", new Map([[".", "dir\tmode=0700"]])]]);
    const d = compareRuns(base(), other).join("\n");
    assert.match(d, /step 1 \[main\]: exit code native 0, sandbox 1/);
    assert.match(d, /stdout differs[^\n]*\n {4} {2}a\n {4}- b\n {4}\+ c/);
    assert.match(d, /stderr differs/);
    assert.match(d, /tree \[main\] differs:\n\s+differs: \./);
  });

  test("a step or a tree present on one side only is reported", () => {
    const other = base();
    other.side = "sandbox";
    other.steps = [];
    other.trees = new Map();
    const d = compareRuns(base(), other).join("\n");
    assert.match(d, /step 1 \[main\]: ran only on native/);
    assert.match(d, /only in native: \./);
  });

  test("lineDiff marks changed lines", () => {
    assert.deepEqual(lineDiff("x\ny\nz", "x\nz\nw"), ["  x", "- y", "  z", "+ w"]);
  });
});

test("CVISOR_TEST_OVERLAY picks the other side: the sandbox unless told otherwise", () => {
  assert.equal(overlayMode({}), "sandbox");
  assert.equal(overlayMode({ CVISOR_TEST_OVERLAY: "off" }), "off");
  assert.equal(overlayMode({ CVISOR_TEST_OVERLAY: "1" }), "sandbox");
  assert.equal(overlayMode({ CVISOR_TEST_OVERLAY: "native" }), "native");
});
