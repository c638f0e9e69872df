// Differential tests of the copy-on-write overlay: creating, changing, deleting and renaming
// files and directories, natively on a copy of the fixture vs in a named sandbox over the
// original (test/helpers/differential.ts). Each test compares exit codes, stdout, stderr and
// the resulting tree; the guard proves the host fixture and $HOME unchanged.
import assert from "node:assert/strict";
import { addManyFiles, diffTest, sh } from "../../helpers/differential.js";

// ---- creating and writing ----

diffTest(
  "create a file with >, append with >>, read it back",
  "echo one > new.txt; echo two >> new.txt; cat new.txt; wc -c < new.txt; stat -c '%n %s %a %F' new.txt",
);

diffTest(
  "O_EXCL twice (bash noclobber): the second create fails with the same message",
  'set -C; echo first > excl.txt; echo "exit=$?"; echo second > excl.txt; echo "exit=$?"; ' +
    'cat excl.txt; echo host > hello.txt; echo "exit=$?"; cat hello.txt',
);

diffTest(
  "truncate a host file with `: > file`",
  ": > hello.txt; echo \"exit=$?\"; wc -c < hello.txt; stat -c '%n %s %a' hello.txt; cat link-to-hello | wc -c",
);

diffTest(
  "append to a host file",
  "echo appended >> hello.txt; echo again >> sub/nested.txt; cat hello.txt sub/nested.txt; cat link-to-hello",
);

// A reader and a writer in one process: the fds it opened for reading before the file was
// copied up read the new bytes, at their own offsets, and keep their close-on-exec flag.
const READ_THEN_WRITE_PY = String.raw`
import os
r = open("hello.txt")
raw = os.open("sub/nested.txt", os.O_RDONLY)
kept = os.open("hello.txt", os.O_RDONLY); os.set_inheritable(kept, True)
print(repr(r.read()), repr(os.read(raw, 6)))
with open("hello.txt", "a") as w:
    w.write("appended\n")
with open("sub/nested.txt", "r+") as w:
    w.write("NESTED")
print(repr(r.read()), repr(os.read(raw, 100)), repr(os.read(kept, 100)), os.get_inheritable(kept))
r.seek(0); print(repr(r.read()))
os.lseek(raw, 0, os.SEEK_SET); print(repr(os.read(raw, 12)))
print(os.fstat(raw).st_size == os.stat("sub/nested.txt").st_size)
`;

diffTest("a process's read-only fds of a file follow its copy-up when it writes the file", {
  steps: [{ argv: ["python3", "-c", READ_THEN_WRITE_PY] }],
});

diffTest(
  "sed -i on host files (temp file + rename in the same directory)",
  "sed -i 's/host/sandbox/' hello.txt; sed -i -e '1d' sub/nested.txt; cat hello.txt sub/nested.txt; " +
    "stat -c '%n %a %s' hello.txt sub/nested.txt; ls -A | sort; ls -A sub | sort",
);

diffTest(
  "write through a host symlink and through a dangling host symlink",
  "echo via-link > link-to-hello; cat hello.txt; echo created > dangling; cat missing; " +
    "ls -A | sort; readlink dangling link-to-hello",
);

// ---- directories ----

diffTest(
  "mkdir -p deep, in new and in host directories",
  "mkdir -p a/b/c/d/e/f/g; echo deep > a/b/c/d/e/f/g/file; mkdir -p sub/deeper/x/y; mkdir -p sub; " +
    'echo "exit=$?"; find a sub | sort; cat a/b/c/d/e/f/g/file',
);

diffTest(
  "mkdir of something that exists: the same error text",
  'mkdir sub; echo "exit=$?"; mkdir hello.txt; echo "exit=$?"; mkdir dangling; echo "exit=$?"; ' +
    'mkdir link-to-hello; echo "exit=$?"; mkdir -p hello.txt/x; echo "exit=$?"; ' +
    'mkdir new; mkdir new; echo "exit=$?"; mkdir nothere/x; echo "exit=$?"',
);

