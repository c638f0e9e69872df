// Running the try-syscall prober inside cvisor and checking what each op returned. Many ops go
// in one guest run; a mismatch report lists every case, so one run shows all that is wrong.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { probeArgs, prober } from "./cc.js";
import { cvisor, show, type CliOptions, type CliResult } from "./repo.js";

/** What an op may print: an exact result, one of several, or a predicate. */
export type Expectation = string | readonly string[] | ((result: string) => boolean);

export interface ProbeCase {
  op: readonly string[];
  expect: Expectation;
}

/** The call failed (any errno), and not because a prerequisite failed. */
export const FAILED: Expectation = (r) => /^E[A-Z0-9]+$/.test(r);
/** The call or a step before it (e.g. opening the directory it is relative to) failed. */
export const DENIED: Expectation = (r) => /^(E[A-Z0-9]+|SETUP-[a-z-]+-E[A-Z0-9]+)$/.test(r);

export function matches(result: string, expect: Expectation): boolean {
  if (typeof expect === "function") return expect(result);
  if (typeof expect === "string") {
    return expect === "OK" ? result === "OK" || result.startsWith("OK ") : result === expect;
  }
  return expect.some((e) => matches(result, e));
}

function describeExpectation(expect: Expectation): string {
  if (typeof expect === "function") return "an errno (any)";
  if (typeof expect === "string") return expect;
  return expect.join(" | ");
}

export interface ProbeRun {
  results: string[];
  cli: CliResult;
}

/** Runs `cvisor [cliOptions] -- try-syscall op1 ; op2 ...` and returns one result per op. */
export async function runProbes(
  ops: readonly (readonly string[])[],
  cliOptions: readonly string[] = [],
  opts: CliOptions = {},
): Promise<ProbeRun> {
  const cli = await cvisor(cliOptions, [prober(), ...probeArgs(ops)], opts);
  const results = cli.out.split("\n").filter((line) => line !== "");
  return { results, cli };
}

/** Asserts every case; the failure message is the whole table with the mismatches marked. */
export function checkProbes(cases: readonly ProbeCase[], run: ProbeRun, what: string): void {
  const rows: string[] = [];
  let bad = 0;
  cases.forEach((c, i) => {
    const got = run.results[i] ?? "(no output: the prober stopped before this op)";
    const ok = matches(got, c.expect);
    if (!ok) bad++;
    rows.push(
      `${ok ? "  ok " : "  BAD"} ${c.op.join(" ")}: got ${got.slice(0, 200)}, want ${describeExpectation(c.expect)}`,
    );
  });
  if (run.cli.code !== 0) bad++;
  assert.ok(
    bad === 0,
    `${what}: ${bad} unexpected result(s)\n${rows.join("\n")}\n${show(run.cli)}`,
  );
}

/** runProbes + checkProbes. */
export async function expectProbes(
  cases: readonly ProbeCase[],
  what: string,
  cliOptions: readonly string[] = [],
  opts: CliOptions = {},
): Promise<ProbeRun> {
  const run = await runProbes(
    cases.map((c) => c.op),
    cliOptions,
    opts,
  );
  checkProbes(cases, run, what);
  return run;
}

/** Runs the same prober ops natively (no sandbox), e.g. on a scratch copy of a fixture. */
export function runProbesNative(ops: readonly (readonly string[])[], cwd?: string): string[] {
  const r = spawnSync(prober(), probeArgs(ops), { cwd, encoding: "utf8", timeout: 30_000 });
  assert.equal(r.status, 0, `native prober: ${r.stderr}`);
  return r.stdout.split("\n").filter((line) => line !== "");
}

/**
 * The sandbox answers exactly as a writable copy would: each op's result in the sandbox
 * (over the original fixture) equals its result natively on a copy (paths mapped by `toCopy`).
 * `differs` names ops whose result may deliberately differ, with the reason in the test.
 */
export async function expectLikeNative(
  cases: readonly (readonly string[])[],
  toCopy: (arg: string) => string,
  what: string,
  options: { cliOptions?: readonly string[]; nativeCwd?: string; differs?: readonly string[] } = {},
): Promise<void> {
  const native = runProbesNative(
    cases.map((op) => op.map(toCopy)),
    options.nativeCwd,
  );
  const run = await runProbes(cases, options.cliOptions ?? []);
  const expected: ProbeCase[] = cases.map((op, i) => ({
    op,
    expect: options.differs?.includes(op[0] ?? "") ? DENIED : (native[i] ?? "(none)"),
  }));
  checkProbes(expected, run, `${what} (want: the native result on a copy)`);
}
