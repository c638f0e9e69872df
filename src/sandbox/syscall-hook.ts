// The embedder's per-syscall hook (`onSyscall`): the run's filter notifies the hooked syscalls,
// the supervisor describes each call on a socket (native/src/supervisor/hook.h: the registers,
// and the strings the arguments point to, read once from the guest) and waits; here the call is
// decoded, the handler asked, and its answer written back. A hook can only make the sandbox
// stricter: `allow` lets cvisor's own handling go on (the overlay, the hiding, the network
// policy), `deny` fails the call with an errno, `result` answers it without making it. A handler that throws, or a hook that stops
// answering, fails the call closed (EPERM); the error is in the run's result.
import net from "node:net";
import { constants as osConstants } from "node:os";
import { UsageError } from "../core/errors.js";
import * as native from "../core/native.js";

/** A socket address a call names (connect, bind, sendto). */
export type SocketAddress =
  | { family: "inet" | "inet6"; address: string; port: number }
  | { family: "unix"; path: string; abstract: boolean }
  | { family: "other"; number: number };

/** One hooked call, as the supervisor saw it. */
export interface SyscallCall {
  /** The syscall's name ("openat") and number (257). */
  name: string;
  nr: number;
  /** The calling thread and its process, as the host numbers them. */
  tid: number;
  pid: number;
  /** The raw registers. */
  args: readonly bigint[];
  /** Paths the call names, as the guest wrote them (relative ones too), in argument order. */
  paths: string[];
  /**
   * Each of `paths` as resolved in the sandbox (same index): the absolute, symlink-free path the
   * call acts on, from the guest's working directory or dirfd, following a final symlink where
   * the call does (open without O_NOFOLLOW, stat, exec; not lstat, unlink, rename). null when
   * it names nothing there (a missing directory on the way), and for a symlink's target text.
   */
  resolved: (string | null)[];
  /** open/openat/openat2/creat: the open flags, by name ("O_WRONLY", "O_CREAT", ...). */
  flags?: string[];
  /** execve/execveat: the new program's arguments (the first 64). */
  argv?: string[];
  /** connect/bind/sendto: the address. */
  address?: SocketAddress;
  /**
   * What cvisor does with the call if the hook allows it: "native" (the kernel runs it as it
   * is), "handled" (the supervisor answers it: the overlay, the hiding, the socket policy), or
   * "denied" (it fails with `deniedErrno` whatever the hook says).
   */
  cvisor: "native" | "handled" | "denied";
  deniedErrno?: string;
}

/**
 * What a handler answers: let cvisor go on, fail the call with an errno, or answer it with a
 * value instead of making it (a call cvisor itself refuses stays refused).
 */
export type SyscallDecision =
  | { action: "allow" }
  | { action: "deny"; errno: string | number }
  | { action: "result"; value: number | bigint };

/** The hook of a Sandbox or of one run. */
export interface SyscallHook {
  /** Syscall names to watch ("openat", "connect", "execve"). */
  syscalls: readonly string[];
  handler: (call: SyscallCall) => SyscallDecision | Promise<SyscallDecision>;
}

/** Lets cvisor's own handling of the call go on. */
export const allow: SyscallDecision = Object.freeze({ action: "allow" });

/** Fails the call with errno (a name such as "EACCES", or its number). */
export function deny(errno: string | number = "EPERM"): SyscallDecision {
  return { action: "deny", errno };
}

/**
 * Answers the call with value instead of making it (getuid → 0, a write → its length): what the
 * guest sees; nothing happens on the host. A call cvisor refuses stays refused.
 */
export function result(value: number | bigint): SyscallDecision {
  return { action: "result", value };
}

/** A handler that failed: the call it was asked about failed closed (EPERM). */
export interface HookError {
  syscall: string;
  message: string;
}

const ERRNO = osConstants.errno as Record<string, number | undefined>;
const REQ_HEADER = 88; // struct cv_hook_req
const STR_HEADER = 8; // struct cv_hook_str
const POLICY = ["native", "handled", "denied"] as const;

