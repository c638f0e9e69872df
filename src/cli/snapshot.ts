// `cvisor [--sandbox NAME] snapshot [ID] [--json]`: freezes the sandbox's changes into a
// read-only snapshot layer and gives it a fresh upper; prints the snapshot's ID.
import { recoverStore, snapshot as takeSnapshot } from "../../snapshots/ops.js";
import { targetSandbox } from "./commands.js";
import { writeStderr } from "./errors.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";

/** Cleans what killed commands left (one stderr line each), as every snapshot command does first. */
export function reportLeftovers(): void {
  for (const line of recoverStore()) writeStderr(`cvisor: ${line}\n`);
}

export async function snapshot(plan: StoreCommandPlan): Promise<number> {
  reportLeftovers();
  const r = await takeSnapshot(targetSandbox(plan), plan.operands[0]);
  if (plan.json) process.stdout.write(`${JSON.stringify({ ...r, layers: r.chain.length + 1 })}\n`);
  else process.stdout.write(`${r.id}\n`);
  return EXIT_OK;
}
