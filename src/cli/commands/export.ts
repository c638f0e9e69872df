// `cvisor [--sandbox NAME] export FILE`: the sandbox's changes as an OCI image layer tarball
// (src/sandbox/export-layer.ts writes it), written to FILE.tmp~<owner record> and renamed into
// place (or to stdout for -).
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { createWriteStream, existsSync, openSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { getSystemErrorMap } from "node:util";
import { CopyError } from "../../core/errors.js";
import { ownerRecord, removeDeadLeftovers } from "../../store/owner.js";
import { cleanedUpOnSignal } from "../../sandbox/interrupt.js";
import { sandboxLowers } from "../../sandbox/lowers.js";
import { existingSandbox } from "./diff.js";
import { targetSandbox } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

interface Summary {
  sandbox: string;
  file: string;
  entries: number;
  bytes: number;
}

/** An fs error in words ("no such file or directory"), else its message. */
function errorText(err: unknown): string {
  const errno = (err as NodeJS.ErrnoException).errno;
  const known = errno === undefined ? undefined : getSystemErrorMap().get(errno);
  return known ? known[1] : (err as Error).message;
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  const { writeLayer } = await import("../../sandbox/export-layer.js");
  const name = targetSandbox(plan);
  const dir = existingSandbox(name);
  const upper = `${dir}/upper`;
  const layers = [...(existsSync(upper) ? [upper] : []), ...sandboxLowers({ dir })];
  const file = plan.operands[0] ?? "-";
  const summary: Summary = { sandbox: name, file, entries: 0, bytes: 0 };
  if (file === "-") {
    await writeLayer(layers, process.stdout, summary);
  } else {
    // Written beside FILE and renamed onto it: removed on a signal, and a killed export's by the
    // next export to the same place.
    const prefix = `${basename(file)}.tmp~`;
    removeDeadLeftovers(dirname(file), prefix);
    const tmp = join(dirname(file), `${prefix}${ownerRecord()}`);
    const write = async (): Promise<void> => {
      // Opened here, not by the stream in the thread pool: a signal's cleanup must never run
      // before the file exists and then see it appear.
      const fd = openSync(tmp, "wx", 0o644);
      await writeLayer(layers, createWriteStream("", { fd }), summary);
      renameSync(tmp, file);
    };
    try {
      await cleanedUpOnSignal(() => rmSync(tmp, { force: true }), write);
    } catch (err) {
      rmSync(tmp, { force: true });
      throw new CopyError(`cannot write ${file}: ${errorText(err)}`, "EEXPORT");
    }
  }
  if (plan.json) writeStderr(`${JSON.stringify(summary)}\n`);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("export")
    .description(
      "write the sandbox's changes (--sandbox, else 'default') as an OCI image layer tarball",
    )
    .argument("<file>", "the tarball to write ('-' for standard output)")
    .option("--json", "print a summary as JSON on stderr")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox whose changes to write"))
    .action((file: string, opts: { json?: boolean }) => to("export", [file], opts));
}
