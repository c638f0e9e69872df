// `cvisor [options] -- CMD [ARGS...]`: runs the plan with the terminal's fds handed straight
// to the guest (Node never reads process.stdin nor copies output), then exits with its code.
// A CLI has one run, so it blocks in cv_run_wait_forwarding (which also turns SIGTERM/SIGHUP,
// and SIGINT/SIGQUIT off a terminal, into a kill of the tree) rather than watching the done fd
// with the library's net.Socket, and asks cv_isatty rather than node:tty: this path loads
// neither node:net nor node:tty and starts no threadpool.
import { statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import * as native from "../core/native.js";
import { finishRun, runSpec } from "../sandbox/native-run.js";
import { toRunResult } from "../sandbox/result.js";
import { closeLayer, openLayer } from "../sandbox/open-layer.js";
import { NotFoundError, UsageError } from "../core/errors.js";
import { writeStderr } from "./errors.js";
import { denialHints, jsonReport, runMessage } from "./exit-codes.js";
import type { RunPlan } from "./plan.js";

/** Runs the plan; resolves to the exit code of cvisor. */
export async function runCommand(plan: RunPlan): Promise<number> {
  // A named sandbox may hold directories the host lacks: the core enters it in the sandbox's view.
  if (plan.workdir !== undefined && plan.sandbox === undefined) checkWorkdir(plan.workdir);
  const layer = openLayer(plan.sandbox);
  let run: native.NativeRun | undefined;
  try {
    const spec = runSpec(
      plan.argv,
      {
        network: plan.network,
        allowListen: plan.allowListen,
        hide: plan.hide,
        expose: plan.expose,
        allowUnix: plan.allowUnix,
      },
      {
        env: plan.env,
        ...(plan.workdir !== undefined ? { cwd: plan.workdir } : {}),
        timeout: plan.timeoutMs,
      },
      layer,
    );
    run = native.createRun({ ...spec, stdio: [0, 1, 2] });
    const { doneFd } = native.start(run);
    native.close(doneFd); // the forwarding wait tells the end: nothing watches this fd
    // On a terminal, SIGINT and SIGQUIT are the guest's (the terminal sends them to it too).
    const forwarded = native.waitForwarding(run, native.isatty(0));
    // The per-syscall counts appear only in the --json report.
    const { raw, failure, notifications, denials } = finishRun(run, plan.json);
    if (failure) throw failure;
    const result = toRunResult(raw, notifications, "", "", denials);
    // A signal that ended cvisor (and with it the tree) is cvisor's exit status, as for any
    // process a signal ends: 128 + N.
    if (forwarded > 0) result.exitCode = 128 + forwarded;
    const message = runMessage(result, plan.argv[0] ?? "", plan.timeoutText, errnoText);
    if (message !== null) writeStderr(`cvisor: ${message}\n`);
    // What a user will want to allow: one line each (the rest is in the --json report).
    for (const line of denialHints(result.denials)) writeStderr(`cvisor: ${line}\n`);
    if (plan.json) writeStderr(`${jsonReport(result)}\n`);
    return result.exitCode;
  } finally {
    if (run) native.free(run);
    // After the free: the guest tree is gone. Then an ephemeral sandbox goes too (a SIGKILLed
    // CLI never gets here: the next run's sweep removes what it left).
    closeLayer(layer);
  }
}

function checkWorkdir(dir: string): void {
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    throw new NotFoundError(`--workdir ${dir}: no such directory`);
  }
  if (!isDir) throw new UsageError(`--workdir ${dir}: not a directory`);
}

/** "EACCES" → "permission denied", from the C library's strerror. */
function errnoText(name: string): string {
  const errno = (osConstants.errno as Record<string, number | undefined>)[name];
  if (errno === undefined) return name;
  const text = native.strerror(-errno);
  return /^[A-Z][a-z]/.test(text) ? text[0]?.toLowerCase() + text.slice(1) : text;
}