/** The syscall numbers of the names, checked: a name the filter table does not know is refused. */
export function hookedNumbers(hook: SyscallHook): Map<number, string> {
  if (!Array.isArray(hook.syscalls) || hook.syscalls.length === 0) {
    throw new UsageError('onSyscall.syscalls: name at least one syscall (e.g. ["openat"])');
  }
  if (typeof hook.handler !== "function") {
    throw new UsageError("onSyscall.handler: a function that returns allow or deny(errno)");
  }
  const out = new Map<number, string>();
  for (const name of hook.syscalls) {
    const nr = typeof name === "string" ? native.syscallNumber(name) : undefined;
    if (nr === undefined) throw new UsageError(`onSyscall: unknown syscall ${String(name)}`);
    out.set(nr, name);
  }
  return out;
}

const OPEN_FLAGS: readonly [string, number][] = [
  ["O_CREAT", 0o100],
  ["O_EXCL", 0o200],
  ["O_NOCTTY", 0o400],
  ["O_TRUNC", 0o1000],
  ["O_APPEND", 0o2000],
  ["O_NONBLOCK", 0o4000],
  ["O_DSYNC", 0o10000],
  ["O_DIRECT", 0o40000],
  ["O_DIRECTORY", 0o200000],
  ["O_NOFOLLOW", 0o400000],
  ["O_NOATIME", 0o1000000],
  ["O_CLOEXEC", 0o2000000],
  ["O_PATH", 0o10000000],
];

function openFlags(value: bigint): string[] {
  const v = Number(value & 0xffffffffn);
  const out = [["O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"][v & 3] as string];
  for (const [name, bit] of OPEN_FLAGS) if (v & bit) out.push(name);
  if ((v & 0o20200000) === 0o20200000) out.push("O_TMPFILE");
  return out;
}

/** The flags argument of the open family, by syscall name. */
const FLAGS_ARG: Record<string, number> = { open: 1, openat: 2, creat: -1 };

function socketAddress(b: Buffer): SocketAddress {
  const family = b.length >= 2 ? b.readUInt16LE(0) : -1;
  if (family === 1) {
    const raw = b.subarray(2);
    const abstract = raw[0] === 0 && raw.length > 0;
    const body = abstract ? raw.subarray(1) : raw;
    const end = abstract ? body.length : body.indexOf(0);
    return {
      family: "unix",
      path: body.subarray(0, end < 0 ? body.length : end).toString(),
      abstract,
    };
  }
  if (family === 2 && b.length >= 8) {
    return { family: "inet", address: [...b.subarray(4, 8)].join("."), port: b.readUInt16BE(2) };
  }
  if (family === 10 && b.length >= 24) {
    const words: string[] = [];
    for (let i = 8; i < 24; i += 2) words.push(b.readUInt16BE(i).toString(16));
    return { family: "inet6", address: words.join(":"), port: b.readUInt16BE(2) };
  }
  return { family: "other", number: family };
}

function decode(msg: Buffer, names: Map<number, string>): { seq: bigint; call: SyscallCall } {
  const nr = msg.readUInt32LE(4);
  const seq = msg.readBigUInt64LE(8);
  const args = Array.from({ length: 6 }, (_, i) => msg.readBigUInt64LE(24 + 8 * i));
  const policy = msg.readUInt32LE(72);
  const name = names.get(nr) ?? String(nr);
  const call: SyscallCall = {
    name,
    nr,
    tid: msg.readInt32LE(16),
    pid: msg.readInt32LE(20),
    args,
    paths: [],
    resolved: [],
    cvisor: POLICY[policy] ?? "handled",
  };
  if (call.cvisor === "denied") call.deniedErrno = native.errnoName(msg.readInt32LE(76));
  let at = REQ_HEADER;
  const nstr = msg.readUInt32LE(80);
  for (let i = 0; i < nstr && at + STR_HEADER <= msg.length; i++) {
    const what = msg.readUInt8(at);
    const len = msg.readUInt32LE(at + 4);
    const bytes = msg.subarray(at + STR_HEADER, at + STR_HEADER + len);
    at += STR_HEADER + len;
    if (what === 1) {
      call.paths.push(bytes.toString());
      call.resolved.push(null);
    } else if (what === 4 && call.resolved.length > 0) {
      call.resolved[call.resolved.length - 1] = bytes.toString(); // follows its path
    } else if (what === 2) (call.argv ??= []).push(bytes.toString());
    else if (what === 3) call.address = socketAddress(bytes);
  }
  const flagsAt = FLAGS_ARG[name];
  if (flagsAt !== undefined) {
    call.flags = flagsAt < 0 ? openFlags(0o1101n) : openFlags(args[flagsAt] ?? 0n);
  }
  return { seq, call };
}

