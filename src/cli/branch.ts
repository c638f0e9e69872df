// `cvisor --sandbox NEW branch ID [--json]`: NEW becomes a sandbox on snapshot ID's layers
// (shared, not copied); an existing NEW is reset onto them (refused while it runs).
import { branch as branchFrom } from "../../snapshots/ops.js";
import { UsageError } from "../core/errors.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";
import { reportLeftovers } from "./snapshot.js";

export function branch(plan: StoreCommandPlan): Promise<number> {
  if (plan.sandbox === undefined) {
    throw new UsageError(
      "branch needs the new sandbox's name: cvisor --sandbox NEW branch ID (see cvisor --help)",
    );
  }
  reportLeftovers();
  const r = branchFrom(plan.sandbox, plan.operands[0] ?? "");
  if (plan.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  else {
    const how = r.created ? "made" : "reset";
    process.stdout.write(`sandbox ${r.sandbox} ${how} on snapshot ${r.id}\n`);
  }
  return Promise.resolve(EXIT_OK);
}
