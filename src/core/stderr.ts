// cvisor's own lines on stderr, for every layer (the CLI's messages, the store's notes).
import { writeSync } from "node:fs";

/**
 * Writes cvisor's own lines to fd 2 without creating process.stderr, whose stream loads
 * node:tty or node:net (start-up time the run path does without). The write is synchronous
 * because the CLI exits right after a run; if the guest left the shared file non-blocking and
 * it is full (EAGAIN), it waits a little and retries rather than lose the line.
 */
export function writeStderr(text: string): void {
  const bytes = Buffer.from(text);
  let done = 0;
  for (let tries = 0; done < bytes.length && tries < 200;) {
    try {
      done += writeSync(2, bytes, done);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EAGAIN") return; // stderr is gone: nothing to do
      tries++;
      Atomics.wait(PAUSE, 0, 0, 5);
    }
  }
}

const PAUSE = new Int32Array(new SharedArrayBuffer(4));
