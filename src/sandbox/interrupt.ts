// Work that leaves temporary files behind while it runs (a cache entry being written, an archive
// being extracted): on SIGINT, SIGTERM or SIGHUP they are removed before the process ends. What a
// kill -9 leaves is named by its owner record, and the next command removes it.

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** Runs work; if one of those signals comes first, runs cleanup once, then lets the signal end the process. */
export async function cleanedUpOnSignal<T>(
  cleanup: () => void,
  work: () => Promise<T>,
): Promise<T> {
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
