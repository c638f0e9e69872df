#!/usr/bin/env node
// The `cvisor` executable: parse, carry out the plan, and turn every failure into one line
// `cvisor: <message>` and an exit code (a stack trace only with CVISOR_DEBUG=1).
import { CvisorError } from "../core/errors.js";
import { CliError } from "./errors.js";
import { EXIT_CVISOR } from "./exit-codes.js";
import { fastParse } from "./fast-parse.js";
import type { Plan } from "./plan.js";
// Static: the run path is the one that must start fast, and one module graph loads faster
// than a chain of dynamic imports.
import { runCommand } from "./run.js";

async function execute(plan: Plan): Promise<number> {
  switch (plan.kind) {
    case "print":
      process.stdout.write(plan.text);
      return plan.exitCode;
    case "error":
      process.stderr.write(`cvisor: ${plan.message}\n`);
      return plan.exitCode;
    case "doctor": {
      // Lazy: doctor's code stays off the run path.
      const { doctor } = await import("./doctor.js");
      return doctor(plan);
    }
    case "run":
      return runCommand(plan);
  }
}

function report(err: unknown): number {
  const debug = process.env.CVISOR_DEBUG === "1";
  const message = err instanceof Error ? err.message : String(err);
  const line = message.split("\n")[0] ?? message;
  process.stderr.write(`cvisor: ${line}\n`);
  if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
  if (err instanceof CliError || err instanceof CvisorError) return err.exitCode;
  return EXIT_CVISOR;
}

/** The plan: the fast path for plain runs, else the full commander parser (loaded only then). */
async function plan(args: string[]): Promise<Plan> {
  const fast = fastParse(args, process.env);
  if (fast) return fast;
  const { parseCli } = await import("./parse.js");
  return parseCli(args, process.env);
}

try {
  process.exitCode = await execute(await plan(process.argv.slice(2)));
} catch (err) {
  process.exitCode = report(err);
}
