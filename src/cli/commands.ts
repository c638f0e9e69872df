// Sandbox management commands (ls, rm, diff, export, cp, snapshot, rollback, branch, snapshots, cache): one module each, loaded only when
// such a command runs (main.ts imports this lazily, off the run path).
import { DEFAULT_NAMED_SANDBOX } from "../store/sandboxes.js";
import type { StoreCommandPlan } from "./plan.js";

/** The sandbox a command acts on: --sandbox, else "default" (as cVisor does). */
export function targetSandbox(plan: StoreCommandPlan): string {
  return plan.sandbox ?? DEFAULT_NAMED_SANDBOX;
}

/** Carries out a sandbox management command; resolves to the exit code. */
export async function runStoreCommand(plan: StoreCommandPlan): Promise<number> {
  switch (plan.command) {
    case "ls":
      return (await import("./commands/ls.js")).ls(plan);
    case "rm":
      return (await import("./commands/rm.js")).rm(plan);
    case "diff":
      return (await import("./commands/diff.js")).diff(plan);
    case "export":
      return (await import("./commands/export.js")).exportLayer(plan);
    case "cp":
      return (await import("./commands/cp.js")).cp(plan);
    case "snapshot":
      return (await import("./commands/snapshot.js")).snapshot(plan);
    case "rollback":
      return (await import("./commands/rollback.js")).rollback(plan);
    case "branch":
      return (await import("./commands/branch.js")).branch(plan);
    case "snapshots":
      return (await import("./commands/snapshots.js")).snapshots(plan);
    case "cache":
      return (await import("./commands/cache.js")).cache(plan);
  }
}
