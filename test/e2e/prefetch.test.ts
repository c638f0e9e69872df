// Opens made ahead of a walk (native/src/handlers/prefetch.c, native/src/shim/prefetch.c): a
// walker's opens of host directories and files are answered from fds the supervisor opened
// ahead, with the same fd numbers, flags and contents as a native walk, and a change the
// sandbox makes meanwhile is seen; what the supervisor places never includes a hidden name,
// whatever a guest writes into its ask.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { compileFixture } from "../helpers/cc.js";
import { diffSnapshots, gtest, snapshot } from "../helpers/guard.js";
import { cliBuilt, cvisor, notified, repoRoot, show, which } from "../helpers/repo.js";

const skip = cliBuilt() ? false : "the CLI is not built";
// Debian's own: a pyenv shim first in PATH would run a shell script and its tools first.
const PYTHON3 = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
const walker = (): string => compileFixture("walker", ["-I", path.join(repoRoot, "native", "src")]);

const DIRS = 30;
const FILES = 8;

/** `dirs` directories, each with a subdirectory and FILES files of distinct contents. */
function makeTree(root: string, dirs = DIRS): number {
  let objects = 0;
  for (let d = 0; d < dirs; d++) {
    const dir = path.join(root, `d${d}`);
    mkdirSync(path.join(dir, "inner"), { recursive: true });
    writeFileSync(path.join(dir, "inner", "leaf"), `leaf ${d}\n`);
    for (let f = 0; f < FILES; f++)
      writeFileSync(path.join(dir, `file-${f}`), `${d}.${f} `.repeat(d + f));
    objects += 3 + FILES;
  }
  return objects;
}

const walkOpts = { maxEntries: 10_000, maxDepth: 8, hashMaxBytes: 1 << 20, skip: () => false };

