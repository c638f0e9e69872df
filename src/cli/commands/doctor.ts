// `cvisor doctor [--json]`: tries every feature cvisor needs and prints [✓]/[!]/[✗] lines
// with a one-line fix under each problem; exits 1 when sandboxes cannot run here.
// `cvisor doctor --store`: checks the records of $CVISOR_HOME instead (sandboxes, snapshot
// layers, the cache's entries) and lists each damaged one with the command that removes it;
// exits 1 when there is one. It reads only: nothing is repaired or removed.
import { release } from "node:os";
import { CvisorError } from "../../core/errors.js";
import { helperPath, probe, type ProbeResult } from "../../core/native.js";
import { cvisorHome, userHome } from "../../paths.js";
import {
  credentialCheck,
  helperCheck,
  hostCgroupChecks,
  kernelChecks,
  nativeFailureCheck,
  shimCheck,
  stateDirCheck,
  type Check,
} from "../../sandbox/doctor-checks.js";
import { shimPath } from "../../sandbox/shim.js";
import type { StoreProblem } from "../../sandbox/manage.js";
import { EXIT_DOCTOR_FAILED, EXIT_OK } from "../exit-codes.js";
import type { Command } from "commander";
import type { ToPlan } from "./define.js";
import type { StoreCommandPlan } from "../plan.js";

/** Runs every check and prints the report; resolves to the exit code. */
export async function action(plan: StoreCommandPlan): Promise<number> {
  const store = plan.options.store === true;
  const checks = store ? await storeChecks() : runChecks();
  const failed = checks.some((c) => c.status === "fail");
  if (plan.json) {
    process.stdout.write(`${JSON.stringify({ ok: !failed, checks })}\n`);
  } else {
    const noColor = process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== "";
    const color = Boolean(process.stdout.isTTY) && !noColor;
    process.stdout.write(formatReport(checks, color, store ? "store" : "host"));
  }
  return failed ? EXIT_DOCTOR_FAILED : EXIT_OK;
}

/** The store's checks: one per damaged record, else one per kind of record saying it is sound. */
async function storeChecks(): Promise<Check[]> {
  const [{ auditSandboxes }, { auditLayers }, { backendSpec, openBackend }] = await Promise.all([
    import("../../sandbox/manage.js"),
    import("../../../snapshots/ops.js"),
    import("../../../cache/backends/select.js"),
  ]);
  const checks: Check[] = [];
  const area = (
    id: string,
    what: string,
    audit: { checked: number; problems: StoreProblem[] },
  ): void => {
    for (const p of audit.problems) {
      checks.push({ id, name: p.subject, status: "fail", detail: p.detail, fix: p.fix });
    }
    if (audit.problems.length === 0) {
      const detail = `${audit.checked} checked, none damaged`;
      checks.push({ id, name: what, status: "ok", detail });
    }
  };
  area("sandboxes", "sandboxes", auditSandboxes());
  area("layers", "snapshot layers", auditLayers());
  const spec = backendSpec(undefined);
  let cache: { name: string; checked: number; damaged: string[] };
  try {
    const backend = await openBackend(spec, { readOnly: true });
    const damaged: string[] = [];
    const entries = await backend.list("", damaged);
    cache = { name: backend.description, checked: entries.length + damaged.length, damaged };
  } catch (err) {
    if (!(err instanceof CvisorError)) throw err;
    const detail = `cannot be checked: ${err.message}`;
    checks.push({ id: "cache", name: "cache", status: "warn", detail });
    return checks;
  }
  area("cache", `cache (${cache.name})`, {
    checked: cache.checked,
    problems: cache.damaged.map((name) => ({
      subject: `cache entry ${name}`,
      detail: `its metadata in ${cache.name} cannot be read`,
      fix: "cvisor cache rm KEY (when its key is known), or cvisor cache rm --all",
    })),
  });
  return checks;
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
    shimCheck(shimPath(), release()),
    credentialCheck(process.env, userHome()),
  ];
}

const MARK = { ok: "✓", warn: "!", fail: "✗" } as const;
const COLOR = { ok: "\x1b[32m", warn: "\x1b[33m", fail: "\x1b[31m" } as const;

/** The human report: one line per check, a fix line under each problem, a summary. */
export function formatReport(
  checks: readonly Check[],
  color: boolean,
  subject: "host" | "store" = "host",
): string {
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
  if (subject === "store") {
    lines.push(
      fails > 0
        ? `doctor found ${fails} damaged record(s) in the store; each fix above removes one.`
        : "The store is sound.",
    );
  } else if (fails > 0) lines.push(`doctor found ${fails} problem(s); sandboxes cannot run here.`);
  else if (warns > 0)
    lines.push(`doctor found no problem; sandboxes run, with ${warns} warning(s).`);
  else lines.push("No issues found.");
  return `${lines.join("\n")}\n`;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("doctor")
    .description("check that this machine can run sandboxes")
    .option("--json", "print the checks as JSON")
    .option("--store", "check the store ($CVISOR_HOME) instead: list its damaged records")
    .helpOption("-h, --help", "print this help")
    .action((opts: { json?: boolean; store?: boolean }) => to("doctor", [], opts));
}
