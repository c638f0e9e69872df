// The host filesystem is read-only to guests: reads, stats, listings and exec work; every
// change (by path, by fd, through symlinks, /proc magic links or a reopened stdin) fails with
// EROFS, and the guard proves the fixture tree and $HOME are byte-for-byte and
// metadata-unchanged afterwards.
import assert from "node:assert/strict";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { prober } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT, type Fixture } from "../helpers/fixture.js";
import { expectProbes, FAILED, type ProbeCase } from "../helpers/probe.js";
import { cvisor, homeDir, show, tempRoot, uniqueToken } from "../helpers/repo.js";

gtest("reads, stat, listings, symlinks and exec of host files work", async (fx) => {
  const script = [
    'cd "$1"',
    "cat hello.txt",
    "cat sub/nested.txt",
    "cat link-to-hello",
    "cat dir-link/deeper/leaf.txt",
    "readlink link-to-hello dangling",
    "ls -A | tr '\\n' ' '; echo",
    "ls -A empty-dir | wc -l",
    "stat -c '%n %a %s' hello.txt readonly.txt exec.sh data.bin",
    "find . -type f | sort | tr '\\n' ' '; echo",
    "test -x exec.sh && ./exec.sh via-relative",
    "od -An -tx1 -N4 data.bin | tr -d ' \\n'; echo",
    "cat /etc/hostname > /dev/null && echo etc-ok",
    "wc -c < big-missing 2>/dev/null || echo missing-ok",
  ].join("\n");
  const r = await cvisor([], ["sh", "-c", script, "sh", fx.root]);
  assert.equal(r.code, 0, show(r));
  const data = readFileSync(fx.p("data.bin"));
  const want = [
    HELLO_TEXT.trimEnd(),
    ...NESTED_TEXT.trimEnd().split("\n"),
    HELLO_TEXT.trimEnd(),
    "leaf",
    "hello.txt",
    "missing",
    "dangling data.bin dir-link empty-dir exec.sh hello.txt link-to-hello noexec.sh readonly.txt sub xattr.txt ",
    "0",
    "hello.txt 644 20",
    "readonly.txt 444 10",
    "exec.sh 755 31",
    "data.bin 644 4096",
    "./data.bin ./exec.sh ./hello.txt ./noexec.sh ./readonly.txt ./sub/deeper/leaf.txt ./sub/nested.txt ./xattr.txt ",
    "script-ran via-relative",
    data.subarray(0, 4).toString("hex"),
    "etc-ok",
    "missing-ok",
  ];
  assert.deepEqual(r.out.split("\n").slice(0, -1), want, show(r));
});

