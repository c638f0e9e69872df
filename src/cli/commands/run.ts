// `cvisor [options] -- CMD [ARGS...]`: the run command's definition (its options, defined once:
// parse.ts gives them to commander, fast-parse.ts reads a plain run line with them without
// loading commander) and its action, which runs the plan with the terminal's fds handed straight
// to the guest (Node never reads process.stdin nor copies output), then exits with its code.
// A CLI has one run, so it blocks in cv_run_wait_forwarding (which also turns SIGTERM/SIGHUP,
// and SIGINT/SIGQUIT off a terminal, into a kill of the tree) rather than watching the done fd
// with the library's net.Socket, and asks cv_isatty rather than node:tty: this path loads
// neither node:net nor node:tty and starts no threadpool.
import { closeSync, openSync, statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import * as native from "../../core/native.js";
import { createPlannedRun, finishRun, releaseLimits, runSpec } from "../../sandbox/native-run.js";
import { toRunResult } from "../../sandbox/result.js";
import type { RunResult } from "../../sandbox/types.js";
import { parseSecret } from "../../sandbox/broker/broker.js";
import { closeLayer, openLayer } from "../../sandbox/open-layer.js";
import { NotFoundError, UsageError } from "../../core/errors.js";
import { writeStderr } from "../errors.js";
import { denialHints, jsonReport, runMessage } from "../exit-codes.js";
import type { RunPlan } from "../plan.js";
import type { Command } from "commander";

export interface RunOption {
  flags: string;
  help: string;
  /** Given again, it adds a value (an array); else the last one wins. */
  repeat?: true;
}

export const RUN_OPTIONS: readonly RunOption[] = [
  {
    flags: "-e, --env <KEY=VAL>",
    help: "set a variable in the guest environment (KEY alone: the host's value); repeatable",
    repeat: true,
  },
  {
    flags: "--network <mode>",
    help: "host: reach what the host reaches but a cloud's metadata range (the default); none: AF_INET/AF_INET6 sockets fail (unix sockets still work)",
  },
  { flags: "--no-network", help: "the same as --network none" },
  {
    flags: "--allow-net <rule>",
    help: "let the guest reach only what such rules allow: HOST[:PORT], *.DOMAIN[:PORT], IP[/PREFIX][:PORT], [IPv6]:PORT, ports as 8000-8100; repeatable",
    repeat: true,
  },
  {
    flags: "--secret <NAME=SOURCE>",
    help: "a secret the guest never holds, SOURCE env:VAR or file:PATH (the guest's NAME has a placeholder): --inject puts it on requests; repeatable",
    repeat: true,
  },
  {
    flags: "--inject <rule>",
    help: "'HOST[:PORT] Header: value', {NAME} for a --secret: set the header on each request to HOST (HTTPS, port 443 by default; http://HOST: plain HTTP); repeatable",
    repeat: true,
  },
  {
    flags: "--allow-http <rule>",
    help: "'HOST[:PORT] METHOD[,METHOD] PATH' (PATH* a prefix): the broker sends on only such requests to an --inject host; repeatable",
    repeat: true,
  },
  {
    flags: "--dns <server>",
    help: "look names up on SERVER (IP[:PORT]): the guest's name servers, or with --allow-net names the run's name service's; repeatable",
    repeat: true,
  },
  {
    flags: "--add-host <name:ip>",
    help: "add NAME to the guest's /etc/hosts (as docker's --add-host); repeatable",
    repeat: true,
  },
  {
    flags: "--allow-listen",
    help: "let the guest bind inet ports and listen on any address (default: loopback only)",
  },
  { flags: "--no-listen", help: "let the guest bind no inet port and listen nowhere" },
  {
    flags: "--timeout <duration>",
    help: "kill the whole process tree after DURATION (500ms, 5s, 2m)",
  },
  {
    flags: "--memory <size>",
    help: "limit the memory of the whole process tree to SIZE (256m, 1g); reaching it ends the run with 137",
  },
  {
    flags: "--pids-limit <n>",
    help: "limit the processes and threads of the tree to N at once; a fork beyond them fails (EAGAIN)",
  },
  {
    flags: "--cpus <cores>",
    help: "limit the CPU time of the tree to CORES (0.5: half of one core)",
  },
  {
    flags: "--disk <size>",
    help: "limit what the sandbox's layer may hold to SIZE (500m, 2g); going over ends the run with 137",
  },
  { flags: "-C, --workdir <dir>", help: "run the command in DIR" },
  {
    flags: "--hide <path>",
    help: "also keep PATH (and all below it) from the guest; repeatable",
    repeat: true,
  },
  {
    flags: "--expose <path>",
    help: "let the guest read PATH although it is hidden by default (e.g. ~/.ssh); repeatable",
    repeat: true,
  },
  {
    flags: "--allow-unix <path>",
    help: "let the guest connect to the host's unix socket PATH (an ssh-agent, Docker, D-Bus); repeatable",
    repeat: true,
  },
  {
    flags: "--sandbox <name>",
    help: "run in the named sandbox NAME, created on first use: its changes are kept for the next run (letters, digits, - _ .); without it the sandbox is thrown away at the end",
  },
  {
    flags: "--trace <syscalls>",
    help: "print each call of SYSCALLS (comma-separated, e.g. openat,execve,connect) on stderr as PID NAME(ARGS) = RESULT; repeatable",
    repeat: true,
  },
  { flags: "--trace-file <file>", help: "write the --trace lines to FILE instead" },
  { flags: "--json", help: "print a JSON run report on stderr at the end" },
  {
    flags: "-t, --tty",
    help: "give the command a pseudo-terminal of its own (default: only for the shell, when stdin and stdout are terminals)",
  },
  {
    flags: "-T, --no-tty",
    help: "never allocate a pseudo-terminal; the guest uses cvisor's stdio",
  },
];

/** One option as the fast parser uses it. */
export interface OptionShape {
  /** The options key ("allowUnix"). */
  key: string;
  /** It takes a value (`<...>` in its flags). */
  value: boolean;
  /** --no-X: sets key X to false. */
  negated: boolean;
  repeat: boolean;
}

/** Each name an option is written with ("-e", "--env") and what it is. */
export function optionShapes(options: readonly RunOption[]): Map<string, OptionShape> {
  const out = new Map<string, OptionShape>();
  for (const o of options) {
    const names = o.flags.split(/[ ,]+/).filter((n) => n.startsWith("-"));
    const long = names.find((n) => n.startsWith("--")) ?? "";
    const negated = long.startsWith("--no-");
    const bare = long.slice(negated ? 5 : 2);
    const key = bare.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const shape = { key, value: o.flags.includes("<"), negated, repeat: o.repeat === true };
    for (const n of names) out.set(n, shape);
  }
  return out;
}

/** The names of the options that take a value ("-e", "--env", ...). */
export const VALUE_FLAGS: ReadonlySet<string> = new Set(
  [...optionShapes(RUN_OPTIONS)].filter(([, shape]) => shape.value).map(([name]) => name),
);

const HELP_AFTER = `
Everything after -- is the command, verbatim. Without a command, cvisor starts $SHELL
(else /bin/sh) in the sandbox, on a pseudo-terminal of its own when stdin and stdout are
terminals (-T: on cvisor's own stdio instead; -t gives a command one too).

Exit status: the command's own; 128+N when it was killed by signal N; 124 when
--timeout fired; 125 when cvisor itself failed; 126 when the command could not be
executed; 127 when it was not found.

Examples:
  cvisor -- uname -a
  cvisor --no-network --timeout 30s -- make test
  cvisor --allow-net registry.npmjs.org:443 -- npm ci
  cvisor -e DEBUG=1 -e HOME -C /tmp -- sh -c 'echo $DEBUG'
  cvisor --sandbox work -- make install     (again later: the same files)
  cvisor -t -- vim notes.txt
`;

/** A repeatable option's values, in order. */
function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** The run command's definition: the root program's usage, options and help. */
export function define(program: Command): void {
  program
    .usage("[options] -- CMD [ARGS...]")
    .description("Run a program in a sandbox that can read this machine but not change it.");
  for (const o of RUN_OPTIONS) {
    if (o.repeat) program.option(o.flags, o.help, collect);
    else program.option(o.flags, o.help);
  }
  program.addHelpText("after", HELP_AFTER);
}

/** Runs the plan; resolves to the exit code of cvisor. */
export async function action(plan: RunPlan): Promise<number> {
  // A named sandbox may hold directories the host lacks: the core enters it in the sandbox's view.
  if (plan.workdir !== undefined && plan.sandbox === undefined) checkWorkdir(plan.workdir);
  const trace = traceSyscalls(plan.trace);
  const layer = openLayer(plan.sandbox);
  let run: native.NativeRun | undefined;
  let traceFd: number | undefined;
  try {
    const spec = runSpec(
      plan.argv,
      {
        ...(plan.network !== undefined ? { network: plan.network } : {}),
        allowNet: plan.allowNet,
        addHosts: plan.addHosts,
        dns: plan.dns,
        inject: plan.inject,
        allowHttp: plan.allowHttp,
        secrets: Object.fromEntries(
          plan.secrets.map((text) => {
            const { name, source } = parseSecret(text);
            return [name, source];
          }),
        ),
        listen: plan.listen,
        hide: plan.hide,
        expose: plan.expose,
        allowUnix: plan.allowUnix,
      },
      {
        env: plan.env,
        ...(plan.workdir !== undefined ? { cwd: plan.workdir } : {}),
        timeout: plan.timeoutMs,
        ...(plan.limits
          ? {
              limits: {
                memory: plan.limits.memoryBytes,
                pids: plan.limits.pids,
                cpus: plan.limits.cpus,
                disk: plan.limits.diskBytes,
              },
            }
          : {}),
      },
      layer,
    );
    if (trace !== undefined && plan.traceFile !== undefined) {
      try {
        traceFd = openSync(plan.traceFile, "w", 0o644);
      } catch (err) {
        throw new NotFoundError(`--trace-file ${plan.traceFile}: ${(err as Error).message}`);
      }
    }
    const traceSpec = trace !== undefined ? { trace: { syscalls: trace, fd: traceFd ?? 2 } } : {};
    let result: RunResult;
    if (wantsTerminal(plan)) {
      // The guest's own pty, relayed on the event loop (./terminal-run.ts, loaded only here).
      const { runOnTerminal } = await import("../terminal-run.js");
      result = await runOnTerminal({ ...spec, ...traceSpec }, { stopReading: true });
    } else {
      run = createPlannedRun({ ...spec, stdio: [0, 1, 2], ...traceSpec });
      const { doneFd } = native.start(run);
      native.close(doneFd); // the forwarding wait tells the end: nothing watches this fd
      // On a terminal, SIGINT and SIGQUIT are the guest's (the terminal sends them to it too).
      const forwarded = native.waitForwarding(run, native.isatty(0));
      // The per-syscall counts appear only in the --json report.
      const { raw, failure, notifications, denials, limits } = finishRun(run, plan.json);
      run = undefined; // freed
      if (failure) throw failure;
      result = toRunResult(raw, notifications, "", "", denials, limits);
      // A signal that ended cvisor (and with it the tree) is cvisor's exit status, as for any
      // process a signal ends: 128 + N.
      if (forwarded > 0) result.exitCode = 128 + forwarded;
    }
    const message = runMessage(result, plan.argv[0] ?? "", plan.timeoutText, errnoText);
    if (message !== null) writeStderr(`cvisor: ${message}\n`);
    // What a user will want to allow: one line each (the rest is in the --json report).
    for (const line of denialHints(result.denials)) writeStderr(`cvisor: ${line}\n`);
    if (plan.json) writeStderr(`${jsonReport(result)}\n`);
    return result.exitCode;
  } finally {
    if (run) {
      native.free(run);
      releaseLimits(run);
    }
    if (traceFd !== undefined) closeSync(traceFd);
    // After the free: the guest tree is gone. Then an ephemeral sandbox goes too (a SIGKILLed
    // CLI never gets here: the next run's sweep removes what it left).
    closeLayer(layer);
  }
}

/**
 * A pty of the guest's own: -t always, -T never; by default for the shell (no command) when
 * stdin and stdout are terminals, as `docker run -it` would be asked for.
 */
function wantsTerminal(plan: RunPlan): boolean {
  if (plan.tty !== undefined) return plan.tty;
  return plan.shell && native.isatty(0) && native.isatty(1);
}

/** The --trace names as syscall numbers; a name the filter table does not know is refused. */
function traceSyscalls(names: readonly string[]): number[] | undefined {
  if (names.length === 0) return undefined;
  return names.map((name) => {
    const nr = native.syscallNumber(name);
    if (nr === undefined) throw new UsageError(`--trace: unknown syscall ${name}`);
    return nr;
  });
}

function checkWorkdir(dir: string): void {
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    throw new NotFoundError(`--workdir ${dir}: no such directory`);
  }
  if (!isDir) throw new UsageError(`--workdir ${dir}: not a directory`);
}

/** "EACCES" → "permission denied", from the C library's strerror. */
function errnoText(name: string): string {
  const errno = (osConstants.errno as Record<string, number | undefined>)[name];
  if (errno === undefined) return name;
  const text = native.strerror(-errno);
  return /^[A-Z][a-z]/.test(text) ? text[0]?.toLowerCase() + text.slice(1) : text;
}
