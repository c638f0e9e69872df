// Where things are, and how e2e tests run the `cvisor` CLI: a real child process, its output
// captured, with a hard deadline of its own so a hung sandbox fails the test instead of the run.
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { userInfo } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file is dist/test/helpers/repo.js once compiled). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
/** The CLI as installed: the package's bin (src/cli/bin.cts, which runs the bundle of src/cli/main.ts). */
export const cliPath = path.join(
  repoRoot,
  (
    JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")) as {
      bin: { cvisor: string };
    }
  ).bin.cvisor,
);
/** C and shell fixture sources (not compiled by tsc). */
export const fixtureSources = path.join(repoRoot, "test", "fixtures");

/** The system temp dir ($TMPDIR, else /tmp), read from the environment as os.tmpdir() does. */
export function tempRoot(): string {
  const dir = process.env.TMPDIR;
  return dir && path.isAbsolute(dir) ? dir.replace(/\/+$/, "") || "/" : "/tmp";
}

/** The home directory the guard watches: $HOME, else the passwd entry. */
export function homeDir(): string {
  const home = process.env.HOME;
  return home && path.isAbsolute(home) ? home : userInfo().homedir;
}

export interface CliOptions {
  /** Fed to the CLI's stdin (then closed); without it stdin is /dev/null. */
  input?: string | Uint8Array;
  /** The CLI's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Added over `env`. */
  extraEnv?: Record<string, string>;
  cwd?: string;
  /** Hard deadline for the CLI process (default 30 s); on expiry its process group is killed. */
  timeoutMs?: number;
  /** An fd to use as the CLI's stdout instead of a pipe (e.g. a file the test opened). */
  stdoutFd?: number;
  /** An fd to use as the CLI's stdin (instead of `input` or /dev/null). */
  stdinFd?: number;
  /** Called with the CLI's pid as soon as it is spawned. */
  onSpawn?: (pid: number) => void;
}

export interface CliResult {
  /** Exit code, null when the CLI process itself died of a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: Buffer;
  /** stdout/stderr decoded as UTF-8. */
  out: string;
  err: string;
  durationMs: number;
  pid: number;
  /** The hard deadline fired and the CLI's process group was killed. */
  hung: boolean;
  /** The CLI exited but its stdout/stderr pipes stayed open (something it started still holds them). */
  stdioLeftOpen: boolean;
}

/** Runs `node <bin> ...args` and resolves when it exited and its pipes closed. */
export function runCli(args: readonly string[], opts: CliOptions = {}): Promise<CliResult> {
  return runProcess(process.execPath, [cliPath, ...args], opts);
}

/** Runs any program the way runCli runs the CLI (own process group, hard deadline, capture). */
export function runProcess(
  file: string,
  args: readonly string[],
  opts: CliOptions = {},
): Promise<CliResult> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const env = { ...(opts.env ?? process.env), ...(opts.extraEnv ?? {}) };
  const start = performance.now();
  const stdin = opts.stdinFd ?? (opts.input === undefined ? "ignore" : "pipe");
  const child = spawn(file, args, {
    cwd: opts.cwd ?? repoRoot,
    env,
    stdio: [stdin, opts.stdoutFd ?? "pipe", "pipe"],
    detached: true, // its own process group, so the deadline can kill everything it started
  });
  if (child.pid === undefined) {
    return Promise.reject(new Error(`could not spawn ${file}`));
  }
  const pid = child.pid;
  opts.onSpawn?.(pid);
  const outChunks: Buffer[] = [];
  const errChunks: Buffer[] = [];
  child.stdout?.on("data", (chunk: Buffer) => outChunks.push(chunk));
  child.stderr?.on("data", (chunk: Buffer) => errChunks.push(chunk));
  if (child.stdin) {
    child.stdin.on("error", () => undefined); // the guest may not read it all (EPIPE)
    child.stdin.end(opts.input);
  }
  return new Promise((resolve, reject) => {
    let hung = false;
    let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;
    let closeTimer: NodeJS.Timeout | undefined;
    const deadline = setTimeout(() => {
      hung = true;
      killGroup(pid);
    }, timeoutMs);
    const finish = (stdioLeftOpen: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      if (closeTimer) clearTimeout(closeTimer);
      if (stdioLeftOpen) {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }
      const stdout = Buffer.concat(outChunks);
      const stderr = Buffer.concat(errChunks);
      resolve({
        code: exited?.code ?? null,
        signal: exited?.signal ?? null,
        stdout,
        stderr,
        out: stdout.toString("utf8"),
        err: stderr.toString("utf8"),
        durationMs: performance.now() - start,
        pid,
        hung,
        stdioLeftOpen,
      });
    };
    child.on("error", (err) => {
      clearTimeout(deadline);
      reject(err);
    });
    child.on("exit", (code, signal) => {
      exited = { code, signal };
      // The pipes should close with it; if a stray process holds them, say so after 3 s.
      closeTimer = setTimeout(() => finish(true), 3000);
    });
    child.on("close", (code, signal) => {
      exited ??= { code, signal };
      finish(false);
    });
  });
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // Already gone.
  }
}

/** `cvisor [opts] -- argv...` */
export function cvisor(
  options: readonly string[],
  argv: readonly string[],
  opts: CliOptions = {},
): Promise<CliResult> {
  return runCli([...options, "--", ...argv], opts);
}

/** A compact description of a CLI result for assertion messages. */
export function show(r: CliResult): string {
  const clip = (s: string): string => (s.length > 2000 ? `${s.slice(0, 2000)}…(${s.length})` : s);
  return (
    `exit=${String(r.code)} signal=${String(r.signal)} hung=${r.hung} ` +
    `stdioLeftOpen=${r.stdioLeftOpen} ${Math.round(r.durationMs)}ms\n` +
    `--- stdout ---\n${clip(r.out)}\n--- stderr ---\n${clip(r.err)}`
  );
}

/** How many of the named syscalls a `--json` run had notified (its report: stderr's last line). */
export function notified(r: CliResult, ...names: string[]): number {
  const lines = r.err.split("\n").filter((l) => l !== "");
  const report = JSON.parse(lines[lines.length - 1] ?? "{}") as {
    notifications?: Record<string, number>;
  };
  const n = report.notifications ?? {};
  return names.reduce((sum, name) => sum + (n[name] ?? 0), 0);
}

/** Is the CLI built? (e2e files skip themselves with a clear reason when not.) */
export function cliBuilt(): boolean {
  return existsSync(cliPath);
}

/** Absolute path of a program on this process's PATH, or null. */
export function which(name: string): string | null {
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(":")) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      if (existsSync(candidate)) return candidate;
    } catch {
      // Unreadable directory: keep looking.
    }
  }
  return null;
}

export interface ProcInfo {
  pid: number;
  cmdline: string;
}

/** Every process whose /proc/PID/cmdline contains `marker` (zombies have none and never match). */
export function processesWith(marker: string): ProcInfo[] {
  const found: ProcInfo[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
    } catch {
      continue;
    }
    if (cmdline.includes(marker)) found.push({ pid: Number(name), cmdline });
  }
  return found.filter((p) => p.pid !== process.pid);
}

/** Is `pid` alive and not a zombie? */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Kills (SIGKILL) every process carrying `marker`: cleanup after a failed containment test. */
export function killAllWith(marker: string): void {
  for (const p of processesWith(marker)) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `cond` every 25 ms until it holds or `ms` passed; returns its last value. */
export async function waitFor(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (cond()) return true;
    if (Date.now() >= end) return cond();
    await sleep(25);
  }
}

/** A unique token for markers and secrets. */
export function uniqueToken(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}

/** Quotes one word for sh. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
