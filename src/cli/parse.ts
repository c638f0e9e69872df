// Command-line parsing as a pure function: argv and the host environment in, a plan out
// (what to run, or what to print). main.ts carries the plan out.
import { Command, CommanderError } from "commander";
import { CvisorError } from "../core/errors.js";
import { VERSION } from "../version.js";
import { EXIT_CVISOR, EXIT_OK } from "./exit-codes.js";
import { RUN_OPTIONS } from "./run-options.js";
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

export type { DoctorPlan, ErrorPlan, Plan, PrintPlan, RunPlan, StoreCommandPlan } from "./plan.js";

const HELP_AFTER = `
Everything after -- is the command, verbatim. Without a command, cvisor starts $SHELL
(else /bin/sh) in the sandbox.

Exit status: the command's own; 128+N when it was killed by signal N; 124 when
--timeout fired; 125 when cvisor itself failed; 126 when the command could not be
executed; 127 when it was not found.

Examples:
  cvisor -- uname -a
  cvisor --no-network --timeout 30s -- make test
  cvisor -e DEBUG=1 -e HOME -C /tmp -- sh -c 'echo $DEBUG'
  cvisor --sandbox work -- make install     (again later: the same files)
`;

/** A repeatable option's values, in order. */
function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

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

  const program = new Command("cvisor")
    .usage("[options] -- CMD [ARGS...]")
    .description("Run a program in a sandbox that can read this machine but not change it.");
  for (const o of RUN_OPTIONS) {
    if (o.repeat) program.option(o.flags, o.help, collect);
    else program.option(o.flags, o.help);
  }
  program
    .version(VERSION, "-V, --version", "print the version")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", HELP_AFTER)
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
  program
    .command("doctor")
    .description("check that this machine can run sandboxes")
    .option("--json", "print the checks as JSON")
    .helpOption("-h, --help", "print this help")
    .action((opts: { json?: boolean }) => {
      plan =
        command.length > 0
          ? usageError("doctor takes no command after --")
          : { kind: "doctor", json: Boolean(opts.json || program.opts<RootOptions>().json) };
    });

  /** A sandbox-management command: its operands and options go to src/cli/commands.ts. */
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
  program
    .command("ls")
    .description("list the named sandboxes: size on disk, layers, created, last run")
    .option("--json", "print the list as JSON")
    .helpOption("-h, --help", "print this help")
    .action((opts: { json?: boolean }) => storeCommand("ls", [], opts));
  program
    .command("rm")
    .description("remove named sandboxes (refused while one of them is running)")
    .argument("<name...>", "the sandboxes to remove")
    .option("--json", "print what was removed as JSON")
    .helpOption("-h, --help", "print this help")
    .action((names: string[], opts: { json?: boolean }) => storeCommand("rm", names, opts));
  program
    .command("diff")
    .description(
      "what the sandbox (--sandbox, else 'default') changed against the host: A added, C changed, D deleted",
    )
    .option("--json", "print the changes as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to show"))
    .action((opts: { json?: boolean }) => storeCommand("diff", [], opts));
  program
    .command("export")
    .description(
      "write the sandbox's changes (--sandbox, else 'default') as an OCI image layer tarball",
    )
    .argument("<file>", "the tarball to write ('-' for standard output)")
    .option("--json", "print a summary as JSON on stderr")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to write"))
    .action((file: string, opts: { json?: boolean }) => storeCommand("export", [file], opts));
  program
    .command("cp")
    .description(
      "copy files into or out of the sandbox (--sandbox, else 'default'): the sandbox side is sb:/PATH",
    )
    .argument("<paths...>", "SRC... DST; exactly one side is sb:")
    .option("--no-ignore", "copy what .gitignore and .dockerignore exclude too")
    .option("--json", "print a summary as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox sb:/PATH is in"))
    .action((paths: string[], opts: { ignore?: boolean; json?: boolean }) =>
      storeCommand("cp", paths, opts),
    );

  program
    .command("snapshot")
    .description(
      "freeze the sandbox's changes (--sandbox, else 'default') into a read-only snapshot; prints its ID",
    )
    .argument("[id]", "the snapshot's ID (letters, digits, - _ .); generated when left out")
    .option("--json", "print the snapshot as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to snapshot"))
    .action((id: string | undefined, opts: { json?: boolean }) =>
      storeCommand("snapshot", id === undefined ? [] : [id], opts),
    );
  program
    .command("rollback")
    .description(
      "drop everything the sandbox (--sandbox, else 'default') changed after snapshot ID",
    )
    .argument("<id>", "a snapshot in the sandbox's history")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to roll back"))
    .action((id: string, opts: { json?: boolean }) => storeCommand("rollback", [id], opts));
  program
    .command("branch")
    .description(
      "make sandbox --sandbox NEW a branch of snapshot ID (sharing its layers); an existing NEW is reset onto it",
    )
    .argument("<id>", "the snapshot to branch from")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to make (or reset) from the snapshot"))
    .action((id: string, opts: { json?: boolean }) => storeCommand("branch", [id], opts));
  program
    .command("snapshots")
    .description("list snapshots (ls, the default) or remove them (rm [--force] ID...)")
    .argument("[action]", "ls or rm")
    .argument("[ids...]", "for rm: the snapshots to remove")
    .option("--force", "rm: remove even what sandboxes or snapshots use (they break)")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .action(
      (action: string | undefined, ids: string[], opts: { force?: boolean; json?: boolean }) =>
        storeCommand("snapshots", [action ?? "ls", ...ids], opts),
    );
  addCacheCommands(program, storeCommand);
  program.helpCommand("help [command]", "print the help of a command");
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

