// Turns a decoded cv_run_result into the public RunResult (pure: unit-tested).
import { coreError, cvErrorName, SetupError } from "../core/errors.js";
import { RUN_STATE, errnoName, signalName, type NativeRunResult } from "../core/native.js";
import type { LimitsReport } from "./limits.js";
import type { Denial, RunResult, RunStats } from "./types.js";

/** Exit code of the CLI when the deadline fired. */
export const EXIT_TIMEOUT = 124;
/** Exit code when cvisor itself failed. */
export const EXIT_CVISOR = 125;
/** Exit code when the command exists but could not be executed. */
export const EXIT_CANNOT_EXEC = 126;
/** Exit code when the command was not found. */
export const EXIT_NOT_FOUND = 127;

const ENOENT = 2;

/** The exit code convention shared by the CLI and the library. */
export function exitCodeOf(raw: NativeRunResult): number {
  if (raw.timedOut) return EXIT_TIMEOUT;
  switch (raw.state) {
    case RUN_STATE.EXITED:
      return raw.exitCode;
    case RUN_STATE.SIGNALED:
      return 128 + raw.signal;
    case RUN_STATE.EXEC_FAILED:
      return raw.execErrno === ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
    default:
      return EXIT_CVISOR;
  }
}

/** The CvisorError for a run that failed before its guest ran, or null when the guest ran. */
export function runFailure(raw: NativeRunResult, describe: (rc: number) => string): Error | null {
  if (raw.state === RUN_STATE.FAILED) {
    const code = cvErrorName(raw.error) ?? (raw.error < 0 ? errnoName(-raw.error) : "CVISOR");
    return coreError(raw.message || describe(raw.error), code);
  }
  const known: number[] = Object.values(RUN_STATE);
  if (!known.includes(raw.state)) {
    return new SetupError(`the native core reported an unknown run state ${raw.state}`, "ESTATE");
  }
  return null;
}

/** The public RunResult of a guest that ran (or could not be executed). */
export function toRunResult(
  raw: NativeRunResult,
  notifications: Record<string, number>,
  stdout: string,
  stderr: string,
  denials: Denial[] = [],
  limits?: LimitsReport,
): RunResult {
  const stats: RunStats = {
    notifications,
    totalNotifications: raw.notifications,
    userMs: raw.userMs,
    systemMs: raw.systemMs,
    maxRssKb: raw.maxRssKb,
  };
  const result: RunResult = {
    exitCode: exitCodeOf(raw),
    signal: raw.state === RUN_STATE.SIGNALED ? signalName(raw.signal) : null,
    timedOut: raw.timedOut,
    stdout,
    stderr,
    durationMs: raw.durationMs,
    stats,
    denials,
  };
  if (raw.state === RUN_STATE.EXEC_FAILED) result.execError = errnoName(raw.execErrno);
  if (limits) {
    const { limitHit, ...each } = limits;
    result.limits = each;
    if (limitHit !== undefined) result.limitHit = limitHit;
    // The memory (or disk) limit ended the whole tree, as an OOM ends a container: 137
    // whichever process the kernel's OOM killer chose.
    if ((limitHit === "memory" || limitHit === "disk") && !raw.timedOut) {
      result.exitCode = 128 + 9;
      result.signal = "SIGKILL";
    }
  }
  return result;
}
