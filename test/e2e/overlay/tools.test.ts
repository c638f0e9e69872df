// Differential tests of the copy-on-write overlay with real tools: tar, python3, git, make and
// gcc, sqlite3 — natively on a copy of the fixture vs in a named sandbox over the original
// (test/helpers/differential.ts). The last cases run a program that exists only in the
// sandbox's layer ("[exec from upper]"): that needs the overlay's exec relay, a separate
// mechanism from the file operations above, so they are kept apart and named so.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import {
  addBuildFiles,
  addManyFiles,
  diffTest,
  sh,
  type DiffCase,
} from "../../helpers/differential.js";
import type { Fixture } from "../../helpers/fixture.js";
import { which } from "../../helpers/repo.js";

diffTest("tar a host subtree, then extract it elsewhere in the tree", {
  steps: [
    sh(
      "tar -cf sub.tar sub; tar -tf sub.tar | sort; mkdir out; tar -xf sub.tar -C out; find out | sort; " +
        "cmp sub/nested.txt out/sub/nested.txt && echo same; tar -czf sub.tgz -C sub .; mkdir out2; " +
        "tar -xzf sub.tgz -C out2; find out2 | sort",
    ),
  ],
  // tar restores the archived times: they must be the host's (fixed) ones on both sides.
  mtimes: ["out/sub", "out/sub/nested.txt", "out/sub/deeper", "out/sub/deeper/leaf.txt"],
  // gzip stores no name or time for stdin data, but keep the compressed bytes out of it anyway.
  ignoreContent: /^\.\/sub\.tgz$/,
  // The archive's member order is the directories' listing order.
  listingOrder: /^\.\/sub\.tar$/,
});

// tar -p (root's default) restores each member's mode, a symlink's with lchmod: glibc opens the
// link O_PATH|O_NOFOLLOW, sees a link and answers EOPNOTSUPP, which tar ignores (issue 12).
// The archive is made in the tree, so its links live in the sandbox's layer; it is extracted
// twice, the second time over the first. Python's chmod(follow_symlinks=False) is the same
// call; it is tried on a link of the sandbox's and on one of the host's.
const LCHMOD_PY = String.raw`
import os
for link in ("out/arc/to-file", "link-to-hello"):
    try:
        os.chmod(link, 0o700, follow_symlinks=False)
        print(link, "chmod ok")
    except NotImplementedError as e:
        print(link, "NotImplementedError", e)
    os.chown(link, os.getuid(), os.getgid(), follow_symlinks=False)
    print(link, "lchown ok", os.readlink(link), oct(os.lstat(link).st_mode))
`;

diffTest("tar -xp of an archive of symlinks, hard links and modes, then lchmod", {
  steps: [
    sh(
      "mkdir -p arc/dir && echo data > arc/file && chmod 0640 arc/file && ln -s file arc/to-file && " +
        "ln -s /nonexistent/target arc/dangling && ln -s dir arc/to-dir && ln arc/file arc/dir/hard && " +
        "chmod 0711 arc/dir && chmod 4755 arc/file && tar -cf arc.tar arc && rm -rf arc && " +
        "mkdir out && tar -xpf arc.tar -C out && echo 'first rc=0' && tar -xpf arc.tar -C out && " +
        "echo 'second rc=0' && find out -printf '%p %y %m %n %l\\n' | sort && cat out/arc/to-file",
    ),
    { argv: ["python3", "-c", LCHMOD_PY] },
  ],
  // The archive holds the members' times, made at each side's own moment.
  ignoreContent: /^\.\/arc\.tar$/,
});

const PYTHON = String.raw`
import os, shutil
os.makedirs("py/a/b", exist_ok=True)
with open("py/a/b/f.txt", "w") as f:
    f.write("x\n")
os.replace("hello.txt", "py/hello-moved.txt")
with open("tmp.txt", "w") as f:
    f.write("replacement\n")
os.replace("tmp.txt", "data.bin")
os.rename("py/a", "py/a2")
try:
    os.rename("empty-dir", "sub")
except OSError as e:
    print("rename onto a non-empty dir:", type(e).__name__, os.strerror(e.errno))
os.rename("sub", "empty-dir")  # onto an empty dir: replaces it
# os.scandir while deleting what it lists (more than one getdents64 buffer)
seen = 0
with os.scandir("many") as it:
    for entry in it:
        seen += 1
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
print("scandir saw", seen, "left", sorted(os.listdir("many")))
os.rmdir("many")
shutil.rmtree("empty-dir")
print(sorted(os.listdir(".")))
for root, dirs, files in os.walk("."):
    dirs.sort()
    print(root, sorted(files))
print(open("data.bin").read(), end="")
print(os.path.exists("hello.txt"), os.path.islink("link-to-hello"), os.path.exists("link-to-hello"))
`;

