// `cvisor [--sandbox NAME] diff [--json]`: what the sandbox changed against the host, one
// `A|C|D PATH` line each, as `docker diff` prints them: the upper and the read-only snapshot
// layers under it, together, against the host.
import { NotFoundError } from "../core/errors.js";
import { existsSync } from "node:fs";
import { layerChanges } from "../sandbox/changes.js";
import { sandboxLowers } from "../sandbox/lowers.js";
import { readMeta, sandboxesDir } from "../store/sandboxes.js";
import { targetSandbox } from "./commands.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";

/** The named sandbox's directory; a clear error when there is no such sandbox. */
export function existingSandbox(name: string): string {
  const dir = `${sandboxesDir()}/${name}`;
  if (readMeta(dir, name) === undefined) {
    throw new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
  }
  return dir;
}

export function diff(plan: StoreCommandPlan): Promise<number> {
  const dir = existingSandbox(targetSandbox(plan));
  const upper = `${dir}/upper`;
  const changes = layerChanges([...(existsSync(upper) ? [upper] : []), ...sandboxLowers({ dir })]);
  if (plan.json) process.stdout.write(`${JSON.stringify(changes)}\n`);
  else for (const c of changes) process.stdout.write(`${c.kind} ${c.path}\n`);
  return Promise.resolve(EXIT_OK);
}
