// The `cvisor` executable: parse, carry out the plan, and turn every failure into one line
// `cvisor: <message>` and an exit code (a stack trace only with CVISOR_DEBUG=1).
//
// What runs is not tsc's ESM output of this file but dist/cli.cjs, one CommonJS file that
// esbuild bundles from it (scripts/build-cli.mjs), started by the bin (bin.cts) with V8's code
// cache: `cvisor -- CMD` must start about as fast as `node -e 0`, and an ESM entry costs ~3 ms
// of loader alone, each extra module file ~0.2 ms. The dynamic imports below stay out of the
// bundle (the build points them at tsc's ESM output, loaded through the bin). Modules of both
// builds (this one and what it imports, also in the ESM library) use neither import.meta nor
// top-level await.
import { CvisorError } from "../core/errors.js";
import { exitNow, setPackageAnchor } from "../core/native.js";
import { writeStderr } from "./errors.js";
import { EXIT_CVISOR, EXIT_SIGPIPE } from "./exit-codes.js";
import { fastParse } from "./fast-parse.js";
import type { Plan } from "./plan.js";
// Static: the run path is the one that must start fast.
import * as run from "./commands/run.js";

async function execute(plan: Plan): Promise<number> {
  switch (plan.kind) {
    case "print":
      process.stdout.write(plan.text);
      return plan.exitCode;
    case "error":
      writeStderr(`cvisor: ${plan.message}\n`);
      return plan.exitCode;
    case "command": {
      // Lazy: every other command stays off the run path (and out of the bundle: it runs from
      // the ESM build, whose modules learn where the package is from the library entry).
      await import("../index.js");
      const { runCommand } = await import("./commands/all.js");
      return runCommand(plan);
    }
    case "run":
      return run.action(plan);
  }
}

/** A write to a stdout nobody reads any more: the end, quietly, as SIGPIPE ends a C tool. */
function isEpipe(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | null)?.code === "EPIPE";
}

function stdoutFailed(err: Error): void {
  if (!isEpipe(err)) writeStderr(`cvisor: cannot write to stdout: ${err.message}\n`);
  process.exit(isEpipe(err) ? EXIT_SIGPIPE : EXIT_CVISOR);
}

function report(err: unknown): number {
  const debug = process.env.CVISOR_DEBUG === "1";
  const message = err instanceof Error ? err.message : String(err);
  const line = message.split("\n")[0] ?? message;
  writeStderr(`cvisor: ${line}\n`);
  if (debug && err instanceof Error && err.stack) writeStderr(`${err.stack}\n`);
  if (err instanceof CvisorError) return err.exitCode;
  return EXIT_CVISOR;
}

/** The plan: the fast path for plain runs, else the full commander parser (loaded only then). */
async function plan(args: string[]): Promise<Plan> {
  if (args[0] === "__complete") {
    // A shell asking for candidates (./completion.ts): its words are not a command line.
    const { complete } = await import("./completion.js");
    const words = args.slice(1);
    return { kind: "print", text: complete(words.slice(0, -1), words.at(-1) ?? ""), exitCode: 0 };
  }
  const fast = fastParse(args, process.env);
  if (fast) return fast;
  const { parseCli } = await import("./parse.js");
  return parseCli(args, process.env);
}

async function main(): Promise<void> {
  // The package (native/build/, koffi) is found from the script node runs: this file. In the
  // CommonJS bundle Node has already resolved its real path (require.main.filename).
  const main = typeof require === "undefined" ? undefined : require.main?.filename;
  if (main) setPackageAnchor(main, true);
  else if (process.argv[1]) setPackageAnchor(process.argv[1]);
  let chosen: Plan | undefined;
  try {
    chosen = await plan(process.argv.slice(2));
    // Not for a run: touching process.stdout loads net and tty, which `cvisor -- true` must not.
    if (chosen.kind !== "run") process.stdout.on("error", stdoutFailed);
    process.exitCode = await execute(chosen);
  } catch (err) {
    process.exitCode = report(err);
  }
  // A run wrote everything it had to say synchronously (fd 2) and cleaned up after itself:
  // leave now, without another turn of the event loop nor Node's teardown, which cost a
  // measurable part of `cvisor -- true`.
  if (chosen?.kind === "run") exitNow(Number(process.exitCode ?? 0));
}

void main();