diffTest(
  "rm a host file (and a host symlink); the name is gone, the link dangles",
  'rm hello.txt; echo "exit=$?"; cat hello.txt; echo "exit=$?"; test -e hello.txt || echo gone; ' +
    'cat link-to-hello; echo "exit=$?"; rm dir-link; ls -A | sort; ls sub | sort',
);

diffTest(
  "rm -rf a host directory of 200 files (readdir while deleting)",
  {
    steps: [
      sh(
        'ls many | wc -l; rm -rf many; echo "exit=$?"; test -e many || echo gone; ls -A | sort; ' +
          "mkdir many; ls -A many | wc -l; echo fresh > many/one; ls many",
      ),
    ],
    expectNative: (r) => assert.match(r.steps[0]?.stdout ?? "", /^201\n/),
  },
  { setup: addManyFiles },
);

diffTest(
  "readdir-while-deleting with find -delete on a host directory",
  'find many -type f -delete; echo "exit=$?"; find many | sort; rmdir many/nested many; ls -A | sort',
  { setup: addManyFiles },
);

diffTest(
  "rm of a missing file, rm -f, rm of a directory: the same errors",
  'rm nothere; echo "exit=$?"; rm -f nothere; echo "exit=$?"; rm sub; echo "exit=$?"; ' +
    'rm -d sub; echo "exit=$?"; rm -d empty-dir; echo "exit=$?"; rm sub/nothere/x; echo "exit=$?"',
);

diffTest(
  "rmdir: non-empty host dir fails (ENOTEMPTY), emptied host dir succeeds",
  'rmdir sub; echo "exit=$?"; rmdir empty-dir; echo "exit=$?"; rmdir hello.txt; echo "exit=$?"; ' +
    'rmdir nothere; echo "exit=$?"; rm sub/deeper/leaf.txt; rmdir sub/deeper; echo "exit=$?"; ' +
    'rmdir sub; echo "exit=$?"; rm sub/nested.txt; rmdir sub; echo "exit=$?"; ls -A | sort',
);

// ---- renames ----

diffTest(
  "mv a host file to a new name and into a directory",
  "mv hello.txt renamed.txt; cat renamed.txt; mv renamed.txt sub/; cat sub/renamed.txt; " +
    'mv data.bin empty-dir/moved.bin; ls -A | sort; ls -A sub empty-dir; cat link-to-hello; echo "exit=$?"',
);

diffTest(
  "mv a file over an existing file (host over host, new over host, host over new)",
  "mv hello.txt data.bin; cat data.bin; echo fresh > fresh.txt; mv fresh.txt readonly.txt; " +
    "cat readonly.txt; stat -c '%n %a %s' readonly.txt; echo newer > newer.txt; " +
    "mv sub/nested.txt newer.txt; cat newer.txt; ls -A | sort; ls -A sub",
);

diffTest(
  "mv a host directory with nested contents to a new name, then change inside it",
  "mv sub moved; find moved | sort; cat moved/nested.txt moved/deeper/leaf.txt; " +
    'test -e sub || echo sub-gone; cat dir-link/nested.txt; echo "exit=$?"; ' +
    "echo new > moved/deeper/new.txt; rm moved/nested.txt; mv moved sub; find sub | sort; " +
    "cat dir-link/deeper/new.txt",
);

diffTest(
  "mv a directory into another directory, and over an empty directory",
  "mv sub empty-dir/; find empty-dir | sort; mkdir target; mv empty-dir target/; find target | sort; " +
    'mkdir e2; mv target e2; echo "exit=$?"; find e2 | sort; ' +
    'mkdir full; touch full/x; mv e2 full; echo "exit=$?"; mkdir -p y/full; mv full y; echo "exit=$?"; ' +
    "ls -A | sort",
);

diffTest("cp -a of host files, a host directory and a symlink", {
  steps: [
    sh(
      "cp -a sub sub-copy; cp -a hello.txt hello-copy; cp -a link-to-hello link-copy; " +
        "cp -a xattr.txt xattr-copy.txt; find sub-copy | sort; readlink link-copy; cat hello-copy; " +
        "stat -c '%n %a %Y' sub-copy/nested.txt hello-copy",
    ),
  ],
  // cp -a keeps the times of the originals: compare them.
  mtimes: ["hello-copy", "sub-copy/nested.txt", "sub-copy/deeper/leaf.txt", "xattr-copy.txt"],
});

