// `cvisor --sandbox NEW branch ID [--json]`: NEW becomes a sandbox on snapshot ID's layers
// (shared, not copied); an existing NEW is reset onto them (refused while it runs).
import type { Command } from "commander";
import { librarySandbox, sandboxHelp, type ToPlan } from "./define.js";
import { UsageError } from "../../core/errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";
import { reportLeftovers } from "./snapshot.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  if (plan.sandbox === undefined) {
    throw new UsageError(
      "branch needs the new sandbox's name: cvisor --sandbox NEW branch ID (see cvisor --help)",
    );
  }
  await reportLeftovers();
  const r = await (await librarySandbox(plan)).branch(plan.sandbox, plan.operands[0] ?? "");
  if (plan.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  else {
    const how = r.created ? "made" : "reset";
    process.stdout.write(`sandbox ${r.sandbox} ${how} on snapshot ${r.id}\n`);
  }
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("branch")
    .description(
      "make sandbox --sandbox NEW a branch of snapshot ID (sharing its layers); an existing NEW is reset onto it",
    )
    .argument("<id>", "the snapshot to branch from")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to make (or reset) from the snapshot"))
    .action((id: string, opts: { json?: boolean }) => to("branch", [id], opts));
}
