// The in-guest shim (native/src/shim/shim.c): glibc's fstat stays a native call in a sandbox,
// a guest's own LD_PRELOAD still works, and guests the shim cannot reach (static binaries, a
// cleared environment) behave the same, only with their fstat calls notified. The boundary
// side (no stat of a hidden file through AT_EMPTY_PATH, with or without the shim) is in
// boundary.test.ts.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { probeArgs, prober, staticProber } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { cliBuilt, cvisor, notified, repoRoot, show, type CliResult } from "../helpers/repo.js";

const SHIM = path.join(repoRoot, "native", "build", "libcvisor-shim.so");
const skip = cliBuilt() ? false : "the CLI is not built";

const statsNotified = (r: CliResult): number => notified(r, "newfstatat", "statx");

const CALLS = 3000;
const DIRS = 40;
// CPython's os.fstat is glibc's fstat; Node's fs.fstatSync is libuv's statx(fd, "", ...).
const PYTHON = `import os\nfd = os.open("/etc/hostname", os.O_RDONLY)\nfor _ in range(${CALLS}): os.fstat(fd)\nprint("py", os.fstat(fd).st_size == os.stat("/etc/hostname").st_size)`;
// Debian's own: a pyenv shim first in PATH would run a shell script and its tools first.
const PYTHON3 = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
const NODE = `const fs = require("fs"); const fd = fs.openSync("/etc/hostname", "r"); let st; for (let i = 0; i < ${CALLS}; i++) st = fs.fstatSync(fd); console.log("node", st.size === fs.statSync("/etc/hostname").size);`;

for (const [name, argv] of [
  ["python3", [PYTHON3, "-c", PYTHON]],
  ["node", [process.execPath, "-e", NODE]],
] as const) {
  gtest(
    `${name}: fstat of an fd stays native with the shim, and is answered either way`,
    async () => {
      const on = await cvisor(["--json"], argv);
      assert.equal(on.code, 0, show(on));
      assert.equal(on.out, name === "node" ? "node true\n" : "py True\n", show(on));
      const off = await cvisor(["--json"], argv, { extraEnv: { CVISOR_SHIM: "off" } });
      assert.equal(off.code, 0, show(off));
      assert.equal(off.out, on.out, show(off));
      // Without the shim each of the calls reaches the supervisor; with it, only the start-up's
      // (the dynamic loader's own, before the shim is loaded, and the path lookups).
      assert.ok(statsNotified(off) >= CALLS, `shim off: ${statsNotified(off)}\n${show(off)}`);
      assert.ok(statsNotified(on) < CALLS / 10, `shim on: ${statsNotified(on)}\n${show(on)}`);
    },
    { skip, timeout: 120_000 },
  );
}

// A walk's listings: each host directory's is published when it is opened, and the shim gives
// the guest's getdents64 the kernel's records, in the kernel's order.
gtest(
  "find's listings stay in the guest with the shim, in the order the kernel lists them",
  async (fx) => {
    const tree = path.join(fx.scratch, "walk");
    for (let d = 0; d < DIRS; d++) {
      mkdirSync(path.join(tree, `d${d}`, "inner"), { recursive: true });
      for (let f = 0; f < 6; f++)
        writeFileSync(path.join(tree, `d${d}`, `file-${f}-${"x".repeat(d)}`), "");
    }
    const argv = ["find", tree, "-printf", "%p %y\\n"];
    const native = spawnSync(argv[0] ?? "", argv.slice(1), { encoding: "utf8" });
    assert.equal(native.status, 0, native.stderr);
    const on = await cvisor(["--json"], argv);
    assert.equal(on.code, 0, show(on));
    assert.equal(on.out, native.stdout, show(on));
    const off = await cvisor(["--json"], argv, { extraEnv: { CVISOR_SHIM: "off" } });
    assert.equal(off.code, 0, show(off));
    assert.equal(off.out, native.stdout, show(off));
    const listings = (r: CliResult): number => notified(r, "getdents64");
    assert.ok(listings(off) >= DIRS * 2, `shim off: ${listings(off)}\n${show(off)}`);
    assert.ok(listings(on) < DIRS / 4, `shim on: ${listings(on)}\n${show(on)}`);
  },
  { skip, timeout: 120_000 },
);

