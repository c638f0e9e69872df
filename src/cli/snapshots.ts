// `cvisor snapshots [ls] [--json]`: the snapshots (id, sandbox, created, size, parent, layers);
// `cvisor snapshots rm [--force] ID...`: removes them (refused while something uses one, unless
// --force, which says what breaks).
import { CvisorError, UsageError } from "../core/errors.js";
import { listSnapshots, removeSnapshot, type RemoveResult } from "../../snapshots/ops.js";
import { writeStderr } from "./errors.js";
import { EXIT_CVISOR, EXIT_OK } from "./exit-codes.js";
import { humanBytes, humanTime, writeTable } from "./human.js";
import type { StoreCommandPlan } from "./plan.js";
import { reportLeftovers } from "./snapshot.js";

function usage(message: string): UsageError {
  return new UsageError(`${message} (see cvisor snapshots --help)`);
}

export function snapshots(plan: StoreCommandPlan): Promise<number> {
  const [action, ...ids] = plan.operands;
  if (action !== "ls" && action !== "rm") {
    throw usage(`unknown snapshots action '${action ?? ""}': use ls or rm`);
  }
  if (action === "ls" && ids.length > 0) throw usage("snapshots ls takes no IDs");
  if (action === "ls" && plan.options.force) throw usage("--force goes with snapshots rm");
  if (action === "rm" && ids.length === 0) throw usage("snapshots rm needs the IDs to remove");
  reportLeftovers();
  return Promise.resolve(action === "ls" ? ls(plan) : rm(plan, ids));
}

function ls(plan: StoreCommandPlan): number {
  const list = listSnapshots();
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
      s.sandbox,
      humanTime(s.created),
      humanBytes(s.sizeBytes),
      s.parent ?? "-",
      String(s.layers),
    ]),
  ];
  writeTable(rows);
  return EXIT_OK;
}

function rm(plan: StoreCommandPlan, ids: string[]): number {
  const removed: RemoveResult[] = [];
  const failed: { id: string; error: string }[] = [];
  for (const id of ids) {
    try {
      const r = removeSnapshot(id, Boolean(plan.options.force));
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
