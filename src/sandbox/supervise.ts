// One run's plumbing, shared by Sandbox.run (output captured into the result) and
// Sandbox.spawn (output as streams): the guest's stdio pipes, the start, the wait for the end
// on the event loop (./run-ends.ts: no threadpool, no sync wait), and the
// free whatever happens.
import { closeSync } from "node:fs";
import net from "node:net";
import tty from "node:tty";
import { constants as osConstants } from "node:os";
import { UsageError } from "../core/errors.js";
import * as native from "../core/native.js";
import { finishRun, releaseLimits } from "./native-run.js";
import { whenOver } from "./run-ends.js";
import { toRunResult } from "./result.js";
import type { OutputMode, RunResult } from "./types.js";

/** How the guest's stdin is fed: nothing, this process's, given bytes, or a stream (spawn). */
export type InputMode = "ignore" | "inherit" | "stream" | { data: Uint8Array };

/** The pipes of one run: the guest's ends (closed once the run started) and ours. */
export class Stdio {
  readonly guestEnds: number[] = [];
  /** Our ends not yet owned by a socket. */
  readonly ownEnds = new Set<number>();
  /** Our read ends of the guest's piped output: captured (run) or handed out (spawn). */
  readonly outputs: { stream: "stdout" | "stderr"; fd: number; chunks: Buffer[] }[] = [];
  /** Our write end of the guest's stdin pipe, and what to write to it (none: a stream). */
  input: { fd: number; data?: Uint8Array } | undefined;
  /** The master of the guest's own pseudo-terminal (a tty run). */
  ptyMaster: number | undefined;

  constructor(private readonly capture: boolean) {}

  stdin(mode: InputMode): number {
    if (mode === "ignore") return -1;
    if (mode === "inherit") return 0;
    const [r, w] = this.pipe();
    this.guestEnds.push(r);
    this.input = { fd: w, ...(mode === "stream" ? {} : { data: mode.data }) };
    return r;
  }

  output(stream: "stdout" | "stderr", mode: OutputMode, inherit: number): number {
    if (mode === "ignore") return -1;
    if (mode === "inherit") return inherit;
    if (mode !== "pipe") throw new UsageError(`invalid output mode: ${String(mode)}`, "EINVAL");
    const [r, w] = this.pipe();
    this.guestEnds.push(w);
    this.outputs.push({ stream, fd: r, chunks: [] });
    return w;
  }

  /**
   * A pseudo-terminal of its own for the guest: its stdin, stdout and stderr are the slave (the
   * fd returned), which its session takes as controlling terminal; we keep the master.
   */
  terminal(cols: number, rows: number): number {
    const [master, slave] = native.openpty(cols, rows);
    this.ownEnds.add(master).add(slave);
    this.guestEnds.push(slave);
    this.ptyMaster = master;
    return slave;
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
    const output = this.outputs.find((c) => c.stream === stream);
    return output && this.capture ? Buffer.concat(output.chunks).toString() : "";
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

/** A started run: its streams (spawn) and the promise of its end. */
export interface Started {
  stdin: net.Socket | undefined;
  stdout: net.Socket | undefined;
  stderr: net.Socket | undefined;
  /** A tty run's window size (the guest gets SIGWINCH); undefined without a pty. */
  resize: ((cols: number, rows: number) => void) | undefined;
  /** Kills the whole guest tree (nothing once it is over); a signal: to the main process only. */
  kill(signal?: NodeJS.Signals | number): void;
  /** The result, once the tree is over and the run freed; the output streams end on their own. */
  result: Promise<RunResult>;
}

/**
 * Starts the run and watches it on the event loop; the run is freed whatever happens. Captured
 * output (run) is in the result once every output pipe reached EOF; streamed output (spawn) is
 * in the returned sockets, which the caller reads at its own pace: a guest writing to a pipe
 * nobody reads waits, as it would on a host pipe.
 */
export function startRun(
  run: native.NativeRun,
  io: Stdio,
  capture: boolean,
  signal: AbortSignal | undefined,
): Started {
  let freed = false;
  const free = (): void => {
    if (!freed) native.free(run);
    freed = true;
    releaseLimits(run); // nothing after finishRun did it
  };
  const kill = (signal?: NodeJS.Signals | number): void => {
    const sig = typeof signal === "string" ? osConstants.signals[signal] : signal;
    if (signal !== undefined && sig === undefined) {
      throw new UsageError(`kill: unknown signal ${String(signal)}`);
    }
    try {
      if (freed) return;
      if (sig === undefined || sig === osConstants.signals.SIGKILL) native.kill(run);
      else native.signal(run, sig);
    } catch {
      // The run is over or already freed: nothing to signal.
    }
  };
  let done: Promise<void>;
  let watch: ReturnType<typeof whenOver> | undefined;
  try {
    watch = whenOver(run);
    done = watch.over;
    // The end is told on the process's one socket (./run-ends.ts): this fd is not watched.
    native.close(native.start(run).doneFd);
  } catch (err) {
    watch?.cancel();
    free();
    throw err;
  }
  io.closeGuestEnds();
  const sockets = new Map<"stdout" | "stderr", net.Socket>();
  const captured: Promise<void>[] = [];
  for (const o of io.outputs) {
    const socket = readSocket(io.adopt(o.fd));
    sockets.set(o.stream, socket);
    if (capture) {
      socket.on("data", (chunk: Buffer) => o.chunks.push(chunk));
      captured.push(new Promise((resolve) => socket.on("close", () => resolve())));
    }
  }
  let stdin: net.Socket | undefined;
  let resize: Started["resize"];
  if (io.ptyMaster !== undefined) {
    // The master is both ways: the guest's output is read here, its input written here. Once
    // every slave is closed (the tree is over), reading it fails with EIO: its end.
    const master = io.adopt(io.ptyMaster);
    const term = new tty.ReadStream(master);
    term.on("error", () => term.destroy());
    stdin = term;
    sockets.set("stdout", term);
    resize = (cols, rows) => {
      if (!term.destroyed) native.ptyResize(master, cols, rows);
    };
  } else if (io.input) {
    stdin = new net.Socket({ fd: io.adopt(io.input.fd), readable: false, writable: true });
    // A guest that stops reading its stdin is no error.
    stdin.on("error", () => stdin?.destroy());
    if (io.input.data) stdin.end(io.input.data);
  }
  let stopWatching = (): void => undefined;
  if (signal?.aborted) kill();
  else if (signal) stopWatching = watchAbort(signal, () => kill());
  const result = (async (): Promise<RunResult> => {
    try {
      await done;
      // Freed (by finishRun) before waiting for the captured pipes: the guest tree is over once
      // done_fd closed, and no copy of a write end held for the run can then delay their EOF.
      const { raw, failure, notifications, denials, limits } = finishRun(run);
      await Promise.all(captured);
      if (failure) throw failure;
      const stdout = io.text("stdout");
      return toRunResult(raw, notifications, stdout, io.text("stderr"), denials, limits);
    } finally {
      stopWatching();
      // Fed input (run) ends with the run; a stdin stream (spawn) is the caller's to end.
      if (io.input?.data) stdin?.destroy();
      free();
    }
  })();
  return {
    stdin,
    stdout: sockets.get("stdout"),
    stderr: sockets.get("stderr"),
    resize,
    kill,
    result,
  };
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

/** A socket reading a pipe's read end; it closes the fd. A read error ends it. */
function readSocket(fd: number): net.Socket {
  const socket = new net.Socket({ fd, readable: true, writable: false });
  socket.on("error", () => socket.destroy());
  return socket;
}