/** Every path and fd mutator the prober knows, aimed at the fixture. */
function mutatorCases(fx: Fixture): ProbeCase[] {
  const p = fx.p;
  const newName = p("new-entry");
  const cases: ProbeCase[] = [
    // opens that would write or create
    { op: ["open-wronly", p("hello.txt")], expect: "EROFS" },
    { op: ["open-rdwr", p("hello.txt")], expect: "EROFS" },
    { op: ["open-append", p("hello.txt")], expect: "EROFS" },
    { op: ["open-trunc", p("hello.txt")], expect: "EROFS" },
    { op: ["open-rdonly-trunc", p("hello.txt")], expect: "EROFS" },
    { op: ["open-creat", p("hello.txt")], expect: "EROFS" },
    { op: ["open-creat", newName], expect: "EROFS" },
    { op: ["open-excl", newName], expect: "EROFS" },
    { op: ["open-excl", p("hello.txt")], expect: ["EROFS", "EEXIST"] },
    { op: ["creat", newName], expect: "EROFS" },
    { op: ["open-tmpfile", p("sub")], expect: "EROFS" },
    { op: ["openat2-rdwr", p("hello.txt")], expect: ["EROFS", "ENOSYS"] },
    { op: ["open-rdwr", p("readonly.txt")], expect: "EROFS" },
    { op: ["open-rdwr", p("link-to-hello")], expect: "EROFS" },
    { op: ["open-rdwr", p("dir-link", "nested.txt")], expect: "EROFS" },
    { op: ["open-rdwr", p("sub", "..", "hello.txt")], expect: "EROFS" },
    { op: ["open-creat", p("dangling")], expect: "EROFS" },
    { op: ["open-rdwr", `/proc/self/root${p("hello.txt")}`], expect: "EROFS" },
    { op: ["reopen-rdwr", p("hello.txt")], expect: ["EROFS", "EACCES", "EPERM"] },
    // metadata by path
    { op: ["chmod", p("hello.txt")], expect: "EROFS" },
    { op: ["chmod", p("sub")], expect: "EROFS" },
    { op: ["chmod", fx.root], expect: "EROFS" },
    { op: ["chown", p("hello.txt")], expect: "EROFS" },
    { op: ["lchown", p("link-to-hello")], expect: "EROFS" },
    { op: ["fchmodat2", p("hello.txt")], expect: "EROFS" },
    { op: ["truncate", p("hello.txt")], expect: "EROFS" },
    { op: ["utimensat", p("hello.txt")], expect: "EROFS" },
    { op: ["utimensat", p("sub")], expect: "EROFS" },
    { op: ["utimes-zero", p("data.bin")], expect: "EROFS" },
    { op: ["setxattr", p("xattr.txt")], expect: "EROFS" },
    { op: ["setxattr", p("sub")], expect: "EROFS" },
    { op: ["lsetxattr", p("link-to-hello")], expect: "EROFS" },
    { op: ["removexattr", p("xattr.txt")], expect: "EROFS" },
    // names
    { op: ["unlink", p("hello.txt")], expect: "EROFS" },
    { op: ["unlink", p("link-to-hello")], expect: "EROFS" },
    { op: ["rmdir", p("empty-dir")], expect: "EROFS" },
    { op: ["rmdir", p("sub")], expect: "EROFS" },
    { op: ["mkdir", newName], expect: "EROFS" },
    { op: ["mkdir", p("sub")], expect: ["EROFS", "EEXIST"] },
    { op: ["rename", p("hello.txt"), p("renamed.txt")], expect: "EROFS" },
    { op: ["rename", p("hello.txt"), p("sub", "moved.txt")], expect: "EROFS" },
    { op: ["rename", p("hello.txt"), p("data.bin")], expect: "EROFS" },
    { op: ["rename", p("empty-dir"), p("renamed-dir")], expect: "EROFS" },
    { op: ["rename-exchange", p("hello.txt"), p("data.bin")], expect: ["EROFS", "EINVAL"] },
    { op: ["rename-noreplace", p("hello.txt"), newName], expect: "EROFS" },
    { op: ["link", p("hello.txt"), newName], expect: "EROFS" },
    { op: ["link", p("hello.txt"), p("data.bin")], expect: ["EROFS", "EEXIST"] },
    { op: ["symlink", "hello.txt", newName], expect: "EROFS" },
    { op: ["symlink", "hello.txt", p("data.bin")], expect: ["EROFS", "EEXIST"] },
    { op: ["mkfifo", newName], expect: "EROFS" },
    { op: ["mknod-reg", newName], expect: "EROFS" },
    // metadata through an fd opened read-only
    { op: ["fchmod", p("hello.txt")], expect: "EROFS" },
    { op: ["fchmod", p("sub")], expect: "EROFS" },
    { op: ["fchown", p("hello.txt")], expect: "EROFS" },
    { op: ["fchownat-empty", p("hello.txt")], expect: "EROFS" },
    { op: ["futimens", p("hello.txt")], expect: "EROFS" },
    { op: ["fsetxattr", p("xattr.txt")], expect: "EROFS" },
    { op: ["fremovexattr", p("xattr.txt")], expect: "EROFS" },
    // never allowed on a read-only fd anyway; must not succeed here either
    { op: ["ftruncate", p("hello.txt")], expect: FAILED },
    { op: ["fallocate", p("hello.txt")], expect: FAILED },
    // relative to a directory fd, and links made from fds
    { op: ["openat-rdwr", fx.root, "hello.txt"], expect: "EROFS" },
    { op: ["openat-rdwr", p("sub"), "../hello.txt"], expect: "EROFS" },
    { op: ["openat-creat", p("sub"), "new-entry"], expect: "EROFS" },
    { op: ["unlinkat", fx.root, "hello.txt"], expect: "EROFS" },
    { op: ["fchmodat-dirfd", p("sub"), "nested.txt"], expect: "EROFS" },
    { op: ["link-proc-fd", p("hello.txt"), newName], expect: "EROFS" },
    { op: ["linkat-empty", p("hello.txt"), newName], expect: ["EROFS", "ENOENT"] },
    { op: ["lremovexattr", p("xattr.txt")], expect: "EROFS" },
    // a pathname AF_UNIX socket is a new file
    { op: ["bind-unix-path", newName], expect: "EROFS" },
    // reading still works in the same guest
    { op: ["open-read", p("hello.txt")], expect: "OK" },
    { op: ["open-at", p("sub"), "nested.txt"], expect: "OK" },
  ];
  return cases;
}

