// What every command file of this directory shares: how its definition hands a parsed command
// line to the plan, and the help text of --sandbox.
import type { StoreCommandPlan } from "../plan.js";

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
