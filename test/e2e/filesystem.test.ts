// The guest sees the host and may change anything, by path, by fd, through symlinks, /proc
// magic links or a reopened stdin: every change lands in the sandbox's upper layer, answered
// exactly as on a writable copy of the fixture, and the guard proves the fixture tree and
// $HOME are byte-for-byte and metadata-unchanged afterwards. (The differential suite in
// test/e2e/overlay/ checks the resulting trees; this file checks each call's answer.)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { prober } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT, type Fixture } from "../helpers/fixture.js";
import { expectLikeNative, expectProbes, FAILED, type ProbeCase } from "../helpers/probe.js";
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
function mutatorCases(fx: Fixture): string[][] {
  const p = fx.p;
  const newName = p("new-entry");
  const cases: string[][] = [
    // opens that would write or create
    ["open-wronly", p("hello.txt")],
    ["open-rdwr", p("hello.txt")],
    ["open-append", p("hello.txt")],
    ["open-trunc", p("hello.txt")],
    ["open-rdonly-trunc", p("hello.txt")],
    ["open-creat", p("hello.txt")],
    ["open-creat", newName],
    ["open-excl", newName],
    ["open-excl", p("hello.txt")],
    ["creat", newName],
    ["open-tmpfile", p("sub")],
    ["openat2-rdwr", p("hello.txt")],
    ["open-rdwr", p("readonly.txt")],
    ["open-rdwr", p("link-to-hello")],
    ["open-rdwr", p("dir-link", "nested.txt")],
    ["open-rdwr", p("sub", "..", "hello.txt")],
    ["open-creat", p("dangling")],
    ["open-rdwr", `/proc/self/root${p("hello.txt")}`],
    ["reopen-rdwr", p("hello.txt")],
    // metadata by path
    ["chmod", p("hello.txt")],
    ["chmod", p("sub")],
    ["chmod", fx.root],
    ["chown", p("hello.txt")],
    ["lchown", p("link-to-hello")],
    ["fchmodat2", p("hello.txt")],
    ["truncate", p("hello.txt")],
    ["utimensat", p("hello.txt")],
    ["utimensat", p("sub")],
    ["utimes-zero", p("data.bin")],
    ["setxattr", p("xattr.txt")],
    ["setxattr", p("sub")],
    ["lsetxattr", p("link-to-hello")],
    ["removexattr", p("xattr.txt")],
    // names
    ["unlink", p("hello.txt")],
    ["unlink", p("link-to-hello")],
    ["rmdir", p("empty-dir")],
    ["rmdir", p("sub")],
    ["mkdir", newName],
    ["mkdir", p("sub")],
    ["rename", p("hello.txt"), p("renamed.txt")],
    ["rename", p("hello.txt"), p("sub", "moved.txt")],
    ["rename", p("hello.txt"), p("data.bin")],
    ["rename", p("empty-dir"), p("renamed-dir")],
    ["rename-exchange", p("hello.txt"), p("data.bin")],
    ["rename-noreplace", p("hello.txt"), newName],
    ["link", p("hello.txt"), newName],
    ["link", p("hello.txt"), p("data.bin")],
    ["symlink", "hello.txt", newName],
    ["symlink", "hello.txt", p("data.bin")],
    ["mkfifo", newName],
    ["mknod-reg", newName],
    // metadata through an fd opened read-only
    ["fchmod", p("hello.txt")],
    ["fchmod", p("sub")],
    ["fchown", p("hello.txt")],
    ["fchownat-empty", p("hello.txt")],
    ["futimens", p("hello.txt")],
    ["fsetxattr", p("xattr.txt")],
    ["fremovexattr", p("xattr.txt")],
    // never allowed on a read-only fd
    ["ftruncate", p("hello.txt")],
    ["fallocate", p("hello.txt")],
    // relative to a directory fd, and links made from fds
    ["openat-rdwr", fx.root, "hello.txt"],
    ["openat-rdwr", p("sub"), "../hello.txt"],
    ["openat-creat", p("sub"), "new-entry"],
    ["unlinkat", fx.root, "hello.txt"],
    ["fchmodat-dirfd", p("sub"), "nested.txt"],
    ["link-proc-fd", p("hello.txt"), newName],
    ["linkat-empty", p("hello.txt"), newName],
    ["lremovexattr", p("xattr.txt")],
    // a pathname AF_UNIX socket is a new file
    ["bind-unix-path", newName],
    // reading still works in the same guest
    ["open-read", p("hello.txt")],
    ["open-at", p("sub"), "nested.txt"],
  ];
  return cases;
}

/** A scratch copy of the fixture (cp -a), removed by the caller. */
function copyOf(fx: Fixture): { root: string; map: (arg: string) => string; done: () => void } {
  const dir = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-copy-"));
  const root = path.join(dir, "fx");
  execFileSync("cp", ["-a", fx.root, root]);
  return {
    root,
    map: (arg) => arg.split(fx.root).join(root),
    done: () => rmSync(dir, { recursive: true, force: true }),
  };
}

