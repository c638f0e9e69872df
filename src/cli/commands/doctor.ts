// `cvisor doctor [--json]`: tries every feature cvisor needs and prints [✓]/[!]/[✗] lines
// with a one-line fix under each problem; exits 1 when sandboxes cannot run here.
import { helperPath, probe, type ProbeResult } from "../core/native.js";
import { cvisorHome, userHome } from "../paths.js";
import {
  credentialCheck,
  helperCheck,
  hostCgroupChecks,
  kernelChecks,
  nativeFailureCheck,
  stateDirCheck,
  type Check,
} from "../sandbox/doctor-checks.js";
import { EXIT_DOCTOR_FAILED, EXIT_OK } from "./exit-codes.js";
import type { DoctorPlan } from "./parse.js";

/** Runs every check and prints the report; resolves to the exit code. */
export function doctor(plan: DoctorPlan): Promise<number> {
  const checks = runChecks();
  const failed = checks.some((c) => c.status === "fail");
  if (plan.json) {
    process.stdout.write(`${JSON.stringify({ ok: !failed, checks })}\n`);
  } else {
    const noColor = process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== "";
    process.stdout.write(formatReport(checks, Boolean(process.stdout.isTTY) && !noColor));
  }
  return Promise.resolve(failed ? EXIT_DOCTOR_FAILED : EXIT_OK);
}

/** All checks, in the order they are printed. */
export function runChecks(): Check[] {
  const helper = helperPath();
  let probed: ProbeResult | undefined;
  let kernel: Check[];
  try {
    probed = probe(helper);
    kernel = kernelChecks(probed);
  } catch (err) {
    kernel = [nativeFailureCheck(err instanceof Error ? err.message : String(err))];
  }
  return [
    ...kernel,
    ...hostCgroupChecks(),
    stateDirCheck(cvisorHome()),
    helperCheck(helper, probed),
    credentialCheck(process.env, userHome()),
  ];
}

const MARK = { ok: "✓", warn: "!", fail: "✗" } as const;
const COLOR = { ok: "\x1b[32m", warn: "\x1b[33m", fail: "\x1b[31m" } as const;

/** The human report: one line per check, a fix line under each problem, a summary. */
export function formatReport(checks: readonly Check[], color: boolean): string {
  const lines: string[] = [];
  for (const c of checks) {
    const mark = color ? `${COLOR[c.status]}${MARK[c.status]}\x1b[0m` : MARK[c.status];
    lines.push(`[${mark}] ${c.name} — ${c.detail}`);
    if (c.purpose) lines.push(`    ${c.purpose}`);
    if (c.status !== "ok" && c.fix) lines.push(`  fix: ${c.fix}`);
  }
  const fails = checks.filter((c) => c.status === "fail").length;
  const warns = checks.filter((c) => c.status === "warn").length;
  lines.push("");
  if (fails > 0) lines.push(`doctor found ${fails} problem(s); sandboxes cannot run here.`);
  else if (warns > 0)
    lines.push(`doctor found no problem; sandboxes run, with ${warns} warning(s).`);
  else lines.push("No issues found.");
  return `${lines.join("\n")}\n`;
}
