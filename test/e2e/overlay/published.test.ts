// The shim answers stat, lstat, statx and ls -l's getxattr calls in host directories whose
// entries the supervisor published (native/src/handlers/statpub.c). Differential: whatever
// changes a directory's entries, by the process itself or another one of the sandbox, each way
// of asking after them shows the change as natively: an absolute path, a name under a dirfd
// (following or not), a path relative to the cwd, through a symlinked directory, `..` and
// /proc/self/fd, statx with and without the birth time, and getxattr. Native runs of the same
// script set what is right.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { addManyFiles, diffTest, probe } from "../../helpers/differential.js";

const PUBLISHED_PY = String.raw`
import os, stat, subprocess, sys, time
here = os.getcwd()
names = ["hello.txt", "data.bin", "readonly.txt", "xattr.txt", "link-to-hello", "dangling",
         "dir-link", "sub", "empty-dir", "new.txt", "hard.txt", "moved.txt", "newdir"]

def fmt(st):
    kind = stat.filemode(st.st_mode)
    size = "" if stat.S_ISDIR(st.st_mode) else st.st_size
    m = st.st_mtime_ns
    when = "" if not stat.S_ISREG(st.st_mode) else "now" if abs(m - time.time_ns()) < 3600 * 10**9 else m
    return f"{kind}/{size}/{st.st_nlink}/{when}"

def attempt(fn):
    try:
        return fmt(fn())
    except OSError as e:
        return f"E{e.errno}"

def xattr(path, follow):
    try:
        os.getxattr(path, "security.selinux", follow_symlinks=follow)
        return "has"
    except OSError as e:
        return f"E{e.errno}"

def show(label):
    d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    sub = os.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    print("--", label)
    for name in names:
        print(name,
              attempt(lambda: os.stat(os.path.join(here, name), follow_symlinks=False)),
              attempt(lambda: os.stat(name, dir_fd=d, follow_symlinks=False)),
              attempt(lambda: os.stat(name, dir_fd=d)),
              attempt(lambda: os.lstat(name)),
              attempt(lambda: os.stat(os.path.join(here, "sub", "..", name), follow_symlinks=False)),
              attempt(lambda: os.stat(f"/proc/self/fd/{d}/{name}", follow_symlinks=False)),
              xattr(os.path.join(here, name), False), xattr(os.path.join(here, name), True))
    for name in ["nested.txt", "moved.txt", "deeper"]:
        print("sub/" + name,
              attempt(lambda: os.stat(name, dir_fd=sub, follow_symlinks=False)),
              attempt(lambda: os.stat(os.path.join(here, "dir-link", name))),
              attempt(lambda: os.stat(os.path.join(here, "sub", name))))
    os.close(d)
    os.close(sub)
    sys.stdout.flush()

show("first")
show("again")
subprocess.run(["sh", "-c", "chmod 600 hello.txt; touch -d @1000000000 sub/nested.txt; echo more >> data.bin; "
                "rm link-to-hello; mv sub/nested.txt sub/moved.txt; ln hello.txt hard.txt; mkdir newdir; "
                "ln -s hello.txt new.txt; rmdir empty-dir"], check=True)
show("after another process changed them")
os.chmod("readonly.txt", 0o640)
os.utime("data.bin", ns=(2000000000000000000, 2000000000000000000))
os.truncate("hello.txt", 3)
os.rename("sub/moved.txt", "moved.txt")
os.unlink("dangling")
os.symlink("newdir", "empty-dir")
show("after this process changed them")
`;