// Deliberate differences: linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH, which a sandbox's
// root does not keep; openat2 is ENOSYS in the sandbox (libc falls back to openat).
const DIFFERS = ["linkat-empty", "openat2-rdwr"];

gtest(
  "every path and fd mutator answers as on a writable copy; the fixture is unchanged (guard)",
  async (fx) => {
    if (!fx.hasXattr)
      console.log("# note: no user xattrs on this filesystem; xattr cases still run");
    const copy = copyOf(fx);
    try {
      await expectLikeNative(mutatorCases(fx), copy.map, "mutators on the host fixture", {
        differs: DIFFERS,
      });
    } finally {
      copy.done();
    }
    assert.ok(!existsSync(fx.p("new-entry")), "no new entry appeared on the host");
  },
);

gtest("the same mutators from a guest whose cwd is the fixture (relative paths)", async (fx) => {
  const rel = (op: readonly string[]): string[] =>
    op.map((a) => (a.startsWith(`${fx.root}/`) ? path.relative(fx.root, a) : a));
  const ops = mutatorCases(fx)
    .filter((op) => !op.some((a) => a.startsWith("/proc/")) && !op.includes(fx.root))
    .map(rel);
  ops.push(["open-rdwr", "/proc/self/cwd/hello.txt"]);
  ops.push(["chmod", "/proc/self/cwd/hello.txt"]);
  ops.push(["chmod", "."]);
  const copy = copyOf(fx);
  try {
    await expectLikeNative(ops, (a) => a, "relative mutators", {
      cliOptions: ["-C", fx.root],
      nativeCwd: copy.root,
      differs: DIFFERS,
    });
  } finally {
    copy.done();
  }
});

const TOOLS = [
  `try redirect sh -c 'echo pwned > hello.txt'`,
  `try append sh -c 'echo pwned >> hello.txt'`,
  `try clobber sh -c ': > data.bin'`,
  "try truncate truncate -s 0 hello.txt",
  "try chmod chmod 777 hello.txt",
  `try chown chown "$(id -u):$(id -g)" hello.txt`,
  'try chgrp-dir chgrp "$(id -g)" sub',
  "try mv mv hello.txt moved.txt",
  "try mv-dir mv sub sub2",
  "try rm rm -f moved.txt",
  "try rm-r rm -rf sub2",
  "try rmdir rmdir empty-dir",
  "try touch-existing touch data.bin",
  "try touch-date touch -d 2020-01-01 data.bin",
  "try touch-new touch newfile",
  "try ln ln newfile hardlink",
  "try ln-s ln -s newfile symlink2",
  "try mkdir mkdir newdir",
  "try cp cp newfile copy.txt",
  "try sed-i sed -i s/x/y/ copy.txt",
  "try mkfifo mkfifo fifo",
  "try dd dd if=/dev/zero of=data.bin bs=1 count=1 conv=notrunc status=none",
  "try tee sh -c 'echo pwned | tee -a readonly.txt'",
  "try install install -m 644 newfile installed.txt",
  'try listing sh -c \'ls -A | sort | tr "\\n" " "\'',
];
const TRY = `try() { d=$1; shift; m=$("$@" 2>&1); rc=$?; printf '%s\\t%s\\t%s\\n' "$d" "$rc" "$(printf %s "$m" | tr '\\n' ' ')"; }`;

gtest("shell tools behave as on a writable copy and change nothing on the host", async (fx) => {
  const script = [TRY, 'cd "$1"', ...TOOLS].join("\n");
  const copy = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-copy-"));
  try {
    execFileSync("cp", ["-a", fx.root, path.join(copy, "fx")]);
    const native = execFileSync("sh", ["-c", script, "sh", path.join(copy, "fx")], {
      encoding: "utf8",
      env: { ...process.env, LC_ALL: "C" },
    });
    const r = await cvisor([], ["sh", "-c", script, "sh", fx.root], { extraEnv: { LC_ALL: "C" } });
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out.split("\n").length, TOOLS.length + 1, show(r));
    assert.equal(r.out, native, `sandbox vs a writable copy\n${show(r)}`);
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});

