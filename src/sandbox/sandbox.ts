// The library API: `await new Sandbox(options).run(argv, runOptions)`. Completion and captured
// output are watched from the event loop (net.Socket over the fds): no threadpool, no sync wait.
import { closeSync } from "node:fs";
import net from "node:net";
import { UsageError } from "../core/errors.js";
import * as native from "../core/native.js";
import { parseDuration } from "./duration.js";
import { checkArgv, finishRun, runSpec } from "./native-run.js";
import { toRunResult } from "./result.js";
import { closeLayer, openLayer } from "./open-layer.js";
import { validateSandboxName } from "../store/sandboxes.js";
import type { OutputMode, RunOptions, RunResult, SandboxOptions } from "./types.js";

/** A sandbox configuration; each run() starts a fresh guest under it. */
export class Sandbox {
  /** The options every run starts from. */
  readonly options: Readonly<SandboxOptions>;

  constructor(options: SandboxOptions = {}) {
    if (options.timeout !== undefined) parseDuration(options.timeout);
    if (options.sandbox !== undefined) validateSandboxName(options.sandbox);
    this.options = { ...options };
  }

  /** Runs argv in the sandbox; rejects only when cvisor itself failed (never for the guest). */
  async run(argv: readonly string[], options: RunOptions = {}): Promise<RunResult> {
    checkArgv(argv);
    const layer = openLayer(this.options.sandbox);
    const io = new Stdio();
    try {
      const spec = runSpec(argv, this.options, options, layer);
      const stdio: [number, number, number] = [
        io.input(options.stdin ?? "ignore"),
        io.output("stdout", options.stdout ?? "pipe", 1),
        io.output("stderr", options.stderr ?? "pipe", 2),
      ];
      return await supervise(native.createRun({ ...spec, stdio }), io, options.signal);
    } finally {
      io.closeGuestEnds();
      io.closeOwnEnds();
      // The guest tree is gone (supervise freed the run): an ephemeral sandbox goes with it.
      closeLayer(layer);
    }
  }
}

/** The pipes of one run: the guest's ends (closed once the run started) and ours. */
class Stdio {
  readonly guestEnds: number[] = [];
  /** Our ends not yet owned by a socket. */
  readonly ownEnds = new Set<number>();
  readonly captures: { stream: "stdout" | "stderr"; fd: number; chunks: Buffer[] }[] = [];
  feed: { fd: number; data: Uint8Array } | undefined;

  input(mode: NonNullable<RunOptions["stdin"]>): number {
    if (mode === "ignore") return -1;
    if (mode === "inherit") return 0;
    const [r, w] = this.pipe();
    this.guestEnds.push(r);
    this.feed = { fd: w, data: typeof mode === "string" ? Buffer.from(mode) : mode };
    return r;
  }

  output(stream: "stdout" | "stderr", mode: OutputMode, inherit: number): number {
    if (mode === "ignore") return -1;
    if (mode === "inherit") return inherit;
    if (mode !== "pipe") throw new UsageError(`invalid output mode: ${String(mode)}`, "EINVAL");
    const [r, w] = this.pipe();
    this.guestEnds.push(w);
    this.captures.push({ stream, fd: r, chunks: [] });
    return w;
  }

  private pipe(): [number, number] {
    const fds = native.pipe();
    this.ownEnds.add(fds[0]).add(fds[1]);
    return fds;
  }

  /** Our ends are handed to sockets from here on; the sockets close them. */
  adopt(fd: number): number {
    this.ownEnds.delete(fd);
    return fd;
  }

  /** What the guest wrote to a captured stream ("" when not captured). */
  text(stream: "stdout" | "stderr"): string {
    const capture = this.captures.find((c) => c.stream === stream);
    return capture ? Buffer.concat(capture.chunks).toString() : "";
  }

  closeGuestEnds(): void {
    for (const fd of this.guestEnds.splice(0)) {
      this.ownEnds.delete(fd);
      closeQuietly(fd);
    }
  }

  closeOwnEnds(): void {
    for (const fd of this.ownEnds) closeQuietly(fd);
    this.ownEnds.clear();
  }
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed: nothing left to release.
  }
}

/** Starts the run, waits for it on the event loop, and frees it whatever happens. */
async function supervise(
  run: native.NativeRun,
  io: Stdio,
  signal: AbortSignal | undefined,
): Promise<RunResult> {
  const onAbort = (): void => {
    try {
      native.kill(run);
    } catch {
      // The run is over or already freed: nothing to kill.
    }
  };
  let stdinSocket: net.Socket | undefined;
  let stopWatching = (): void => undefined;
  try {
    const { doneFd } = native.start(run);
    io.closeGuestEnds();
    const done = untilClosed(doneFd);
    const captured = io.captures.map((c) => untilClosed(io.adopt(c.fd), c.chunks));
    if (io.feed) stdinSocket = feed(io.adopt(io.feed.fd), io.feed.data);
    if (signal?.aborted) onAbort();
    else if (signal) stopWatching = watchAbort(signal, onAbort);
    await done;
    // Freed (by finishRun) before waiting for the captured pipes: the guest tree is over once
    // done_fd closed, and no copy of a write end held for the run can then delay their EOF.
    const { raw, failure, notifications, denials } = finishRun(run);
    await Promise.all(captured);
    if (failure) throw failure;
    return toRunResult(raw, notifications, io.text("stdout"), io.text("stderr"), denials);
  } finally {
    stopWatching();
    stdinSocket?.destroy();
    native.free(run);
  }
}

/** The runs waiting on each AbortSignal: one listener per signal, however many runs share it. */
const abortWatchers = new WeakMap<AbortSignal, Set<() => void>>();

/** Calls onAbort when signal aborts; returns the function that stops watching. */
function watchAbort(signal: AbortSignal, onAbort: () => void): () => void {
  let watchers = abortWatchers.get(signal);
  if (!watchers) {
    const set = new Set<() => void>();
    signal.addEventListener("abort", () => set.forEach((watcher) => watcher()), { once: true });
    abortWatchers.set(signal, set);
    watchers = set;
  }
  const set = watchers;
  set.add(onAbort);
  return () => set.delete(onAbort);
}

/** Resolves when fd (a pipe read end) reaches EOF or fails; the socket then closes the fd. */
function untilClosed(fd: number, chunks?: Buffer[]): Promise<void> {
  return new Promise((resolve) => {
    const socket = new net.Socket({ fd, readable: true, writable: false });
    socket.on("error", () => socket.destroy());
    socket.on("close", () => resolve());
    if (chunks) socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    else socket.resume();
  });
}

/** Writes data to the guest's stdin pipe and ends it; a guest that stops reading is no error. */
function feed(fd: number, data: Uint8Array): net.Socket {
  const socket = new net.Socket({ fd, readable: false, writable: true });
  socket.on("error", () => socket.destroy());
  socket.end(data);
  return socket;
}