diffTest("stat and getxattr follow every change to a directory's entries, however asked", {
  steps: [{ argv: ["python3", "-c", PUBLISHED_PY] }],
  expectNative: (native) => {
    const out = native.steps[0]?.stdout ?? "";
    assert.match(out, /-- after this process changed them/);
    assert.match(out, /^hello\.txt -rw-------\/3\/2\//m, "the native run saw the last changes");
  },
});

// A walk as find, ls -lR and tar make it, then the same after a change deep in the tree.
diffTest(
  "find, ls -lR and tar see a change made between two walks",
  "walk() { find . -printf '%p %y %m %n\\n' | sort; find . -type f -printf '%p %s\\n' | sort; " +
    "ls -lR --time-style=+ sub | grep -v '^total' | awk '{print $1, $2, $NF}' | sort; }; walk; " +
    "chmod 700 sub/deeper; echo x >> sub/deeper/leaf.txt; mkdir sub/deeper/new; walk; tar cf - sub | tar tf - | sort",
);

// Names relative to the cwd: the shim keeps the cwd the supervisor gave until a chdir or a
// rename anywhere in the view, so a cwd another process renamed, or one it moved into, is
// looked up where it now is.
const CWD_PY = String.raw`
import os, stat, subprocess
def look(*names):
    out = []
    for n in names:
        try:
            st = os.lstat(n)
            out.append(f"{n}:{stat.filemode(st.st_mode)}:{st.st_size if stat.S_ISREG(st.st_mode) else ''}")
        except OSError as e:
            out.append(f"{n}:E{e.errno}")
    print(os.path.basename(os.getcwd()), *out)
os.chdir("sub")
look("nested.txt", "deeper", "./deeper/leaf.txt", "added.txt")
subprocess.run(["sh", "-c", "mv ../sub ../moved && echo more >> nested.txt && echo new > added.txt"], check=True)
look("nested.txt", "deeper", "./deeper/leaf.txt", "added.txt")
os.chdir("deeper")
look("leaf.txt", "../nested.txt")
fd = os.open("..", os.O_RDONLY)
os.fchdir(fd)
look("nested.txt", "added.txt")
os.chdir("/")
look("moved", "sub")
`;

diffTest("a path relative to the cwd after a chdir and after another process renamed the cwd", {
  steps: [{ argv: ["python3", "-c", CWD_PY] }],
});

// Names longer than the table keeps (common/answers_fmt.h: CV_ANS_NAME_MAX) are asked each time,
// in a directory whose other entries are published.
diffTest(
  "a walked directory of long names: ls -l before and after one changes",
  "look() { ls -l --time-style=+ many many/nested | awk '{print $1, $2, $5, $NF}' | sort | sed -n '1,6p;$p'; }; " +
    'look; first="many/$(ls many | sort | head -n 1)"; chmod 600 "$first"; echo more >> "$first"; look',
  { setup: addManyFiles },
);

// statx answers the mask as the kernel does: the birth time only when asked, and on Linux 6.13+
// the change and modification times only when one of them is (the rest is always filled).
diffTest("statx of a walked directory's entries, mask by mask, by path and under a dirfd", {
  steps: [probe(["statx-masks", "."]), probe(["statx-masks", "sub"])],
});

// The shim answers getdents64 from the listing the supervisor published when a host directory
// whose own view is the kernel's was opened. Each listing is checked against the kernel's (a
// raw syscall(), which the shim leaves to the supervisor) record for record (inode, offset,
// type, name; a merged directory's offsets are its snapshot's), read whole, a few records at a time, after a seek into the middle, and with a
// buffer too small for one record; and its names against the native run's, through an fd
// opened before and one opened after changes by another process and by this one.
const LISTING_PY = String.raw`
import ctypes, errno, os, struct, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.getdents64.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.getdents64.restype = ctypes.c_ssize_t
libc.syscall.restype = ctypes.c_long

def records(data):
    out, o = [], 0
    while o < len(data):
        ino, off, reclen, kind = struct.unpack_from("<QqHB", data, o)
        out.append((ino, off, kind, data[o + 19:o + reclen].split(b"\0", 1)[0].decode()))
        o += reclen
    return out

def read_all(fd, size, raw=False):
    buf, got = ctypes.create_string_buffer(size), []
    while True:
        n = libc.syscall(217, fd, buf, ctypes.c_size_t(size)) if raw else libc.getdents64(fd, buf, size)
        if n < 0:
            return "E" + errno.errorcode[ctypes.get_errno()]
        if n == 0:
            return got
        got += records(buf.raw[:n])

def show(label, fd):
    os.lseek(fd, 0, os.SEEK_SET)
    kernel = read_all(fd, 32768, raw=True)
    os.lseek(fd, 0, os.SEEK_SET)
    # offsets compared where they stay (a merged directory's name the snapshot a listing made)
    stable = read_all(fd, 32768, raw=True) == kernel
    key = (lambda rs: rs) if stable else (lambda rs: [(r[0], r[2], r[3]) for r in rs] if isinstance(rs, list) else rs)
    checks = []
    for size in (32768, 64):
        os.lseek(fd, 0, os.SEEK_SET)
        checks.append(key(read_all(fd, size)) == key(kernel))
    mid = kernel[len(kernel) // 2]
    os.lseek(fd, mid[1], os.SEEK_SET)
    checks.append(key(read_all(fd, 4096)) == key(kernel[len(kernel) // 2 + 1:]))
    os.lseek(fd, 0, os.SEEK_SET)
    checks.append(read_all(fd, 10) == "EEINVAL")
    print(label, *checks, " ".join(sorted(r[3] for r in kernel)))

def opened(path):
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)

old, deep = opened("."), opened("sub/deeper")
show("first", old)
show("again", old)
show("deeper", deep)
subprocess.run(["sh", "-c", "touch added.txt; rm hello.txt; mkdir sub/new"], check=True)
show("after another process: old fd", old)
show("after another process: new fd", opened("."))
show("sub after another process", opened("sub"))
os.rename("data.bin", "renamed.bin")
os.mkdir("made")
show("after this process: old fd", old)
show("after this process: new fd", opened("."))
show("deeper, untouched", deep)
show("through /proc/self/fd", opened(f"/proc/self/fd/{deep}"))
p = os.open(".", os.O_PATH)
print("O_PATH", read_all(p, 4096), read_all(p, 4096, raw=True))
`;

diffTest(
  "getdents64 from the published listing agrees with the kernel's and follows every change",
  {
    steps: [{ argv: ["python3", "-c", LISTING_PY] }],
    expectNative: (native) => {
      const out = native.steps[0]?.stdout ?? "";
      assert.match(out, /^first True True True True \. \.\. /m);
      assert.match(out, /^after this process: new fd True True True True .* made .* renamed\.bin/m);
      assert.match(out, /^O_PATH EEBADF EEBADF$/m);
    },
  },
);

// A walk across sibling directories (git status's lstat of each tracked file, in index order):
// once a walk is under way, a small directory is published at its first miss. Those the sandbox
// changed (a new file, a removed one, a mode, a renamed directory, one made anew) are looked up
// as they are, changed before the walk by this process and between two of its steps by another.
const SIBLINGS_PY = String.raw`
import os, stat, subprocess
mods = [f"mod{i}" for i in range(8)] + ["renamed", "fresh"]
def walk(label, during=None):
    out = []
    for m in mods:
        for f in ["a.txt", "b.txt", "c.txt", "new.txt"]:
            p = os.path.join("tree", m, f)
            try:
                st = os.lstat(p)
                out.append(f"{p}:{stat.filemode(st.st_mode)}:{st.st_size}")
            except OSError as e:
                out.append(f"{p}:E{e.errno}")
        if m == "mod2" and during:
            subprocess.run(["sh", "-c", during], check=True)
    print(label, *out)
walk("first")
walk("again", "echo x >> tree/mod5/a.txt; rm tree/mod6/b.txt; touch tree/mod7/new.txt")
os.chmod("tree/mod1/a.txt", 0o600)
os.unlink("tree/mod3/c.txt")
os.rename("tree/mod4", "tree/renamed")
os.mkdir("tree/fresh")
open("tree/fresh/new.txt", "w").close()
walk("after this process changed them")
walk("and another", "chmod 700 tree/mod0/c.txt; mv tree/mod7 tree/mod4")
`;

diffTest(
  "a walk across sibling directories sees each as the sandbox changed it",
  { steps: [{ argv: ["python3", "-c", SIBLINGS_PY] }] },
  {
    setup: (fx) => {
      for (let m = 0; m < 8; m++) {
        mkdirSync(fx.p("tree", `mod${m}`), { recursive: true });
        for (const f of ["a.txt", "b.txt", "c.txt"])
          writeFileSync(fx.p("tree", `mod${m}`, f), `mod${m}${f}`);
      }
    },
  },
);