gtest(
  "the guest's own LD_PRELOAD comes after the shim and still loads",
  async () => {
    // libm is a real library that every glibc host has and nothing here needs.
    const own = "/usr/lib/x86_64-linux-gnu/libm.so.6";
    const r = await cvisor(
      ["-e", `LD_PRELOAD=${own}`],
      ["sh", "-c", 'echo "$LD_PRELOAD"; grep -c libm /proc/self/maps'],
    );
    assert.equal(r.code, 0, show(r));
    const [preload, maps] = r.out.trim().split("\n");
    assert.equal(preload, `${SHIM}:${own}`, show(r));
    assert.ok(Number(maps) > 0, show(r));
    assert.equal(r.err, "", show(r));
    const off = await cvisor(["-e", `LD_PRELOAD=${own}`], ["sh", "-c", 'echo "$LD_PRELOAD"'], {
      extraEnv: { CVISOR_SHIM: "off" },
    });
    assert.equal(off.out, `${own}\n`, show(off));
  },
  { skip },
);

gtest(
  "guests without the shim (static, a cleared environment) get the same answers",
  async () => {
    const ops = probeArgs([
      ["fstat-fd", "/etc/hostname"],
      ["fstatat-empty-asm", "-"],
    ]);
    const want = ["OK size=", "OK cwd=yes"];
    for (const argv of [
      [prober(), ...ops],
      [staticProber(), ...ops],
      ["env", "-i", prober(), ...ops],
    ]) {
      const r = await cvisor(["-C", "/tmp"], argv);
      assert.equal(r.code, 0, show(r));
      const lines = r.out.trim().split("\n");
      assert.match(lines[0] ?? "", /^OK size=\d+ same=yes$/, show(r));
      assert.equal(lines[1], want[1], show(r));
    }
  },
  { skip },
);

gtest(
  "a shim the guest could not read is not preloaded (no loader error at each exec)",
  async (fx) => {
    // A copy of the shim under a hidden directory: the guest cannot open it.
    const dir = path.join(fx.scratch, "secret");
    mkdirSync(dir);
    const copy = path.join(dir, "libcvisor-shim.so");
    copyFileSync(SHIM, copy);
    const r = await cvisor(["--hide", dir], ["sh", "-c", 'echo "[$LD_PRELOAD]"; true'], {
      extraEnv: { CVISOR_SHIM: copy },
    });
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, "[]\n", show(r));
    assert.equal(r.err, "", show(r));
  },
  { skip },
);

// git status's walk: an lstat of each file, directory after directory. Once a walk is under way
// each small directory is published at its first miss, and with it the other small
// subdirectories of the directory holding it: a tree of small directories costs a few
// notifications, not one a directory.
const SIBLINGS_PY = `import os, sys
root = sys.argv[1]
for d in sorted(os.listdir(root)):
    for f in range(10): os.lstat(os.path.join(root, d, "f%d" % f))
print("walked", len(os.listdir(root)))`;

gtest(
  "a walk's lstat in sibling directories is answered from their publication, a few notified",
  async (fx) => {
    const tree = path.join(fx.scratch, "siblings");
    siblingDirs(tree);
    const empty = path.join(fx.scratch, "empty");
    mkdirSync(empty);
    const walk = await cvisor(["--json"], [PYTHON3, "-c", SIBLINGS_PY, tree]);
    assert.equal(walk.code, 0, show(walk));
    assert.equal(walk.out, `walked ${DIRS}\n`, show(walk));
    const none = await cvisor(["--json"], [PYTHON3, "-c", SIBLINGS_PY, empty]);
    assert.equal(none.code, 0, show(none));
    const walked = statsNotified(walk) - statsNotified(none);
    assert.ok(walked < DIRS / 4, `${walked} of ${DIRS} directories' lstat notified\n${show(walk)}`);
  },
  { skip, timeout: 60_000 },
);

// git status' order: each tracked file's lstat, a directory's own before it, in name order.
const PACKAGES = 10;
const PACKAGES_PY = `import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for p in range(n):
    for m in range(10):
        os.lstat(os.path.join(root, "p%d" % p, "m%d" % m))
        for f in range(10): os.lstat(os.path.join(root, "p%d" % p, "m%d" % m, "f%d" % f))
print("walked", n)`;

