// `cvisor ls [--json]`: the named sandboxes, with size on disk, layers (the upper and the
// snapshot layers under it), created and last run.
import type { Command } from "commander";
import type { ToPlan } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_OK } from "../exit-codes.js";
import { humanBytes, humanTime, writeTable } from "../human.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  // Interrupted snapshots and branches are finished (or undone) first, and said so.
  await (await import("./snapshot.js")).reportLeftovers();
  const { Sandbox } = await import("../../sandbox/sandbox.js");
  const list = await Sandbox.list();
  if (plan.json) {
    process.stdout.write(`${JSON.stringify(list)}\n`);
    return EXIT_OK;
  }
  if (list.length === 0) {
    process.stdout.write("no sandboxes yet (cvisor --sandbox NAME -- CMD makes one)\n");
    return EXIT_OK;
  }
  const rows = [
    ["NAME", "SIZE", "LAYERS", "CREATED", "LAST RUN", "RUNNING"],
    ...list.map((s) => [
      s.name,
      humanBytes(s.sizeBytes),
      s.damaged ? "-" : String(s.layers),
      s.damaged ? "damaged" : humanTime(s.created),
      s.damaged ? "-" : humanTime(s.lastRun),
      s.running > 0 ? String(s.running) : "-",
    ]),
  ];
  writeTable(rows);
  for (const s of list) if (s.damaged) writeStderr(`cvisor: ${s.damaged}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("ls")
    .description("list the named sandboxes: size on disk, layers, created, last run")
    .option("--json", "print the list as JSON")
    .helpOption("-h, --help", "print this help")
    .action((opts: { json?: boolean }) => to("ls", [], opts));
}
