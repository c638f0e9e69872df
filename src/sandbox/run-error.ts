// The rejection of a run given `reject: true` whose guest did not exit 0 (as execa's): not a
// failure of cvisor itself (those are CvisorError), so it carries the guest's whole result.
import type { RunResult } from "./types.js";

export class RunFailedError extends Error {
  /** The guest's exit code (128+N for a signal, 124 for a timeout, as RunResult's). */
  readonly exitCode: number;

  constructor(
    readonly argv: readonly string[],
    readonly result: RunResult,
  ) {
    const why = result.timedOut
      ? "timed out"
      : result.signal !== null
        ? `was killed by ${result.signal}`
        : result.execError !== undefined
          ? `could not be executed (${result.execError})`
          : `failed with exit code ${result.exitCode}`;
    const firstLine = result.stderr.split("\n").find((l) => l.trim() !== "");
    super(`command ${why}: ${argv.join(" ")}${firstLine ? `\n${firstLine}` : ""}`);
    this.name = "RunFailedError";
    this.exitCode = result.exitCode;
  }
}
