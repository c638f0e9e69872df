// Differential tests of the copy-on-write overlay at the system-call level: the overlay probe
// (test/fixtures/overlay-probe.c) makes the calls and prints results and errno names, natively
// on a copy of the fixture vs in a named sandbox over the original
// (test/helpers/differential.ts); the trees are compared afterwards too.
//
// Deliberate differences, masked rather than compared:
//   - mknod of a character device: natively as root it succeeds (CAP_MKNOD); a sandbox's root
//     has no CAP_MKNOD, so it fails with EPERM there (unprivileged, both fail with EPERM). The
//     probe removes the node it made so the trees still compare; only that line is masked.
//   - an fd the guest opened on a host directory keeps showing the host directory's mode after
//     a change through it, and one of a host file its link count after the file is unlinked
//     (a file's fds follow its copy-up, docs/ARCHITECTURE.md): fstat of such an fd is masked.
//   - linkat(AT_EMPTY_PATH) of an O_TMPFILE needs CAP_DAC_READ_SEARCH, which a sandbox's root
//     lacks: the probe links through /proc/self/fd/N instead (AT_SYMLINK_FOLLOW), which needs
//     no capability, so that part is compared.

import assert from "node:assert/strict";
import { addManyFiles, diffTest, probe, sh, type Step } from "../../helpers/differential.js";

/** One probe op per step (so one failing op does not hide the others' results). */
function probes(...ops: (readonly string[])[]): { steps: Step[] } {
  return { steps: ops.map((op) => probe(op)) };
}

diffTest(
  "probe: O_CREAT|O_EXCL on a new name, a host file and a dangling host symlink",
  probes(["excl", "new.txt"], ["excl", "hello.txt"], ["excl", "dangling"]),
);

diffTest(
  "probe: O_TRUNC of a host file",
  probes(["trunc", "hello.txt"], ["trunc", "link-to-hello"]),
);

diffTest(
  "probe: O_APPEND to a host file ignores the offset",
  probes(["append", "sub/nested.txt", "tail\n"], ["append", "data.bin", "more"]),
);

diffTest(
  "probe: O_DIRECTORY on a file (ENOTDIR), on a dir, with O_CREAT",
  probes(["odirectory", "hello.txt", "sub"], ["odirectory", "link-to-hello", "dir-link"]),
);

// O_PATH opens of symlinks compared too: the probe is dynamically linked, and the shim receives
// the real O_PATH fd the supervisor cannot inject (native/src/common/opath_proto.h).
diffTest("probe: O_NOFOLLOW on host symlinks (ELOOP; O_PATH opens them)", {
  steps: [probe(["onofollow", "link-to-hello"]), probe(["onofollow", "dangling"])],
});

diffTest("probe: O_NOFOLLOW on a new symlink (O_PATH opens it)", {
  steps: [sh('ln -s hello.txt nl && "$OVERLAY_PROBE" onofollow nl')],
});

diffTest("probe: O_TMPFILE, then linkat through /proc/self/fd", {
  steps: [
    probe(["tmpfile", "sub", "from-tmpfile"]),
    sh('mkdir fresh && "$OVERLAY_PROBE" tmpfile fresh t'),
  ],
});

diffTest(
  "probe: telldir/seekdir round trip on host, merged and new directories",
  {
    steps: [
      probe(["seekdir", "sub"]),
      sh('rm many/f00[0-4]-*; touch many/new-1 many/new-2; "$OVERLAY_PROBE" seekdir many'),
      sh('mkdir nd; touch nd/a nd/b nd/c; "$OVERLAY_PROBE" seekdir nd'),
    ],
  },
  { setup: addManyFiles },
);

diffTest(
  "probe: readdir continued in a forked child (shared directory offset)",
  {
    steps: [
      probe(["fork-readdir", "many"]),
      sh('rm many/f01[0-9]-*; touch many/added-1 many/added-2; "$OVERLAY_PROBE" fork-readdir many'),
    ],
    expectNative: (r) => {
      for (const s of r.steps) assert.match(s.stdout, /parent\+child == listing: yes/);
    },
  },
  { setup: addManyFiles },
);

diffTest("probe: unlink a new file while open, then read the open fd", {
  steps: [sh('echo new > n.txt && "$OVERLAY_PROBE" unlink-open n.txt')],
});

diffTest("probe: unlink a host file while open (the fd's link count masked)", {
  steps: [probe(["unlink-open", "hello.txt"])],
  normalize: (text: string) =>
    text.replace(/^fstat-nlink: .*$/m, "fstat-nlink: (masked: a host fd)"),
});

diffTest(
  "probe: renameat2 RENAME_NOREPLACE (EEXIST, then a new name)",
  probes(
    ["noreplace", "hello.txt", "data.bin", "moved.txt"],
    ["noreplace", "sub", "empty-dir", "sub2"],
  ),
);

diffTest(
  "probe: renameat2 RENAME_EXCHANGE of host files, a file and a dir",
  probes(["exchange", "hello.txt", "readonly.txt"], ["exchange", "data.bin", "sub"]),
);

