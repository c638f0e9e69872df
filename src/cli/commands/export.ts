// `cvisor [--sandbox NAME] export FILE`: the sandbox's changes as an OCI image layer tarball
// (Sandbox.export: written to FILE.tmp~<owner record> and renamed into place), or to stdout
// for -.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { librarySandbox } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  const sb = await librarySandbox(plan);
  const file = plan.operands[0] ?? "-";
  const summary = await sb.export(file === "-" ? process.stdout : file);
  if (plan.json) writeStderr(`${JSON.stringify({ sandbox: sb.name, file, ...summary })}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("export")
    .description(
      "write the sandbox's changes (--sandbox, else 'default') as an OCI image layer tarball",
    )
    .argument("<file>", "the tarball to write ('-' for standard output)")
    .option("--json", "print a summary as JSON on stderr")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to write"))
    .action((file: string, opts: { json?: boolean }) => to("export", [file], opts));
}
