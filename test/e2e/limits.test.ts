// --memory, --pids-limit and --cpus (and the library's limits) hold the whole guest tree: by the
// kernel's cgroups where this user can make them (root here), else by the supervisor itself (CI's
// unprivileged run). The report says what enforced each and how close the guest came, a memory
// limit ends the run with 137 and one line, and no cgroup or process is left after a run, a
// timeout, or a kill -9 of cvisor.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statfsSync } from "node:fs";
import { dirname, join } from "node:path";
import { Sandbox } from "../../src/index.js";
import {
  openCgroups,
  parseMountinfo,
  parseProcCgroup,
  v1Dir,
  v2Home,
} from "../../src/sandbox/cgroups.js";
import { gtest } from "../helpers/guard.js";
import { storeHome } from "../helpers/store.js";
import {
  cliPath,
  cvisor,
  show,
  sleep,
  uniqueToken,
  processesWith,
  waitFor,
} from "../helpers/repo.js";

const PY = "/usr/bin/python3"; // not a shim that forks on its way (pyenv)

/** What holds every limit for this user here: "cgroup-v2", "cgroup-v1" (root on this machine),
 * or "supervisor" (a limit no cgroup of this user's can hold). */
function heldBy(): string {
  const made = openCgroups({ memoryBytes: 64 << 20, pids: 64, cpus: 1 });
  const report = made.report();
  made.remove();
  return made.unheld === undefined ? (report.memory?.mechanism ?? "") : "supervisor";
}

/** The run cgroups (cvisor-*) under this process's memory, pids and cpu cgroups, and in the v2
 * hierarchy under its own cgroup and every one above it (where v2's go). */
function runCgroups(): string[] {
  const mounts = parseMountinfo(readFileSync("/proc/self/mountinfo", "utf8"));
  const paths = parseProcCgroup(readFileSync("/proc/self/cgroup", "utf8"));
  const dirs = new Set<string>();
  for (const c of ["memory", "pids", "cpu"] as const) {
    const dir = v1Dir(c, mounts, paths);
    if (dir !== null) dirs.add(dir);
  }
  const home = v2Home(mounts, paths);
  for (let dir = home?.own; dir?.startsWith(home?.root ?? "/"); dir = dirname(dir)) {
    dirs.add(dir);
    if (dir === home?.root) break;
  }
  const out: string[] = [];
  for (const dir of dirs) {
    if (!existsSync(dir)) continue;
    out.push(
      ...readdirSync(dir)
        .filter((n) => n.startsWith("cvisor-"))
        .map((n) => join(dir, n)),
    );
  }
  return out;
}

/** What holds the limits for this user here. */
const mechanism = heldBy();
const cgroups = mechanism.startsWith("cgroup-");

gtest(
  "limits are held here by what CVISOR_EXPECT_LIMITS names (the cgroup v2 VM run sets it)",
  async () => {
    assert.equal(mechanism, process.env.CVISOR_EXPECT_LIMITS);
  },
  process.env.CVISOR_EXPECT_LIMITS ? {} : { skip: "CVISOR_EXPECT_LIMITS is not set" },
);

gtest(
  "--memory 64m: a guest allocating 1 GiB ends with 137 and one line; the report says memory",
  async () => {
    const before = runCgroups();
    const r = await cvisor(
      ["--memory", "64m", "--json"],
      [PY, "-c", "b = bytearray(1 << 30); print('alive')"],
    );
    assert.equal(r.code, 137, show(r));
    assert.equal(r.out, "", show(r));
    const lines = r.err.trim().split("\n");
    assert.equal(lines[0], "cvisor: memory limit 64 MiB reached", show(r));
    const report = JSON.parse(lines.at(-1) ?? "{}") as {
      limitHit?: string;
      limits?: { memory?: { limit: number; mechanism: string; peak: number } };
    };
    assert.equal(report.limitHit, "memory");
    const memory = report.limits?.memory;
    assert.equal(memory?.limit, 64 << 20);
    assert.equal(memory.mechanism, mechanism);
    // The cgroup stops at the limit; the supervisor's samples see it past it, well short of 1 GiB.
    if (cgroups) assert.equal(memory.peak, 64 << 20);
    else assert.ok(memory.peak > 64 << 20 && memory.peak < 1 << 30, String(memory.peak));
    assert.deepEqual(runCgroups(), before, "the run's cgroup is removed");
  },
);

