// cgroup v2, which this machine cannot give (it binds every controller to v1): the limits suite
// (test/e2e/limits.test.ts) runs in a VM on a v2 hierarchy laid out as systemd lays it out, as
// root and as an unprivileged user from its delegated user@UID.service, and must find cgroup v2
// holding every limit; doctor then says, for a user with and without a delegated subtree, what
// holds each limit and why. The VM: Debian's kernel under qemu (software emulation, no KVM
// needed), this machine's / shared read-only over 9p, so it cannot change anything here
// (make-vm.sh, init.sh, inside.sh). `node scripts/test.mjs --only vm` runs it (CI does, as root).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { repoRoot, runProcess, show, tempRoot, which } from "../helpers/repo.js";

/** The unprivileged user (CI's own); the VM sees this machine's users. */
const USER = process.env.CVISOR_VM_USER ?? "cvisor-ci";
const QEMU = "qemu-system-x86_64";

const userExists = spawnSync("id", ["-u", USER]).status === 0;
const missing = [QEMU, "busybox", "cpio", "xz", "dpkg-deb", "apt-get"].filter((t) => !which(t));
const skip =
  process.getuid?.() !== 0
    ? "needs root (the VM's users are this machine's, and the user's files must be readable)"
    : missing.length > 0
      ? `missing ${missing.join(", ")} (apt-get install qemu-system-x86 busybox-static cpio xz-utils)`
      : !userExists
        ? `no user ${USER} (CI makes it; CVISOR_VM_USER names another)`
        : false;

const work = skip ? "" : mkdtempSync(join(tempRoot(), "cvisor-vm-"));
after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** The console lines the VM wrote with a prefix: `VMRESULT root 0` → ["root 0"]. */
function marked(log: string, prefix: string): string[] {
  return log
    .split(/\r?\n/)
    .filter((l) => l.startsWith(`${prefix} `))
    .map((l) => l.slice(prefix.length + 1));
}

test(
  "cgroup v2 (in a VM): every limit held by a v2 cgroup, as root and as a delegated user",
  { skip, timeout: 30 * 60_000 },
  async () => {
    // The kernel package is kept between runs, as a registry cache would be.
    const cache = process.env.CVISOR_VM_CACHE ?? "/var/cache/cvisor-ci/vm";
    const made = await runProcess("bash", [join(repoRoot, "test/vm/make-vm.sh"), cache, work], {
      timeoutMs: 10 * 60_000,
    });
    assert.equal(made.code, 0, show(made));
    const append = [
      "console=ttyS0",
      "rdinit=/init",
      "quiet",
      "panic=-1",
      `cvisor.repo=${repoRoot}`,
      `cvisor.node=${dirname(process.execPath)}`,
      `cvisor.user=${USER}`,
    ].join(" ");
    const vm = await runProcess(
      QEMU,
      [
        ...["-accel", "tcg,thread=multi", "-smp", "2", "-m", "4096"],
        ...["-nographic", "-no-reboot", "-nic", "none"],
        ...["-kernel", join(work, "vmlinuz"), "-initrd", join(work, "initrd.gz")],
        "-virtfs",
        "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        ...["-append", append],
      ],
      { timeoutMs: 25 * 60_000 },
    );
    const log = vm.out;
    const tail = `--- the VM's console (end) ---\n${log.split("\n").slice(-80).join("\n")}`;
    assert.match(log, /^VMEND\r?$/m, tail);
    assert.deepEqual(marked(log, "VMRESULT"), ["root 0", "user 0"], tail);
    const doctor = new Map(
      marked(log, "VMDOCTOR").map((l) => [l.slice(0, l.indexOf(" ")), l.slice(l.indexOf(" ") + 1)]),
    );
    const delegated = doctor.get("user-delegated") ?? "";
    for (const flag of ["--memory", "--pids-limit", "--cpus"]) {
      assert.match(
        delegated,
        new RegExp(`${flag}: cgroup v2 \\(/sys/fs/cgroup/user\\.slice/`),
        tail,
      );
    }
    // Without a delegated subtree the supervisor holds them, and doctor says how to get one.
    const plain = doctor.get("user-undelegated") ?? "";
    assert.match(plain, /--memory: the supervisor samples/, tail);
    assert.match(plain, /no delegated subtree; systemd-run --user --scope -p Delegate=yes/, tail);
  },
);
