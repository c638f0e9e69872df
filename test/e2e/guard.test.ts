// The oracle itself: the guard must notice every kind of change a broken sandbox could make
// (otherwise "unchanged afterwards" proves nothing), and the prober run without a sandbox
// must really change the fixture (otherwise its EROFS results prove nothing).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  linkSync,
  renameSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import test from "node:test";
import { probeArgs, prober, xattrTool } from "../helpers/cc.js";
import { FIXED_TIME, HELLO_TEXT, XATTR_NAME, type Fixture } from "../helpers/fixture.js";
import { guarded } from "../helpers/guard.js";

const CHANGES: [string, (fx: Fixture) => void][] = [
  ["content, same size", (fx) => writeFileSync(fx.p("hello.txt"), HELLO_TEXT.toUpperCase())],
  ["mode", (fx) => chmodSync(fx.p("hello.txt"), 0o600)],
  ["mtime", (fx) => utimesSync(fx.p("hello.txt"), FIXED_TIME, FIXED_TIME + 1)],
  ["ctime only (chmod to the same mode)", (fx) => chmodSync(fx.p("hello.txt"), 0o644)],
  ["hard link count", (fx) => linkSync(fx.p("hello.txt"), fx.p("sub", "hl"))],
  [
    "symlink target",
    (fx) => {
      unlinkSync(fx.p("link-to-hello"));
      symlinkSync("data.bin", fx.p("link-to-hello"));
    },
  ],
  [
    "rename and back",
    (fx) => {
      renameSync(fx.p("hello.txt"), fx.p("tmp"));
      renameSync(fx.p("tmp"), fx.p("hello.txt"));
    },
  ],
  [
    "create and delete (directory times)",
    (fx) => {
      writeFileSync(fx.p("sub", "x"), "x");
      unlinkSync(fx.p("sub", "x"));
    },
  ],
  ["a new file", (fx) => writeFileSync(fx.p("empty-dir", "new"), "")],
  ["a removed file", (fx) => unlinkSync(fx.p("sub", "deeper", "leaf.txt"))],
];

test("the guard notices every kind of change to the fixture", async () => {
  for (const [what, change] of CHANGES) {
    await assert.rejects(
      guarded(async (fx) => change(fx), { noHome: true }),
      /the host changed/,
      `the guard missed: ${what}`,
    );
  }
  await assert.rejects(
    guarded(
      async (fx) => {
        if (!fx.hasXattr) throw new Error("the host changed (no xattrs here: nothing to check)");
        execFileSync(xattrTool(), ["set", fx.p("xattr.txt"), XATTR_NAME, "changed"]);
      },
      { noHome: true },
    ),
    /the host changed/,
    "the guard missed an xattr change",
  );
  // And it stays quiet when nothing changes (reads do not count).
  await guarded(async (fx) => {
    execFileSync("cat", [fx.p("hello.txt"), fx.p("sub", "nested.txt")], { stdio: "ignore" });
  });
});

test("without a sandbox the prober's mutators do change the host (negative control)", async () => {
  let fixture: Fixture | undefined;
  await assert.rejects(
    guarded(
      async (fx) => {
        fixture = fx;
        const out = execFileSync(
          prober(),
          probeArgs([
            ["chmod", fx.p("hello.txt")],
            ["fchmod", fx.p("data.bin")],
            ["futimens", fx.p("readonly.txt")],
            ["open-creat", fx.p("created")],
            ["rename", fx.p("exec.sh"), fx.p("renamed.sh")],
            ["unlink", fx.p("noexec.sh")],
            ["truncate", fx.p("sub", "nested.txt")],
          ]),
          { encoding: "utf8" },
        );
        assert.deepEqual(out.trim().split("\n"), ["OK", "OK", "OK", "OK", "OK", "OK", "OK"]);
      },
      { noHome: true },
    ),
    (err: Error) => {
      for (const name of ["hello.txt", "data.bin", "readonly.txt", "created", "renamed.sh"]) {
        assert.ok(err.message.includes(name), `the guard report should name ${name}`);
      }
      return true;
    },
  );
  assert.ok(fixture, "the test ran");
});
