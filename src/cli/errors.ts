// The CLI's own failure: a one-line message and the exit code to leave with.

/** Thrown by commands; main.ts prints `cvisor: <message>` and exits with exitCode. */
export class CliError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode: number) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

// Shared with the layers below the CLI (snapshots report leftovers they cleaned up).
export { writeStderr } from "../core/stderr.js";
