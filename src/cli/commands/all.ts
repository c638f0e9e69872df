// Every management command, one file each (its definition for commander and its action), in
// the order `cvisor --help` lists them.
import type { Command } from "commander";
import * as branch from "./branch.js";
import * as cache from "./cache.js";
import * as cp from "./cp.js";
import type { ToPlan } from "./define.js";
import * as diff from "./diff.js";
import * as exportCmd from "./export.js";
import * as ls from "./ls.js";
import * as rm from "./rm.js";
import * as rollback from "./rollback.js";
import * as snapshot from "./snapshot.js";
import * as snapshots from "./snapshots.js";

export interface CommandModule {
  define(program: Command, to: ToPlan): void;
}

export const COMMANDS: readonly CommandModule[] = [
  ls,
  rm,
  diff,
  exportCmd,
  cp,
  snapshot,
  rollback,
  branch,
  snapshots,
  cache,
];
