// The plans the command line turns into, and the run plan builder shared by the full
// (commander) parser and the fast path.
import { CvisorError } from "../core/errors.js";
import { parseDuration } from "../sandbox/duration.js";
import { parseLimits, type ParsedLimits } from "../sandbox/limits.js";
import { parseHttpRule, parseInject, parseSecret } from "../sandbox/broker/broker.js";
import {
  parseAddHost,
  parseAllowRule,
  type NetworkMode,
  parseDnsServer,
} from "../sandbox/net-policy.js";
import type { ListenPolicy } from "../sandbox/types.js";
import { validateSandboxName } from "../store/sandboxes.js";
import { EXIT_CVISOR } from "./exit-codes.js";
import { VALUE_FLAGS } from "./commands/run.js";

/** Run a command (or the user's shell) in a sandbox. */
export interface RunPlan {
  kind: "run";
  argv: string[];
  /** True when no command was given and argv is the user's shell. */
  shell: boolean;
  /** The -e additions (already resolved against the host for `-e KEY`). */
  env: Record<string, string>;
  /** --network (--no-network: "none"); unset: host, or an allow-list with --allow-net. */
  network?: NetworkMode;
  /** --allow-net rules and --add-host entries (checked). */
  allowNet: string[];
  addHosts: string[];
  /** --dns servers (checked). */
  dns: string[];
  /** --secret and --inject (checked; the secrets are read when the run starts). */
  secrets: string[];
  inject: string[];
  allowHttp: string[];
  listen: ListenPolicy;
  /** 0: no deadline. */
  timeoutMs: number;
  /** The --timeout text as the user wrote it, for messages. */
  timeoutText?: string;
  workdir?: string;
  json: boolean;
  /** --hide, --expose and --allow-unix, as given (resolved against the cwd when the run is built). */
  hide: string[];
  expose: string[];
  allowUnix: string[];
  /** --sandbox: the named sandbox (validated); without it the run is ephemeral. */
  sandbox?: string;
  /** --trace: syscall names (checked when the run is built). */
  trace: string[];
  /** --trace-file: where the trace goes instead of stderr. */
  traceFile?: string;
  /** -t (true) or -T (false): a pty of the guest's own or never; unset: the shell on a terminal. */
  tty?: boolean;
  /** --memory, --pids-limit, --cpus, --disk (checked). */
  limits?: ParsedLimits;
}

/** Any command but the run (its action in src/cli/commands/ carries it out, loaded only then). */
export interface StoreCommandPlan {
  kind: "command";
  command:
    | "doctor"
    | "ls"
    | "rm"
    | "diff"
    | "export"
    | "cp"
    | "snapshot"
    | "rollback"
    | "branch"
    | "snapshots"
    | "cache"
    | "ui"
    | "completion";
  /** The command's own arguments (names, paths). */
  operands: string[];
  /** The command's own options, as commander parsed them. */
  options: Record<string, string | boolean | string[] | undefined>;
  /** The root --sandbox (validated), if given. */
  sandbox?: string;
  json: boolean;
}

/** Print text (help, version) and exit. */
export interface PrintPlan {
  kind: "print";
  text: string;
  exitCode: number;
}

/** Report a usage error in one line and exit. */
export interface ErrorPlan {
  kind: "error";
  message: string;
  exitCode: number;
}

/** Everything the command line can ask for. */
export type Plan = RunPlan | StoreCommandPlan | PrintPlan | ErrorPlan;

/**
 * The index of the `--` that ends cvisor's own options, or -1. After an option that takes a
 * value the next token is its value, `--` too (`--sandbox --` is a sandbox named "--"), unless
 * no other `--` follows: then the value was left out (`--timeout -- make`), and that `--` is
 * the separator.
 */
export function separatorIndex(args: readonly string[]): number {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") return i;
    if (arg !== undefined && VALUE_FLAGS.has(arg)) {
      if (args[i + 1] === "--" && !args.includes("--", i + 2)) return i + 1;
      i++;
    }
  }
  return -1;
}

/** cvisor's own options, as commander (or the fast path) collects them. */
export interface RootOptions {
  env?: string[];
  /** --network MODE, or false for --no-network. */
  network?: string | boolean;
  allowNet?: string[];
  addHost?: string[];
  dns?: string[];
  secret?: string[];
  inject?: string[];
  allowHttp?: string[];
  allowListen?: boolean;
  /** false: --no-listen. */
  listen?: boolean;
  timeout?: string;
  workdir?: string;
  json?: boolean;
  hide?: string[];
  expose?: string[];
  allowUnix?: string[];
  sandbox?: string;
  trace?: string[];
  traceFile?: string;
  tty?: boolean;
  memory?: string;
  pidsLimit?: string;
  cpus?: string;
  disk?: string;
}

