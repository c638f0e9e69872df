// The answer table (native/src/common/answers_fmt.h): the shim serves readlink again from the
// supervisor's earlier answers, so glibc's realpath (gcc, make, Python) stops paying a
// notification per component. What it serves must be what the supervisor would say: a name
// the guest removes, replaces or renames, by any path and from any process, reads changed at
// once; one the host changes, within the table's second. The boundary side (no guest can
// write it, it holds nothing hidden, no other sandbox's) is in boundary.test.ts.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, symlinkSync } from "node:fs";
import path from "node:path";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { cliBuilt, cvisor, notified, show, type CliResult } from "../helpers/repo.js";

const skip = cliBuilt() ? false : "the CLI is not built";
const PYTHON3 = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

const readlinksNotified = (r: CliResult): number => notified(r, "readlink", "readlinkat");

const WARM = 2000;

// Each step reads its paths three times (the first may be notified, the others served) and
// prints the answers only if all three agree. Changes come between the reads: by this process
// through absolute, relative, dirfd and /proc/self/fd paths, and by other processes.
const SCRIPT = String.raw`
import errno, os, subprocess, sys
fx = sys.argv[1]
def rl(p):
    try: return os.readlink(p)
    except OSError as e: return "E" + errno.errorcode[e.errno]
def rec(tag, *ps):
    got = []
    for p in ps:
        a = [rl(p) for _ in range(3)]
        got.append(a[0] if a.count(a[0]) == 3 else "UNSTEADY:" + ",".join(a))
    print(tag, *got)
L = fx + "/link-to-hello"
for _ in range(${WARM}): rl(L); rl(fx + "/hello.txt")
rec("host", L, fx + "/hello.txt", fx + "/sub", fx + "/dangling", fx + "/dir-link", "/")
os.unlink(L); rec("unlinked", L)
os.symlink("data.bin", L); rec("relinked", L)
subprocess.run(["ln", "-sfn", "sub", L], check=True); rec("other-process", L)
os.chdir(fx)
os.unlink("link-to-hello"); os.symlink("readonly.txt", "link-to-hello"); rec("relative", L)
d = os.open(fx, os.O_RDONLY)
os.rename("link-to-hello", "moved", src_dir_fd=d, dst_dir_fd=d); rec("renamed", L, fx + "/moved")
os.symlink("via-proc", "/proc/self/fd/%d/p" % d); rec("proc-made", fx + "/p")
os.unlink("/proc/self/fd/%d/p" % d); rec("proc-removed", fx + "/p")
os.mkdir(fx + "/gone"); rec("dir-made", fx + "/gone"); os.rmdir(fx + "/gone"); rec("dir-removed", fx + "/gone")
os.mkdir(fx + "/d"); os.symlink("t1", fx + "/d/l"); rec("in-dir", fx + "/d/l")
os.rename(fx + "/d", fx + "/e"); rec("dir-renamed", fx + "/d/l", fx + "/e/l")
subprocess.run(["mv", fx + "/e", fx + "/sub/e"], check=True); rec("dir-moved-by-mv", fx + "/e/l", fx + "/sub/e/l")
os.unlink(fx + "/sub/e/l"); open(fx + "/sub/e/l", "w").close(); rec("file-over-link", fx + "/sub/e/l")
subprocess.run(["sh", "-c", "rm " + fx + "/dir-link && ln -s empty-dir " + fx + "/dir-link"], check=True)
rec("shell", fx + "/dir-link")
os.rename(fx + "/dangling", fx + "/sub/e/l"); rec("over-a-file", fx + "/sub/e/l", fx + "/dangling")
print("cwd-real", os.path.realpath("moved"), os.path.realpath(fx + "/dir-link/x"))
`;

/** The script's lines with the fixture's own path taken out (so two trees compare). */
function answers(r: CliResult, root: string): string {
  return r.out.split(root).join("FX");
}

/** The script run natively on a copy of the fixture (which must not change): its answers. */
function nativeAnswers(fx: Fixture, script: string): string {
  const copy = path.join(fx.scratch, "native");
  assert.equal(spawnSync("cp", ["-a", fx.root, copy]).status, 0);
  const native = spawnSync(PYTHON3, ["-c", script, copy], { encoding: "utf8" });
  assert.equal(native.status, 0, native.stderr);
  assert.doesNotMatch(native.stdout, /UNSTEADY/);
  return native.stdout.split(copy).join("FX");
}

