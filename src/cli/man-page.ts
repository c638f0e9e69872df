// The man page, cvisor(1), made from the command definitions (the tree `--help` shows), so it
// never lists an option the CLI lacks or misses one it has. `npm run build` writes it to
// man/cvisor.1 (scripts/build-man.mjs); the package installs it.
import type { Argument, Command, Option } from "commander";
import { VERSION } from "../version.js";
import { commandTree } from "./parse.js";

/** Text for troff: backslashes and leading dots or quotes kept literal, dashes as minus signs. */
function roff(text: string): string {
  return text
    .replace(/\\/g, "\\e")
    .replace(/-/g, "\\-")
    .replace(/^([.'])/gm, "\\&$1");
}

function optionLines(options: readonly Option[]): string[] {
  return options.flatMap((o) => [".TP", `.B ${roff(o.flags)}`, roff(o.description)]);
}

function usage(c: Command, path: string): string {
  const args = (c.registeredArguments as readonly Argument[])
    .map((a) => {
      const name = `${a.name()}${a.variadic ? "..." : ""}`;
      return a.required ? `<${name}>` : `[${name}]`;
    })
    .join(" ");
  return `${path}${c.options.length > 0 ? " [options]" : ""}${args ? ` ${args}` : ""}`;
}

/** Every command below c, depth first, with its path ("cvisor cache save"). */
function commands(c: Command, path: string): [string, Command][] {
  return c.commands.flatMap((sub) => {
    const subPath = `${path} ${sub.name()}`;
    return [[subPath, sub] as [string, Command], ...commands(sub, subPath)];
  });
}

const EXIT_STATUS =
  "The command's own exit status; 128+N when it was killed by signal N (137 when a --memory or " +
  "--disk limit ended it); 124 when --timeout fired; 125 when cvisor itself failed (one line on " +
  "stderr says why); 126 when the command could not be executed; 127 when it was not found.";

const ENVIRONMENT: [string, string][] = [
  [
    "CVISOR_HOME",
    "where named sandboxes, snapshots and runs live (default: $XDG_DATA_HOME/cvisor, else ~/.local/share/cvisor)",
  ],
  ["CVISOR_CACHE_DIR", "the disk cache's directory (default: $CVISOR_HOME/cache)"],
  [
    "CVISOR_CACHE_BACKEND",
    "the cache backend when --cache-backend is not given: disk, disk:/PATH or s3://BUCKET/PREFIX",
  ],
  ["NO_COLOR", "no colours in doctor's report and the ui"],
  ["CVISOR_DEBUG", "1: a stack trace after cvisor's own error line"],
];

/** cvisor(1) in man(7) format. */
export function manPage(): string {
  const tree = commandTree();
  const out: string[] = [
    `.TH CVISOR 1 "" "cvisor ${VERSION}" "User Commands"`,
    ".SH NAME",
    `cvisor \\- ${roff(tree.description())}`,
    ".SH SYNOPSIS",
    `.B cvisor`,
    roff("[options] -- CMD [ARGS...]"),
    ".br",
    ".B cvisor",
    roff("COMMAND [options] [ARGS...]"),
    ".SH DESCRIPTION",
    roff(
      "cvisor runs an unmodified Linux program so that it sees the host's files and tools, while " +
        "everything it writes, deletes or renames lands in a copy-on-write layer the host never " +
        "sees. A seccomp user-notification supervisor decides what each system call does, and " +
        "Landlock backs it in the kernel; no root, no container image, no user namespaces. " +
        "Without a command, cvisor starts $SHELL (else /bin/sh) in the sandbox.",
    ),
    ".SH OPTIONS",
    roff("Options of a run (before --):"),
    ...optionLines(tree.options as readonly Option[]),
    ".SH COMMANDS",
  ];
  for (const [path, c] of commands(tree, "cvisor")) {
    out.push(".SS " + roff(usage(c, path)), roff(c.description()));
    if (c.options.length > 0)
      out.push(".RS", ...optionLines(c.options as readonly Option[]), ".RE");
  }
  out.push(".SH EXIT STATUS", roff(EXIT_STATUS), ".SH ENVIRONMENT");
  for (const [name, what] of ENVIRONMENT) out.push(".TP", `.B ${roff(name)}`, roff(what));
  out.push(
    ".SH EXAMPLES",
    ".nf",
    roff("cvisor -- uname -a"),
    roff("cvisor --no-network --timeout 30s -- make test"),
    roff("cvisor --sandbox work -- make install"),
    roff("cvisor --memory 512m --pids-limit 200 -- npm test"),
    roff("cvisor cp ./src sb:/app"),
    roff("cvisor cache save deps-$(sha256sum package-lock.json | cut -c1-16) node_modules"),
    ".fi",
    ".SH SEE ALSO",
    roff("The README and docs/ of the cvisor package; cvisor doctor checks what this host gives."),
    "",
  );
  return out.join("\n");
}
