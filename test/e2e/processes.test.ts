// Other processes are out of a guest's reach: signals (kill PID, kill -PGID, kill -9 -1) only
// reach the sandbox's own processes, and /proc/<pid>/{environ,cmdline,mem} of processes outside
// it cannot be opened — not the CLI's (the supervisor, which holds credentials), not the test
// runner's, not a host process the test starts with a secret in its environment.
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { Sandbox } from "../../src/index.js";
import { prober, sleeper } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { DENIED, expectProbes, FAILED, type ProbeCase } from "../helpers/probe.js";
import {
  cliPath,
  cvisor,
  isAlive,
  killAllWith,
  repoRoot,
  runProcess,
  show,
  uniqueToken,
  waitFor,
  which,
} from "../helpers/repo.js";

interface HostProcess {
  child: ChildProcess;
  pid: number;
  marker: string;
  secret: string;
}

/** A host sleeper (outside any sandbox) with a marker in argv and a secret in its environment. */
async function startHostSleeper(): Promise<HostProcess> {
  const marker = uniqueToken("cvisor-e2e-host");
  const secret = uniqueToken("cvisor-e2e-secret");
  const child = spawn(sleeper(), ["120", marker], {
    env: { ...process.env, CVISOR_E2E_SECRET: secret },
    stdio: "ignore",
    detached: true,
  });
  const pid = child.pid;
  assert.ok(pid !== undefined, "spawn the host sleeper");
  assert.ok(await waitFor(() => isAlive(pid), 5000), "host sleeper started");
  return { child, pid, marker, secret };
}

function stopHost(h: HostProcess): void {
  try {
    process.kill(h.pid, "SIGKILL");
  } catch {
    // Already gone.
  }
  killAllWith(h.marker);
}

function assertNoLeak(text: string, secrets: readonly string[], what: string): void {
  for (const s of secrets) assert.ok(!text.includes(s), `${what}: leaked ${s}\n${text}`);
}

gtest("signals to a host process fail and it survives (kill PID, kill -PGID, kill 0)", async () => {
  const host = await startHostSleeper();
  try {
    const pid = String(host.pid);
    await expectProbes(
      [
        { op: ["kill", pid, "0"], expect: FAILED },
        { op: ["kill", pid, "9"], expect: FAILED },
        { op: ["kill", pid, "15"], expect: FAILED },
        { op: ["kill", `-${pid}`, "9"], expect: FAILED },
        { op: ["kill", "1", "0"], expect: FAILED },
        { op: ["kill", String(process.pid), "0"], expect: FAILED },
        // the other ways to signal a process (SIGUSR1 would end the sleeper)
        { op: ["tkill", pid, "10"], expect: FAILED },
        { op: ["tgkill", pid, "10"], expect: FAILED },
        { op: ["sigqueue", pid, "10"], expect: FAILED },
        { op: ["pidfd-kill", pid, "10"], expect: FAILED },
        // F_SETOWN/F_SETSIG: the kernel itself would send SIGUSR1 on I/O; the call may be
        // accepted, but the signal must not arrive (checked below)
        { op: ["fsetown", pid, "10"], expect: (r) => r === "OK" || /^E[A-Z0-9]+$/.test(r) },
      ],
      "signals to outside processes",
    );
    const sh = await cvisor([], ["sh", "-c", `kill -9 ${pid}; echo "rc=$?"`], {
      extraEnv: { LC_ALL: "C" },
    });
    assert.match(sh.out, /^rc=[1-9]/m, show(sh));
    assert.ok(isAlive(host.pid), "the host sleeper was killed from inside the sandbox");
  } finally {
    stopHost(host);
  }
});

gtest("signals inside the sandbox still work", async () => {
  const r = await cvisor(
    [],
    [
      "sh",
      "-c",
      'sleep 30 & p=$!; kill -0 $p && echo alive; kill -TERM $p; wait $p; echo "status=$?"; kill -0 $$ && echo self-ok',
    ],
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "alive\nstatus=143\nself-ok\n", show(r));
});

let pidnsArgv: string[] | null | undefined;

/** `unshare` flags for a fresh PID namespace (with /proc), or null when not possible here. */
function pidnsPrefix(): string[] | null {
  if (pidnsArgv !== undefined) return pidnsArgv;
  pidnsArgv = null;
  const unshare = which("unshare");
  if (!unshare) return null;
  const base = ["--pid", "--fork", "--mount", "--mount-proc", "--kill-child"];
  const candidates =
    process.getuid?.() === 0
      ? [base]
      : [
          ["--user", "--map-current-user", ...base],
          ["--user", "--map-root-user", ...base],
        ];
  for (const flags of candidates) {
    const r = spawnSync(unshare, [...flags, "true"], { stdio: "ignore", timeout: 10_000 });
    if (r.status === 0) {
      pidnsArgv = [unshare, ...flags];
      break;
    }
  }
  return pidnsArgv;
}