gtest("$HOME and the temp dir are writable in the sandbox, never on the host", async () => {
  const home = homeDir();
  const tmpName = path.join(tempRoot(), uniqueToken("cvisor-e2e-tmp-create"));
  const homeName = path.join(home, uniqueToken(".cvisor-e2e-create"));
  const cases: ProbeCase[] = [
    { op: ["open-creat", homeName], expect: "OK" },
    { op: ["unlink", homeName], expect: "OK" },
    { op: ["mkdir", homeName], expect: "OK" },
    { op: ["symlink", "/etc/passwd", `${homeName}/link`], expect: "OK" },
    { op: ["chmod", home], expect: "OK" },
    { op: ["utimensat", home], expect: "OK" },
    { op: ["open-creat", tmpName], expect: "OK" },
    { op: ["mkdir", `${tmpName}.d`], expect: "OK" },
  ];
  for (const name of [".profile", ".bashrc"]) {
    const file = path.join(home, name);
    if (existsSync(file) && statSync(file).isFile()) {
      cases.push({ op: ["open-append", file], expect: "OK" });
      cases.push({ op: ["utimensat", file], expect: "OK" });
    }
  }
  await expectProbes(cases, "mutators on $HOME and the temp dir");
  for (const p of [tmpName, `${tmpName}.d`, homeName])
    assert.ok(!existsSync(p), `${p} was created on the host`);
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

gtest(
  "a host file given as stdin is written through /dev/stdin in the sandbox only",
  async (fx) => {
    const fd = openSync(fx.p("hello.txt"), "r");
    try {
      const r = await cvisor(
        [],
        [
          "sh",
          "-c",
          'read line; echo "read:$line"; echo pwned > /dev/stdin; echo "rc=$?"; ' +
            `"$0" open-rdwr /dev/stdin ";" open-rdwr /proc/self/fd/0 ";" reopen-rdwr /dev/stdin; ` +
            `cat "$1"`,
          prober(),
          fx.p("hello.txt"),
        ],
        { stdinFd: fd, extraEnv: { LC_ALL: "C" } },
      );
      assert.equal(r.code, 0, show(r));
      const lines = r.out.split("\n");
      assert.equal(lines[0], `read:${HELLO_TEXT.trimEnd()}`, show(r));
      assert.equal(lines[1], "rc=0", `the redirect writes the sandbox's copy\n${show(r)}`);
      assert.deepEqual(lines.slice(2, 5), ["OK", "OK", "OK"], show(r));
      // The sandbox sees its copy: "pwned", its first byte overwritten by the prober's writes.
      assert.match(lines[5] ?? "", /^.wned$/, `the sandbox sees its copy\n${show(r)}`);
      // The guard proves hello.txt itself is unchanged.
    } finally {
      closeSync(fd);
    }
  },
);

// tail -f of a host file while another process appends to it (issue 12): tail's inotify watch
// copies the file up, and tail's own fd of it then follows the copy, so the appended line
// shows. (tail also says the file "was replaced" and falls back to polling: a copy-up gives the
// file a new inode, a documented difference.)
gtest("tail -f of a host file shows what another process appends", async (fx) => {
  const r = await cvisor(
    [],
    [
      "sh",
      "-c",
      'cd "$1" || exit 1; tail -f hello.txt > "$HOME/tail.out" & t=$!; sleep 0.5; ' +
        "echo appended >> hello.txt; " +
        'for i in $(seq 100); do grep -q appended "$HOME/tail.out" && break; sleep 0.1; done; ' +
        'kill $t; cat "$HOME/tail.out"',
      "sh",
      fx.root,
    ],
    { timeoutMs: 30_000 },
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, `${HELLO_TEXT}appended\n`, show(r));
});

// A host directory keeps its identity once the sandbox gives it an upper copy (deleting what is
// in it makes one): `rm -rf` (fts) checks each ".." it climbs back through against the
// dev/ino it saw on the way down, and failed ("fts_read failed: No such file or directory") on
// any host tree more than a few levels deep. stat and an opened fd's fstat must agree too.
const DEEP_HOST_LEVELS = 40;
gtest(
  "rm -rf, chmod -R and find of a host tree 40 levels deep; a changed directory keeps its dev/ino",
  async (fx) => {
    const script = [
      'cd "$1" || exit 1',
      "before=$(stat -c %d:%i tree/d/d)",
      "find tree | wc -l",
      "touch tree/d/d/new",
      "after=$(stat -c %d:%i tree/d/d)",
      'opened=$(python3 -c "import os; s = os.fstat(os.open(\\"tree/d/d\\", os.O_RDONLY)); print(f\\"{s.st_dev}:{s.st_ino}\\")")',
      '[ "$before" = "$after" ] && [ "$opened" = "$after" ] && echo same-identity',
      "chmod -R go-w tree; echo chmod=$?",
      "rm -rf tree; echo rm=$?",
      "test -e tree || echo gone",
    ].join("\n");
    const r = await cvisor([], ["sh", "-c", script, "sh", fx.root]);
    assert.equal(r.code, 0, show(r));
    assert.equal(
      r.out,
      `${DEEP_HOST_LEVELS * 2 + 1}\nsame-identity\nchmod=0\nrm=0\ngone\n`,
      show(r),
    );
  },
  {
    setup: (fx) => {
      let dir = fx.p("tree");
      for (let i = 0; i < DEEP_HOST_LEVELS; i++) {
        dir = path.join(dir, "d");
        mkdirSync(dir, { recursive: true });
        writeFileSync(path.join(dir, "f"), `${i}\n`);
      }
    },
  },
);