/** Help text for a command that acts on a sandbox: --sandbox is cvisor's own option, given first. */
function sandboxHelp(what: string): string {
  return `\nSandbox:\n  --sandbox <name>  ${what}, else 'default'; before the command: cvisor --sandbox NAME ...\n`;
}

function strayPlan(stray: readonly string[]): ErrorPlan {
  // The first one is the mistake: an unknown option, or a program name before `--`.
  const word = stray[0] ?? "";
  if (word.startsWith("-")) return usageError(`unknown option '${word.split("=")[0] ?? word}'`);
  return usageError(
    `unknown command '${word}' (to run a program: cvisor [options] -- ${word} ...)`,
  );
}

type StoreCommand = (
  name: StoreCommandPlan["command"],
  operands: string[],
  options: StoreCommandPlan["options"],
) => void;

/** `cvisor [--sandbox NAME] cache save|restore|ls|rm` (src/cli/cache.ts carries them out). */
function addCacheCommands(program: Command, storeCommand: StoreCommand): void {
  const cache = program
    .command("cache")
    .description(
      "directory caches for CI: save a directory (host, or sb:/DIR of the sandbox) under a key, restore it later",
    )
    .helpOption("-h, --help", "print this help");
  const common = (c: Command): Command =>
    c
      .option(
        "--cache-backend <spec>",
        "where entries live: disk (default), disk:/PATH or s3://BUCKET/PREFIX (else $CVISOR_CACHE_BACKEND)",
      )
      .option("--read-only", "refuse to write to the backend")
      .option("--json", "print a summary as JSON")
      .helpOption("-h, --help", "print this help");
  const run =
    (sub: string) =>
    (...args: unknown[]): void => {
      // commander passes the operands, then the options, then the command.
      const opts = args[args.length - 2] as StoreCommandPlan["options"];
      const operands = args
        .slice(0, -2)
        .flatMap((a) =>
          Array.isArray(a) ? (a as string[]) : a === undefined ? [] : [a as string],
        );
      storeCommand("cache", [sub, ...operands], opts);
    };
  common(
    cache
      .command("save")
      .description("save the directory PATH as the cache entry KEY (never replaces an entry)")
      .argument("<key>", "the entry's key (at most 512 characters)")
      .argument("<path>", "a host directory, or sb:/DIR in the sandbox (--sandbox, else 'default')")
      .option("--format <format>", "gzip (default), zstd, estargz or none")
      .option("--no-ignore", "save what .gitignore and .dockerignore exclude too")
      .option("--force", "replace an existing entry of that key")
      .addHelpText("after", sandboxHelp("the sandbox an sb:/DIR path is in")),
  ).action(run("save"));
  common(
    cache
      .command("restore")
      .description(
        "replace the directory PATH with the entry KEY, else the newest entry whose key starts with KEY, else with each --restore-key in order",
      )
      .argument("<key>", "the key to look up")
      .argument("<path>", "a host directory, or sb:/DIR in the sandbox (--sandbox, else 'default')")
      .option(
        "--restore-key <prefix>",
        "a key prefix to fall back to; repeatable, tried in order",
        (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
      )
      .option("--fail-on-miss", "exit 1 when no entry matches")
      .option(
        "--allow-external-links",
        "accept symlinks that lead outside PATH (absolute or ../ targets, e.g. a virtualenv's)",
      )
      .addHelpText("after", sandboxHelp("the sandbox an sb:/DIR path is in")),
  ).action(run("restore"));
  common(
    cache
      .command("ls")
      .description("list the entries (whose key starts with PREFIX), newest first")
      .argument("[prefix]", "a key prefix"),
  ).action(run("ls"));
  common(
    cache
      .command("rm")
      .description("remove the entry KEY (or every entry with --all)")
      .argument("[key]", "the entry to remove")
      .option("--all", "remove every entry"),
  ).action(run("rm"));
}