// ---- links ----

diffTest(
  "ln -s and readlink: new symlinks to host and new files",
  "echo new > new.txt; ln -s hello.txt s1; ln -s sub/nested.txt s2; ln -s new.txt s3; ln -s ../outside s4; " +
    'readlink s1 s2 s3 s4; cat s1 s2 s3; ln -s x s1; echo "exit=$?"; ln -sf new.txt s1; readlink s1; ' +
    "ls -A | sort",
);

diffTest(
  "a dangling symlink: readlink works, reading fails, writing creates the target",
  'ln -s nowhere dl; readlink dl; cat dl; echo "exit=$?"; test -L dl && echo is-link; ' +
    "test -e dl || echo target-missing; echo created > dl; cat dl nowhere; ls -A | sort",
);

diffTest(
  "a symlink to a directory, then cd through it",
  "ln -s sub/deeper dl; cd dl; pwd; pwd -P; cat leaf.txt; echo made > made.txt; cd ..; pwd; " +
    "ls sub/deeper | sort; cd dir-link/deeper; pwd; pwd -P; cat ../nested.txt",
);

diffTest(
  "a hard link of a host file: change through one name, read the other",
  "ln hello.txt hl; echo more >> hl; cat hello.txt; stat -c '%n %h %s' hello.txt hl; " +
    "echo a > n1; ln n1 n2; echo b >> n2; cat n1; stat -c '%n %h' n1 n2; rm n1; cat n2; stat -c '%h' n2; " +
    'ln sub hl-dir; echo "exit=$?"',
);

// ---- metadata ----

diffTest(
  "chmod of host files and a host directory, stat -c %a",
  "chmod 600 hello.txt; chmod 700 sub; chmod +x noexec.sh; chmod 0 readonly.txt; chmod g+w sub/nested.txt; " +
    "stat -c '%n %a' hello.txt sub noexec.sh readonly.txt sub/nested.txt; cat hello.txt; " +
    "chmod 644 link-to-hello; stat -c '%n %a' hello.txt; chmod 755 nothere; echo \"exit=$?\"",
);

diffTest("touch -d with explicit times, stat -c %Y (mtimes compared)", {
  steps: [
    sh(
      "touch -d '2020-01-02 03:04:05' hello.txt; touch -d @1600000000.5 new.txt; " +
        "touch -m -d '2019-05-06 07:08:09' sub; touch -h -d '2018-01-01 00:00:00' link-to-hello; " +
        "stat -c '%n %Y %y' hello.txt new.txt sub; stat -c '%n %Y' link-to-hello; cat hello.txt",
    ),
  ],
  mtimes: ["hello.txt", "new.txt", "sub", "link-to-hello", "sub/nested.txt", "data.bin"],
});

diffTest(
  "mkfifo: a new FIFO, written and read through",
  "mkfifo f1; stat -c '%n %F %a' f1; (echo through-fifo > f1 &); cat f1; wait; mkfifo f1; " +
    'echo "exit=$?"; mkfifo sub/f2; ls -A sub | sort',
);

