// The doctor's pure parts: probe results to checks, cgroup discovery, the printed report.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ProbeResult } from "../../src/core/native.js";
import { formatReport } from "../../src/cli/commands/doctor.js";
import { parseMountinfo } from "../../src/sandbox/cgroups.js";
import { cgroupChecks, kernelChecks, type Check } from "../../src/sandbox/doctor-checks.js";

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

test("mountinfo parsing unescapes paths", () => {
  const mounts = parseMountinfo(mountinfo);
  assert.equal(mounts.length, 5);
  assert.equal(mounts[4]?.mountPoint, "/mnt/with space");
  assert.deepEqual(mounts[2]?.superOptions, ["rw", "memory"]);
});

test("cgroup checks try this process's own cgroup directories", () => {
  const tried: string[] = [];
  const checks = cgroupChecks(mountinfo, procCgroup, (dir) => {
    tried.push(dir);
    return dir.includes("memory") ? "EACCES" : null;
  });
  assert.deepEqual(tried, [
    "/sys/fs/cgroup/unified/user.slice/session-1.scope",
    "/sys/fs/cgroup/memory/user.slice/app",
    "/sys/fs/cgroup/pids/user.slice",
  ]);
  assert.equal(status(checks, "cgroup_v2"), "ok");
  // v1 is what cvisor enforces limits with: a memory controller it cannot write is a warning,
  // and the limits line says which limit is refused and why.
  assert.equal(status(checks, "cgroup_v1"), "warn");
  const limits = checks.find((c) => c.id === "limits");
  assert.equal(limits?.status, "warn");
  assert.match(
    limits?.detail ?? "",
    /--memory: the supervisor samples the tree's memory every 20 ms \(v1 memory: EACCES; cgroup v2: not used yet\)/,
  );
  assert.match(
    limits?.detail ?? "",
    /--pids-limit: cgroup v1 \(\/sys\/fs\/cgroup\/pids\/user\.slice\)/,
  );
  assert.match(
    limits?.detail ?? "",
    /--cpus: the supervisor stops the tree while it is ahead of its share \(no v1 cpu controller/,
  );
  const denied = cgroupChecks(mountinfo, procCgroup, () => "EACCES");
  assert.equal(status(denied, "cgroup_v2"), "warn");
  assert.equal(status(denied, "cgroup_v1"), "warn");
  const none = cgroupChecks("", "", () => null);
  assert.deepEqual(
    none.map((c) => c.status),
    ["warn", "warn", "warn"],
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