function native(argv: readonly string[]): string {
  const r = spawnSync(argv[0] ?? "", argv.slice(1), { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

gtest(
  "a walk's opens come from opens made ahead: the fds, flags and bytes of a native walk",
  async (fx) => {
    const tree = path.join(fx.scratch, "tree");
    const objects = makeTree(tree);
    const argv = [walker(), "walk", tree];
    const want = native(argv);
    const on = await cvisor(["--json"], argv);
    assert.equal(on.code, 0, show(on));
    assert.equal(on.out, want, show(on));
    const off = await cvisor(["--json"], argv, { extraEnv: { CVISOR_SHIM: "off" } });
    assert.equal(off.code, 0, show(off));
    assert.equal(off.out, want, show(off));
    const opens = (r: typeof on): number => notified(r, "openat", "open");
    assert.ok(opens(off) >= objects, `shim off: ${opens(off)}\n${show(off)}`);
    assert.ok(opens(on) < objects / 3, `shim on: ${opens(on)} of ${objects}\n${show(on)}`);
    // tar reads every file the same way
    const tar = which("tar");
    if (tar) {
      const tarArgv = ["sh", "-c", `${tar} cf - -C ${tree} . | sha256sum`];
      const r = await cvisor([], tarArgv);
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, native(tarArgv), show(r));
    }
  },
  { skip, timeout: 120_000 },
);

gtest(
  "ls -R opens in name order, not the listing's: the opens made ahead turn to that order",
  async (fx) => {
    const tree = path.join(fx.scratch, "tree");
    makeTree(tree, 200); // the first ask comes 32 opens in, and its walk grows from 2
    const dirs = 1 + 200 * 2;
    const argv = ["env", "LC_ALL=C", "ls", "-R", tree];
    const want = native(argv);
    const r = await cvisor(["--json"], argv);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, want, show(r));
    const opens = notified(r, "openat", "open");
    assert.ok(opens < dirs / 3, `${opens} of ${dirs} directories' opens notified\n${show(r)}`);
  },
  { skip, timeout: 120_000 },
);

// The sandbox changes the tree half-way through the walk (another process, between two opens):
// the walker must see the changed view, not the objects opened for it before.
// The walk has opened 40 (four directories): $7 on are the directories it has not reached, some
// of them opened ahead already ($2...: the root's entries in the order the walk takes them).
const CHANGE = [
  'rm -rf "$1/$7"',
  'printf changed > "$1/$8/file-3"',
  'mkdir "$1/$9/made" && printf new > "$1/$9/made/x"',
  'mv "$1/${10}" "$1/${10}-moved"',
  'rm "$1/${11}/file-5"',
  'printf more >> "$1/${12}/inner/leaf"',
].join("; ");

for (const mode of ["change", "fork"] as const) {
  gtest(
    mode === "change"
      ? "a change made while a walk holds opens ahead is what the walk sees"
      : "a process forked in the middle of a walk and its parent both walk as natively",
    async (fx) => {
      const tree = path.join(fx.scratch, "tree");
      const copy = path.join(fx.scratch, "copy");
      makeTree(tree);
      makeTree(copy); // made as the tree was: listed in the same order
      const before = snapshot(tree, walkOpts, false);
      const tail = mode === "change" ? ["40", CHANGE] : ["40", "-", "fork"];
      // native: the same walk of a copy, the same change applied to the copy
      const want = native([walker(), "walk", copy, ...tail]).replaceAll(copy, tree);
      const r = await cvisor([], [walker(), "walk", tree, ...tail]);
      assert.equal(r.code, 0, show(r));
      // a directory the sandbox changed lists its merged entries in the overlay's order, not the
      // kernel's: what is seen, not in which order
      const lines = (out: string): string[] =>
        mode === "change" ? out.trimEnd().split("\n").sort() : out.trimEnd().split("\n");
      assert.deepEqual(lines(r.out), lines(want), show(r));
      if (mode === "change") assert.match(r.out, /\/file-3 fd=\d+ fl=00 size=7 /, show(r));
      assert.deepEqual(
        diffSnapshots(before, snapshot(tree, walkOpts, false)),
        [],
        "the host tree changed",
      );
    },
    { skip, timeout: 120_000 },
  );
}

// A guest that writes the ask itself (a raw openat with the bit and a made-up ask asking for the
// most, past the shim) gets read-only fds of what the walk shows, and never of a hidden name or
// of a directory that holds one.
gtest(
  "opens ahead never place a hidden name, whatever the guest's ask says",
  async (fx) => {
    const tree = path.join(fx.scratch, "tree");
    makeTree(tree);
    writeFileSync(path.join(tree, "d3", "secret.txt"), "hidden file\n");
    mkdirSync(path.join(tree, "d4", "vault"));
    writeFileSync(path.join(tree, "d4", "vault", "key"), "hidden dir\n");
    const hidden = [path.join(tree, "d3", "secret.txt"), path.join(tree, "d4", "vault")];
    const r = await cvisor(
      [...hidden.flatMap((h) => ["--hide", h])],
      [walker(), "forge", tree, "600"],
    );
    assert.equal(r.code, 0, show(r));
    const got = Number(/^forge got=(\d+)$/m.exec(r.out)?.[1] ?? "0");
    const fds = [...r.out.matchAll(/^fd (\S*) mode=(\d)$/gm)];
    assert.ok(
      got > DIRS * 2 && fds.length === got,
      `the asks placed too little to look at\n${show(r)}`,
    );
    for (const [, target = "", mode] of fds) {
      assert.ok(target.startsWith(tree + "/d"), `${target}\n${show(r)}`);
      assert.equal(mode, "0", `${target} is not read-only\n${show(r)}`);
      for (const d of ["d3", "d4"].map((name) => path.join(tree, name)))
        assert.ok(target !== d && !target.startsWith(d + "/"), `${target}\n${show(r)}`);
    }
    assert.ok(!r.out.includes("secret") && !r.out.includes("vault"), show(r));
    assert.equal(readFileSync(path.join(tree, "d3", "secret.txt"), "utf8"), "hidden file\n");
  },
  { skip, timeout: 120_000 },
);

// The slots count against the process's fd limit: a process near it gets every fd a native
// one gets (an open that finds none left gives the slots up and is made again).
const NEAR_LIMIT = String.raw`
import os, sys
walk = os.walk(sys.argv[1])
for seen, _ in enumerate(walk):
    if seen == 150: break
walk.close()
def target(f):
    try: return os.readlink("/proc/self/fd/" + f)
    except OSError: return None  # the listing's own
held = [t for t in map(target, os.listdir("/proc/self/fd")) if t is not None]
own = [t for t in held if not t.startswith(sys.argv[1])]  # not a walk's
fds = []
try:
    while True: fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e: print("reached", len(fds) + len(own), e.strerror)
print("ahead", len(held) > len(own), file=sys.stderr)
`;

gtest(
  "a process near its fd limit opens as many files as natively while a walk holds opens ahead",
  async (fx) => {
    const tree = path.join(fx.scratch, "tree");
    makeTree(tree, 100); // walked 150 directories in: opens of the next ones are held
    // the limit set before the interpreter starts: the shim's slots lie below it
    const argv = ["sh", "-c", 'ulimit -n 300 && exec "$0" -c "$1" "$2"', PYTHON3, NEAR_LIMIT, tree];
    const want = native(argv);
    assert.equal(want, "reached 300 Too many open files\n");
    const r = await cvisor([], argv);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, want, show(r));
    assert.match(
      r.err,
      /^ahead True$/m,
      `no opens were ahead when the limit was reached\n${show(r)}`,
    );
  },
  { skip, timeout: 60_000 },
);

// The slot numbers are the guest's too: a number it puts its own fd at while a walk goes on
// keeps that fd, and the walk reads every file as natively. Slots [top-80, top-16), the
// socket's number (top-81) left free so that the walk goes on asking.
const SLOTS_TAKEN = String.raw`
import hashlib, os, resource, sys
top = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024)
marker = os.open(sys.argv[2], os.O_RDONLY)
numbers = range(top - 80, top - 16)
digest, n = hashlib.sha256(), 0
for root, dirs, files in os.walk(sys.argv[1]):
    dirs.sort()
    for name in sorted(files):
        with open(os.path.join(root, name), "rb") as f:
            digest.update(name.encode() + f.read())
        n += 1
        if n == 40:
            for k in numbers: os.dup2(marker, k)
mine = os.fstat(marker)
kept = sum(1 for k in numbers if os.path.samestat(os.fstat(k), mine))
print("read", n, digest.hexdigest()[:16], "kept", kept)
`;

gtest(
  "fds the guest puts at the slots' numbers during a walk stay its own",
  async (fx) => {
    const tree = path.join(fx.scratch, "tree");
    makeTree(tree);
    const marker = path.join(fx.scratch, "marker");
    writeFileSync(marker, "the guest's own\n");
    const argv = [PYTHON3, "-c", SLOTS_TAKEN, tree, marker];
    const want = native(argv);
    assert.equal(want.replace(/ [0-9a-f]{16} /, " - "), `read ${DIRS * (FILES + 1)} - kept 64\n`);
    const r = await cvisor(["--json"], argv);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, want, show(r));
  },
  { skip, timeout: 60_000 },
);