function errnoNumber(e: string | number): number | undefined {
  const n = typeof e === "number" ? e : ERRNO[e];
  return n !== undefined && Number.isInteger(n) && n > 0 && n < 4096 ? n : undefined;
}

/**
 * Serves the hook on our end of the socket pair until the run closes its end; resolves to the
 * handler's failures. Calls are handed to the handler as they come, without waiting for earlier
 * answers: a slow answer holds only the guest thread that made that call.
 */
export function serveHook(
  fd: number,
  hook: SyscallHook,
  names: Map<number, string>,
): Promise<HookError[]> {
  const errors: HookError[] = [];
  const socket = new net.Socket({ fd, readable: true, writable: true });
  let pending: Buffer = Buffer.alloc(0);
  /** The answer: allow (nothing), deny with an errno, or a value the call returns. */
  const reply = (seq: bigint, deny: number | undefined, value?: bigint): void => {
    const out = Buffer.alloc(24); // struct cv_hook_reply
    out.writeBigUInt64LE(seq, 0);
    out.writeInt32LE(value !== undefined ? 2 : deny === undefined ? 0 : 1, 8);
    out.writeInt32LE(deny ?? 0, 12);
    out.writeBigInt64LE(value ?? 0n, 16);
    if (!socket.destroyed) socket.write(out);
  };
  const answer = async (msg: Buffer): Promise<void> => {
    const { seq, call } = decode(msg, names);
    let decision: SyscallDecision;
    try {
      decision = await hook.handler(call);
    } catch (err) {
      errors.push({
        syscall: call.name,
        message: err instanceof Error ? err.message : String(err),
      });
      reply(seq, osConstants.errno.EPERM);
      return;
    }
    if (decision?.action === "allow") {
      reply(seq, undefined);
    } else if (decision?.action === "result") {
      let value: bigint | undefined;
      try {
        value = BigInt(decision.value);
      } catch {
        value = undefined;
      }
      if (value === undefined || value < -(2n ** 63n) || value >= 2n ** 63n) {
        errors.push({
          syscall: call.name,
          message: `result(${String(decision.value)}): not a 64-bit integer`,
        });
        reply(seq, osConstants.errno.EPERM);
      } else {
        reply(seq, undefined, value);
      }
    } else if (decision?.action === "deny") {
      const n = errnoNumber(decision.errno);
      if (n === undefined) {
        errors.push({
          syscall: call.name,
          message: `deny(${String(decision.errno)}): not an errno`,
        });
      }
      reply(seq, n ?? osConstants.errno.EPERM);
    } else {
      errors.push({ syscall: call.name, message: "the handler answered neither allow nor deny" });
      reply(seq, osConstants.errno.EPERM);
    }
  };
  socket.on("data", (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 4 && pending.length >= pending.readUInt32LE(0)) {
      const len = pending.readUInt32LE(0);
      if (len < REQ_HEADER) {
        socket.destroy(); // not a message of ours: the run's calls fail closed
        return;
      }
      const msg = pending.subarray(0, len);
      pending = pending.subarray(len);
      // Each call is answered on its own: a handler that takes its time holds only its caller.
      answer(msg).catch(() => socket.destroy()); // a message we cannot read: fail closed
    }
  });
  return new Promise((resolve) => {
    socket.on("error", () => socket.destroy());
    // The run is over: a handler still busy answers nobody (the supervisor gave its call up).
    socket.on("close", () => resolve(errors));
  });
}
