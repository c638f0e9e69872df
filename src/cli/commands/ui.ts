// `cvisor ui`: the interactive view of the sandboxes, their snapshots and changes, and the caches
// (src/tui/). Ink and React load here only, never for a run.
import type { Command } from "commander";
import { isatty } from "node:tty";
import { UsageError } from "../../core/errors.js";
import type { ToPlan } from "./define.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(_plan: StoreCommandPlan): Promise<number> {
  if (!isatty(0) || !isatty(1)) {
    throw new UsageError("ui needs a terminal (stdin and stdout); for scripts: cvisor ls --json");
  }
  const [{ runUi, librarySource }, { runShell }, { runChecks }] = await Promise.all([
    loadedInteractive(() => import("../../tui/main.js")),
    import("../terminal-run.js"),
    import("./doctor.js"),
  ]);
  return runUi(
    librarySource(() => doctorLine(runChecks())),
    runShell,
  );
}

/**
 * Loads the TUI with CI and CONTINUOUS_INTEGRATION out of sight: Ink reads them once, at load,
 * and in "CI" draws only a last frame at exit. A terminal on both ends is a person, whatever a
 * variable says; the shells the TUI opens get the variables back.
 */
async function loadedInteractive<T>(load: () => Promise<T>): Promise<T> {
  const saved = { CI: process.env.CI, CONTINUOUS_INTEGRATION: process.env.CONTINUOUS_INTEGRATION };
  delete process.env.CI;
  delete process.env.CONTINUOUS_INTEGRATION;
  try {
    return await load();
  } finally {
    for (const [key, value] of Object.entries(saved))
      if (value !== undefined) process.env[key] = value;
  }
}

/** doctor in one line: "ok", or how many checks fail or warn, and which. */
export function doctorLine(checks: readonly { name: string; status: string }[]): string {
  const bad = checks.filter((c) => c.status !== "ok");
  if (bad.length === 0) return "ok";
  const fails = bad.filter((c) => c.status === "fail").length;
  const what = fails > 0 ? `${fails} failing` : `${bad.length} warning${bad.length > 1 ? "s" : ""}`;
  return `${what} (${bad.map((c) => c.name).join(", ")}): cvisor doctor`;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("ui")
    .description("the sandboxes, their snapshots and changes, and the caches, interactively")
    .helpOption("-h, --help", "print this help")
    .action(() => to("ui", [], {}));
}