gtest(
  "a walk of a tree's packages, subdirectory after subdirectory, asks three times a package",
  async (fx) => {
    const tree = path.join(fx.scratch, "packages");
    for (let p = 0; p < PACKAGES; p++)
      for (let m = 0; m < 10; m++)
        for (let f = 0; f < 10; f++) writeFile(path.join(tree, `p${p}`, `m${m}`, `f${f}`), "x");
    const walk = await cvisor(["--json"], [PYTHON3, "-c", PACKAGES_PY, tree, String(PACKAGES)]);
    assert.equal(walk.code, 0, show(walk));
    assert.equal(walk.out, `walked ${PACKAGES}\n`, show(walk));
    const none = await cvisor(["--json"], [PYTHON3, "-c", PACKAGES_PY, tree, "0"]);
    assert.equal(none.code, 0, show(none));
    // a package's own lstat, its first subdirectory's, the second's (which publishes the rest)
    const walked = statsNotified(walk) - statsNotified(none);
    assert.ok(
      walked < PACKAGES * 3.5,
      `${walked} lstat notified in ${PACKAGES} packages\n${show(walk)}`,
    );
  },
  { skip, timeout: 60_000 },
);

// Python's imports: a few subdirectories of a directory, not one after the other.
const SCATTERED = ["m5", "m20", "m33"];
const SCATTERED_PY = `import os, sys
root = sys.argv[1]
for d in sys.argv[2:]:
    for f in range(10): os.lstat(os.path.join(root, d, "f%d" % f))
print("looked", len(sys.argv) - 2)`;

gtest(
  "look-ups in a few scattered subdirectories publish those alone, not their siblings",
  async (fx) => {
    const tree = path.join(fx.scratch, "scattered");
    siblingDirs(tree);
    const look = await cvisor(["--json"], [PYTHON3, "-c", SCATTERED_PY, tree, ...SCATTERED]);
    assert.equal(look.code, 0, show(look));
    assert.equal(look.out, `looked ${SCATTERED.length}\n`, show(look));
    const none = await cvisor(["--json"], [PYTHON3, "-c", SCATTERED_PY, tree]);
    assert.equal(none.code, 0, show(none));
    // each directory's first lstat asks (and publishes it); none was published ahead
    const looked = statsNotified(look) - statsNotified(none);
    assert.ok(
      looked >= SCATTERED.length,
      `${looked} lstat notified in ${SCATTERED.join(", ")}\n${show(look)}`,
    );
  },
  { skip, timeout: 60_000 },
);

// Probes for names a directory does not hold (an include path's, git's .gitignore): once its
// listing is published (opened for it, or probed twice) the shim answers ENOENT itself, by
// absolute and relative path and below a missing name; a name the guest makes then is found
// through each of them.
const PROBES = 100;
const ABSENT_PY = `import os, sys
d, n, first = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if first == "list": os.listdir(d)
os.chdir(d)
missing = 0
for i in range(n):
    for p in ("nope%d" % i, os.path.join(d, "nope%d.txt" % i), "nodir%d/x" % i):
        try: os.stat(p)
        except FileNotFoundError: missing += 1
        try: open(p).close()
        except FileNotFoundError: missing += 1
open("nope7", "w").write("made")
print(missing, open("nope7").read(), open(os.path.join(d, "nope7")).read(), os.path.exists("nope7"),
      os.stat(os.path.join(d, "nope7")).st_size, os.path.exists("../absent/nope7"))`;

for (const first of ["list", "probe"]) {
  gtest(
    `names a published listing does not hold are missing without a notification, until made (${first})`,
    async (fx) => {
      const dir = path.join(fx.scratch, "absent");
      for (let f = 0; f < 10; f++) writeFile(path.join(dir, `f${f}`), "x");
      const argv = (n: number) => [PYTHON3, "-c", ABSENT_PY, dir, String(n), first];
      const probe = await cvisor(["--json"], argv(PROBES));
      assert.equal(probe.code, 0, show(probe));
      assert.equal(probe.out, `${PROBES * 6} made made True 4 True\n`, show(probe));
      const none = await cvisor(["--json"], argv(0));
      assert.equal(none.code, 0, show(none));
      assert.equal(none.out, "0 made made True 4 True\n", show(none));
      const asked =
        notified(probe, "openat", "newfstatat") - notified(none, "openat", "newfstatat");
      assert.ok(asked < PROBES / 10, `${asked} of ${PROBES * 6} probes notified\n${show(probe)}`);
      assert.ok(!existsSync(path.join(dir, "nope7")), "the guest's file reached the host");
    },
    { skip, timeout: 60_000 },
  );
}

/** DIRS directories m0, m1, ... of root, each with ten files f0...f9. */
function siblingDirs(root: string): void {
  for (let d = 0; d < DIRS; d++)
    for (let f = 0; f < 10; f++) writeFile(path.join(root, `m${d}`, `f${f}`), "x");
}

function writeFile(p: string, text: string): void {
  mkdirSync(path.dirname(p), { recursive: true });
  writeFileSync(p, text);
}