gtest(
  "every path and fd mutator fails with EROFS; the fixture is unchanged (guard)",
  async (fx) => {
    if (!fx.hasXattr)
      console.log("# note: no user xattrs on this filesystem; xattr cases still run");
    await expectProbes(mutatorCases(fx), "mutators on the host fixture");
    assert.ok(!existsSync(fx.p("new-entry")), "no new entry appeared");
  },
);

gtest(
  "the same mutators fail from a guest whose cwd is the fixture (relative paths)",
  async (fx) => {
    const rel = (c: ProbeCase): ProbeCase => ({
      op: c.op.map((a) => (a.startsWith(`${fx.root}/`) ? path.relative(fx.root, a) : a)),
      expect: c.expect,
    });
    const cases = mutatorCases(fx)
      .filter((c) => !c.op.some((a) => a.startsWith("/proc/")) && !c.op.includes(fx.root))
      .map(rel);
    cases.push({ op: ["open-rdwr", "/proc/self/cwd/hello.txt"], expect: "EROFS" });
    cases.push({ op: ["chmod", "/proc/self/cwd/hello.txt"], expect: "EROFS" });
    cases.push({ op: ["chmod", "."], expect: "EROFS" });
    await expectProbes(cases, "relative mutators", ["-C", fx.root]);
  },
);

gtest("shell tools report 'Read-only file system' and change nothing", async (fx) => {
  const script = [
    // try DESC CMD...: runs CMD, prints "DESC<TAB>rc<TAB>its output on one line"
    `try() { d=$1; shift; m=$("$@" 2>&1); rc=$?; printf '%s\\t%s\\t%s\\n' "$d" "$rc" "$(printf %s "$m" | tr '\\n' ' ')"; }`,
    'cd "$1"',
    `try redirect sh -c 'echo pwned > hello.txt'`,
    `try append sh -c 'echo pwned >> hello.txt'`,
    `try clobber sh -c ': > data.bin'`,
    "try truncate truncate -s 0 hello.txt",
    "try chmod chmod 777 hello.txt",
    `try chown chown "$(id -u):$(id -g)" hello.txt`,
    'try chgrp-dir chgrp "$(id -g)" sub',
    "try mv mv hello.txt moved.txt",
    "try mv-dir mv sub sub2",
    "try rm rm -f hello.txt",
    "try rm-r rm -rf sub",
    "try rmdir rmdir empty-dir",
    "try touch-existing touch hello.txt",
    "try touch-date touch -d 2020-01-01 data.bin",
    "try touch-new touch newfile",
    "try ln ln hello.txt hardlink",
    "try ln-s ln -s hello.txt symlink2",
    "try mkdir mkdir newdir",
    "try cp cp hello.txt copy.txt",
    "try sed-i sed -i s/hello/pwned/ hello.txt",
    "try mkfifo mkfifo fifo",
    "try dd dd if=/dev/zero of=hello.txt bs=1 count=1 conv=notrunc status=none",
    "try tee sh -c 'echo pwned | tee -a hello.txt'",
    "try install install -m 644 hello.txt installed.txt",
    'try mktemp-tmp mktemp "${TMPDIR:-/tmp}/cvisor-e2e-XXXXXX"',
    'try home-touch touch "$HOME/cvisor-e2e-should-not-exist"',
    'try home-mkdir mkdir "$HOME/.cvisor-e2e-should-not-exist"',
    'try home-chmod chmod "$(stat -c %a "$HOME")" "$HOME"',
  ].join("\n");
  const r = await cvisor([], ["sh", "-c", script, "sh", fx.root], {
    extraEnv: { LC_ALL: "C" },
  });
  assert.equal(r.code, 0, show(r));
  const rows = r.out.split("\n").filter((l) => l !== "");
  assert.equal(rows.length, 28, show(r));
  const bad: string[] = [];
  for (const row of rows) {
    const [desc, rc, msg] = row.split("\t");
    if (rc === "0" || !/Read-only file system/.test(msg ?? ""))
      bad.push(`${desc}: rc=${rc} ${msg}`);
  }
  assert.deepEqual(bad, [], `every tool must fail with EROFS\n${show(r)}`);
  assert.ok(!existsSync(path.join(homeDir(), "cvisor-e2e-should-not-exist")));
  assert.ok(!existsSync(path.join(homeDir(), ".cvisor-e2e-should-not-exist")));
});

