// The CLI's interactive run: the guest gets a pseudo-terminal of its own (its session's
// controlling terminal), and cvisor relays it to the user's terminal, which it puts in raw mode
// for the run (keys, ^C and ^Z included, go to the guest's terminal, whose line discipline makes
// them signals there) and restores on every way out: the guest's exit, a signal to cvisor, a
// failure of cvisor itself. The window size follows the user's terminal (SIGWINCH).
import { constants as osConstants } from "node:os";
// Loaded lazily as ESM beside the CLI's bundle (scripts/build-cli.mjs): the library's entry
// tells these modules where the package is, as it does for the other lazy commands.
import "../index.js";
import { createPlannedRun, type PlannedRun } from "../sandbox/native-run.js";
import { startRun, Stdio, type Started } from "../sandbox/supervise.js";
import type { RunResult } from "../sandbox/types.js";

const ENDING_SIGNALS = ["SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT"] as const;
/** How long the last output may take to arrive once the guest tree is over. */
const DRAIN_MS = 2000;

/** Runs spec on a pty of its own, relayed to this process's terminal; resolves to the result. */
export async function runOnTerminal(
  spec: PlannedRun,
  opts: {
    /**
     * Stop reading the terminal once the guest is over (the CLI, which exits next): what the
     * user types then stays in the terminal for the next program. The TUI reads it again.
     */
    stopReading?: boolean;
  } = {},
): Promise<RunResult> {
  const stdin = process.stdin;
  const stdout = process.stdout;
  const io = new Stdio(false);
  let started: Started;
  try {
    const slave = io.terminal(stdout.columns ?? 80, stdout.rows ?? 24);
    const run = createPlannedRun({ ...spec, stdio: [slave, slave, slave], ctty: true });
    started = startRun(run, io, false, undefined);
  } catch (err) {
    io.closeGuestEnds();
    io.closeOwnEnds();
    throw err;
  }
  const term = started.stdout;
  if (!term) throw new Error("a terminal run without its terminal");
  const closed = new Promise<void>((resolve) => term.on("close", () => resolve()));
  term.on("data", (chunk: Buffer) => stdout.write(chunk));
  // Read with 'readable' and read(), not 'data' and pause(): a paused stdin whose read was
  // under way never reads again for the next reader (the TUI's Ink, after a shell).
  const onKeys = (): void => {
    for (let chunk: unknown; (chunk = stdin.read()) !== null;) {
      if (!term.destroyed) term.write(chunk as Buffer | string);
    }
  };
  const onResize = (): void => started.resize?.(stdout.columns ?? 80, stdout.rows ?? 24);
  let ending: NodeJS.Signals | undefined;
  const onSignal = (sig: NodeJS.Signals): void => {
    ending ??= sig;
    started.kill();
  };
  const raw = stdin.isTTY === true;
  let released = false;
  /** The user's terminal back as it was: no relay of keys, modes restored. */
  const release = (): void => {
    if (released) return;
    released = true;
    stdin.off("readable", onKeys);
    if (opts.stopReading) stdin.pause();
    if (raw) stdin.setRawMode(false);
  };
  try {
    if (raw) stdin.setRawMode(true);
    stdin.on("readable", onKeys);
    stdout.on("resize", onResize);
    for (const sig of ENDING_SIGNALS) process.on(sig, onSignal);
    const result = await started.result;
    release(); // at once: keys typed from here on are for what runs next
    // The tree is over: what it wrote last is still in the pty, read to its end (EIO).
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, DRAIN_MS).unref())]);
    // A signal that ended cvisor (and with it the tree) is cvisor's exit status: 128 + N.
    if (ending !== undefined) result.exitCode = 128 + osConstants.signals[ending];
    return result;
  } finally {
    for (const sig of ENDING_SIGNALS) process.off(sig, onSignal);
    stdout.off("resize", onResize);
    release();
    term.destroy();
  }
}

/**
 * An interactive shell ($SHELL, else /bin/sh) in the named sandbox, on a pty of its own (the TUI's
 * Enter); resolves to its exit code. The caller's terminal is the shell's until it exits.
 */
export async function runShell(sandbox: string): Promise<number> {
  const [{ openLayer, closeLayer }, { runSpec }] = await Promise.all([
    import("../sandbox/open-layer.js"),
    import("../sandbox/native-run.js"),
  ]);
  const layer = openLayer(sandbox);
  try {
    const spec = runSpec([process.env.SHELL || "/bin/sh"], {}, {}, layer);
    return (await runOnTerminal(spec)).exitCode;
  } finally {
    closeLayer(layer);
  }
}
