// `cvisor [--sandbox NAME] diff [--json]`: what the sandbox changed against the host, one
// `A|C|D PATH` line each, as `docker diff` prints them.
import { CvisorError } from "../core/errors.js";
import { upperChanges } from "../sandbox/changes.js";
import { readMeta, sandboxesDir } from "../sandbox/store.js";
import { targetSandbox } from "./commands.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";

/** The named sandbox's directory; a clear error when there is no such sandbox. */
export function existingSandbox(name: string): string {
  const dir = `${sandboxesDir()}/${name}`;
  if (readMeta(dir, name) === undefined) {
    throw new CvisorError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
  }
  return dir;
}

export function diff(plan: StoreCommandPlan): Promise<number> {
  const dir = existingSandbox(targetSandbox(plan));
  const changes = upperChanges(`${dir}/upper`);
  if (plan.json) process.stdout.write(`${JSON.stringify(changes)}\n`);
  else for (const c of changes) process.stdout.write(`${c.kind} ${c.path}\n`);
  return Promise.resolve(EXIT_OK);
}
