// Limits as users write them (Docker's units), and the cgroup directories a run's limits go to.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import {
  openCgroups,
  parseMountinfo,
  parseProcCgroup,
  v1Dir,
  type CgroupFs,
} from "../../src/sandbox/cgroups.js";
import {
  memoryText,
  parseCpus,
  parseDisk,
  parseLimits,
  parseMemory,
  parsePids,
} from "../../src/sandbox/limits.js";

test("--memory takes bytes or a size with b, k, m, g (binary), at least 6m", () => {
  assert.equal(parseMemory("256m"), 256 * 1024 ** 2);
  assert.equal(parseMemory("1G"), 1024 ** 3);
  assert.equal(parseMemory("1.5g"), 1.5 * 1024 ** 3);
  assert.equal(parseMemory("8192k"), 8 * 1024 ** 2);
  assert.equal(parseMemory("64MiB"), 64 * 1024 ** 2);
  assert.equal(parseMemory(7_000_000), 7_000_000);
  for (const bad of ["", "m", "-1m", "5m", "12q", "1e9", Number.NaN]) {
    assert.throws(() => parseMemory(bad), UsageError, String(bad));
  }
});

test("--disk takes a size of at least 1m", () => {
  assert.equal(parseDisk("2g"), 2 * 1024 ** 3);
  assert.equal(parseDisk("1t"), 1024 ** 4);
  assert.equal(parseDisk("1m"), 1024 ** 2);
  for (const bad of ["512k", "0", "big", ""]) assert.throws(() => parseDisk(bad), /at least 1m/);
});

test("--pids-limit takes a whole number from 1; --cpus cores from 0.01 to the machine's", () => {
  assert.equal(parsePids("100"), 100);
  assert.equal(parsePids(1), 1);
  for (const bad of ["0", "-3", "1.5", "ten", 0]) assert.throws(() => parsePids(bad), UsageError);
  assert.equal(parseCpus("0.5", 2), 0.5);
  assert.equal(parseCpus(".25", 2), 0.25);
  assert.equal(parseCpus(2, 2), 2);
  for (const bad of ["0", "0.001", "3", "half", -1]) {
    assert.throws(() => parseCpus(bad, 2), /use a number of cores from 0\.01 to 2/);
  }
});

test("a run's limits replace its sandbox's, one by one; none is undefined", () => {
  assert.equal(parseLimits(undefined, undefined), undefined);
  assert.equal(parseLimits({}, {}), undefined);
  assert.deepEqual(parseLimits({ memory: "1g", pids: 10, disk: "1g" }, { pids: 20, cpus: 1 }), {
    memoryBytes: 1024 ** 3,
    pids: 20,
    cpus: 1,
    diskBytes: 1024 ** 3,
  });
});

test("a limit is said in the largest whole unit", () => {
  assert.equal(memoryText(256 * 1024 ** 2), "256 MiB");
  assert.equal(memoryText(1024 ** 3), "1 GiB");
  assert.equal(memoryText(1.5 * 1024 ** 3), "1536 MiB");
  assert.equal(memoryText(7_000_000), "7000000 bytes");
});

test("each controller's directory is this process's own cgroup in its v1 mount", () => {
  const mounts = parseMountinfo(
    [
      "26 25 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
      "27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
      "28 25 0:25 /ci /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
    ].join("\n"),
  );
  const paths = parseProcCgroup("4:memory:/app/x\n3:cpu,cpuacct:/app\n2:pids:/ci/job\n");
  assert.equal(v1Dir("memory", mounts, paths), "/sys/fs/cgroup/memory/app/x");
  assert.equal(v1Dir("cpu", mounts, paths), "/sys/fs/cgroup/cpu,cpuacct/app");
  // The mount's root is a subtree: the path is taken relative to it.
  assert.equal(v1Dir("pids", mounts, paths), "/sys/fs/cgroup/pids/job");
  assert.equal(v1Dir("memory", [], paths), null);
});

test("a hybrid host: v2 holds the controllers it has, v1 the others, each limit written once", () => {
  const v2 = "/sys/fs/cgroup/unified";
  const files: Record<string, string> = {
    [`${v2}/cgroup.controllers`]: "pids\n",
    [`${v2}/job/cgroup.controllers`]: "pids\n",
    [`${v2}/job/cgroup.subtree_control`]: "pids\n",
    [`${v2}/job/cgroup.type`]: "domain\n",
  };
  const written: string[] = [];
  // As cgroupfs does: a controller's files exist only where it is on (pids in v2, memory in v1).
  const fs: CgroupFs = {
    read: (file) => files[file] ?? null,
    write: (file) => {
      const base = file.slice(file.lastIndexOf("/") + 1);
      const inV2 = file.startsWith(`${v2}/`);
      if (base.startsWith(inV2 ? "memory." : "pids.")) return "ENOENT";
      written.push(file);
      return null;
    },
    mkdir: () => null,
    rmdir: () => null,
    writable: () => true,
  };
  const procSelf = {
    mountinfo: [
      `26 25 0:23 / ${v2} rw - cgroup2 cgroup2 rw`,
      "27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
    ].join("\n"),
    cgroup: "5:memory:/job\n0::/job/shell.scope\n",
  };
  const made = openCgroups({ memoryBytes: 64 << 20, pids: 32 }, procSelf, fs);
  const name = `cvisor-${process.pid}-`;
  assert.equal(made.unheld, undefined);
  assert.deepEqual(
    made.procs.map((p) => p.replace(/cvisor-\d+-\d+/, "RUN")),
    [`${v2}/job/RUN/cgroup.procs`, "/sys/fs/cgroup/memory/job/RUN/cgroup.procs"],
  );
  assert.ok(made.procs.every((p) => p.includes(name)));
  const report = made.report();
  assert.equal(report.pids?.mechanism, "cgroup-v2");
  assert.equal(report.memory?.mechanism, "cgroup-v1");
  assert.deepEqual(
    written.map((w) => w.replace(/cvisor-\d+-\d+/, "RUN")),
    [`${v2}/job/RUN/pids.max`, "/sys/fs/cgroup/memory/job/RUN/memory.limit_in_bytes"],
  );
});