gtest(
  "kill -9 -1 inside kills the guest's own processes and nothing outside",
  async () => {
    // Contained: the whole scene runs in a fresh PID namespace, so even a broken sandbox
    // could only kill this test's own processes (the host sleeper and the CLI), never the
    // machine's. Inside it: pid 1 is the shell below, a "host" sleeper, then the CLI.
    const prefix = pidnsPrefix();
    assert.ok(prefix);
    const marker = uniqueToken("cvisor-e2e-kill1");
    const scene = [
      "S=$1 NODE=$2 CLI=$3 MARK=$4 PROBE=$5",
      '"$S" 120 "$MARK-host" &',
      "host=$!",
      "sleep 0.3",
      // the guest: its own sleeper, kill -9 -1 from the shell, then (as the guest's main
      // process, so it is the only one left to report) the prober's kill(-1, SIGKILL)
      `"$NODE" "$CLI" -- sh -c '"$0" 120 "$1-guest" & g=$!; sleep 0.3; kill -9 -1; echo "kill-rc=$?"; wait $g; echo "guest-sleeper-status=$?"; exec "$2" kill-all 9' "$S" "$MARK" "$PROBE"`,
      'echo "cli-exit=$?"',
      "sleep 0.2",
      'if kill -0 "$host" 2>/dev/null; then echo host-alive; else echo host-dead; fi',
      'kill -9 "$host" 2>/dev/null',
      "wait",
    ].join("\n");
    const [file, ...flags] = prefix;
    try {
      const r = await runProcess(
        file ?? "unshare",
        [...flags, "sh", "-c", scene, "sh", sleeper(), process.execPath, cliPath, marker, prober()],
        { timeoutMs: 30_000, cwd: repoRoot },
      );
      assert.equal(r.code, 0, show(r));
      const lines = r.out.split("\n").filter((l) => l !== "");
      assert.deepEqual(
        lines,
        ["kill-rc=0", "guest-sleeper-status=137", "OK", "cli-exit=0", "host-alive"],
        show(r),
      );
    } finally {
      killAllWith(marker);
    }
  },
  { skip: pidnsPrefix() ? false : "cannot create a PID namespace here (unshare)" },
);

gtest("/proc/<pid>/{environ,cmdline,mem} of a host process cannot be opened", async () => {
  const host = await startHostSleeper();
  try {
    const pid = String(host.pid);
    const cases: ProbeCase[] = ["environ", "cmdline", "mem"].map((name) => ({
      op: ["proc-read", pid, name],
      expect: FAILED,
    }));
    // The same files by other spellings and through directory fds.
    for (const file of [
      `/proc/${pid}/task/${pid}/environ`,
      `/proc//${pid}//environ`,
      `/proc/./${pid}/environ`,
      `/proc/self/../${pid}/environ`,
      `/proc/thread-self/../../${pid}/environ`,
      `/proc/${pid}/root/proc/${pid}/environ`,
    ]) {
      cases.push({ op: ["read-file", file], expect: DENIED });
    }
    cases.push({ op: ["open-at", `/proc/${pid}`, "environ"], expect: DENIED });
    cases.push({ op: ["open-at", "/proc", `${pid}/environ`], expect: DENIED });
    cases.push({ op: ["open-at", `/proc/${pid}/task/${pid}`, "cmdline"], expect: DENIED });
    // Control: outside the sandbox the same probe reads the secret (the probe can see a leak).
    const native = execFileSync(prober(), ["proc-read", pid, "environ"], { encoding: "utf8" });
    assert.ok(native.includes(host.secret), "natively the prober reads the host's environ");
    const run = await expectProbes(cases, "a host process's /proc files");
    assertNoLeak(run.cli.out + run.cli.err, [host.secret, host.marker], "prober");
    const sh = await cvisor(
      [],
      [
        "sh",
        "-c",
        `cat /proc/${pid}/environ; cat /proc/${pid}/cmdline; tr '\\0' '\\n' < /proc/${pid}/environ; echo done`,
      ],
    );
    assert.match(sh.out, /done\n$/, show(sh));
    assertNoLeak(sh.out + sh.err, [host.secret, host.marker], "shell");
  } finally {
    stopHost(host);
  }
});