gtest(
  "--pids-limit 32: a guest forking 200 sleepers gets no more than 32 processes at once",
  async () => {
    const marker = uniqueToken("pids");
    // Each child sleeps; a fork the limit refuses fails with EAGAIN, which the guest counts.
    const py = `import os, time
ok = refused = 0
for i in range(200):
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    ok += 1
print(ok, refused)`;
    const r = await new Sandbox({ limits: { pids: 32 } }).run([PY, "-c", py, marker]);
    const [ok, refused] = r.stdout.trim().split(" ").map(Number);
    assert.equal(r.exitCode, 0, r.stderr);
    // The sandbox's init and the guest itself are two of the 32.
    assert.equal(ok, 30, r.stdout);
    assert.equal(refused, 170);
    assert.equal(r.limitHit, "pids");
    assert.equal(r.limits?.pids?.mechanism, mechanism);
    assert.equal(r.limits?.pids?.peak, 32);
    assert.deepEqual(processesWith(marker), [], "nothing of the tree is left");
  },
);

gtest(
  "--pids-limit 32: a tree of processes that all fork at once never has more than 32",
  async () => {
    const marker = uniqueToken("bomb");
    // A bounded bomb (at most 511 processes even with no limit): every process forks two that
    // fork in turn, all at once, and each stays alive a while.
    const py = `import os, time
def grow(depth):
    for _ in range(2):
        if depth == 0:
            return
        try:
            pid = os.fork()
        except BlockingIOError:
            continue
        if pid == 0:
            grow(depth - 1)
            time.sleep(1.5)
            os._exit(0)
grow(8)
time.sleep(1.5)`;
    const run = new Sandbox({ limits: { pids: 32 } }).run([PY, "-c", py, marker]);
    let most = 0;
    let done = false;
    void run.finally(() => (done = true));
    while (!done) {
      most = Math.max(most, processesWith(marker).length);
      await sleep(5);
    }
    const r = await run;
    assert.equal(r.exitCode, 0, r.stderr);
    // The sandbox's init is one of the 32 (its argv holds the command, marker included).
    assert.ok(most > 10 && most <= 32, `at most ${most} processes at once`);
    assert.ok((r.limits?.pids?.peak ?? 99) <= 32, JSON.stringify(r.limits));
    assert.equal(r.limitHit, "pids");
    assert.deepEqual(processesWith(marker), []);
  },
);

