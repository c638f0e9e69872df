// The fast path of the command line: the plain run grammar (known options, then `--`),
// parsed without loading commander, which costs more start-up time than a `cvisor -- true`
// budget allows. Anything else (help, version, doctor, errors) returns null and goes to parse.ts,
// which stays the authority (a unit test checks that both agree).
import { buildRunPlan, separatorIndex, type Plan, type RootOptions } from "./plan.js";

/** The plan for a plain run command line, or null when the full parser must decide. */
export function fastParse(
  args: readonly string[],
  hostEnv: Readonly<Record<string, string | undefined>>,
): Plan | null {
  const sep = separatorIndex(args);
  const own = sep < 0 ? args : args.slice(0, sep);
  const opts: RootOptions = { network: true };
  const env: string[] = [];
  const hide: string[] = [];
  const expose: string[] = [];
  const allowUnix: string[] = [];
  for (let i = 0; i < own.length; i++) {
    const arg = own[i] ?? "";
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq < 0 ? arg : arg.slice(0, eq);
    const takeValue = (): string | undefined => (eq < 0 ? own[++i] : arg.slice(eq + 1));
    switch (name) {
      case "--no-network":
      case "--allow-listen":
      case "--json":
        if (eq >= 0) return null;
        if (name === "--no-network") opts.network = false;
        else if (name === "--allow-listen") opts.allowListen = true;
        else opts.json = true;
        break;
      case "-e":
      case "--env":
      case "--timeout":
      case "-C":
      case "--workdir":
      case "--hide":
      case "--expose":
      case "--allow-unix":
      case "--sandbox": {
        const value = takeValue();
        if (value === undefined) return null;
        if (name === "-e" || name === "--env") env.push(value);
        else if (name === "--timeout") opts.timeout = value;
        else if (name === "--hide") hide.push(value);
        else if (name === "--expose") expose.push(value);
        else if (name === "--allow-unix") allowUnix.push(value);
        else if (name === "--sandbox") opts.sandbox = value;
        else opts.workdir = value;
        break;
      }
      default:
        return null;
    }
  }
  if (env.length > 0) opts.env = env;
  if (hide.length > 0) opts.hide = hide;
  if (expose.length > 0) opts.expose = expose;
  if (allowUnix.length > 0) opts.allowUnix = allowUnix;
  return buildRunPlan(opts, sep < 0 ? [] : args.slice(sep + 1), hostEnv);
}
