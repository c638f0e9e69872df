// `cvisor [--sandbox NAME] cp [--no-ignore] [--json] SRC... DST`: copies files and trees into or
// out of a named sandbox (without --sandbox: "default"), by docker cp's rules; the sandbox side
// is written sb:/PATH. Into: only the sandbox's upper layer is written (src/sandbox/copy-in.ts),
// and the sandbox is created if missing. Out: the merged view is read and nothing is written
// outside DST, whatever the sandbox holds (src/sandbox/copy-out.ts). Skipped entries are
// warnings on stderr; a progress line shows on stderr when it is a terminal and the copy grows
// large; --json prints a summary on stdout.
import { isatty } from "node:tty";
import { CopyError, CvisorError, restated, UsageError } from "../core/errors.js";
import { errCode } from "../store/fd-path.js";
import { defaultHiddenPaths } from "../paths.js";
import { checkHostSources, copyIn } from "../sandbox/copy-in.js";
import { copyOut } from "../sandbox/copy-out.js";
import type { CopyReport, Skipped } from "../sandbox/copy-tree.js";
import { useNamed } from "../sandbox/open-layer.js";
import { targetSandbox } from "./commands.js";
import { writeStderr } from "./errors.js";
import { EXIT_OK } from "./exit-codes.js";
import type { StoreCommandPlan } from "./plan.js";
import { humanBytes, ignoredNote } from "./human.js";

const SB = "sb:";

/** The progress line shows once a copy passes either of these. */
const PROGRESS_BYTES = 20 << 20;
const PROGRESS_FILES = 2000;
const PROGRESS_EVERY_MS = 100;

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

/** The progress line on stderr (a terminal only), redrawn at most every 100 ms. */
class Progress {
  private readonly start = Date.now();
  private last = 0;
  private shown = false;

  constructor(private readonly enabled: boolean) {}

  update(r: CopyReport): void {
    if (!this.enabled) return;
    if (!this.shown && r.bytes <= PROGRESS_BYTES && r.files <= PROGRESS_FILES) return;
    const now = Date.now();
    if (now - this.last < PROGRESS_EVERY_MS) return;
    this.last = now;
    this.shown = true;
    const secs = Math.max((now - this.start) / 1000, 0.001);
    const width = 20;
    const filled = Math.floor((now / 120) % (width * 2));
    const pos = filled < width ? filled : width * 2 - filled - 1;
    const bar = `${" ".repeat(pos)}=${" ".repeat(width - pos - 1)}`;
    writeStderr(
      `\r\x1b[Kcp [${bar}] ${r.files} files, ${humanBytes(r.bytes)}, ` +
        `${humanBytes(r.bytes / secs)}/s`,
    );
  }

  clear(): void {
    if (this.shown) writeStderr("\r\x1b[K");
    this.shown = false;
    this.last = 0;
  }
}

export async function cp(plan: StoreCommandPlan): Promise<number> {
  const ops = cpOperands(plan.operands);
  const name = targetSandbox(plan);
  const progress = new Progress(!plan.json && isatty(2));
  const opts = {
    ignore: plan.options.ignore !== false,
    hidden: defaultHiddenPaths(process.env),
    onSkip: (s: Skipped) => {
      progress.clear();
      writeStderr(`cvisor: cp: skipped ${s.path}: ${s.reason}\n`);
    },
    onProgress: (r: CopyReport) => progress.update(r),
  };
  let report: CopyReport;
  try {
    if (ops.direction === "in") checkHostSources(ops.sources); // before the sandbox is made
    const sb = useNamed(name, ops.direction === "in");
    try {
      report =
        ops.direction === "in"
          ? await copyIn(sb.named, ops.sources, ops.dst, { ...opts, lowers: sb.lowers })
          : await copyOut(sb.named.upper, ops.sources, ops.dst, { ...opts, lowers: sb.lowers });
    } finally {
      sb.release();
    }
  } catch (err) {
    progress.clear();
    if (err instanceof CvisorError && err.code === "ENOSANDBOX") throw err;
    const message = err instanceof Error ? err.message : String(err);
    const said = message.startsWith("cp") ? message : `cp: ${message}`;
    if (err instanceof CvisorError) throw restated(err, said);
    throw new CopyError(said, errCode(err) ?? "ECP", { cause: err });
  }
  progress.clear();
  if (plan.json) {
    process.stdout.write(
      `${JSON.stringify({ sandbox: name, direction: ops.direction, ...report })}\n`,
    );
  } else if (report.ignored > 0) {
    writeStderr(`cvisor: cp: ${ignoredNote(report.ignored, "copies")}\n`);
  }
  return EXIT_OK;
}
