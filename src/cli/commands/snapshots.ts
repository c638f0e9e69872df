// `cvisor snapshots [ls] [--json]`: the snapshots (id, sandbox, created, size, parent, layers);
// `cvisor snapshots rm [--force] ID...`: removes them (refused while something uses one, unless
// --force, which says what breaks).
import type { Command } from "commander";
import type { ToPlan } from "./define.js";
import { CvisorError, UsageError } from "../../core/errors.js";
import type { RemoveResult, SnapshotInfo } from "../../../snapshots/ops.js";
import type { Sandbox } from "../../sandbox/sandbox.js";
import { writeStderr } from "../errors.js";
import { EXIT_CVISOR, EXIT_OK } from "../exit-codes.js";
import { humanBytes, humanTime, writeTable } from "../human.js";
import type { StoreCommandPlan } from "../plan.js";
import { reportLeftovers } from "./snapshot.js";

function usage(message: string): UsageError {
  return new UsageError(`${message} (see cvisor snapshots --help)`);
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  const [verb, ...ids] = plan.operands;
  if (verb !== "ls" && verb !== "rm") {
    throw usage(`unknown snapshots action '${verb ?? ""}': use ls or rm`);
  }
  if (verb === "ls" && ids.length > 0) throw usage("snapshots ls takes no IDs");
  if (verb === "ls" && plan.options.force) throw usage("--force goes with snapshots rm");
  if (verb === "rm" && ids.length === 0) throw usage("snapshots rm needs the IDs to remove");
  await reportLeftovers();
  const { Sandbox } = await import("../../sandbox/sandbox.js");
  return verb === "ls" ? ls(plan, await Sandbox.snapshots()) : rm(plan, ids, Sandbox);
}

function ls(plan: StoreCommandPlan, list: readonly SnapshotInfo[]): number {
  if (plan.json) {
    process.stdout.write(`${JSON.stringify(list)}\n`);
    return EXIT_OK;
  }
  if (list.length === 0) {
    process.stdout.write("no snapshots yet (cvisor --sandbox NAME snapshot makes one)\n");
    return EXIT_OK;
  }
  const rows = [
    ["ID", "SANDBOX", "CREATED", "SIZE", "PARENT", "LAYERS"],
    ...list.map((s) => [
      s.id,
      s.damaged ? "-" : s.sandbox,
      s.damaged ? "damaged" : humanTime(s.created),
      humanBytes(s.sizeBytes),
      s.parent ?? "-",
      s.damaged ? "-" : String(s.layers),
    ]),
  ];
  writeTable(rows);
  for (const s of list) if (s.damaged) writeStderr(`cvisor: ${s.damaged}\n`);
  return EXIT_OK;
}

async function rm(plan: StoreCommandPlan, ids: string[], lib: typeof Sandbox): Promise<number> {
  const removed: RemoveResult[] = [];
  const failed: { id: string; error: string }[] = [];
  for (const id of ids) {
    try {
      const r = await lib.removeSnapshot(id, { force: Boolean(plan.options.force) });
      removed.push(r);
      const broken = [
        ...r.broken.sandboxes.map((s) => `sandbox ${s}`),
        ...r.broken.snapshots.map((s) => `snapshot ${s}`),
      ];
      if (broken.length > 0 && !plan.json) {
        writeStderr(
          `cvisor: removed snapshot ${r.id}, which ${broken.join(", ")} used: ` +
            `${broken.length > 1 ? "they" : "it"} can no longer be used (reset a sandbox with ` +
            `cvisor --sandbox NAME branch ID, or rm it)\n`,
        );
      }
    } catch (err) {
      if (!(err instanceof CvisorError)) throw err;
      failed.push({ id, error: err.message });
      if (!plan.json) writeStderr(`cvisor: ${err.message}\n`);
    }
  }
  if (plan.json) process.stdout.write(`${JSON.stringify({ removed, failed })}\n`);
  else for (const r of removed) process.stdout.write(`${r.id}\n`);
  return failed.length > 0 ? EXIT_CVISOR : EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("snapshots")
    .description("list snapshots (ls, the default) or remove them (rm [--force] ID...)")
    .argument("[action]", "ls or rm")
    .argument("[ids...]", "for rm: the snapshots to remove")
    .option("--force", "rm: remove even what sandboxes or snapshots use (they break)")
    .option("--json", "print the result as JSON")
    .helpOption("-h, --help", "print this help")
    .action(
      (action: string | undefined, ids: string[], opts: { force?: boolean; json?: boolean }) =>
        to("snapshots", [action ?? "ls", ...ids], opts),
    );
}
