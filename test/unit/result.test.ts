// Exit-code mapping from a decoded cv_run_result, and the CLI's messages for it.
import assert from "node:assert/strict";
import { test } from "node:test";
import { CvisorError } from "../../src/core/errors.js";
import { RUN_STATE, type NativeRunResult } from "../../src/core/native.js";
import { denialHints, jsonReport, runMessage } from "../../src/cli/exit-codes.js";
import { exitCodeOf, runFailure, toRunResult } from "../../src/sandbox/result.js";

function raw(fields: Partial<NativeRunResult>): NativeRunResult {
  return {
    state: RUN_STATE.EXITED,
    exitCode: 0,
    signal: 0,
    timedOut: false,
    killed: false,
    execErrno: 0,
    error: 0,
    durationMs: 1.5,
    userMs: 0.5,
    systemMs: 0.25,
    maxRssKb: 1024,
    notifications: 3,
    denials: 0,
    message: "",
    ...fields,
  };
}

const noText = (name: string): string => `text of ${name}`;

test("the guest's own exit code", () => {
  assert.equal(exitCodeOf(raw({ exitCode: 0 })), 0);
  assert.equal(exitCodeOf(raw({ exitCode: 3 })), 3);
});

test("killed by signal N is 128+N with the signal's name", () => {
  const r = raw({ state: RUN_STATE.SIGNALED, exitCode: -1, signal: 9 });
  assert.equal(exitCodeOf(r), 137);
  const result = toRunResult(r, {}, "", "");
  assert.equal(result.signal, "SIGKILL");
  assert.equal(result.exitCode, 137);
});

test("a timeout is 124 whatever killed the tree", () => {
  const r = raw({ state: RUN_STATE.SIGNALED, signal: 9, timedOut: true });
  assert.equal(exitCodeOf(r), 124);
  const result = toRunResult(r, {}, "", "");
  assert.equal(result.timedOut, true);
  assert.equal(runMessage(result, "sleep", "300ms", noText), "timed out after 300ms");
});

test("exec failures: 127 not found, 126 otherwise", () => {
  const notFound = toRunResult(raw({ state: RUN_STATE.EXEC_FAILED, execErrno: 2 }), {}, "", "");
  assert.equal(notFound.exitCode, 127);
  assert.equal(notFound.execError, "ENOENT");
  assert.equal(runMessage(notFound, "nope", undefined, noText), "nope: command not found");
  const denied = toRunResult(raw({ state: RUN_STATE.EXEC_FAILED, execErrno: 13 }), {}, "", "");
  assert.equal(denied.exitCode, 126);
  assert.equal(denied.execError, "EACCES");
  assert.equal(runMessage(denied, "./x", undefined, noText), "./x: text of EACCES");
});

test("a normal exit has no message and no execError", () => {
  const result = toRunResult(raw({ exitCode: 1 }), { openat: 2, execve: 1 }, "out", "err");
  assert.equal(runMessage(result, "false", undefined, noText), null);
  assert.equal("execError" in result, false);
  assert.deepEqual(result.stats, {
    notifications: { openat: 2, execve: 1 },
    totalNotifications: 3,
    userMs: 0.5,
    systemMs: 0.25,
    maxRssKb: 1024,
  });
  assert.equal(result.stdout, "out");
  assert.equal(result.stderr, "err");
});

test("a memory limit that ended the run is 137 and one line, whatever process the kernel chose", () => {
  const limits = { memory: { limit: 256 << 20, mechanism: "cgroup-v1", peak: 256 << 20 } };
  // The OOM killer took a child; the main process exited 1 before the tree was killed.
  const hit = toRunResult(raw({ exitCode: 1 }), {}, "", "", [], { ...limits, limitHit: "memory" });
  assert.equal(hit.exitCode, 137);
  assert.equal(hit.signal, "SIGKILL");
  assert.equal(hit.limitHit, "memory");
  assert.deepEqual(hit.limits, limits);
  assert.equal(runMessage(hit, "x", undefined, noText), "memory limit 256 MiB reached");
  assert.deepEqual(JSON.parse(jsonReport(hit)).limits, limits);
  // A refused fork changes neither the exit code nor the message.
  const pids = { pids: { limit: 8, mechanism: "supervisor", peak: 8 } };
  const forks = toRunResult(raw({ exitCode: 0 }), {}, "", "", [], { ...pids, limitHit: "pids" });
  assert.equal(forks.exitCode, 0);
  assert.equal(forks.limitHit, "pids");
  assert.equal(runMessage(forks, "x", undefined, noText), null);
});

test("CV_RUN_FAILED is a CvisorError with the C message", () => {
  const failure = runFailure(
    raw({ state: RUN_STATE.FAILED, error: -1004, message: "helper not found" }),
    () => "unused",
  );
  assert.ok(failure instanceof CvisorError);
  assert.equal(failure.message, "helper not found");
  assert.equal(failure.code, "CV_ERR_HELPER");
  const noMessage = runFailure(raw({ state: RUN_STATE.FAILED, error: -1006 }), () => "described");
  assert.equal(noMessage?.message, "described");
  assert.equal(
    runFailure(raw({}), () => ""),
    null,
  );
  assert.ok(runFailure(raw({ state: 99 }), () => "") instanceof CvisorError);
});

test("the --json report has exactly the documented keys", () => {
  const denial = { syscall: "connect", target: "/run/x.sock", why: "host unix socket", count: 2 };
  const result = toRunResult(raw({ exitCode: 2 }), { openat: 3 }, "", "", [denial]);
  assert.deepEqual(JSON.parse(jsonReport(result)), {
    exitCode: 2,
    signal: null,
    timedOut: false,
    durationMs: 1.5,
    notifications: { openat: 3 },
    totalNotifications: 3,
    denials: [denial],
  });
});

test("a refused host unix socket gets one line naming the flag; other denials stay in the report", () => {
  const lines = denialHints([
    {
      syscall: "connect",
      target: "/run/a.sock",
      why: "host unix socket (--allow-unix ...)",
      count: 3,
    },
    {
      syscall: "bind",
      target: "port 80",
      why: "only loopback addresses without --allow-listen",
      count: 1,
    },
  ]);
  assert.deepEqual(lines, [
    "refused connect to host unix socket /run/a.sock (--allow-unix /run/a.sock lets it through)",
  ]);
});

test("a name the run's name service refused gets one line naming the rule", () => {
  const lines = denialHints([
    { syscall: "dns", target: "evil.test", why: "no --allow-net rule names it", count: 2 },
  ]);
  assert.deepEqual(lines, [
    "refused DNS lookup of evil.test: no --allow-net rule names it (--allow-net evil.test lets it through)",
  ]);
});
