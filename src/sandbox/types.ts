// The public shapes of the library API: what a Sandbox takes and what a run resolves to.
import type { Readable, Writable } from "node:stream";
import type { LimitHit, Limits, LimitsReport } from "./limits.js";
import type { NetworkMode } from "./net-policy.js";
import type { HookError, SyscallHook } from "./syscall-hook.js";

/** A secret's value, or where to read it. */
export type SecretSource = string | { env: string } | { file: string };

/** Where a guest may bind an inet port and listen. */
export type ListenPolicy = "loopback" | "any" | "none";

/** Options of a Sandbox, the defaults of each of its runs. */
export interface SandboxOptions {
  /**
   * The name of a persistent sandbox: the guest's changes are kept under
   * $CVISOR_HOME/sandboxes/<name> and seen again by the next run with the same name (created on
   * first use). 1 to 64 letters, digits, '-', '_', '.'. Without it every run is ephemeral: its
   * changes are thrown away when it ends. The guest's hostname and CVISOR_SANDBOX are the name
   * ("cvisor" for ephemeral runs).
   */
  sandbox?: string;
  /**
   * "host" (or true): inet sockets reach what the host reaches, but a cloud's metadata range
   * (169.254.0.0/16, fd00:ec2::254) unless `allowNet` names it; "none" (or false): AF_INET/AF_INET6
   * sockets fail (AF_UNIX always works). Left out with `allowNet` given: only what it allows.
   */
  network?: boolean | NetworkMode;
  /**
   * The inet destinations a guest may connect and send to (TCP and UDP): "host[:port]",
   * "*.domain[:port]", "IP[/prefix][:port]", "[IPv6][/prefix][:port]", a port or a range
   * "8000-8100". A host name is allowed for what it resolves to when the guest looks it up (the
   * run's name service resolves it on this host, or on `dns`, and allows those addresses), or
   * for the addresses its /etc/hosts lists. Loopback and link-local addresses only when a rule
   * names them by address, or /etc/hosts lists them.
   */
  allowNet?: readonly string[];
  /** Names the guest's /etc/hosts adds, as docker's --add-host: "name:ip" or "name=ip". */
  addHosts?: readonly string[];
  /**
   * DNS servers, "IP[:PORT]" or "[IPv6]:PORT" (docker's --dns): the guest's (port 53 only), or
   * with allowNet names, the ones the run's name service asks instead of this host's resolver.
   */
  dns?: readonly string[];
  /**
   * Secrets the guest never holds: NAME → its value, or where to read it ({ env: "VAR" },
   * { file: "path" }). The guest's NAME holds a placeholder; `inject` puts the value on requests.
   */
  secrets?: Readonly<Record<string, SecretSource>>;
  /**
   * "HOST[:PORT] Header-Name: value {NAME}" (port 443 by default): the credential broker adds
   * the header to each HTTPS request the guest makes to HOST ("http://HOST[:PORT] ...": plain
   * HTTP, port 80 by default; a guest speaking the other one is refused).
   */
  inject?: readonly string[];
  /**
   * "HOST[:PORT] METHOD[,METHOD] PATH" ("*": any method; a PATH ending in "*" is a prefix): with
   * any for an injected host, the broker sends on only the requests one of them allows (403).
   */
  allowHttp?: readonly string[];
  /**
   * Where a guest may bind an inet port and listen: "loopback" (the default: 127.0.0.0/8 and
   * ::1), "any", or "none".
   */
  listen?: ListenPolicy;
  /** true: listen "any"; false: "none" (the older form of `listen`). */
  allowListen?: boolean;
  /**
   * Host unix sockets the guest may connect and send to (paths; default none: an ssh-agent,
   * Docker's or D-Bus's socket is refused with EACCES). Sockets made inside the sandbox work.
   */
  allowUnix?: readonly string[];
  /** Added to the default guest environment (see buildEnv). */
  env?: Record<string, string>;
  /** Working directory of the guest (default: this process's cwd). */
  cwd?: string;
  /** Deadline: milliseconds, or "500ms", "5s", "2m", "1h". */
  timeout?: number | string;
  /** More paths the guest must not read (absolute, or relative to this process's cwd). */
  hide?: readonly string[];
  /** Paths to take out of the default hidden list (credentials in $HOME, cvisor's state). */
  expose?: readonly string[];
  /** Reject runs whose guest does not exit 0 (RunFailedError, carrying the result). */
  reject?: boolean;
  /**
   * Decide the guest's calls of some syscalls (docs/library.md, "onSyscall"): the handler sees
   * each call and allows it (cvisor's own handling goes on) or denies it with an errno.
   */
  onSyscall?: SyscallHook;
  /**
   * Resource limits of each run's whole guest tree (Docker's units: memory "256m", pids, cpus
   * 0.5), enforced by the kernel's cgroups; a run fails (SetupError) when this host gives none.
   */
  limits?: Limits;
}

/** Where a guest stream goes: this process's own fd, a captured pipe, or /dev/null. */
export type OutputMode = "inherit" | "pipe" | "ignore";