diffTest(
  "probe: statx of a new file and of a host symlink",
  probes(["statx", "new.txt", "link-to-hello"]),
);

diffTest(
  "probe: faccessat W_OK/R_OK/X_OK on host files and dirs",
  probes(["access", "hello.txt", "readonly.txt", "exec.sh", "sub", "link-to-hello", "dangling"]),
);

diffTest("probe: utimensat with explicit times and UTIME_OMIT (mtimes compared)", {
  steps: [probe(["utimens", "hello.txt", "link-to-hello"]), probe(["utimens", "sub"])],
  mtimes: ["hello.txt", "link-to-hello", "sub"],
});

diffTest(
  "probe: truncate() and ftruncate() of host files, shorter and longer",
  probes(
    ["truncate", "hello.txt", "5"],
    ["ftruncate", "data.bin", "10000"],
    ["truncate", "sub/nested.txt", "0"],
  ),
);

diffTest("probe: fchmod through a host file's read-only fd (fstat of that fd masked)", {
  ...probes(["fchmod", "hello.txt", "600"], ["fchmod", "sub", "700"]),
  normalize: (text: string) => text.replace(/^fstat-mode: .*$/m, "fstat-mode: (masked: a host fd)"),
});

diffTest(
  "probe: fsetxattr user.x on a host file's fd, then getxattr by path",
  probes(
    ["fsetxattr", "hello.txt", "user.x", "value-x"],
    ["fsetxattr", "xattr.txt", "user.y", "value-y"],
  ),
);

diffTest(
  "probe: link and linkat of a host file, write through one name",
  probes(["link", "hello.txt", "hl1", "sub/hl2"]),
);

diffTest(
  "probe: symlinkat and readlinkat, to a host file and to nothing",
  probes(
    ["symlinkat", "hello.txt", "sl"],
    ["symlinkat", "sub/deeper", "sl2"],
    ["symlinkat", "nowhere", "sl3"],
  ),
);

diffTest("probe: mknod of a regular file, a FIFO and a char device (device result masked)", {
  steps: [probe(["mknod", "node"])],
  normalize: (text: string) =>
    text.replace(/^mknod-chr: .*$/m, "mknod-chr: (masked: CAP_MKNOD differs)"),
});

diffTest("probe: getcwd after rmdir of the cwd", probes(["getcwd-rmdir", "gone"]));

diffTest(
  "probe: a read-only fd reopened O_RDWR via /proc/self/fd: fchmod, fsetxattr, ftruncate on it",
  probes(
    ["reopen-meta", "hello.txt", "600", "5"],
    ["reopen-meta", "xattr.txt", "640", "100"],
    ["reopen-meta", "sub/nested.txt", "755", "0"],
  ),
);

diffTest("probe: inotify watch on a new file, written and read through the overlay", {
  steps: [probe(["inotify", "new.txt"]), sh('echo x > n2 && "$OVERLAY_PROBE" inotify n2 new.txt')],
});

diffTest("probe: inotify watch on a host file, written and read through the overlay", {
  steps: [probe(["inotify", "hello.txt"]), probe(["inotify", "sub/nested.txt", "link-to-hello"])],
});

diffTest("probe: statfs of host files and dirs, new ones, symlinks and missing names (OK/errno)", {
  steps: [
    probe(["statfs", "hello.txt", "sub", "link-to-hello", "dir-link", "dangling", "missing", "."]),
    sh(
      'echo n > n.txt && mkdir nd && ln -s n.txt nl && echo more >> hello.txt && "$OVERLAY_PROBE" statfs n.txt nd nd/. nl hello.txt sub/../nd nd/missing',
    ),
  ],
});

diffTest("probe: getxattr/listxattr/removexattr (user.*) on a host file, a new file, symlinks", {
  steps: [
    probe(["xattrs", "xattr.txt", "user.cvisor", "link-to-hello"]),
    probe(["xattrs", "hello.txt", "user.cvisor"]),
    sh('echo n > n.txt && ln -s n.txt nl && "$OVERLAY_PROBE" xattrs n.txt user.other nl'),
    // After the steps above, xattr.txt is a copy in the upper: the same calls again.
    probe(["xattrs", "xattr.txt", "user.other", "dir-link"]),
  ],
});

diffTest("probe: faccessat2 with AT_EACCESS and AT_SYMLINK_NOFOLLOW", {
  steps: [
    probe([
      "access2",
      "hello.txt",
      "readonly.txt",
      "exec.sh",
      "noexec.sh",
      "sub",
      "link-to-hello",
      "dangling",
      "dir-link",
      "missing",
    ]),
    sh(
      'touch n.txt && chmod 600 n.txt && ln -s n.txt nl && ln -s nowhere nd && mkdir ndir && chmod 700 ndir && "$OVERLAY_PROBE" access2 n.txt nl nd ndir',
    ),
  ],
});

diffTest(
  "probe: faccessat2 with an unknown flag or a bad mode fails with EINVAL",
  probes(["access2-invalid", "hello.txt", "sub", "dangling", "missing"]),
);
