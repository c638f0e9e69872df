// `cvisor [--sandbox NAME] diff [--json]`: what the sandbox changed against the host, one
// `A|C|D PATH` line each, as `docker diff` prints them: the upper and the read-only snapshot
// layers under it, together, against the host.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { NotFoundError } from "../../core/errors.js";
import { existsSync } from "node:fs";
import { readMeta, sandboxesDir } from "../../store/sandboxes.js";
import { targetSandbox } from "./define.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

/** The named sandbox's directory; a clear error when there is no such sandbox. */
export function existingSandbox(name: string): string {
  const dir = `${sandboxesDir()}/${name}`;
  if (readMeta(dir, name) === undefined) {
    throw new NotFoundError(`no sandbox named ${name} (cvisor ls lists them)`, "ENOSANDBOX");
  }
  return dir;
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  const { layerChanges } = await import("../../sandbox/changes.js");
  const { sandboxLowers } = await import("../../sandbox/lowers.js");
  const dir = existingSandbox(targetSandbox(plan));
  const upper = `${dir}/upper`;
  const changes = layerChanges([...(existsSync(upper) ? [upper] : []), ...sandboxLowers({ dir })]);
  if (plan.json) process.stdout.write(`${JSON.stringify(changes)}\n`);
  else for (const c of changes) process.stdout.write(`${c.kind} ${c.path}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("diff")
    .description(
      "what the sandbox (--sandbox, else 'default') changed against the host: A added, C changed, D deleted",
    )
    .option("--json", "print the changes as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to show"))
    .action((opts: { json?: boolean }) => to("diff", [], opts));
}
