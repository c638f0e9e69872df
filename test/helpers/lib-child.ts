// A separate Node process that uses the library: `node lib-child.js '<argv as JSON>'`. "{PID}"
// in an argument becomes this process's pid. It prints the RunResult as JSON. Tests start it
// with a secret in its environment to check that a guest cannot read the supervisor's.
import { Sandbox } from "../../src/index.js";

const spec: unknown = JSON.parse(process.argv[2] ?? "[]");
if (!Array.isArray(spec) || !spec.every((a): a is string => typeof a === "string")) {
  throw new Error("lib-child: argv must be a JSON array of strings");
}
const argv = spec.map((a) => a.replaceAll("{PID}", String(process.pid)));
const result = await new Sandbox().run(argv);
process.stdout.write(`${JSON.stringify(result)}\n`);