diffTest(
  "python3: os.replace, os.rename, shutil.rmtree, os.scandir during deletion",
  {
    steps: [{ argv: ["python3", "-c", PYTHON] }],
    expectNative: (r) => {
      assert.match(r.steps[0]?.stdout ?? "", /scandir saw 201 left \[\]/);
      assert.match(
        r.steps[0]?.stdout ?? "",
        /rename onto a non-empty dir: OSError Directory not empty/,
      );
    },
  },
  { setup: addManyFiles },
);

const GIT_ENV = {
  GIT_AUTHOR_NAME: "Diff Test",
  GIT_AUTHOR_EMAIL: "diff@example.com",
  GIT_AUTHOR_DATE: "2020-01-01T00:00:00Z",
  GIT_COMMITTER_NAME: "Diff Test",
  GIT_COMMITTER_EMAIL: "diff@example.com",
  GIT_COMMITTER_DATE: "2020-01-01T00:00:00Z",
  // The user's own configuration stays out of it (never `git config --global`).
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_PAGER: "cat",
};

diffTest("git init, add, commit, log, status, diff, checkout in the tree", {
  steps: [
    sh(
      "git -c init.defaultBranch=main init -q . && git add -A && git commit -q -m first && " +
        "echo change >> hello.txt && git status --short && git diff --stat && " +
        "git add hello.txt && git commit -q -m second && git log --format='%H %an %ad %s' && " +
        "rm sub/nested.txt && echo new > untracked.txt && git status --porcelain && " +
        "git checkout -- sub/nested.txt && cat sub/nested.txt && git rev-parse 'HEAD^{tree}' && " +
        "git mv data.bin moved.bin && git commit -q -m third && git status --short && git log --oneline | wc -l",
    ),
  ],
  env: GIT_ENV,
  // The index holds stat data (inode, device, ctime): its bytes differ between any two trees.
  ignoreContent: /^\.\/\.git\/index$/,
  timeoutMs: 60_000,
});

// A hard link of a host file is one file under two names (issue 12): the same st_dev/st_ino as
// the host file had before the link, st_nlink 2, a write through one name seen through the
// other, and an open of either name is that file too (cp compares its fstat with the stat it
// took; tar archives the second name as a link). A local git clone hard-links every object and
// checks exactly this ("hardlink different from source").
const LINK_PY = String.raw`
import os
def ident(p):
    s = os.stat(p)
    return (s.st_dev, s.st_ino)
before = ident("hello.txt")
os.link("hello.txt", "hl")
for name in ("hello.txt", "hl"):
    s = os.stat(name)
    fd = os.open(name, os.O_RDONLY)
    f = os.fstat(fd)
    os.close(fd)
    print(name, "same as before" if ident(name) == before else "CHANGED", "nlink", s.st_nlink,
          "fstat agrees" if (f.st_dev, f.st_ino) == ident(name) else "FSTAT DIFFERS")
with open("hl", "a") as f:
    f.write("through hl\n")
print(open("hello.txt").read(), end="")
print("after the write:", "one file" if ident("hl") == ident("hello.txt") else "TWO FILES",
      "nlink", os.stat("hello.txt").st_nlink)
os.link("sub/nested.txt", "n2")
os.chmod("n2", 0o600)
fd = os.open("sub/nested.txt", os.O_RDONLY)
print("after chmod:", oct(os.stat("sub/nested.txt").st_mode), "one file" if ident("n2") == ident("sub/nested.txt") else "TWO FILES",
      "fstat agrees" if (os.fstat(fd).st_ino, os.fstat(fd).st_mode) == (os.stat("n2").st_ino, os.stat("n2").st_mode) else "FSTAT DIFFERS")
os.close(fd)
os.unlink("sub/nested.txt")
print("n2 after unlink:", open("n2").read().strip(), "nlink", os.stat("n2").st_nlink)
`;