// O_PATH opens as on the host (issue 12): symlinks (the fixture's, a dangling one, a new one),
// a file and a directory no one may read or list, each used the ways an O_PATH fd can be (and
// refused the ways it cannot). The supervisor cannot inject an O_PATH file; the shim receives it
// (native/src/common/opath_proto.h), at the number a native open gives.
const O_PATH_PY = String.raw`
import os, stat
os.symlink("hello.txt", "new-link")
os.mkdir("locked", 0o311)
os.close(os.open("locked/inside", os.O_CREAT | os.O_WRONLY, 0o644))
os.chmod("readonly.txt", 0)
def attempt(what, fn):
    try:
        out = fn()
        return f"{what}={out}"
    except OSError as e:
        return f"{what}:{os.strerror(e.errno)}"
for name in ["link-to-hello", "dangling", "new-link", "readonly.txt", "locked", "sub"]:
    flags = os.O_PATH | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags)
    except OSError as e:
        print(name, "open:", e.strerror)
        continue
    st = os.fstat(fd)
    kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
    mode = "" if kind == "link" else oct(st.st_mode & 0o7777)
    print(name, fd, kind, mode,
          attempt("readlink", lambda: os.readlink("", dir_fd=fd)),
          attempt("read", lambda: os.read(fd, 1)),
          attempt("proc", lambda: os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1]))
    def reopen(flags):
        g = os.open(f"/proc/self/fd/{fd}", flags)
        kind = stat.S_IFMT(os.fstat(g).st_mode)
        os.close(g)
        return kind
    print(" ", attempt("reopen", lambda: reopen(os.O_RDONLY)), attempt("reopen-path", lambda: reopen(os.O_PATH)))
    if kind == "dir":
        print(" ", attempt("listdir", lambda: sorted(os.listdir(fd))),
              attempt("open-in", lambda: os.close(os.open("inside" if name == "locked" else "nested.txt", os.O_RDONLY, dir_fd=fd))),
              attempt("stat-in", lambda: os.stat("inside" if name == "locked" else "nested.txt", dir_fd=fd).st_size))
        here = os.open(".", os.O_RDONLY)
        print(" ", attempt("fchdir", lambda: os.fchdir(fd)), os.getcwd().rsplit("/", 1)[-1])
        os.fchdir(here)
        os.close(here)
    os.close(fd)
os.chmod("locked", 0o755)
os.chmod("readonly.txt", 0o644)
`;

diffTest("O_PATH opens of symlinks, and of a file and a directory nobody may read", {
  steps: [{ argv: ["python3", "-c", O_PATH_PY] }],
});

// An fd opened on a host file before another process writes the file (copying it up) reads
// what was written, as overlayfs fds follow a copy-up (issue 12): read, pread, readv, fstat and
// lseek of a raw fd, and Python's buffered file. The shim sees the run's count of copy-ups move
// and has the supervisor make its fds opens of the copies (native/src/common/answers_fmt.h).
const FOLLOW_COPY_UP_PY = String.raw`
import os, subprocess
fd = os.open("hello.txt", os.O_RDONLY)
print(os.read(fd, 5))
subprocess.run(["sh", "-c", "echo appended >> hello.txt"], check=True)
print(os.read(fd, 100))
print(os.fstat(fd).st_size, os.pread(fd, 100, 0), os.lseek(fd, 0, os.SEEK_END))
f = open("sub/nested.txt")
first = f.readline()
subprocess.run(["sh", "-c", "echo more >> sub/nested.txt"], check=True)
print(repr(first), repr(f.read()))
fd2 = os.open("data.bin", os.O_RDONLY)
subprocess.run(["sh", "-c", "printf NEW | dd of=data.bin conv=notrunc status=none"], check=True)
buf = bytearray(3)
print(os.readv(fd2, [buf]), bytes(buf))
`;

diffTest("an fd opened before another process writes the file reads what it wrote", {
  steps: [{ argv: ["python3", "-c", FOLLOW_COPY_UP_PY] }],
});

// The same in a multi-threaded process, where the supervisor cannot swap fds other threads may
// be using: the reading thread's shim asks for the one fd it reads, whichever process wrote.
const FOLLOW_COPY_UP_THREADS_PY = String.raw`
import os, subprocess, threading
stop = threading.Event()
idle = threading.Thread(target=stop.wait)
idle.start()
fd = os.open("hello.txt", os.O_RDONLY)
print(os.read(fd, 5))
with open("hello.txt", "a") as w:
    w.write("same process\n")
print(os.read(fd, 100), os.fstat(fd).st_size)
fd2 = os.open("sub/nested.txt", os.O_RDONLY)
kept = os.open("sub/nested.txt", os.O_RDONLY)
subprocess.run(["sh", "-c", "echo more >> sub/nested.txt"], check=True)
got = []
reader = threading.Thread(target=lambda: got.append(os.pread(fd2, 100, 0)))
reader.start()
reader.join()
print(got, os.lseek(kept, 0, os.SEEK_END))
stop.set()
idle.join()
`;

diffTest("an fd of a multi-threaded process follows a copy-up made by it or by another process", {
  steps: [{ argv: ["python3", "-c", FOLLOW_COPY_UP_THREADS_PY] }],
});