gtest(
  "readlink served in the guest answers as the supervisor does, across the guest's own changes",
  async (fx) => {
    const want = nativeAnswers(fx, SCRIPT);

    const on = await cvisor(["--json"], [PYTHON3, "-c", SCRIPT, fx.root], { timeoutMs: 60_000 });
    assert.equal(on.code, 0, show(on));
    assert.equal(answers(on, fx.root), want, show(on));
    const off = await cvisor(["--json"], [PYTHON3, "-c", SCRIPT, fx.root], {
      extraEnv: { CVISOR_SHIM: "off" },
      timeoutMs: 60_000,
    });
    assert.equal(off.code, 0, show(off));
    assert.equal(answers(off, fx.root), want, show(off));
    // Without the shim every readlink is notified; with it, the warm-up's are served.
    assert.ok(readlinksNotified(off) >= 2 * WARM, `shim off: ${readlinksNotified(off)}`);
    assert.ok(readlinksNotified(on) < WARM / 10, `shim on: ${readlinksNotified(on)}\n${show(on)}`);
  },
  { skip, timeout: 180_000 },
);

gtest(
  "a link the host changes reads changed in the guest within the table's second",
  async (fx) => {
    const dir = path.join(fx.scratch, "host");
    mkdirSync(dir);
    const link = path.join(dir, "l");
    symlinkSync("before", link);
    // The guest reads the link in a loop (served from the table after the first read) and
    // reports how long after the host's change it saw the new target.
    const script = String.raw`
import os, sys, time
l = sys.argv[1]
while not os.path.lexists(l + ".go"): os.readlink(l); time.sleep(0.002)
t0 = time.monotonic()
while os.readlink(l) == "before":
    if time.monotonic() - t0 > 5: print("never"); sys.exit(1)
    time.sleep(0.002)
print("seen", os.readlink(l), round(time.monotonic() - t0, 2))
`;
    const run = cvisor([], [PYTHON3, "-c", script, link], { timeoutMs: 30_000 });
    await new Promise((res) => setTimeout(res, 1500));
    symlinkSync("after", `${link}.new`);
    renameSync(`${link}.new`, link);
    symlinkSync("x", `${link}.go`);
    const r = await run;
    assert.equal(r.code, 0, show(r));
    const m = /^seen after ([\d.]+)$/m.exec(r.out);
    assert.ok(m, show(r));
    assert.ok(Number(m[1]) < 1.5, show(r));
  },
  { skip, timeout: 60_000 },
);

// A missing name is recorded too (readlink's and open's ENOENT), so every way of making a name
// must make the record stale before the guest learns the name exists.
const MADE = String.raw`
import errno, os, socket, subprocess, sys
fx = sys.argv[1]
def rl(p):
    try: return os.readlink(p)
    except OSError as e: return "E" + errno.errorcode[e.errno]
def op(p):
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK))
        return "open"
    except OSError as e: return "E" + errno.errorcode[e.errno]
def st(p, follow):
    try:
        os.stat(p, follow_symlinks=follow)
        return "stat"
    except OSError as e: return "E" + errno.errorcode[e.errno]
def both(p):
    a = ["/".join([rl(p), op(p), st(p, True), st(p, False), str(os.access(p, os.F_OK))]) for _ in range(3)]
    return a[0] if a.count(a[0]) == 3 else "UNSTEADY:" + ",".join(a)
def bind(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    s.close()
ways = {
    "creat": lambda p: open(p, "w").close(),
    "mkdir": os.mkdir,
    "symlink": lambda p: os.symlink("hello.txt", p),
    "link": lambda p: os.link(fx + "/hello.txt", p),
    "mkfifo": os.mkfifo,
    "bind": bind,
    "rename": lambda p: (open(p + ".tmp", "w").close(), os.rename(p + ".tmp", p)),
    "other-process": lambda p: subprocess.run(["touch", p], check=True),
    "cp": lambda p: subprocess.run(["cp", fx + "/dangling", p, "-P"], check=True),
    "relative": lambda p: (os.chdir(fx), open(os.path.basename(p), "w").close()),
}
def check(name, p, make):
    before = both(p)
    for _ in range(${WARM / 10}): rl(p); op(p); st(p, True); os.access(p, os.F_OK)
    make()
    print(name, before, both(p))
for name, make in ways.items():
    p = fx + "/new-" + name
    check(name, p, lambda: make(p))
# Names below a missing directory: made one level at a time, or all at once by a symlink or a
# rename that brings a tree.
q = fx + "/new-deep/a/b"
check("deep", q, lambda: (os.makedirs(fx + "/new-deep/a"), open(q, "w").close()))
check("through-a-new-symlink", fx + "/new-dirlink/nested.txt", lambda: os.symlink("sub", fx + "/new-dirlink"))
def tree():
    subprocess.run(["cp", "-r", fx + "/sub", fx + "/new-tree.tmp"], check=True)
    os.rename(fx + "/new-tree.tmp", fx + "/new-tree")
check("tree-renamed-in", fx + "/new-tree/deeper/leaf.txt", tree)
`;

