// `cvisor ui`: the TUI's entry (loaded only by that command; Ink and React never load for a run).
// It reads and acts through the library, draws with Ink, and steps aside for a shell: the screen
// ends, the shell gets the terminal on a pty of its own, and the screen comes back after.
import { constants as osConstants } from "node:os";
import { render } from "ink";
import { Sandbox } from "../sandbox/sandbox.js";
import { Cache } from "../sandbox/caches.js";
import { validateSandboxName } from "../store/sandboxes.js";
import { App } from "./app.js";
import type { UiSource, UiState } from "./model.js";

/** The library behind the screen. doctor is run once (it starts a probe of the kernel). */
export function librarySource(doctorLine: () => string): UiSource {
  let doctor: string | undefined;
  const sb = (name: string): Sandbox => new Sandbox({ sandbox: name });
  return {
    async load(): Promise<UiState> {
      const [sandboxes, snapshots] = await Promise.all([Sandbox.list(), Sandbox.snapshots()]);
      let caches: UiState["caches"] = [];
      let cacheError: string | undefined;
      try {
        caches = (await new Cache().list()).entries;
      } catch (err) {
        cacheError = err instanceof Error ? err.message : String(err);
      }
      doctor ??= doctorLine();
      return { sandboxes, snapshots, caches, doctor, ...(cacheError ? { cacheError } : {}) };
    },
    diff: (name) => sb(name).diff(),
    async create(name) {
      validateSandboxName(name);
      if ((await Sandbox.list()).some((s) => s.name === name)) {
        throw new Error(`${name} exists already`);
      }
      await sb(name).run(["true"], { reject: true });
    },
    snapshot: async (name) => (await sb(name).snapshot()).id,
    rollback: async (name, id) => void (await sb(name).rollback(id)),
    branch: async (name, to, id) => {
      validateSandboxName(to);
      await sb(name).branch(to, id);
    },
    remove: (name) => Sandbox.remove(name),
  };
}

/** The terminal's alternate screen, as full-screen programs use it: quitting shows what was there. */
const ALT_SCREEN_ON = "\x1b[?1049h";
const ALT_SCREEN_OFF = "\x1b[?1049l";

/**
 * Draws the screen until q (or SIGTERM, SIGHUP, SIGINT); Enter leaves it for a shell (runShell)
 * and comes back. The screen is drawn on the terminal's alternate screen, left for the shell
 * and on the way out. Resolves to cvisor's exit code.
 */
export async function runUi(
  source: UiSource,
  runShell: (sandbox: string) => Promise<number>,
): Promise<number> {
  let selected: string | undefined;
  let stop: (() => void) | undefined;
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (sig: NodeJS.Signals): void => {
    stoppedBy ??= sig;
    stop?.();
  };
  const signals = ["SIGTERM", "SIGHUP", "SIGINT"] as const;
  for (const sig of signals) process.on(sig, onSignal);
  try {
    while (stoppedBy === undefined) {
      let shell: string | undefined;
      process.stdout.write(ALT_SCREEN_ON);
      const app = render(
        <App
          source={source}
          initial={selected}
          onShell={(name) => {
            shell = name;
          }}
        />,
        { exitOnCtrlC: false },
      );
      stop = () => app.unmount();
      try {
        await app.waitUntilExit();
      } finally {
        stop = undefined;
        process.stdout.write(ALT_SCREEN_OFF);
      }
      if (shell === undefined || stoppedBy !== undefined) break;
      selected = shell;
      try {
        await runShell(shell);
      } catch (err) {
        process.stderr.write(`cvisor: ${err instanceof Error ? err.message : String(err)}\n`);
      }
    }
  } finally {
    for (const sig of signals) process.off(sig, onSignal);
    // Stop reading the terminal now: what the user types next is the shell's, not ours to drop.
    process.stdin.pause();
  }
  // A signal that ended cvisor is its exit status, as for any process: 128 + N.
  return stoppedBy === undefined ? 0 : 128 + osConstants.signals[stoppedBy];
}