/** Options of one run; they override the Sandbox's. */
export interface RunOptions {
  /** Merged over the Sandbox's env; a value `undefined` removes the key. */
  env?: Record<string, string | undefined>;
  cwd?: string;
  timeout?: number | string;
  network?: boolean | NetworkMode;
  /** Added to the Sandbox's allowNet list. */
  allowNet?: readonly string[];
  /** Added to the Sandbox's addHosts list. */
  addHosts?: readonly string[];
  /** Added to the Sandbox's dns list. */
  dns?: readonly string[];
  /** Merged over the Sandbox's secrets. */
  secrets?: Readonly<Record<string, SecretSource>>;
  /** Added to the Sandbox's inject list. */
  inject?: readonly string[];
  /** Added to the Sandbox's allowHttp list. */
  allowHttp?: readonly string[];
  listen?: ListenPolicy;
  allowListen?: boolean;
  /** Added to the Sandbox's allowUnix list. */
  allowUnix?: readonly string[];
  /** Added to the Sandbox's hide list. */
  hide?: readonly string[];
  /** Added to the Sandbox's expose list. */
  expose?: readonly string[];
  /** "ignore" (default): /dev/null; "inherit": this process's stdin; a string or bytes: fed to the guest. */
  stdin?: "inherit" | "ignore" | string | Uint8Array;
  /** Default "pipe": captured into RunResult.stdout. */
  stdout?: OutputMode;
  /** Default "pipe": captured into RunResult.stderr. */
  stderr?: OutputMode;
  /** Aborting kills the whole guest tree; the run still resolves with its result. */
  signal?: AbortSignal;
  /** Reject when the guest does not exit 0 (RunFailedError, carrying the result). */
  reject?: boolean;
  /** This run's hook, instead of the Sandbox's (null: none). */
  onSyscall?: SyscallHook | null;
  /** Each limit given here replaces the Sandbox's. */
  limits?: Limits;
}

/** Options of a spawn: a run's, with stdin a stream by default. */
export interface SpawnOptions extends Omit<RunOptions, "stdin"> {
  /** "pipe" (default): SandboxProcess.stdin, a stream the caller ends; "ignore"; "inherit". */
  stdin?: "pipe" | "ignore" | "inherit";
  /**
   * A pseudo-terminal of the guest's own (`true`: 80x24), as `docker run -t` gives: the guest's
   * stdin, stdout and stderr are its slave and its session's controlling terminal (job control,
   * ^C and ^Z work in it); `stdout` reads what the guest shows (stderr included), `stdin`
   * types into it, `resize()` changes its size. The stdin, stdout and stderr options are
   * ignored.
   */
  tty?: boolean | { cols?: number; rows?: number };
}

/** A guest started by Sandbox.spawn. */
export interface SandboxProcess {
  /** The guest's stdin (when "pipe"): end() it when done. */
  stdin: Writable | null;
  /** The guest's stdout and stderr (when "pipe"): readable streams, async iterable. */
  stdout: Readable | null;
  stderr: Readable | null;
  /**
   * Without a signal (or SIGKILL): kills the whole guest tree, every process of the sandbox.
   * With another signal ("SIGTERM", "SIGINT", a number): sends it to the main guest process only,
   * as kill(1) would; the tree ends when the main process does. The result still resolves.
   */
  kill(signal?: NodeJS.Signals | number): void;
  /** How the run ended; stdout and stderr are "" in it (they were streamed). */
  result: Promise<RunResult>;
  /** With `tty`: sets the terminal's size (the guest gets SIGWINCH). A UsageError without. */
  resize(cols: number, rows: number): void;
}

/**
 * A call the sandbox refused: the syscall ("dns" for a name lookup the run's name service
 * refused), what it named (a path, an address, a name), why, how often, and the first process
 * it refused (pid and name, when known).
 */
export interface Denial {
  syscall: string;
  target: string;
  why: string;
  count: number;
  pid?: number;
  process?: string;
}

/** Resource use of a run. */
export interface RunStats {
  /** Seccomp notifications handled, per syscall name. */
  notifications: Record<string, number>;
  totalNotifications: number;
  userMs: number;
  systemMs: number;
  maxRssKb: number;
}

/** How a run ended; exitCode follows the CLI convention (128+N, 124, 126, 127). */
export interface RunResult {
  exitCode: number;
  /** "SIGKILL" etc. when the guest was killed by a signal, else null. */
  signal: string | null;
  timedOut: boolean;
  /** Captured output ("" unless the stream was "pipe"). */
  stdout: string;
  stderr: string;
  durationMs: number;
  stats: RunStats;
  /** Errno name when the command could not be executed, e.g. "ENOENT" when not found. */
  execError?: string;
  /** What the sandbox refused the guest (each distinct refusal once). */
  denials: Denial[];
  /** With onSyscall: the handler's failures (each failed its call closed, EPERM). */
  hookErrors?: HookError[];
  /** With limits: what enforced each, the peaks, and the limit the run hit. */
  limits?: LimitsReport;
  /** "memory", "disk": that limit ended the run (exitCode 137); "pids": a fork was refused. */
  limitHit?: LimitHit;
}
