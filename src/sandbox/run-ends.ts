// Which runs ended, for all the runs of this process on one socket: each run sends its token
// there as it ends (cv_run_set_end_note). Watching each run's own done fd took a net.Socket a
// run, which cost a short run more than the rest of its bookkeeping.
import net from "node:net";
import * as native from "../core/native.js";

const TOKEN_BYTES = 8;

interface Ends {
  /** Our copy of the write end: each run takes a dup of it. */
  writeFd: number;
  socket: net.Socket;
  waiting: Map<number, () => void>;
  next: number;
  /** A token read in part. */
  partial: Buffer;
}

let ends: Ends | undefined;

/** Forgets token's wait; with none left the socket no longer holds the event loop open. */
function forget(e: Ends, token: number): void {
  e.waiting.delete(token);
  if (e.waiting.size === 0) e.socket.unref();
}

function open(): Ends {
  const [readFd, writeFd] = native.socketpair();
  const socket = new net.Socket({ fd: readFd, readable: true, writable: false });
  const e: Ends = { writeFd, socket, waiting: new Map(), next: 1, partial: Buffer.alloc(0) };
  socket.on("data", (chunk: Buffer) => {
    let buf = e.partial.length ? Buffer.concat([e.partial, chunk]) : chunk;
    for (; buf.length >= TOKEN_BYTES; buf = buf.subarray(TOKEN_BYTES)) {
      const token = Number(buf.readBigUInt64LE(0));
      const resolve = e.waiting.get(token);
      forget(e, token);
      resolve?.();
    }
    e.partial = Buffer.from(buf);
  });
  // Reading a socket pair does not fail; if it did, the runs it watched could not be told
  // over, and the next run opens a new one.
  socket.on("error", () => socket.destroy());
  socket.on("close", () => {
    if (ends === e) ends = undefined;
    native.close(e.writeFd);
  });
  socket.unref();
  return e;
}

/**
 * Resolves once `run` is over (as its done fd reaches EOF). Call before native.start; if the
 * start fails, `cancel` forgets the wait.
 */
export function whenOver(run: native.NativeRun): { over: Promise<void>; cancel: () => void } {
  const e = (ends ??= open());
  const token = e.next++;
  native.setEndNote(run, e.writeFd, token);
  const over = new Promise<void>((resolve) => e.waiting.set(token, resolve));
  e.socket.ref();
  return { over, cancel: () => forget(e, token) };
}
