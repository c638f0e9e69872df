// `cvisor [options] -- CMD [ARGS...]`: runs the plan with the terminal's fds handed straight
// to the guest (Node never reads process.stdin nor copies output), then exits with its code.
import { statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { isatty } from "node:tty";
import { strerror } from "../core/native.js";
import { Sandbox } from "../sandbox/sandbox.js";
import { CliError } from "./errors.js";
import { EXIT_CVISOR, jsonReport, runMessage } from "./exit-codes.js";
import type { RunPlan } from "./parse.js";

/** Runs the plan; resolves to the exit code of cvisor. */
export async function runCommand(plan: RunPlan): Promise<number> {
  if (plan.workdir !== undefined) checkWorkdir(plan.workdir);
  const controller = new AbortController();
  const stopSignals = forwardSignals(() => controller.abort());
  try {
    const sandbox = new Sandbox({ network: plan.network, allowListen: plan.allowListen });
    const result = await sandbox.run(plan.argv, {
      env: plan.env,
      ...(plan.workdir !== undefined ? { cwd: plan.workdir } : {}),
      timeout: plan.timeoutMs,
      stdin: "inherit",
      stdout: "inherit",
      stderr: "inherit",
      signal: controller.signal,
    });
    const message = runMessage(result, plan.argv[0] ?? "", plan.timeoutText, errnoText);
    if (message !== null) process.stderr.write(`cvisor: ${message}\n`);
    if (plan.json) process.stderr.write(`${jsonReport(result)}\n`);
    return result.exitCode;
  } finally {
    stopSignals();
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
  const terminal = isatty(0);
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
  const text = strerror(-errno);
  return /^[A-Z][a-z]/.test(text) ? text[0]?.toLowerCase() + text.slice(1) : text;
}
