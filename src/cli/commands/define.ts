// What every command file of this directory shares: how its definition hands a parsed command
// line to the plan, the help text of --sandbox, and the sandbox a command acts on.
import { DEFAULT_NAMED_SANDBOX } from "../../store/sandboxes.js";
import type { StoreCommandPlan } from "../plan.js";

/** The sandbox a command acts on: --sandbox, else "default" (as cVisor does). */
export function targetSandbox(plan: StoreCommandPlan): string {
  return plan.sandbox ?? DEFAULT_NAMED_SANDBOX;
}

/** Hands a management command's operands and options to the plan (parse.ts's storeCommand). */
export type ToPlan = (
  name: StoreCommandPlan["command"],
  operands: string[],
  options: StoreCommandPlan["options"],
) => void;

/** Help text for a command that acts on a sandbox: --sandbox is cvisor's own option, given first. */
export function sandboxHelp(what: string): string {
  return `\nSandbox:\n  --sandbox <name>  ${what}, else 'default'; before the command: cvisor --sandbox NAME ...\n`;
}

/** The library's Sandbox for the sandbox a command acts on (loaded only then). */
export async function librarySandbox(
  plan: StoreCommandPlan,
): Promise<import("../../sandbox/sandbox.js").Sandbox> {
  const { Sandbox } = await import("../../sandbox/sandbox.js");
  return new Sandbox({ sandbox: targetSandbox(plan) });
}
