// The fast path of the command line: the plain run grammar (the run options of
// ./commands/run.ts, then `--`), parsed without loading commander, which costs more start-up
// time than a `cvisor -- true` budget allows. Anything else (help, version, commands, errors)
// returns null and goes to parse.ts, which stays the authority (a unit test checks that both
// agree).
import { buildRunPlan, separatorIndex, type Plan, type RootOptions } from "./plan.js";
import { optionShapes, RUN_OPTIONS } from "./commands/run.js";

const SHAPES = optionShapes(RUN_OPTIONS);

/** The plan for a plain run command line, or null when the full parser must decide. */
export function fastParse(
  args: readonly string[],
  hostEnv: Readonly<Record<string, string | undefined>>,
): Plan | null {
  const sep = separatorIndex(args);
  const own = sep < 0 ? args : args.slice(0, sep);
  const opts: Record<string, unknown> = {};
  for (let i = 0; i < own.length; i++) {
    const arg = own[i] ?? "";
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const shape = SHAPES.get(eq < 0 ? arg : arg.slice(0, eq));
    if (shape === undefined) return null;
    if (!shape.value) {
      if (eq >= 0) return null; // --json=1: commander says what is wrong
      opts[shape.key] = !shape.negated;
      continue;
    }
    const value = eq < 0 ? own[++i] : arg.slice(eq + 1);
    if (value === undefined) return null;
    if (!shape.repeat) opts[shape.key] = value;
    else opts[shape.key] = [...((opts[shape.key] as string[] | undefined) ?? []), value];
  }
  return buildRunPlan(opts as unknown as RootOptions, sep < 0 ? [] : args.slice(sep + 1), hostEnv);
}
