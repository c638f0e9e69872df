// `cvisor ui` in a real terminal (tmux): the sandboxes listed, a snapshot taken, a shell opened
// from the screen (the screen steps aside and comes back), the file it wrote in the diff view,
// a rollback, the file gone, and q leaves the pane's terminal as it was (its modes, and what it
// showed: the screen is drawn on the alternate screen).
import assert from "node:assert/strict";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { cliPath, runCli } from "../helpers/repo.js";
import { noTmux, Pane } from "../helpers/tmux.js";

/** After Esc a moment passes before the next key, as when a person types: Esc then q at once
 * is the terminal's Alt-q. */
const escaped = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 300));

gtest(
  "cvisor ui: snapshot, a shell from the screen, the diff view, rollback, quit",
  async (fx) => {
    const env = { CVISOR_HOME: join(fx.scratch, "home"), XDG_RUNTIME_DIR: fx.scratch };
    const made = await runCli(
      ["--sandbox", "uidemo", "--", "sh", "-c", "echo hi > /tmp/ui-first"],
      {
        extraEnv: env,
      },
    );
    assert.equal(made.code, 0, made.err);
    const pane = new Pane(env, false); // what is on the screen now, not what scrolled by
    try {
      const modes = join(fx.scratch, "modes");
      pane.send(`stty -g > ${modes}; ${process.execPath} ${cliPath} ui`);
      await pane.waitFor(/› uidemo/, "the sandbox in the list");
      await pane.waitFor(/changes: A 1/, "its changes counted");

      pane.send("s", false);
      await pane.waitFor(/snapshot uidemo\? \(y\/n\)/, "the snapshot asks first");
      pane.send("y", false);
      const id = (await pane.waitFor(/snapshot (s-[a-z0-9-]+) taken/, "the snapshot taken"))[1];
      await pane.waitFor(new RegExp(`${id} ← base`), "the tree shows it as the base");

      pane.send("Enter", false);
      pane.send("echo shell-$((6*7)) && echo made > /tmp/ui-second");
      await pane.waitFor(/^shell-42$/m, "a shell in the sandbox");
      pane.send("exit");
      await pane.waitFor(/› uidemo/, "the screen is back after the shell");
      pane.send("d", false);
      await pane.waitFor(/A \/tmp\/ui-second/, "the diff view lists the file the shell wrote");
      pane.send("Escape", false);
      await escaped();

      pane.send("r", false);
      await pane.waitFor(new RegExp(`roll uidemo back to ${id}\\?`), "the rollback asks first");
      pane.send("y", false);
      await pane.waitFor(/rolled back/, "rolled back");
      pane.send("d", false);
      await pane.waitFor(/changes in uidemo/, "the diff view again");
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.doesNotMatch(pane.screen(), /ui-second/, "the file is gone");
      assert.match(pane.screenText, /A \/tmp\/ui-first/, "what the snapshot holds stays");
      pane.send("Escape", false);
      await escaped();
      pane.send("q", false);
      // Typed once the screen has gone (the alternate screen left, the shell's prompt back):
      // keys typed before are the terminal's to drop when its modes are put back.
      await pane.waitGone(/enter shell · n new/, "the screen after q");
      await pane.waitFor(/^\$ ?$/m, "the pane's shell prompt"); // tmux drops trailing blanks
      pane.send(`echo ui-rc=$?; stty -g | cmp -s - ${modes} && echo modes-kept`);
      await pane.waitFor(/^ui-rc=0\nmodes-kept$/m, "q quits and the terminal is as it was");
      assert.match(pane.screenText, /^\$ stty -g > .* ui$/m, "what the pane showed before is back");
    } finally {
      pane.close();
    }
  },
  { skip: noTmux, timeout: 120_000 },
);
