// `cvisor [--sandbox NAME] snapshot [ID] [--json]`: freezes the sandbox's changes into a
// read-only snapshot layer and gives it a fresh upper; prints the snapshot's ID.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
/** The snapshot operations, loaded when a command needs them (not to parse its line). */
export const ops = (): Promise<typeof import("../../../snapshots/ops.js")> =>
  import("../../../snapshots/ops.js");
import { librarySandbox } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

/** Cleans what killed commands left (one stderr line each), as every snapshot command does first. */
export async function reportLeftovers(): Promise<void> {
  const { recoverStore } = await ops();
  for (const line of recoverStore()) writeStderr(`cvisor: ${line}\n`);
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  await reportLeftovers();
  const r = await (await librarySandbox(plan)).snapshot(plan.operands[0]);
  if (plan.json) process.stdout.write(`${JSON.stringify({ ...r, layers: r.chain.length + 1 })}\n`);
  else process.stdout.write(`${r.id}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("snapshot")
    .description(
      "freeze the sandbox's changes (--sandbox, else 'default') into a read-only snapshot; prints its ID",
    )
    .argument("[id]", "the snapshot's ID (letters, digits, - _ .); generated when left out")
    .option("--json", "print the snapshot as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox to snapshot"))
    .action((id: string | undefined, opts: { json?: boolean }) =>
      to("snapshot", id === undefined ? [] : [id], opts),
    );
}