/** `origin/`: a git repository with two commits, made natively before the run. */
function addGitRepo(fx: Fixture): void {
  const dir = fx.p("origin");
  mkdirSync(dir);
  const git = (...args: string[]): void => {
    execFileSync("git", ["-C", dir, ...args], {
      env: { ...process.env, ...GIT_ENV },
      stdio: "ignore",
    });
  };
  git("-c", "init.defaultBranch=main", "init", "-q", ".");
  writeFileSync(path.join(dir, "a.txt"), "a\n");
  git("add", "a.txt");
  git("commit", "-q", "-m", "first");
  writeFileSync(path.join(dir, "b.txt"), "b\n");
  git("add", "b.txt");
  git("commit", "-q", "-m", "second");
}

diffTest(
  "ln of a host file, then git clone of a local repository (hard links that are one file)",
  {
    steps: [
      { argv: ["python3", "-c", LINK_PY] },
      sh(
        "cp hl hl-copy && cat hl-copy && tar -cvf links.tar hello.txt hl | sort && tar -tvf links.tar | grep -c 'link to'",
      ),
      sh(
        "git clone -q origin clone && git -C clone log --format='%H %s' && git -C clone fsck --no-progress && " +
          "ls clone && cd clone && for o in $(cd .git/objects && find . -type f -path './??/*'); do " +
          'test "$(stat -c %d:%i .git/objects/$o)" = "$(stat -c %d:%i ../origin/.git/objects/$o)" && echo linked || echo NOT; done | sort | uniq -c',
      ),
    ],
    env: GIT_ENV,
    // The clone's config and reflogs name the origin by its absolute path, which differs.
    ignoreContent:
      /^\.\/(clone|origin)\/\.git\/index$|^\.\/clone\/\.git\/(config|logs\/.*)$|^\.\/links\.tar$/,
    timeoutMs: 60_000,
  },
  { setup: addGitRepo },
);

const MAKE_CASE: DiffCase = {
  steps: [
    sh(
      "cd build && make hello.o && make hello.o; touch -d '2001-01-01' hello.o; make hello.o; " +
        "ls -A | sort; test -s hello.o && echo object-built",
    ),
  ],
  timeoutMs: 60_000,
  mtimes: ["build/hello.c"],
};

diffTest("make builds an object with gcc -c (make's mtime logic included)", MAKE_CASE, {
  setup: addBuildFiles,
});

const sqlite = which("sqlite3");
diffTest(
  "sqlite3: create, insert, WAL mode (mmap'd -shm), query",
  {
    steps: [
      sh(
        'sqlite3 db.sqlite \'create table t(a, b); insert into t values (1, "x"), (2, "y"); select sum(a) from t;\' && ' +
          "sqlite3 db.sqlite 'pragma journal_mode=wal; insert into t values (3, \"z\"); select count(*), sum(a) from t;' && " +
          "sqlite3 db.sqlite 'pragma journal_mode=delete; pragma integrity_check; select b from t order by a;' && " +
          "ls -A | grep db.sqlite | sort",
      ),
    ],
  },
  { skip: sqlite ? false : "sqlite3 is not installed (command -v sqlite3 found nothing)" },
);

// ---- [exec from upper]: programs that exist only in the sandbox's layer ----

diffTest(
  "[exec from upper] make links a binary built in the sandbox and runs it",
  {
    steps: [sh("cd build && make hello && ./hello && ls -A | sort")],
    timeoutMs: 60_000,
  },
  { setup: addBuildFiles },
);

diffTest(
  "[exec from upper] a new script, and a host script made executable by chmod",
  'printf \'#!/bin/sh\\necho new-script "$0" "$@"\\n\' > new.sh; chmod +x new.sh; ./new.sh a b; ' +
    "chmod +x noexec.sh; ./noexec.sh; sed -i 's/script-ran/edited-script-ran/' exec.sh; ./exec.sh x",
);

diffTest(
  "[exec from upper] a Python venv made in the sandbox runs its python, also from subprocess",
  {
    steps: [
      sh(
        "python3 -m venv --without-pip venv && " +
          "./venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix, sys.prefix)' && " +
          "venv/bin/python -c 'import subprocess, sys; " +
          'print(subprocess.run([sys.executable, "-c", "import sys; print(sys.prefix)"], ' +
          "capture_output=True, text=True).stdout.strip())' && " +
          "PATH=\"$PWD/venv/bin:$PATH\" python -c 'import os, sys; print(os.path.basename(sys.executable))' && " +
          "ls venv/bin | sort",
      ),
    ],
    // activate scripts and pyvenv.cfg hold the venv's absolute path, which differs between the trees.
    ignoreContent: /^\.\/venv\/(bin\/(activate.*|Activate\.ps1)|pyvenv\.cfg)$/,
    timeoutMs: 60_000,
  },
);

