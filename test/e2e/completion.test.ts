// Shell completion in real shells on a real terminal (tmux): bash, zsh and fish each load
// `cvisor completion SHELL` and complete commands, options, sandbox names and snapshot ids from
// the store, and file names where a path goes.
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { cliPath, runCli, show, which } from "../helpers/repo.js";
import { noTmux, Pane } from "../helpers/tmux.js";
import type { Fixture } from "../helpers/fixture.js";

/** A store with sandboxes alpha and beta and a snapshot snap-one, and `cvisor` on a PATH. */
async function setUp(fx: Fixture): Promise<Record<string, string>> {
  const home = join(fx.scratch, "home");
  const bin = join(fx.scratch, "bin");
  mkdirSync(bin);
  const cvisor = join(bin, "cvisor");
  writeFileSync(cvisor, `#!/bin/sh\nexec ${process.execPath} ${cliPath} "$@"\n`);
  chmodSync(cvisor, 0o755);
  const env = { CVISOR_HOME: home };
  for (const args of [
    ["--sandbox", "alpha", "--", "true"],
    ["--sandbox", "beta", "--", "true"],
    ["--sandbox", "alpha", "snapshot", "snap-one"],
  ]) {
    const r = await runCli(args, { extraEnv: env, cwd: fx.scratch });
    assert.equal(r.code, 0, show(r));
  }
  writeFileSync(join(fx.scratch, "notes-file.txt"), "x");
  return { ...env, PATH: `${bin}:${process.env.PATH ?? "/usr/bin:/bin"}`, HOME: fx.scratch };
}

let step = 0;

/**
 * Types `line` and Tab, waits for the line the completion made (`expected`), then clears the
 * line and waits for the shell to run a command again (the next keys must not reach a
 * completion still drawing).
 */
async function tab(pane: Pane, line: string, expected: string, what: string): Promise<void> {
  pane.send(line, false);
  pane.send("Tab", false);
  // capture-pane drops the space a shell adds after a whole word at the end of the line.
  const escaped = expected.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  await pane.waitFor(new RegExp(`${escaped}(?: |$)`, "m"), what);
  await new Promise((resolve) => setTimeout(resolve, 300));
  pane.send("C-c", false);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const marker = `step-${++step}-done`;
  pane.send(`echo ${marker}`);
  await pane.waitFor(new RegExp(`^${marker}$`, "m"), `the prompt after ${what}`);
}

const shells: [string, string, string][] = [
  ["bash", "bash", `eval "$(cvisor completion bash)"`],
  [
    "zsh",
    "zsh -f",
    `autoload -U compinit && compinit -u && eval "$(cvisor completion zsh)" && PS1='$ '`,
  ],
  [
    "fish",
    "fish --no-config",
    "cvisor completion fish | source; function fish_prompt; echo '$ '; end",
  ],
];

for (const [shell, start, load] of shells) {
  const missing = which(shell) ? noTmux : `${shell} is not installed (.ci/run installs it)`;
  gtest(
    `completion in ${shell}: commands, options, sandbox names, snapshot ids, files`,
    async (fx) => {
      const env = await setUp(fx);
      const pane = new Pane(env);
      try {
        pane.send(`cd ${fx.scratch} && exec ${start}`);
        await new Promise((resolve) => setTimeout(resolve, 500));
        pane.send(`${load}; echo loaded-$((1+1))`.replace("$((1+1))", "2"));
        await pane.waitFor(/^loaded-2$/m, "the script loaded");
        await tab(pane, "cvisor rollb", "cvisor rollback", "a command");
        await tab(pane, "cvisor --pids", "cvisor --pids-limit", "an option");
        await tab(pane, "cvisor --sandbox al", "cvisor --sandbox alpha", "a sandbox name");
        await tab(pane, "cvisor rm be", "cvisor rm beta", "a sandbox to remove");
        await tab(pane, "cvisor rollback snap", "cvisor rollback snap-one", "a snapshot id");
        await tab(pane, "cvisor completion z", "cvisor completion zsh", "a shell");
        await tab(pane, "cvisor --hide notes-f", "cvisor --hide notes-file.txt", "a path");
      } finally {
        pane.close();
      }
    },
    { skip: missing },
  );
}

gtest("completion: a shell cvisor has no script for gets one line", async () => {
  const r = await runCli(["completion", "tcsh"]);
  assert.equal(r.code, 125, show(r));
  assert.equal(r.err, "cvisor: completion: no script for tcsh: use bash, zsh or fish\n");
});
