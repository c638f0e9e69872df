// `cvisor completion bash|zsh|fish`: prints the shell's completion script (../completion.ts).
import type { Command } from "commander";
import type { ToPlan } from "./define.js";
import { UsageError } from "../../core/errors.js";
import { EXIT_OK } from "../exit-codes.js";
import type { StoreCommandPlan } from "../plan.js";

export async function action(plan: StoreCommandPlan): Promise<number> {
  const { completionScript } = await import("../completion.js");
  const shell = plan.operands[0] ?? "";
  const script = completionScript(shell);
  if (script === undefined) {
    throw new UsageError(`completion: no script for ${shell}: use bash, zsh or fish`);
  }
  process.stdout.write(script);
  return EXIT_OK;
}

/** The command's definition (parse.ts gives its operands and options to `to`). */
export function define(program: Command, to: ToPlan): void {
  program
    .command("completion")
    .description("print the shell completion script for bash, zsh or fish")
    .argument("<shell>", "bash, zsh or fish")
    .helpOption("-h, --help", "print this help")
    .addHelpText(
      "after",
      `
Install:
  bash  eval "$(cvisor completion bash)"          (in ~/.bashrc)
  zsh   eval "$(cvisor completion zsh)"           (in ~/.zshrc, after compinit)
  fish  cvisor completion fish | source           (in ~/.config/fish/config.fish)
`,
    )
    .action((shell: string) => to("completion", [shell], {}));
}
