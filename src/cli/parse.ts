// Command-line parsing as a pure function: argv and the host environment in, a plan out
// (what to run, or what to print). main.ts carries the plan out.
import { Command, CommanderError } from "commander";
import { CvisorError } from "../core/errors.js";
import { VERSION } from "../version.js";
import { EXIT_CVISOR, EXIT_OK } from "./exit-codes.js";
import * as run from "./commands/run.js";
import { COMMANDS } from "./commands/all.js";
import type { ToPlan } from "./commands/define.js";
import {
  buildRunPlan,
  separatorIndex,
  usageError,
  type ErrorPlan,
  type Plan,
  type RootOptions,
  type StoreCommandPlan,
} from "./plan.js";
import { validateSandboxName } from "../store/sandboxes.js";

export type { ErrorPlan, Plan, PrintPlan, RunPlan, StoreCommandPlan } from "./plan.js";

/** Parses cvisor's command line (without node and the script path). */
export function parseCli(
  args: readonly string[],
  hostEnv: Readonly<Record<string, string | undefined>>,
): Plan {
  const sep = separatorIndex(args);
  const own = sep < 0 ? [...args] : args.slice(0, sep);
  const command = sep < 0 ? [] : args.slice(sep + 1);
  let out = "";
  let plan: Plan | undefined;

  const program = new Command("cvisor");
  defineRoot(program);
  program
    .argument("[stray...]")
    // Unknown options land in `stray` too, so `cvisor ls -l` can say "put ls after --".
    .allowUnknownOption()
    .exitOverride()
    .configureOutput({
      writeOut: (text) => (out += text),
      writeErr: (text) => (out += text),
      outputError: () => undefined,
    })
    .action((stray: string[]) => {
      plan =
        stray.length > 0
          ? strayPlan(stray)
          : buildRunPlan(program.opts<RootOptions>(), command, hostEnv);
    });
  /** Any other command: its operands and options go to its action (src/cli/commands/). */
  const storeCommand = (
    name: StoreCommandPlan["command"],
    operands: string[],
    options: StoreCommandPlan["options"],
  ): void => {
    const root = program.opts<RootOptions>();
    if (command.length > 0) {
      plan = usageError(`${name} takes no command after --`);
      return;
    }
    let sandbox: string | undefined;
    try {
      sandbox = root.sandbox === undefined ? undefined : validateSandboxName(root.sandbox);
    } catch (err) {
      plan = { kind: "error", message: (err as Error).message, exitCode: EXIT_CVISOR };
      return;
    }
    plan = {
      kind: "command",
      command: name,
      operands,
      options,
      ...(sandbox !== undefined ? { sandbox } : {}),
      json: Boolean(options.json || root.json),
    };
  };
  defineCommands(program, storeCommand);
  // An error in a subcommand points at that subcommand's help.
  let failedIn = "";
  const trackErrors = (c: Command, path: string): void => {
    for (const sub of c.commands) {
      const subPath = `${path} ${sub.name()}`;
      sub.exitOverride((err) => {
        failedIn ||= subPath;
        throw err;
      });
      trackErrors(sub, subPath);
    }
  };
  trackErrors(program, "cvisor");

  try {
    program.parse(own, { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) {
      // `cvisor cache`: a command that only groups others shows its help, as `docker image` does.
      const ok =
        err.exitCode === 0 ||
        err.code === "commander.helpDisplayed" ||
        err.code === "commander.help";
      if (ok) return { kind: "print", text: out, exitCode: EXIT_OK };
      const message = err.message.replace(/^error:\s*/, "");
      return failedIn ? usageError(message, `${failedIn} --help`) : usageError(message);
    }
    if (err instanceof CvisorError)
      return { kind: "error", message: err.message, exitCode: EXIT_CVISOR };
    throw err;
  }
  return plan ?? usageError("nothing to do");
}

/** The root's usage, the run's options, --version and --help. */
function defineRoot(program: Command): void {
  run.define(program);
  program
    .version(VERSION, "-V, --version", "print the version")
    .helpOption("-h, --help", "print this help");
}

/** Every other command, and help. */
function defineCommands(program: Command, to: ToPlan): void {
  for (const c of Object.values(COMMANDS)) c.define(program, to);
  program.helpCommand("help [command]", "print the help of a command");
}

/**
 * The command tree as `cvisor --help` shows it, without actions: what shell completion and the
 * man page are made from.
 */
export function commandTree(): Command {
  const program = new Command("cvisor");
  defineRoot(program);
  defineCommands(program, () => undefined);
  return program;
}

function strayPlan(stray: readonly string[]): ErrorPlan {
  // The first one is the mistake: an unknown option, or a program name before `--`.
  const word = stray[0] ?? "";
  if (word.startsWith("-")) return usageError(`unknown option '${word.split("=")[0] ?? word}'`);
  return usageError(
    `unknown command '${word}' (to run a program: cvisor [options] -- ${word} ...)`,
  );
}
