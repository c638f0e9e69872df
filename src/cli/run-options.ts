// The run command's options, defined once: parse.ts gives them to commander, fast-parse.ts
// reads a plain run line with them without loading commander (the run path must start fast).
// Flags are commander's text ("-e, --env <KEY=VAL>"); the option's key is commander's too
// (--allow-unix: allowUnix; --no-network: network, false when given).

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
    flags: "--no-network",
    help: "make AF_INET/AF_INET6 sockets fail (the sandbox's own unix sockets still work)",
  },
  { flags: "--allow-listen", help: "allow bind/listen on AF_INET/AF_INET6 sockets" },
  {
    flags: "--timeout <duration>",
    help: "kill the whole process tree after DURATION (500ms, 5s, 2m)",
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
  { flags: "--json", help: "print a JSON run report on stderr at the end" },
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
