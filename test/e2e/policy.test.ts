// The syscall policy seen from a real guest (the try-syscall prober): what is denied with
// EPERM, what is ENOSYS, terminal injection, foreign syscall ABIs (killed with SIGSYS), and
// the controls that must keep working (fork, prctl).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { probeArgs, prober } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { expectProbes, type ProbeCase } from "../helpers/probe.js";
import { cliPath, cvisor, runProcess, shellQuote, show, which } from "../helpers/repo.js";

const EPERM_CASES: ProbeCase[] = [
  // ptrace and process_vm_*
  { op: ["ptrace-traceme"], expect: "EPERM" },
  { op: ["ptrace-attach"], expect: "EPERM" },
  { op: ["ptrace-attach-child"], expect: "EPERM" },
  { op: ["process-vm-readv"], expect: "EPERM" },
  { op: ["process-vm-readv-child"], expect: "EPERM" },
  { op: ["process-vm-writev-child"], expect: "EPERM" },
  // mount and namespaces
  { op: ["mount"], expect: "EPERM" },
  { op: ["umount2"], expect: "EPERM" },
  { op: ["unshare-user"], expect: "EPERM" },
  { op: ["unshare-ns"], expect: "EPERM" },
  { op: ["unshare-net"], expect: "EPERM" },
  { op: ["unshare-pid"], expect: "EPERM" },
  { op: ["unshare-uts"], expect: "EPERM" },
  { op: ["setns"], expect: "EPERM" },
  { op: ["clone-newns"], expect: "EPERM" },
  { op: ["clone-newpid"], expect: "EPERM" },
  { op: ["clone-newuser"], expect: "EPERM" },
  { op: ["clone-newnet"], expect: "EPERM" },
  // kernel attack surface
  { op: ["bpf"], expect: "EPERM" },
  { op: ["perf-event-open"], expect: "EPERM" },
  { op: ["userfaultfd"], expect: "EPERM" },
  { op: ["keyctl"], expect: "EPERM" },
  { op: ["add-key"], expect: "EPERM" },
  { op: ["request-key"], expect: "EPERM" },
  { op: ["open-by-handle-at"], expect: "EPERM" },
  { op: ["kexec-load"], expect: "EPERM" },
  { op: ["kexec-file-load"], expect: "EPERM" },
  { op: ["init-module"], expect: "EPERM" },
  { op: ["finit-module"], expect: "EPERM" },
  { op: ["delete-module"], expect: "EPERM" },
  // terminal injection (on whatever fd 0 is here; the real-terminal case is below)
  { op: ["tiocsti"], expect: "EPERM" },
  { op: ["tioclinux"], expect: "EPERM" },
];

gtest(
  "ptrace, process_vm_*, mount, namespaces, bpf, perf, uffd, keyctl, handles, kexec, modules, TIOCSTI/TIOCLINUX: EPERM",
  async () => {
    await expectProbes(EPERM_CASES, "denied with EPERM");
  },
);

gtest("SysV IPC and POSIX message queues (host-wide objects): ENOSYS", async () => {
  await expectProbes(
    [
      { op: ["shmget"], expect: "ENOSYS" },
      { op: ["semget"], expect: "ENOSYS" },
      { op: ["mq-open"], expect: "ENOSYS" },
    ],
    "host-wide IPC",
  );
});

gtest("io_uring_setup and clone3: ENOSYS; plain fork and clone still work", async () => {
  await expectProbes(
    [
      { op: ["io-uring-setup"], expect: "ENOSYS" },
      { op: ["clone3"], expect: "ENOSYS" },
      { op: ["clone3-newuser"], expect: "ENOSYS" },
      { op: ["clone-plain"], expect: "OK" },
    ],
    "ENOSYS and controls",
  );
  // A real program that forks and spawns threads still works (libc falls back from clone3).
  const r = await cvisor(
    [],
    ["sh", "-c", "echo $(echo sub) | cat; (sleep 0.1 & wait) && echo forked"],
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "sub\nforked\n", show(r));
});

gtest("prctl(PR_SET_DUMPABLE, 0) returns success", async () => {
  await expectProbes([{ op: ["prctl-dumpable"], expect: "OK" }], "prctl");
});

gtest("an x32 syscall kills the guest with SIGSYS (exit 159)", async () => {
  const r = await cvisor(["--json"], [prober(), "x32"]);
  assert.equal(r.code, 128 + 31, `want SIGSYS (159)\n${show(r)}`);
  assert.equal(r.out, "", `the call must not return\n${show(r)}`);
  assert.match(r.err, /"signal":"SIGSYS"/, show(r));
});

gtest("an i386 (int 0x80) syscall kills the guest with SIGSYS (exit 159)", async () => {
  const r = await cvisor([], [prober(), "i386"]);
  assert.equal(r.code, 128 + 31, `want SIGSYS (159)\n${show(r)}`);
  assert.equal(r.out, "", `the call must not return\n${show(r)}`);
});

gtest(
  "TIOCSTI on a real controlling terminal: EPERM in the sandbox (not outside)",
  async () => {
    const script = which("script") ?? "script";
    const probe = shellQuote(prober());
    // Outside the sandbox first: shows what the kernel alone would answer here.
    const native = await runProcess(script, ["-qec", `${probe} isatty ";" tiocsti`, "/dev/null"]);
    const nativeLines = native.out.split(/\r?\n/).filter((l) => l.trim() !== "");
    const inside = await runProcess(script, [
      "-qec",
      `${shellQuote(process.execPath)} ${shellQuote(cliPath)} -- ${probe} isatty ";" tiocsti ";" tioclinux`,
      "/dev/null",
    ]);
    const lines = inside.out.split(/\r?\n/).filter((l) => l.trim() !== "");
    console.log(
      `# natively on the same kind of terminal: isatty, TIOCSTI = ${nativeLines.join(", ")}`,
    );
    assert.equal(inside.code, 0, show(inside));
    assert.deepEqual(
      lines,
      ["OK", "EPERM", "EPERM"],
      `isatty, TIOCSTI, TIOCLINUX\n${show(inside)}\nnative: ${nativeLines.join(",")}`,
    );
  },
  { skip: which("script") ? false : "util-linux `script` is not installed" },
);

gtest(
  "outside the sandbox the same probes succeed (they can tell success from denial)",
  async () => {
    // Only harmless probes run natively.
    const ops = [["clone-plain"], ["socket-inet"], ["prctl-dumpable"], ["unix-abstract"]];
    const out = execFileSync(prober(), probeArgs(ops), {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    assert.deepEqual(out.trim().split("\n"), ["OK", "OK", "OK", "OK"]);
    // Informational: what this kernel answers for calls the sandbox denies.
    const info = execFileSync(
      prober(),
      probeArgs([
        ["ptrace-attach-child"],
        ["process-vm-readv-child"],
        ["io-uring-setup"],
        ["clone3"],
      ]),
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
    );
    console.log(
      `# natively: ptrace-attach-child, process-vm-readv-child, io_uring_setup, clone3 = ${info.trim().split("\n").join(", ")}`,
    );
  },
);
