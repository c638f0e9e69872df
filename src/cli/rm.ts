// `cvisor rm NAME... [--json]`: removes named sandboxes; refused for one a run is using. The
// snapshot layers they use stay (cvisor snapshots rm removes those).
import { CvisorError } from "../core/errors.js";
import { removeSandbox } from "../sandbox/manage.js";
import { writeStderr } from "./errors.js";
import { EXIT_CVISOR, EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";

export async function rm(plan: StoreCommandPlan): Promise<number> {
  (await import("./snapshot.js")).reportLeftovers();
  const removed: string[] = [];
  const failed: { name: string; error: string }[] = [];
  for (const name of plan.operands) {
    try {
      removeSandbox(name);
      removed.push(name);
    } catch (err) {
      if (!(err instanceof CvisorError)) throw err;
      failed.push({ name, error: err.message });
      if (!plan.json) writeStderr(`cvisor: ${err.message}\n`);
    }
  }
  if (plan.json) process.stdout.write(`${JSON.stringify({ removed, failed })}\n`);
  else for (const name of removed) process.stdout.write(`${name}\n`);
  return failed.length > 0 ? EXIT_CVISOR : EXIT_OK;
}