gtest("$HOME and the temp dir are read-only too", async () => {
  const home = homeDir();
  const tmpName = path.join(tempRoot(), uniqueToken("cvisor-e2e-tmp-create"));
  const homeName = path.join(home, uniqueToken(".cvisor-e2e-create"));
  const cases: ProbeCase[] = [
    { op: ["open-creat", homeName], expect: "EROFS" },
    { op: ["mkdir", homeName], expect: "EROFS" },
    { op: ["symlink", "/etc/passwd", homeName], expect: "EROFS" },
    { op: ["chmod", home], expect: "EROFS" },
    { op: ["utimensat", home], expect: "EROFS" },
    { op: ["open-creat", tmpName], expect: "EROFS" },
    { op: ["mkdir", tmpName], expect: "EROFS" },
  ];
  for (const name of [".profile", ".bashrc"]) {
    const file = path.join(home, name);
    if (existsSync(file) && statSync(file).isFile()) {
      // open-append opens and closes without writing: harmless even if the sandbox were broken.
      cases.push({ op: ["open-append", file], expect: "EROFS" });
      cases.push({ op: ["utimensat", file], expect: "EROFS" });
    }
  }
  await expectProbes(cases, "mutators on $HOME and the temp dir");
  assert.ok(!existsSync(tmpName), `${tmpName} was created on the host`);
  assert.ok(!existsSync(homeName), `${homeName} was created on the host`);
});

gtest("kernel tunables and device nodes cannot be opened for writing", async () => {
  // Opens only (nothing is written), so this is harmless even if the sandbox were broken.
  const targets = ["/proc/sys/vm/drop_caches", "/proc/sysrq-trigger", "/dev/kmsg"];
  const block = readdirSync("/sys/block").find((d) => existsSync(`/dev/${d}`));
  if (block) targets.push(`/dev/${block}`);
  await expectProbes(
    targets.filter((t) => existsSync(t)).map((t) => ({ op: ["open-wronly", t], expect: FAILED })),
    "kernel and device files",
  );
});

gtest("a host file given as stdin cannot be written through /dev/stdin", async (fx) => {
  const fd = openSync(fx.p("hello.txt"), "r");
  try {
    const r = await cvisor(
      [],
      [
        "sh",
        "-c",
        'read line; echo "read:$line"; echo pwned > /dev/stdin; echo "rc=$?"; ' +
          `"$0" open-rdwr /dev/stdin ";" open-rdwr /proc/self/fd/0 ";" reopen-rdwr /dev/stdin`,
        prober(),
      ],
      { stdinFd: fd, extraEnv: { LC_ALL: "C" } },
    );
    assert.equal(r.code, 0, show(r));
    const lines = r.out.split("\n");
    assert.equal(lines[0], `read:${HELLO_TEXT.trimEnd()}`, show(r));
    assert.equal(lines[1], "rc=2", `the redirect must fail\n${show(r)}`);
    for (const res of lines.slice(2, 5)) {
      assert.ok(
        ["EROFS", "EACCES", "EPERM"].includes(res ?? ""),
        `reopen for writing: ${res}\n${show(r)}`,
      );
    }
  } finally {
    closeSync(fd);
  }
});
