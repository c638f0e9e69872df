// `cvisor [--sandbox NAME] rollback ID [--json]`: drops everything the sandbox changed after
// snapshot ID (its upper starts empty over the snapshot's layers).
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { librarySandbox } from "./define.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";
import { reportLeftovers } from "./snapshot.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  await reportLeftovers();
  const r = await (await librarySandbox(plan)).rollback(plan.operands[0] ?? "");
  if (plan.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  else process.stdout.write(`sandbox ${r.sandbox} rolled back to ${r.id}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("rollback")
    .description(
      "drop everything the sandbox (--sandbox, else 'default') changed after snapshot ID",
    )
    .argument("<id>", "a snapshot in the sandbox's history")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to roll back"))
    .action((id: string, opts: { json?: boolean }) => to("rollback", [id], opts));
}
