// A real terminal for the interactive tests: a tmux server of its own with one pane running an
// interactive bash, driven with send-keys and read back with capture-pane.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { shellQuote, uniqueToken, which } from "./repo.js";

export const tmux = which("tmux");
export const noTmux = tmux ? false : "tmux is not installed (.ci/run installs it)";

/** A tmux server of its own with one pane running an interactive bash, and ways to drive it. */
export class Pane {
  private readonly socket = uniqueToken("cvisor-term");
  screenText = "";

  /** history: read the scrollback too (a shell's lines), else only what the pane shows now. */
  constructor(
    env: Record<string, string>,
    private readonly history = true,
  ) {
    const vars = Object.entries(env).map(([k, v]) => `${k}=${shellQuote(v)}`);
    // The pane's shell: after it exits the pane stays (sleep), so the screen can still be read.
    const cmd = `env ${vars.join(" ")} HISTFILE=/dev/null PS1='$ ' bash --norc --noprofile -i; echo pane-shell-exited; sleep 600`;
    this.tmux(["new-session", "-d", "-s", "t", "-x", "100", "-y", "30", cmd]);
  }

  tmux(args: string[]): string {
    assert.ok(tmux);
    const r = spawnSync(tmux, ["-L", this.socket, ...args], {
      encoding: "utf8",
      env: { ...process.env, TERM: "xterm" },
    });
    assert.equal(r.status, 0, `tmux ${args.join(" ")}: ${r.stderr}`);
    return r.stdout;
  }

  /** Types a line (or a key such as C-c). */
  send(keys: string, enter = true): void {
    this.tmux(["send-keys", "-t", "t", ...(enter ? [keys, "Enter"] : [keys])]);
  }

  screen(): string {
    const from = this.history ? ["-S", "-200"] : [];
    this.screenText = this.tmux(["capture-pane", "-p", "-t", "t", ...from]);
    return this.screenText;
  }

  /** Waits until the screen matches re (a marker the step printed); returns the match. */
  async waitFor(re: RegExp, what: string, ms = 20_000): Promise<RegExpMatchArray> {
    const until = Date.now() + ms;
    for (;;) {
      const m = this.screen().match(re);
      if (m) return m;
      if (Date.now() > until) assert.fail(`${what}: not on the screen:\n${this.screenText}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** Waits until the screen no longer matches re (a screen that went away). */
  async waitGone(re: RegExp, what: string, ms = 20_000): Promise<void> {
    const until = Date.now() + ms;
    while (re.test(this.screen())) {
      if (Date.now() > until) assert.fail(`${what}: still on the screen:\n${this.screenText}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  close(): void {
    spawnSync(tmux ?? "tmux", ["-L", this.socket, "kill-server"]);
  }
}
