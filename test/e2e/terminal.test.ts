// Interactive runs on a pseudo-terminal of their own (issue 15), in a real terminal: tmux
// drives `cvisor` with no command in a pane and reads the screen back. The shell's tty is not
// the pane's, its size follows the pane, ^C, ^Z, jobs and fg work on it, the exit code comes
// back, and the pane's terminal modes are as before after an exit, a kill -9 of the guest and a
// SIGTERM to cvisor. The library's spawn({ tty }) gets the same terminal, with resize().
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Sandbox } from "../../src/index.js";
import { gtest } from "../helpers/guard.js";
import { cliPath } from "../helpers/repo.js";
import { noTmux, Pane } from "../helpers/tmux.js";

/**
 * The pane's own shell prompts again (a bare "$" line): cvisor is gone. What is typed before is
 * still the sandbox's shell's, as keys typed ahead into any program that is about to exit.
 */
function outerPrompt(pane: Pane, after = "^"): Promise<RegExpMatchArray> {
  return pane.waitFor(new RegExp(`${after}\\$ ?$`, "m"), "the pane's prompt after cvisor");
}

gtest(
  "cvisor with no command: a shell on a pty of its own, job control, exit codes, modes restored",
  async (fx) => {
    const pane = new Pane({ CVISOR_HOME: join(fx.scratch, "home"), XDG_RUNTIME_DIR: fx.scratch });
    try {
      const modes = join(fx.scratch, "modes");
      pane.send(`tty; stty -g > ${modes}.before`);
      const outer = (await pane.waitFor(/^(\/dev\/pts\/\d+)$/m, "the pane's tty"))[1];
      const start = `${process.execPath} ${cliPath}`;
      pane.send(start);
      pane.send("PS1='sb$ '; echo tty=$(tty) size=$(stty size)");
      const inner = await pane.waitFor(/^tty=(\/dev\/pts\/\d+) size=30 100$/m, "the shell's tty");
      assert.notEqual(inner[1], outer, "the shell has a terminal of its own");

      pane.tmux(["resize-window", "-t", "t", "-x", "90", "-y", "25"]);
      pane.send("echo resized=$(stty size)");
      await pane.waitFor(/^resized=25 90$/m, "the size after a resize");

      pane.send("sleep 100");
      await pane.waitFor(/^sb\$ sleep 100$/m, "sleep started");
      await new Promise((resolve) => setTimeout(resolve, 300));
      pane.send("C-c", false);
      pane.send("echo after-int=$?");
      await pane.waitFor(/^after-int=130$/m, "^C ends the foreground job with SIGINT");

      pane.send("sleep 100");
      await new Promise((resolve) => setTimeout(resolve, 500));
      pane.send("C-z", false);
      await pane.waitFor(/Stopped\s+sleep 100/, "^Z stops the job");
      pane.send("jobs -l | wc -l | sed 's/^/jobs=/'");
      await pane.waitFor(/^jobs=1$/m, "jobs lists it");
      pane.send("fg");
      await new Promise((resolve) => setTimeout(resolve, 500));
      pane.send("C-c", false);
      pane.send("echo after-fg=$?");
      await pane.waitFor(/^after-fg=130$/m, "fg brought it back, ^C ended it");

      pane.send("exit 7");
      await outerPrompt(pane);
      pane.send(`echo outer-rc=$?; stty -g | cmp -s - ${modes}.before && echo modes-kept`);
      await pane.waitFor(/^outer-rc=7\nmodes-kept$/m, "exit 7 is cvisor's status; modes restored");

      // The guest killed outright, then cvisor itself ended by SIGTERM.
      pane.send(start);
      pane.send("PS1='sb$ '; echo ready-$((40+2))");
      await pane.waitFor(/^ready-42$/m, "a second shell");
      pane.send("kill -9 $$");
      await outerPrompt(pane);
      pane.send(`echo killed-rc=$?; stty -g | cmp -s - ${modes}.before && echo modes-kept-2`);
      await pane.waitFor(/^killed-rc=137\nmodes-kept-2$/m, "kill -9 of the guest");

      pane.send(`${start} --sandbox termtest`);
      pane.send("echo ready-$((40+3)); echo $PPID > /tmp/term-ppid");
      await pane.waitFor(/^ready-43$/m, "a third shell");
      const pids = spawnSync("pgrep", ["-f", `${cliPath} --sandbox termtest`], {
        encoding: "utf8",
      }).stdout.trim();
      assert.match(pids, /^\d+$/, "cvisor's own pid");
      process.kill(Number(pids), "SIGTERM");
      await outerPrompt(pane, "(^|[#$] )"); // the shell cut off: its prompt may share our line
      pane.send(`echo term-rc=$?; stty -g | cmp -s - ${modes}.before && echo modes-kept-3`);
      await pane.waitFor(/^term-rc=143\nmodes-kept-3$/m, "SIGTERM to cvisor");
    } finally {
      pane.close();
    }
  },
  { skip: noTmux, timeout: 120_000 },
);

gtest(
  "cvisor -T runs the shell on cvisor's own terminal; -t gives a command one",
  async (fx) => {
    const pane = new Pane({ CVISOR_HOME: join(fx.scratch, "home"), XDG_RUNTIME_DIR: fx.scratch });
    try {
      const start = `${process.execPath} ${cliPath}`;
      pane.send("echo pane=$(tty)");
      const outer = (await pane.waitFor(/^pane=(\/dev\/pts\/\d+)$/m, "the pane's tty"))[1];
      pane.send(`${start} -T -- sh -c 'echo notty=$(tty)'`);
      await pane.waitFor(new RegExp(`^notty=${outer}$`, "m"), "-T: the pane's own terminal");
      pane.send(`${start} -t -- sh -c 'echo own=$(tty)' | cat`);
      const own = await pane.waitFor(/^own=(\/dev\/pts\/\d+)\r?$/m, "-t: a terminal of its own");
      assert.notEqual(own[1], outer);
      pane.send(`${start} -- sh -c 'test -t 0 && echo stdin-tty; tty'`);
      await pane.waitFor(new RegExp(`^stdin-tty\\n${outer}$`, "m"), "a command: no pty by default");
    } finally {
      pane.close();
    }
  },
  { skip: noTmux, timeout: 60_000 },
);

gtest("library: spawn with tty gives the guest a terminal of its own, resized", async () => {
  const p = new Sandbox().spawn(
    [
      "sh",
      "-c",
      "test -t 0 && test -t 1 && echo both-tty; echo size=$(stty size); read x; echo size=$(stty size) got=$x; exit 5",
    ],
    { tty: { cols: 100, rows: 30 } },
  );
  assert.ok(p.stdout && p.stdin);
  let out = "";
  const saw = (re: RegExp): Promise<void> =>
    new Promise((resolve) => {
      const check = (): void => {
        if (re.test(out)) resolve();
        else p.stdout?.once("data", check);
      };
      check();
    });
  p.stdout.on("data", (d: Buffer) => (out += d.toString()));
  await saw(/size=30 100/);
  p.resize(120, 40);
  p.stdin.write("hi\r");
  await saw(/got=hi/);
  const r = await p.result;
  assert.equal(r.exitCode, 5);
  assert.match(out, /^both-tty\r\nsize=30 100\r\n/);
  assert.match(out, /size=40 120 got=hi\r\n/);
  assert.throws(() => new Sandbox().spawn(["true"]).resize(1, 1), /no tty/);
});
