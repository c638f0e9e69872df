// Every command but the run (./run.ts), one file each: its definition for commander and its
// action, in the order `cvisor --help` lists them. parse.ts defines them all; main.ts loads this
// module (and with it the actions' modules, whose heavy imports are dynamic) only to run one.
import type { Command } from "commander";
import * as branch from "./branch.js";
import * as cache from "./cache.js";
import * as completion from "./completion.js";
import * as cp from "./cp.js";
import type { ToPlan } from "./define.js";
import * as diff from "./diff.js";
import * as doctor from "./doctor.js";
import * as exportCmd from "./export.js";
import * as ls from "./ls.js";
import * as rm from "./rm.js";
import * as rollback from "./rollback.js";
import * as snapshot from "./snapshot.js";
import * as snapshots from "./snapshots.js";
import * as ui from "./ui.js";
import type { StoreCommandPlan } from "../plan.js";

export interface CommandModule {
  define(program: Command, to: ToPlan): void;
  /** Carries the command out; resolves to the exit code. */
  action(plan: StoreCommandPlan): Promise<number>;
}

export const COMMANDS: Readonly<Record<StoreCommandPlan["command"], CommandModule>> = {
  doctor,
  ls,
  rm,
  diff,
  export: exportCmd,
  cp,
  snapshot,
  rollback,
  branch,
  snapshots,
  cache,
  ui,
  completion,
};

/** Carries out a command the plan names; resolves to the exit code. */
export function runCommand(plan: StoreCommandPlan): Promise<number> {
  return COMMANDS[plan.command].action(plan);
}