gtest("--pids-limit: a fork the filter refuses stays refused while forks are counted", async () => {
  // clone(CLONE_NEWUSER | SIGCHLD), raw: the filter's clone row refuses new namespaces. Under the
  // supervisor's pids limit every clone is notified to be counted; the row must still apply.
  const py = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)
if r == 0:
    os._exit(0)
if r > 0:
    os.waitpid(r, 0)
    print("cloned into a new user namespace")
else:
    print("refused", ctypes.get_errno())`;
  const plain = await new Sandbox().run([PY, "-c", py]);
  assert.equal(plain.stdout, "refused 1\n", plain.stderr);
  const limited = await new Sandbox({ limits: { pids: 50 } }).run([PY, "-c", py]);
  assert.equal(limited.stdout, "refused 1\n", limited.stderr);
  assert.equal(limited.limits?.pids?.mechanism, mechanism);
});

gtest("--cpus 0.25: a busy loop for 2 s gets about a quarter of a core", async () => {
  const loop = ["timeout", "2", "sh", "-c", "while :; do :; done"];
  const limited = await new Sandbox({ limits: { cpus: 0.25 } }).run(loop);
  const free = await new Sandbox().run(loop);
  const cpu = (r: typeof free): number => r.stats.userMs + r.stats.systemMs;
  assert.equal(limited.exitCode, 124); // timeout(1)'s own code
  // A quarter of 2 s is 500 ms; the scheduler's periods give or take some.
  assert.ok(cpu(limited) > 250 && cpu(limited) < 800, `limited: ${cpu(limited)} ms`);
  assert.ok(cpu(free) > 1200, `without a limit: ${cpu(free)} ms`);
  assert.deepEqual(limited.limits, { cpus: { limit: 0.25, mechanism } });
});

gtest(
  "limits and --timeout compose: the tree is killed, no cgroup and no process left",
  async () => {
    const before = runCgroups();
    const marker = uniqueToken("limtime");
    const r = await cvisor(
      ["--memory", "256m", "--pids-limit", "50", "--cpus", "1", "--timeout", "500ms"],
      ["sh", "-c", `sleep 30 & sleep 31; echo ${marker}`],
    );
    assert.equal(r.code, 124, show(r));
    assert.match(r.err, /^cvisor: timed out after 500ms\n$/, show(r));
    assert.deepEqual(processesWith(marker), []);
    assert.deepEqual(runCgroups(), before);
  },
);

gtest(
  "a kill -9 of cvisor: the guest goes with it, and the next run removes the cgroups it left",
  async () => {
    const marker = uniqueToken("limkill");
    const before = runCgroups();
    const child = spawn(
      process.execPath,
      [cliPath, "--memory", "128m", "--", "sh", "-c", `sleep 60; : ${marker}`],
      {
        stdio: "ignore",
      },
    );
    // The CLI's own argv holds the marker too: wait for the guest's shell.
    const guest = (): boolean => processesWith(marker).some((p) => p.cmdline.startsWith("sh "));
    assert.ok(await waitFor(guest, 5000), "the guest started");
    const left = runCgroups().filter((d) => !before.includes(d));
    assert.equal(left.length, 1, `one memory cgroup for the run: ${left.join(", ")}`);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.on("exit", resolve));
    assert.ok(await waitFor(() => processesWith(marker).length === 0, 5000), "the guest is gone");
    await sleep(50);
    const r = await cvisor(["--memory", "64m"], ["true"]);
    assert.equal(r.code, 0, show(r));
    assert.deepEqual(runCgroups(), before, "the next limited run swept what the killed one left");
  },
  cgroups ? {} : { skip: "this user can make no cgroup here: the supervisor holds the limits" },
);

gtest(
  "--disk 10m: writing 100 MiB ends the run with 137 and one line; the host's space comes back",
  async (fx) => {
    const home = storeHome(fx);
    const free = (): number => {
      const st = statfsSync(fx.scratch);
      return st.bavail * st.bsize;
    };
    const before = free();
    const r = await cvisor(
      ["--disk", "10m", "--json"],
      ["sh", "-c", "dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; echo wrote"],
      { extraEnv: home.env, cwd: fx.scratch },
    );
    assert.equal(r.code, 137, show(r));
    assert.equal(r.out, "", "the run ended before dd did");
    const lines = r.err.trim().split("\n");
    assert.equal(lines[0], "cvisor: disk limit 10 MiB reached", show(r));
    const report = JSON.parse(lines.at(-1) ?? "{}") as {
      limitHit?: string;
      limits?: { disk?: { limit: number; mechanism: string; peak: number } };
    };
    assert.equal(report.limitHit, "disk");
    assert.equal(report.limits?.disk?.mechanism, "supervisor");
    assert.ok((report.limits?.disk?.peak ?? 0) > 10 << 20, JSON.stringify(report));
    // The ephemeral layer is gone with the run; the filesystem has its space back (give or take
    // what else this machine wrote meanwhile).
    assert.ok(Math.abs(free() - before) < 8 << 20, `free space moved by ${before - free()} bytes`);
  },
);

gtest("--disk counts what a named sandbox's layer already holds", async (fx) => {
  const home = storeHome(fx);
  const opts = { extraEnv: home.env, cwd: fx.scratch };
  const write = (name: string, mib: number): string[] => [
    "sh",
    "-c",
    `dd if=/dev/zero of=/tmp/${name} bs=1M count=${mib} 2>/dev/null && echo ok`,
  ];
  const first = await cvisor(["--sandbox", "quota", "--disk", "12m"], write("a", 8), opts);
  assert.equal(first.code, 0, show(first));
  assert.equal(first.out, "ok\n");
  // 8 MiB kept; 6 more is over 12 MiB: this run ends, the next sees what the first left.
  const second = await cvisor(
    ["--sandbox", "quota", "--disk", "12m"],
    ["sh", "-c", "dd if=/dev/zero of=/tmp/b bs=1M count=6 2>/dev/null; sleep 5; echo late"],
    opts,
  );
  assert.equal(second.code, 137, show(second));
  assert.match(second.err, /^cvisor: disk limit 12 MiB reached\n/, show(second));
  const left = await cvisor(["--sandbox", "quota"], ["sh", "-c", "du -sk /tmp/a"], opts);
  assert.match(left.out, /^8\d{3}\s/, show(left));
});

gtest("bad limit values get one line that says what is accepted", async () => {
  const cases: [string[], RegExp][] = [
    [["--memory", "lots"], /^cvisor: invalid memory limit lots: use a size such as 256m or 1g/],
    [["--memory", "1m"], /at least 6m/],
    [
      ["--pids-limit", "0"],
      /^cvisor: invalid pids limit 0: use a whole number of processes, at least 1/,
    ],
    [["--cpus", "0"], /^cvisor: invalid cpus limit 0: use a number of cores from 0\.01 to \d+/],
    [["--cpus", "999"], /invalid cpus limit 999/],
    [["--disk", "10k"], /^cvisor: invalid disk limit 10k: use a size such as 500m or 2g/],
  ];
  for (const [flags, expected] of cases) {
    const r = await cvisor(flags, ["echo", "ran"]);
    assert.equal(r.code, 125, show(r));
    assert.equal(r.out, "");
    assert.match(r.err, expected, show(r));
    assert.equal(r.err.trim().split("\n").length, 1, show(r));
  }
});
