// `cvisor [--sandbox NAME] rollback ID [--json]`: drops everything the sandbox changed after
// snapshot ID (its upper starts empty over the snapshot's layers).
import { rollback as rollbackTo } from "../../snapshots/ops.js";
import { targetSandbox } from "./commands.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";
import { reportLeftovers } from "./snapshot.js";

export function rollback(plan: StoreCommandPlan): Promise<number> {
  reportLeftovers();
  const r = rollbackTo(targetSandbox(plan), plan.operands[0] ?? "");
  if (plan.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  else process.stdout.write(`sandbox ${r.sandbox} rolled back to ${r.id}\n`);
  return Promise.resolve(EXIT_OK);
}