diffTest("npm install of a local package directory, then require() it", {
  steps: [
    sh(
      'export npm_config_cache="$PWD/.npmcache" npm_config_update_notifier=false; ' +
        "mkdir -p pkgs/localpkg app && " +
        'printf \'{"name":"localpkg","version":"1.0.0","main":"index.js"}\\n\' > pkgs/localpkg/package.json && ' +
        "echo 'module.exports = 6 * 7;' > pkgs/localpkg/index.js && " +
        'cd app && printf \'{"name":"app","version":"1.0.0"}\\n\' > package.json && ' +
        "npm install --offline --no-audit --no-fund --loglevel=error ../pkgs/localpkg && " +
        "node -e 'console.log(require(\"localpkg\"))' && cat package.json && ls -A node_modules | sort",
    ),
  ],
  // npm's own cache and logs (times, random names) are not the tree under test.
  ignore: /^\.\/\.npmcache(\/|$)/,
  normalize: (text: string) => text.replace(/ in \d+(\.\d+)?m?s$/m, " in (time)"),
  timeoutMs: 60_000,
});

diffTest(
  '[exec from upper] #! with an argument, a nested interpreter, and $(dirname "$0") next to the script',
  "mkdir -p bin && printf 'sibling data\\n' > bin/data.txt && " +
    'printf \'#!/bin/sh -e\\necho "args: $0 $*"; cat "$(dirname "$0")/data.txt"\\n\' > bin/tool && ' +
    "chmod +x bin/tool && bin/tool one two && ./bin/tool three && (cd bin && ./tool four) && " +
    // an interpreter that is itself a script made in the sandbox (the kernel's nested #!), named
    // relative to the cwd so that both trees hold the same bytes
    'printf \'#!/bin/sh\\necho "interp: $1"; exec /bin/sh "$@"\\n\' > bin/interp && chmod +x bin/interp && ' +
    "printf '#!bin/interp\\necho \"inner: $0\"\\n' > bin/inner && chmod +x bin/inner && " +
    'bin/inner; echo "exit=$?"',
);

diffTest("a unix socket bound at a path in the tree, connected to, and seen in listings", {
  steps: [
    {
      argv: [
        "python3",
        "-c",
        [
          "import os, socket",
          "s = socket.socket(socket.AF_UNIX); s.bind('sock'); s.listen(1)",
          "c = socket.socket(socket.AF_UNIX); c.connect('sock')",
          "a, _ = s.accept(); c.sendall(b'ping'); print(a.recv(4).decode())",
          "c2 = socket.socket(socket.AF_UNIX); c2.connect(os.path.abspath('sock')); print('abs ok')",
          "print(sorted(n for n in os.listdir('.') if n.startswith('sock')))",
          "try:",
          "    socket.socket(socket.AF_UNIX).bind('sock')",
          "except OSError as e:",
          "    print('rebind:', os.strerror(e.errno))",
        ].join("\n"),
      ],
    },
  ],
});

// The names the kernel gives back for unix sockets bound in the tree: getsockname, getpeername,
// an accepted socket's name, each used again to connect; and a datagram answered at the address
// recvfrom gave (CPython's test_socket, test_logging and multiprocessing rely on these).
const UNIX_NAMES_PY = String.raw`
import os, socket
os.mkdir("socks")
for name in (os.path.abspath("socks/stream"), "rel-stream"):
    s = socket.socket(socket.AF_UNIX); s.bind(name); s.listen(2)
    print("getsockname", s.getsockname())
    c = socket.socket(socket.AF_UNIX); c.connect(s.getsockname())
    a, _ = s.accept()
    print("getpeername", c.getpeername(), "accepted getsockname", a.getsockname(), "unnamed peer", repr(a.getpeername()))
    c2 = socket.socket(socket.AF_UNIX); c2.connect(c.getpeername()); print("connected again")
server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); server.bind("socks/dgram-server")
client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); client.bind("socks/dgram-client")
client.settimeout(5)
client.sendto(b"ping", "socks/dgram-server")
data, sender = server.recvfrom(16)
server.sendto(data + b" back", sender)
print("reply", client.recv(16), "sent to", client.getsockname())
`;

diffTest("unix socket names from getsockname, getpeername and recvfrom lead back to the socket", {
  steps: [{ argv: ["python3", "-c", UNIX_NAMES_PY] }],
});
