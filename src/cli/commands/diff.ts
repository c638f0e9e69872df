// `cvisor [--sandbox NAME] diff [--json]`: what the sandbox changed against the host, one
// `A|C|D PATH` line each, as `docker diff` prints them: the upper and the read-only snapshot
// layers under it, together, against the host.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { librarySandbox } from "./define.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  const changes = await (await librarySandbox(plan)).diff();
  if (plan.json) process.stdout.write(`${JSON.stringify(changes)}\n`);
  else for (const c of changes) process.stdout.write(`${c.kind} ${c.path}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("diff")
    .description(
      "what the sandbox (--sandbox, else 'default') changed against the host: A added, C changed, D deleted",
    )
    .option("--json", "print the changes as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to show"))
    .action((opts: { json?: boolean }) => to("diff", [], opts));
}
