// The doctor's pure parts: probe results to checks, cgroup discovery, the printed report.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ProbeResult } from "../../src/core/native.js";
import { formatReport } from "../../src/cli/commands/doctor.js";
import { parseMountinfo } from "../../src/sandbox/cgroups.js";
import {
  cgroupChecks,
  kernelChecks,
  shimCheck,
  type Check,
} from "../../src/sandbox/doctor-checks.js";
import type { CgroupFs } from "../../src/sandbox/cgroups.js";
import { dirname } from "node:path";

const allGood: ProbeResult = {
  seccompUnotify: true,
  seccompErrno: 0,
  addfdSend: true,
  addfdErrno: 0,
  syncWakeup: true,
  killableRecv: true,
  pidfdOpen: true,
  pidfdGetfd: true,
  pidfdErrno: 0,
  landlockAbi: 6,
  landlockErrno: 0,
  procMemForce: true,
  procMemErrno: 0,
  helperOk: true,
  helperErrno: 0,
};

const status = (checks: Check[], id: string): string | undefined =>
  checks.find((c) => c.id === id)?.status;
const detail = (checks: Check[], id: string): string =>
  checks.find((c) => c.id === id)?.detail ?? "";

test("every kernel feature ok", () => {
  const checks = kernelChecks(allGood);
  assert.ok(checks.every((c) => c.status === "ok" && c.fix === undefined));
  assert.equal(checks.find((c) => c.id === "landlock")?.detail, "ABI 6");
});

test("levels: fail for what sandboxes need, warn for what degrades", () => {
  const checks = kernelChecks({
    ...allGood,
    seccompUnotify: false,
    seccompErrno: 1,
    syncWakeup: false,
    landlockAbi: 4,
  });
  assert.equal(status(checks, "seccomp_unotify"), "fail");
  assert.match(checks.find((c) => c.id === "seccomp_unotify")?.detail ?? "", /EPERM/);
  assert.equal(status(checks, "sync_wakeup"), "warn");
  const landlock = checks.find((c) => c.id === "landlock");
  assert.equal(landlock?.status, "warn");
  assert.match(landlock?.detail ?? "", /signals are checked by the supervisor/);
  assert.equal(status(kernelChecks({ ...allGood, landlockAbi: 0 }), "landlock"), "fail");
  assert.ok(checks.filter((c) => c.status !== "ok").every((c) => c.fix));
});

test("without a helper the kernel checks are one failure", () => {
  const checks = kernelChecks({ ...allGood, helperOk: false });
  assert.deepEqual(
    checks.map((c) => [c.id, c.status]),
    [["kernel", "fail"]],
  );
});

const mountinfo = [
  "25 1 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755",
  "26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate",
  "27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
  "28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
  "29 1 0:26 / /mnt/with\\040space rw - ext4 /dev/sda1 rw",
].join("\n");
const procCgroup =
  "12:pids:/user.slice\n5:memory:/user.slice/app\n0::/user.slice/session-1.scope\n";

test("the shim: ok on Linux 6.11+, a warning with the reason before it or without the shim", () => {
  const shim = "/opt/cvisor/native/prebuilt/linux-x64/libcvisor-shim.so";
  assert.deepEqual(
    [shimCheck(shim, "6.18.0-cloud").status, shimCheck(shim, "6.11.0").status],
    ["ok", "ok"],
  );
  for (const old of ["6.10.14-generic", "5.15.0-100-generic"]) {
    const c = shimCheck(shim, old);
    assert.equal(c.status, "warn");
    assert.match(c.detail, /needs 6\.11/);
  }
  const off = shimCheck(undefined, "6.18.0");
  assert.equal(off.status, "warn");
  assert.match(off.detail, /CVISOR_SHIM=off/);
});

test("mountinfo parsing unescapes paths", () => {
  const mounts = parseMountinfo(mountinfo);
  assert.equal(mounts.length, 5);
  assert.equal(mounts[4]?.mountPoint, "/mnt/with space");
  assert.deepEqual(mounts[2]?.superOptions, ["rw", "memory"]);
});

/** A cgroup tree as files: `writable` lists what this user may write; mkdir works in those. */
function standInFs(
  files: Record<string, string>,
  writable: string[],
): CgroupFs & { made: string[] } {
  const made: string[] = [];
  const canWrite = (p: string): boolean => writable.some((w) => p === w || p.startsWith(`${w}/`));
  return {
    made,
    read: (file) => files[file] ?? null,
    write: (file) => (canWrite(file) ? null : "EACCES"),
    mkdir: (dir) => {
      if (!canWrite(dir)) return "EACCES";
      made.push(dir);
      return null;
    },
    rmdir: () => null,
    writable: canWrite,
  };
}

