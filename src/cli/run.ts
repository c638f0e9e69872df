// `cvisor [options] -- CMD [ARGS...]`: runs the plan with the terminal's fds handed straight
// to the guest (Node never reads process.stdin nor copies output), then exits with its code.
// A CLI has one run, so it waits with cv_run_wait on a threadpool thread (the main thread stays
// free for signals) rather than the library's net.Socket on the done fd, and asks cv_isatty
// rather than node:tty: this path loads neither node:net nor node:tty.
import { statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import * as native from "../core/native.js";
import { finishRun, runSpec } from "../sandbox/native-run.js";
import { toRunResult } from "../sandbox/result.js";
import { CliError, writeStderr } from "./errors.js";
import { EXIT_CVISOR, jsonReport, runMessage } from "./exit-codes.js";
import type { RunPlan } from "./plan.js";

/** Runs the plan; resolves to the exit code of cvisor. */
export async function runCommand(plan: RunPlan): Promise<number> {
  if (plan.workdir !== undefined) checkWorkdir(plan.workdir);
  const spec = runSpec(
    plan.argv,
    { network: plan.network, allowListen: plan.allowListen },
    {
      env: plan.env,
      ...(plan.workdir !== undefined ? { cwd: plan.workdir } : {}),
      timeout: plan.timeoutMs,
    },
  );
  let run: native.NativeRun | undefined;
  let started = false;
  let killed = false;
  const stopSignals = forwardSignals(() => {
    killed = true;
    if (run && started) killQuietly(run);
  });
  try {
    run = native.createRun({ ...spec, stdio: [0, 1, 2] });
    const { doneFd } = native.start(run);
    started = true;
    native.close(doneFd); // cv_run_wait tells the end: nothing watches this fd
    if (killed) killQuietly(run);
    await native.wait(run);
    // The per-syscall counts appear only in the --json report.
    const { raw, failure, notifications } = finishRun(run, plan.json);
    if (failure) throw failure;
    const result = toRunResult(raw, notifications, "", "");
    const message = runMessage(result, plan.argv[0] ?? "", plan.timeoutText, errnoText);
    if (message !== null) writeStderr(`cvisor: ${message}\n`);
    if (plan.json) writeStderr(`${jsonReport(result)}\n`);
    return result.exitCode;
  } finally {
    stopSignals();
    if (run) native.free(run);
  }
}

function killQuietly(run: native.NativeRun): void {
  try {
    native.kill(run);
  } catch {
    // The run is over or already freed: nothing to kill.
  }
}

function checkWorkdir(dir: string): void {
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    throw new CliError(`--workdir ${dir}: no such directory`, EXIT_CVISOR);
  }
  if (!isDir) throw new CliError(`--workdir ${dir}: not a directory`, EXIT_CVISOR);
}

/**
 * While the guest runs: on a terminal, SIGINT and SIGQUIT are the guest's (the terminal
 * sends them to it too), so cvisor ignores them; SIGTERM and SIGHUP (and SIGINT/SIGQUIT
 * without a terminal) kill the guest tree. Returns the function that removes the handlers.
 */
function forwardSignals(kill: () => void): () => void {
  const terminal = native.isatty(0);
  const ignore = (): void => undefined;
  const handlers: [NodeJS.Signals, () => void][] = [
    ["SIGTERM", kill],
    ["SIGHUP", kill],
    ["SIGINT", terminal ? ignore : kill],
    ["SIGQUIT", terminal ? ignore : kill],
  ];
  for (const [signal, handler] of handlers) process.on(signal, handler);
  return () => {
    for (const [signal, handler] of handlers) process.off(signal, handler);
  };
}

/** "EACCES" → "permission denied", from the C library's strerror. */
function errnoText(name: string): string {
  const errno = (osConstants.errno as Record<string, number | undefined>)[name];
  if (errno === undefined) return name;
  const text = native.strerror(-errno);
  return /^[A-Z][a-z]/.test(text) ? text[0]?.toLowerCase() + text.slice(1) : text;
}