gtest(
  "the CLI's own /proc entries (the supervisor) are out of reach, and so are the test runner's and init's",
  async (fx) => {
    const secret = uniqueToken("cvisor-e2e-cli-secret");
    const pidFile = path.join(fx.scratch, "cli.pid");
    const script = [
      `i=0; while [ ! -s "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`,
      'P=$(cat "$1")',
      `"$0" proc-read "$P" environ ';' proc-read "$P" cmdline ';' proc-read "$P" mem ';' ` +
        `proc-read "$2" environ ';' proc-read "$2" cmdline ';' proc-read "$2" mem ';' ` +
        `proc-read 1 environ ';' proc-read 1 mem`,
      'cat "/proc/$P/environ" "/proc/$2/environ" 2>/dev/null; echo end',
    ].join("\n");
    const r = await cvisor([], ["sh", "-c", script, prober(), pidFile, String(process.pid)], {
      extraEnv: { CVISOR_E2E_SECRET: secret },
      onSpawn: (pid) => writeFileSync(pidFile, String(pid)),
    });
    assert.equal(r.code, 0, show(r));
    const lines = r.out.split("\n").filter((l) => l !== "");
    assert.equal(lines.length, 9, show(r));
    const bad = lines.slice(0, 8).filter((l) => !/^E[A-Z0-9]+$/.test(l));
    assert.deepEqual(bad, [], `every open must fail\n${show(r)}`);
    assert.equal(lines[8], "end", show(r));
    assertNoLeak(r.out + r.err, [secret], "guest output");
  },
);

gtest(
  "a library user's process (supervisor) environment cannot be read by its guests",
  async () => {
    const secret = uniqueToken("cvisor-e2e-lib-secret");
    const child = path.join(repoRoot, "dist", "test", "helpers", "lib-child.js");
    const guest = [
      "sh",
      "-c",
      `"$0" ${["proc-read {PID} environ", "proc-read {PID} cmdline", "proc-read {PID} mem"].join(" ';' ")}; cat /proc/{PID}/environ; echo end`,
      prober(),
    ];
    const r = await runProcess(process.execPath, [child, JSON.stringify(guest)], {
      extraEnv: { CVISOR_E2E_SECRET: secret },
      timeoutMs: 30_000,
    });
    assert.equal(r.code, 0, show(r));
    const result = JSON.parse(r.out) as { exitCode: number; stdout: string; stderr: string };
    assert.equal(result.exitCode, 0, r.out);
    const lines = result.stdout.split("\n").filter((l) => l !== "");
    assert.equal(lines.length, 4, r.out);
    assert.deepEqual(
      lines.slice(0, 3).filter((l) => !/^E[A-Z0-9]+$/.test(l)),
      [],
      r.out,
    );
    assertNoLeak(result.stdout + result.stderr, [secret], "library guest output");
  },
);

gtest("the guest can read its own /proc/self/*", async () => {
  const r = await cvisor(
    ["-e", "E2E_OWN=visible"],
    [
      "sh",
      "-c",
      [
        "cat /proc/self/status | grep -E '^(Name|Pid):' | cut -f1 | tr '\\n' ' '; echo",
        "grep -c ^Name /proc/$$/status",
        // (not `< /proc/self/environ`: that file would belong to the pre-exec image)
        "cat /proc/self/environ | tr '\\0' '\\n' | grep ^E2E_OWN=",
        "tr '\\0' ' ' < /proc/$$/cmdline | head -c 6; echo",
        "ls /proc/self/fd | grep -c .",
        "test -r /proc/self/maps && echo maps-ok",
      ].join("\n"),
    ],
  );
  assert.equal(r.code, 0, show(r));
  const lines = r.out.split("\n");
  assert.equal(lines[0], "Name: Pid: ", show(r));
  assert.equal(lines[1], "1", show(r));
  assert.equal(lines[2], "E2E_OWN=visible", show(r));
  assert.equal(lines[3], "sh -c ", show(r));
  assert.ok(Number(lines[4]) >= 3, show(r));
  assert.equal(lines[5], "maps-ok", show(r));

  await expectProbes(
    [
      { op: ["proc-read", "self", "status"], expect: (x) => x.startsWith("OK Name:") },
      { op: ["proc-read", "self", "environ"], expect: (x) => x.includes("E2E_OWN=visible") },
    ],
    "own /proc",
    ["-e", "E2E_OWN=visible"],
  );
  // And the library sees the same.
  const lib = await new Sandbox().run(["cat", "/proc/self/status"]);
  assert.match(lib.stdout, /^Name:\s+cat$/m, lib.stderr);
});
