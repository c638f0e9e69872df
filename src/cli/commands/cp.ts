// `cvisor [--sandbox NAME] cp [--no-ignore] [--json] SRC... DST`: copies files and trees into or
// out of a named sandbox (without --sandbox: "default") with Sandbox.cp (src/sandbox/copy.ts);
// the sandbox side is written sb:/PATH. Skipped entries are warnings on stderr; a progress line shows on stderr when it is a terminal and the copy grows
// large; --json prints a summary on stdout.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { isatty } from "node:tty";
import { CvisorError, UsageError } from "../../core/errors.js";
import type { CopyReport, Skipped } from "../../sandbox/copy-tree.js";
import { librarySandbox } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";
import { ProgressLine } from "../progress.js";
import { humanBytes, ignoredNote } from "../human.js";

const SB = "sb:";

/** The progress line shows once a copy passes either of these. */
const PROGRESS_BYTES = 20 << 20;
const PROGRESS_FILES = 2000;

function usage(message: string): CvisorError {
  return new UsageError(message);
}

export interface CpOperands {
  direction: "in" | "out";
  /** The sources as written; sandbox ones without the sb: prefix. */
  sources: string[];
  /** The destination as written; a sandbox one without the sb: prefix. */
  dst: string;
}

/** Checks cp's operands (exactly one side sb:, absolute sandbox paths); throws a usage error. */
export function cpOperands(operands: readonly string[]): CpOperands {
  if (operands.length < 2) throw usage("cp needs SRC... DST (e.g. cvisor cp ./src sb:/app)");
  const dst = operands[operands.length - 1] as string;
  const sources = operands.slice(0, -1);
  if (operands.includes("-")) {
    throw usage("cp: '-' (a tar stream on stdin or stdout) is not supported: name a path");
  }
  const inSb = sources.map((s) => s.startsWith(SB));
  const dstSb = dst.startsWith(SB);
  const allSb = inSb.every(Boolean);
  const noneSb = !inSb.some(Boolean);
  if (!(dstSb ? noneSb : allSb)) {
    throw usage("cp needs exactly one `sb:` side (host <-> sandbox), e.g. cvisor cp ./src sb:/app");
  }
  const strip = (p: string): string => {
    const v = p.slice(SB.length);
    if (!v.startsWith("/")) throw usage(`cp: sandbox paths are absolute: sb:/PATH (not ${p})`);
    return v;
  };
  for (const p of operands) {
    if (p === "") throw usage("cp: an empty path");
  }
  return dstSb
    ? { direction: "in", sources, dst: strip(dst) }
    : { direction: "out", sources: sources.map(strip), dst };
}

/** cp's progress line: a bouncing bar (the total is unknown), files, bytes, rate. */
function progressText(p: ProgressLine, r: CopyReport): string {
  const width = 20;
  const step = Math.floor((Date.now() / 120) % (width * 2));
  const pos = step < width ? step : width * 2 - step - 1;
  const bar = `${" ".repeat(pos)}=${" ".repeat(width - pos - 1)}`;
  return (
    `cp [${bar}] ${r.files} files, ${humanBytes(r.bytes)}, ` +
    `${humanBytes(r.bytes / p.seconds())}/s`
  );
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  const ops = cpOperands(plan.operands);
  const sb = await librarySandbox(plan);
  const progress = new ProgressLine(!plan.json && isatty(2), writeStderr);
  // Small copies end before a line would help.
  let large = false;
  let report: CopyReport;
  try {
    report = await sb.cp(ops.sources, ops.dst, {
      direction: ops.direction,
      ignore: plan.options.ignore !== false,
      onSkip: (s: Skipped) => {
        progress.clear();
        writeStderr(`cvisor: cp: skipped ${s.path}: ${s.reason}\n`);
      },
      onProgress: (r: CopyReport) => {
        large ||= r.bytes > PROGRESS_BYTES || r.files > PROGRESS_FILES;
        if (large) progress.update(() => progressText(progress, r));
      },
    });
  } finally {
    progress.clear();
  }
  if (plan.json) {
    process.stdout.write(
      `${JSON.stringify({ sandbox: sb.name, direction: ops.direction, ...report })}\n`,
    );
  } else if (report.ignored > 0) {
    writeStderr(`cvisor: cp: ${ignoredNote(report.ignored, "copies")}\n`);
  }
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("cp")
    .description(
      "copy files into or out of the sandbox (--sandbox, else 'default'): the sandbox side is sb:/PATH",
    )
    .argument("<paths...>", "SRC... DST; exactly one side is sb:")
    .option("--no-ignore", "copy what .gitignore and .dockerignore exclude too")
    .option("--json", "print a summary as JSON")
    .helpOption("-h, --help", "print this help")
    .addHelpText("after", sandboxHelp("the sandbox sb:/PATH is in"))
    .action((paths: string[], opts: { ignore?: boolean; json?: boolean }) => to("cp", paths, opts));
}