gtest(
  "a name the guest makes, any way, is found at once (readlink, open, stat, access) after the table said it was missing",
  async (fx) => {
    const want = nativeAnswers(fx, MADE);
    for (const env of [{}, { CVISOR_SHIM: "off" }] as Record<string, string>[]) {
      const r = await cvisor(["--json"], [PYTHON3, "-c", MADE, fx.root], {
        extraEnv: env,
        timeoutMs: 60_000,
      });
      assert.equal(r.code, 0, show(r));
      assert.equal(answers(r, fx.root), want, show(r));
      if (!("CVISOR_SHIM" in env)) {
        assert.ok(readlinksNotified(r) < WARM / 5, `shim on: ${readlinksNotified(r)}\n${show(r)}`);
        const looks = notified(r, "newfstatat", "statx", "access");
        assert.ok(looks < WARM, `shim on: ${looks} stats and accesses\n${show(r)}`);
      }
    }
  },
  { skip, timeout: 180_000 },
);

// Names the kernel makes by itself are never recorded: a pty's slave appears in /dev/pts when
// /dev/ptmx is opened, with no call that makes a name.
const PTY = String.raw`
import errno, os, pty
def op(p):
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
        return "open"
    except OSError as e: return errno.errorcode[e.errno]
for _ in range(5):
    m, s = pty.openpty()
    n = os.ttyname(s)
    os.close(s); os.close(m)
    gone = [op(n) for _ in range(3)]
    m, s = pty.openpty()
    if os.ttyname(s) == n: break
    os.close(s); os.close(m)
print("gone", *gone)
print("again", os.ttyname(s) == n, op(n))
`;

gtest(
  "a pty's slave, missing a moment ago, opens once the kernel made it again",
  async () => {
    const r = await cvisor([], [PYTHON3, "-c", PTY]);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, "gone ENOENT ENOENT ENOENT\nagain True open\n", show(r));
  },
  { skip },
);

// Node's fs.statSync is libuv's raw statx, through syscall(): a missing path's is served too.
const NODE_MISSING = `const fs = require("fs"); const p = process.argv[1] + "/node-new";
const look = () => { try { fs.statSync(p); return "stat"; } catch (e) { return e.code; } };
const before = look(); for (let i = 0; i < ${WARM}; i++) look();
fs.writeFileSync(p, "x"); console.log(before, look());`;

gtest(
  "node: a missing path's stat is served, and the path is found once made",
  async (fx) => {
    const r = await cvisor(["--json"], [process.execPath, "-e", NODE_MISSING, fx.root]);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, "ENOENT stat\n", show(r));
    const looks = notified(r, "newfstatat", "statx");
    assert.ok(looks < WARM / 2, `shim on: ${looks}\n${show(r)}`);
  },
  { skip },
);

// Names below a missing directory (a locale glibc looks for under a name that is not there,
// one file for each of its categories): after the first, the shim answers them all from the
// directory's own record, for libc's own opens too (opendir's, the locale loader's), until
// the directory is made.
const BELOW = String.raw`
import errno, os, sys
base = sys.argv[1] + "/no-such-dir"
def op(p):
    try:
        os.close(os.open(p, os.O_RDONLY))
        return "open"
    except OSError as e: return errno.errorcode[e.errno]
def ls(p):
    try: return "ls%d" % len(os.listdir(p))
    except OSError as e: return errno.errorcode[e.errno]
names = ["%s/LC_%d" % (base, i) for i in range(${WARM / 4})]
before = {op(p) for p in names} | {ls(p + "-dir") for p in names} | {str(os.access(p, os.F_OK)) for p in names}
os.mkdir(base)
for p in names[:3]: open(p, "w").close()
os.mkdir(names[3] + "-dir")
print(*sorted(before), op(names[0]), op(names[5]), ls(names[3] + "-dir"), ls(names[4] + "-dir"), os.access(names[1], os.F_OK))
`;

gtest(
  "names below a missing directory are answered from its record, by every open, until it is made",
  async (fx) => {
    const want = nativeAnswers(fx, BELOW);
    assert.equal(want, "ENOENT False open ENOENT ls0 ENOENT True\n");
    for (const env of [{}, { CVISOR_SHIM: "off" }] as Record<string, string>[]) {
      const r = await cvisor(["--json"], [PYTHON3, "-c", BELOW, fx.root], { extraEnv: env });
      assert.equal(r.code, 0, show(r));
      assert.equal(answers(r, fx.root), want, show(r));
      // Each of the names is looked up three ways (open, opendir, access): one notification
      // each without the shim, a few in all with it.
      const looks = notified(r, "openat", "open", "access", "faccessat2");
      if ("CVISOR_SHIM" in env)
        assert.ok(looks >= (3 * WARM) / 4, `shim off: ${looks}\n${show(r)}`);
      else assert.ok(looks < WARM / 4, `shim on: ${looks}\n${show(r)}`);
    }
  },
  { skip, timeout: 60_000 },
);
