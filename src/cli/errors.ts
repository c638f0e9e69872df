// The CLI's own failure: a one-line message and the exit code to leave with.
import { writeSync } from "node:fs";

/** Thrown by commands; main.ts prints `cvisor: <message>` and exits with exitCode. */
export class CliError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode: number) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

/**
 * Writes cvisor's own lines to fd 2 without creating process.stderr, whose stream loads
 * node:tty or node:net (start-up time the run path does without). Falls back to the stream
 * if the fd refuses (EAGAIN: the guest left the shared file non-blocking).
 */
export function writeStderr(text: string): void {
  const bytes = Buffer.from(text);
  let done = 0;
  try {
    while (done < bytes.length) done += writeSync(2, bytes, done);
  } catch {
    process.stderr.write(bytes.subarray(done));
  }
}
