// `cvisor rm NAME... [--json]`: removes named sandboxes; refused for one a run is using. The
// snapshot layers they use stay (cvisor snapshots rm removes those).
import type { Command } from "commander";
import type { ToPlan } from "./define.js";
import { CvisorError } from "../../core/errors.js";
import { writeStderr } from "../errors.js";
import { EXIT_CVISOR, EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  const { Sandbox } = await import("../../sandbox/sandbox.js");
  await (await import("./snapshot.js")).reportLeftovers();
  const removed: string[] = [];
  const failed: { name: string; error: string }[] = [];
  for (const name of plan.operands) {
    try {
      await Sandbox.remove(name);
      removed.push(name);
    } catch (err) {
      if (!(err instanceof CvisorError)) throw err;
      failed.push({ name, error: err.message });
      if (!plan.json) writeStderr(`cvisor: ${err.message}\n`);
    }
  }
  if (plan.json) process.stdout.write(`${JSON.stringify({ removed, failed })}\n`);
  else for (const name of removed) process.stdout.write(`${name}\n`);
  return failed.length > 0 ? EXIT_CVISOR : EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("rm")
    .description("remove named sandboxes (refused while one of them is running)")
    .argument("<name...>", "the sandboxes to remove")
    .option("--json", "print what was removed as JSON")
    .helpOption("-h, --help", "print this help")
    .action((names: string[], opts: { json?: boolean }) => to("rm", names, opts));
}
