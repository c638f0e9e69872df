// Work that leaves temporary files behind while it runs (a copy being staged, a cache entry being
// written, an archive being extracted). Without a caller's AbortSignal, SIGINT, SIGTERM or SIGHUP
// remove them before the process ends (the CLI's case). With one, the caller owns cancellation:
// no process listener is added, and an abort stops the work at its next step, which undoes it.
// What a kill -9 leaves is named by its owner record, and the next command removes it.
import { AbortedError, CvisorError } from "../core/errors.js";

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Runs work. Without signal: if one of the process signals comes first, runs cleanup once, then
 * lets the signal end the process. With signal: runs work as it is (work watches the signal).
 */
export async function cleanedUpOnSignal<T>(
  cleanup: () => void,
  work: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  if (signal) {
    signal.throwIfAborted();
    return work();
  }
  let cleaned = false;
  const handlers = SIGNALS.map((sig) => {
    const handler = (): void => {
      if (!cleaned) {
        cleaned = true;
        try {
          cleanup();
        } catch {
          // What is left is the next command's to sweep.
        }
      }
      stop();
      // Alone, this listener stood in for Node's default: end as the signal would have.
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.on(sig, handler);
    return [sig, handler] as const;
  });
  const stop = (): void => {
    for (const [sig, handler] of handlers) process.off(sig, handler);
  };
  try {
    return await work();
  } finally {
    stop();
  }
}

/** Until the returned function is called, an abort of signal destroys the streams with its reason. */
export function destroyedOnAbort(
  signal: AbortSignal | undefined,
  ...streams: { destroy(err?: Error): unknown }[]
): () => void {
  if (!signal) return () => {};
  const onAbort = (): void => {
    const reason: unknown = signal.reason;
    const err = reason instanceof Error ? reason : new Error(String(reason));
    for (const s of streams) s.destroy(err);
  };
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/**
 * Runs work under signal: refused at once when it is already aborted, and whatever it fails with
 * after an abort is the AbortedError of `what` ("cache save").
 */
export async function abortable<T>(
  signal: AbortSignal | undefined,
  what: string,
  work: () => Promise<T>,
): Promise<T> {
  try {
    signal?.throwIfAborted();
    return await work();
  } catch (err) {
    throw abortedOr(err, signal, what);
  }
}

/**
 * err as an AbortedError when signal was aborted (whatever the work failed with on its way out),
 * else err itself. what names the operation ("cp", "cache save").
 */
export function abortedOr(err: unknown, signal: AbortSignal | undefined, what: string): unknown {
  if (!signal?.aborted || err instanceof AbortedError) return err;
  const reason: unknown = signal.reason;
  const why = reason instanceof Error ? reason.message : String(reason);
  return new AbortedError(`${what}: aborted (${why}); nothing was changed`, {
    cause: err instanceof CvisorError ? err : reason,
  });
}