/** The run plan for parsed options and the command after `--` (an error plan if invalid). */
export function buildRunPlan(
  opts: RootOptions,
  command: readonly string[],
  hostEnv: Readonly<Record<string, string | undefined>>,
): Plan {
  const env: Record<string, string> = {};
  for (const entry of opts.env ?? []) {
    const eq = entry.indexOf("=");
    const key = eq < 0 ? entry : entry.slice(0, eq);
    if (key === "") return usageError(`invalid -e value '${entry}' (use KEY=VALUE or KEY)`);
    if (eq >= 0) env[key] = entry.slice(eq + 1);
    else if (hostEnv[key] !== undefined) env[key] = hostEnv[key];
  }
  let timeoutMs = 0;
  if (opts.timeout !== undefined) {
    try {
      timeoutMs = parseDuration(opts.timeout);
      if (timeoutMs === 0) {
        const message = `invalid duration: ${opts.timeout} (a timeout must be longer than 0; leave --timeout out for none)`;
        return { kind: "error", message, exitCode: EXIT_CVISOR };
      }
    } catch (err) {
      if (err instanceof CvisorError)
        return { kind: "error", message: err.message, exitCode: EXIT_CVISOR };
      throw err;
    }
  }
  let limits: ParsedLimits | undefined;
  try {
    limits = parseLimits(undefined, {
      ...(opts.memory !== undefined ? { memory: opts.memory } : {}),
      ...(opts.pidsLimit !== undefined ? { pids: opts.pidsLimit } : {}),
      ...(opts.cpus !== undefined ? { cpus: opts.cpus } : {}),
      ...(opts.disk !== undefined ? { disk: opts.disk } : {}),
    });
  } catch (err) {
    if (err instanceof CvisorError) {
      return { kind: "error", message: err.message, exitCode: EXIT_CVISOR };
    }
    throw err;
  }
  if (opts.sandbox !== undefined) {
    try {
      validateSandboxName(opts.sandbox);
    } catch (err) {
      if (err instanceof CvisorError)
        return { kind: "error", message: err.message, exitCode: EXIT_CVISOR };
      throw err;
    }
  }
  if (opts.allowListen && opts.listen === false) {
    return usageError("--allow-listen and --no-listen cannot be used together");
  }
  const network =
    opts.network === false ? "none" : opts.network === true ? undefined : opts.network;
  if (network !== undefined && network !== "host" && network !== "none") {
    return usageError(`invalid --network mode '${network}': use host or none`);
  }
  const allowNet = opts.allowNet ?? [];
  const addHosts = opts.addHost ?? [];
  const dns = opts.dns ?? [];
  const secrets = opts.secret ?? [];
  const inject = opts.inject ?? [];
  const allowHttp = opts.allowHttp ?? [];
  try {
    allowNet.forEach(parseAllowRule);
    addHosts.forEach(parseAddHost);
    dns.forEach(parseDnsServer);
    secrets.forEach(parseSecret);
    inject.forEach(parseInject);
    allowHttp.forEach(parseHttpRule);
  } catch (err) {
    if (err instanceof CvisorError) return usageError(err.message);
    throw err;
  }
  if (network === "none" && (allowNet.length > 0 || inject.length > 0)) {
    const flag = allowNet.length > 0 ? "--allow-net" : "--inject";
    return usageError(`${flag} needs the network: it cannot go with --network none`);
  }
  const shell = command.length === 0;
  const plan: RunPlan = {
    kind: "run",
    argv: shell ? [hostEnv.SHELL || "/bin/sh"] : [...command],
    shell,
    env,
    ...(network !== undefined ? { network } : {}),
    allowNet,
    addHosts,
    dns,
    secrets,
    inject,
    allowHttp,
    listen: opts.allowListen ? "any" : opts.listen === false ? "none" : "loopback",
    timeoutMs,
    json: Boolean(opts.json),
    hide: [...(opts.hide ?? [])],
    expose: [...(opts.expose ?? [])],
    allowUnix: [...(opts.allowUnix ?? [])],
    trace: (opts.trace ?? []).flatMap((t) => t.split(",")).filter((t) => t !== ""),
  };
  if (opts.traceFile !== undefined) {
    if (plan.trace.length === 0) return usageError("--trace-file goes with --trace SYSCALLS");
    plan.traceFile = opts.traceFile;
  }
  if (opts.timeout !== undefined) {
    // As the message will say it: a bare number is milliseconds, so it gets its unit.
    const text = opts.timeout.trim();
    plan.timeoutText = /^\d+$/.test(text) ? `${text}ms` : text;
  }
  if (opts.workdir !== undefined) plan.workdir = opts.workdir;
  if (opts.sandbox !== undefined) plan.sandbox = opts.sandbox;
  if (opts.tty !== undefined) plan.tty = opts.tty;
  if (limits !== undefined) plan.limits = limits;
  return plan;
}

/** A usage error: one line, with a hint to read --help. */
export function usageError(message: string, help = "cvisor --help"): ErrorPlan {
  const line = message.replace(/\s*\n\s*/g, " ").trim();
  return { kind: "error", message: `${line} (see ${help})`, exitCode: EXIT_CVISOR };
}
