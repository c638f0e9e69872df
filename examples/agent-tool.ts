// A coding agent's tool call, as an agent runtime would make it: copy a project into a named
// sandbox, run its tests there with a deadline, read what they changed, and roll the sandbox
// back so the next call starts from the same state. The host's copy is never written.
//
//   node dist/examples/agent-tool.js PROJECT_DIR [TEST_COMMAND]
//
// Prints one JSON object: the test run's exit code and output tail, and the changes.
import { Sandbox } from "cvisor";

const [project, command = "sh ./test.sh"] = process.argv.slice(2);
if (project === undefined) {
  console.error("usage: agent-tool PROJECT_DIR [TEST_COMMAND]");
  process.exit(2);
}

const name = `agent-tool-${process.pid}`;
const base = `${name}-base`;
const sb = new Sandbox({ sandbox: name, network: false });
let snapped = false;
try {
  await sb.cp(`${project}/.`, "/project", { direction: "in" });
  await sb.snapshot(base);
  snapped = true;
  const run = await sb.runCmd(command, { cwd: "/project", timeout: "2m" });
  const changes = await sb.diff();
  await sb.rollback(base);
  const after = await sb.runCmd("ls -A /project", { reject: true });
  console.log(
    JSON.stringify({
      exitCode: run.exitCode,
      timedOut: run.timedOut,
      output: run.stdout.split("\n").slice(-20).join("\n"),
      changes: changes.filter((c) => c.path.startsWith("/project/")),
      afterRollback: after.stdout.split("\n").filter(Boolean),
    }),
  );
} finally {
  if ((await Sandbox.list()).some((s) => s.name === name)) await Sandbox.remove(name);
  if (snapped) await Sandbox.removeSnapshot(base);
}