test("cgroup checks on a hybrid host: v2 without controllers, v1 as far as it is writable", () => {
  const fs = standInFs({ "/sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n" }, [
    "/sys/fs/cgroup/pids/user.slice",
  ]);
  const checks = cgroupChecks(mountinfo, procCgroup, fs);
  // Each v1 controller's own cgroup is tried with a child made and removed.
  assert.deepEqual(fs.made, [`/sys/fs/cgroup/pids/user.slice/cvisor-doctor-${process.pid}`]);
  assert.equal(status(checks, "cgroup_v2"), "warn");
  assert.match(detail(checks, "cgroup_v2"), /no memory, pids or cpu controller/);
  assert.equal(status(checks, "cgroup_v1"), "warn");
  const limits = detail(checks, "limits");
  assert.equal(status(checks, "limits"), "warn");
  assert.match(
    limits,
    /--memory: the supervisor samples the tree's memory every 20 ms \(cgroup v2: the v2 hierarchy has no memory controller; v1 memory: EACCES\)/,
  );
  assert.match(limits, /--pids-limit: cgroup v1 \(\/sys\/fs\/cgroup\/pids\/user\.slice\)/);
  assert.match(limits, /--cpus: the supervisor stops the tree .*no v1 cpu controller/);
  const none = cgroupChecks("", "", fs);
  assert.deepEqual(
    none.map((c) => c.status),
    ["warn", "warn", "warn"],
  );
});

const v2Mountinfo = "30 1 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
const v2Files = (own: string): Record<string, string> => {
  const files: Record<string, string> = { [`${own}/cgroup.procs`]: "4242\n" };
  for (let dir = own; dir.startsWith("/sys/fs/cgroup/"); dir = dirname(dir)) {
    files[`${dir}/cgroup.type`] = "domain\n";
  }
  for (let dir = own; dir.startsWith("/sys/fs/cgroup"); dir = dirname(dir)) {
    files[`${dir}/cgroup.controllers`] = "cpu memory pids\n";
    files[`${dir}/cgroup.subtree_control`] = dir === own ? "" : "cpu memory pids\n";
  }
  return files;
};

test("cgroup checks on a v2 host: the nearest delegated cgroup above cvisor's own", () => {
  const user = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service";
  const own = `${user}/app.slice/run-1.scope`;
  const fs = standInFs(v2Files(own), [user]);
  const checks = cgroupChecks(
    v2Mountinfo,
    "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope\n",
    fs,
  );
  // cvisor's own cgroup holds processes: its child could not get the controllers.
  assert.deepEqual(fs.made, [`${user}/app.slice/cvisor-doctor-${process.pid}`]);
  assert.equal(status(checks, "cgroup_v2"), "ok");
  assert.equal(status(checks, "cgroup_v1"), "ok");
  assert.match(detail(checks, "cgroup_v1"), /not needed/);
  assert.equal(status(checks, "limits"), "ok");
  assert.match(
    detail(checks, "limits"),
    new RegExp(`--memory: cgroup v2 \\(${user}/app\\.slice\\)`),
  );

  // A login without a delegated subtree: nothing above is this user's.
  const session = "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope";
  const denied = cgroupChecks(
    v2Mountinfo,
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    standInFs(v2Files(session), []),
  );
  assert.equal(status(denied, "cgroup_v2"), "warn");
  assert.match(
    detail(denied, "cgroup_v2"),
    /no delegated subtree; systemd-run --user --scope -p Delegate=yes gives one/,
  );
  assert.match(
    detail(denied, "limits"),
    /--pids-limit: the supervisor counts the tree's tasks at each fork \(cgroup v2: no cgroup at or above/,
  );
});

test("the report: marks, fix lines, summary", () => {
  const ok: Check = { id: "a", name: "A", status: "ok", detail: "fine" };
  const warn: Check = { id: "b", name: "B", status: "warn", detail: "meh", fix: "do b" };
  const fail: Check = { id: "c", name: "C", status: "fail", detail: "bad", fix: "do c" };
  assert.equal(formatReport([ok], false), "[✓] A — fine\n\nNo issues found.\n");
  assert.equal(
    formatReport([ok, warn], false),
    "[✓] A — fine\n[!] B — meh\n  fix: do b\n\ndoctor found no problem; sandboxes run, with 1 warning(s).\n",
  );
  const failed = formatReport([warn, fail], false);
  assert.match(failed, /\[✗\] C — bad\n {2}fix: do c\n/);
  assert.match(failed, /doctor found 1 problem\(s\); sandboxes cannot run here\.\n$/);
  const esc = String.fromCharCode(27);
  assert.ok(formatReport([fail], true).includes(`[${esc}[31m✗${esc}[0m]`));
  assert.ok(!formatReport([fail], false).includes(esc));
});
