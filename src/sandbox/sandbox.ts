// The library API: `await new Sandbox(options).run(argv, runOptions)`, and everything the CLI
// does with a sandbox (copies, diff, export, snapshots; Cache for directory caches). Completion
// and captured output are watched from the event loop (net.Socket over the fds): no threadpool,
// no sync wait. What is not a run is loaded on first use, so importing the library stays cheap.
import type { Writable } from "node:stream";
import type {
  RemoveResult,
  ResetResult,
  SnapshotInfo,
  SnapshotResult,
} from "../../snapshots/ops.js";
import { UsageError } from "../core/errors.js";
import * as native from "../core/native.js";
import type { Change } from "./changes.js";
import type { CopyFilesOptions, CopyReport } from "./copy.js";
import { parseDuration } from "./duration.js";
import type { ExportOptions, ExportSummary } from "./export-file.js";
import type { SandboxInfo } from "./manage.js";
import { checkArgv, createPlannedRun, runSpec } from "./native-run.js";
import { closeLayer, openLayer } from "./open-layer.js";
import { RunFailedError } from "./run-error.js";
import { startRun, Stdio, type InputMode, type Started } from "./supervise.js";
import { hookedNumbers, serveHook } from "./syscall-hook.js";
import { validateSandboxName } from "../store/sandboxes.js";
import type {
  RunOptions,
  RunResult,
  SandboxOptions,
  SandboxProcess,
  SpawnOptions,
} from "./types.js";

/** The snapshot operations, loaded when one is used. */
const snapshotOps = (): Promise<typeof import("../../snapshots/ops.js")> =>
  import("../../snapshots/ops.js");

/**
 * A sandbox configuration; each run() starts a fresh guest under it. With `sandbox: NAME` it is
 * a named, persistent sandbox: what its guests change is kept, and the methods that read or
 * change that state (cp, diff, export, snapshot, rollback, branch) work on it.
 */
export class Sandbox {
  /** The options every run starts from. */
  readonly options: Readonly<SandboxOptions>;

  constructor(options: SandboxOptions = {}) {
    if (options.timeout !== undefined) parseDuration(options.timeout);
    if (options.sandbox !== undefined) validateSandboxName(options.sandbox);
    this.options = { ...options };
  }

  /** The named sandbox's name (undefined for an ephemeral one). */
  get name(): string | undefined {
    return this.options.sandbox;
  }

  /**
   * Runs argv in the sandbox. Resolves to the result whatever the guest did, unless `reject`:
   * then an exit other than 0 rejects with a RunFailedError carrying the result. Rejects with a
   * CvisorError when cvisor itself failed.
   */
  async run(argv: readonly string[], options: RunOptions = {}): Promise<RunResult> {
    const stdin = options.stdin ?? "ignore";
    const input: InputMode =
      stdin === "ignore" || stdin === "inherit"
        ? stdin
        : { data: typeof stdin === "string" ? Buffer.from(stdin) : stdin };
    const started = this.start(argv, options, input, true);
    const result = await started.result;
    if ((options.reject ?? this.options.reject) === true && result.exitCode !== 0) {
      throw new RunFailedError(argv, result);
    }
    return result;
  }

  /**
   * Starts argv in the sandbox with its output as streams: `stdout` and `stderr` are Node
   * readable streams (async iterables too) that the caller reads at its own pace (a guest
   * writing to one nobody reads waits, as on a host pipe), `stdin` a writable stream the caller
   * ends. `result` resolves once the guest tree is over (its stdout and stderr are "" there:
   * they were streamed); with `reject`, an exit other than 0 rejects it with RunFailedError.
   * Throws a CvisorError when the run cannot start.
   */
  spawn(argv: readonly string[], options: SpawnOptions = {}): SandboxProcess {
    const stdin = options.stdin ?? "pipe";
    if (stdin !== "pipe" && stdin !== "ignore" && stdin !== "inherit") {
      throw new UsageError(`spawn: stdin is "pipe", "ignore" or "inherit" (not ${String(stdin)})`);
    }
    const terminal = ttySize(options.tty);
    const started = this.start(argv, options, stdin === "pipe" ? "stream" : stdin, false, terminal);
    const reject = (options.reject ?? this.options.reject) === true;
    const result = started.result.then((r) => {
      if (reject && r.exitCode !== 0) throw new RunFailedError(argv, r);
      return r;
    });
    return {
      stdin: started.stdin ?? null,
      stdout: started.stdout ?? null,
      stderr: started.stderr ?? null,
      kill: started.kill,
      result,
      resize: (cols, rows) => {
        if (!started.resize)
          throw new UsageError("resize: this process has no tty (spawn with tty)");
        started.resize(cols, rows);
      },
    };
  }

  /** Opens the layer, builds and starts the run; the layer is closed when the run is over. */
  private start(
    argv: readonly string[],
    options: RunOptions | SpawnOptions,
    input: InputMode,
    capture: boolean,
    terminal?: { cols: number; rows: number },
  ): Started {
    checkArgv(argv);
    const hook = options.onSyscall === undefined ? this.options.onSyscall : options.onSyscall;
    const hooked = hook ? hookedNumbers(hook) : undefined;
    const layer = openLayer(this.options.sandbox);
    const io = new Stdio(capture);
    let started: Started;
    let ours: number | undefined;
    try {
      const spec = runSpec(argv, this.options, options, layer);
      let stdio: [number, number, number];
      if (terminal) {
        const slave = io.terminal(terminal.cols, terminal.rows);
        stdio = [slave, slave, slave];
      } else {
        stdio = [
          io.stdin(input),
          io.output("stdout", options.stdout ?? "pipe", 1),
          io.output("stderr", options.stderr ?? "pipe", 2),
        ];
      }
      let hookSpec: native.RunSpec["hook"];
      if (hooked) {
        const [mine, theirs] = native.socketpair();
        ours = mine;
        hookSpec = { syscalls: [...hooked.keys()], fd: theirs };
      }
      const run = createPlannedRun({
        ...spec,
        stdio,
        hook: hookSpec,
        ctty: terminal !== undefined,
      });
      started = startRun(run, io, capture, options.signal);
    } catch (err) {
      if (ours !== undefined) native.close(ours);
      io.closeGuestEnds();
      io.closeOwnEnds();
      closeLayer(layer);
      throw err;
    }
    if (hook && hooked && ours !== undefined) {
      const served = serveHook(ours, hook, hooked);
      const plain = started.result;
      started.result = plain.then(async (r) => ({ ...r, hookErrors: await served }));
    }
    const end = (): void => {
      io.closeOwnEnds();
      // The guest tree is gone (the run was freed): an ephemeral sandbox goes with it.
      closeLayer(layer);
    };
    started.result.then(end, end);
    return started;
  }

  /** Runs a shell command line: `/bin/sh -c command`. */
  async runCmd(command: string, options: RunOptions = {}): Promise<RunResult> {
    if (typeof command !== "string" || command.trim() === "") {
      throw new UsageError("runCmd takes a shell command line (a non-empty string)");
    }
    return this.run(["/bin/sh", "-c", command], options);
  }

  /**
   * Copies files between the host and this named sandbox, by docker cp's rules: direction "in"
   * copies host paths src to the sandbox path dst (absolute), "out" sandbox paths src to the host
   * path dst. All or nothing. A copy in creates the sandbox when it does not exist yet.
   */
  async cp(
    src: string | readonly string[],
    dst: string,
    options: CopyFilesOptions,
  ): Promise<CopyReport> {
    const name = this.named("cp");
    const { copyFiles } = await import("./copy.js");
    return copyFiles(name, typeof src === "string" ? [src] : src, dst, options);
  }

  /** What this named sandbox changed against the host: A added, C changed, D deleted. */
  async diff(): Promise<Change[]> {
    const name = this.named("diff");
    const [{ layerChanges }, { sandboxLayers }] = await Promise.all([
      import("./changes.js"),
      import("./manage.js"),
    ]);
    return layerChanges(sandboxLayers(name));
  }

  /**
   * Writes this named sandbox's changes as one OCI image layer tarball to `to`: a file (written
   * beside it and renamed onto it) or a stream (which it ends).
   */
  async export(to: string | Writable, options: ExportOptions = {}): Promise<ExportSummary> {
    const name = this.named("export");
    const { exportChanges } = await import("./export-file.js");
    return exportChanges(name, to, options);
  }

  /**
   * Freezes this named sandbox's changes into a read-only snapshot layer (id given, or made up)
   * and gives it a fresh upper over it. Refused while it runs.
   */
  async snapshot(id?: string): Promise<SnapshotResult> {
    const name = this.named("snapshot");
    return (await snapshotOps()).snapshot(name, id);
  }

  /** Drops everything this named sandbox changed after snapshot id (one of its history). */
  async rollback(id: string): Promise<ResetResult> {
    const name = this.named("rollback");
    return (await snapshotOps()).rollback(name, id);
  }

  /**
   * Makes the named sandbox `name` a sandbox on snapshot id (an existing one is reset onto it;
   * refused while it runs). `new Sandbox({ sandbox: name })` runs in it.
   */
  async branch(name: string, id: string): Promise<ResetResult> {
    return (await snapshotOps()).branch(validateSandboxName(name), id);
  }

  /** The named sandboxes. */
  static async list(): Promise<SandboxInfo[]> {
    const [{ recoverStore }, { listSandboxes }] = await Promise.all([
      snapshotOps(),
      import("./manage.js"),
    ]);
    recoverStore();
    return listSandboxes();
  }

  /** Removes a named sandbox (refused while a run uses it); its snapshots stay. */
  static async remove(name: string): Promise<void> {
    const [{ recoverStore }, { removeSandbox }] = await Promise.all([
      snapshotOps(),
      import("./manage.js"),
    ]);
    recoverStore();
    removeSandbox(name);
  }

  /** Every snapshot, oldest first. */
  static async snapshots(): Promise<SnapshotInfo[]> {
    const { listSnapshots, recoverStore } = await snapshotOps();
    recoverStore();
    return listSnapshots();
  }

  /**
   * Removes a snapshot. Refused while a sandbox or another snapshot uses it, unless force (they
   * break); refused while a sandbox using it runs.
   */
  static async removeSnapshot(
    id: string,
    options: { force?: boolean } = {},
  ): Promise<RemoveResult> {
    const { removeSnapshot, recoverStore } = await snapshotOps();
    recoverStore();
    return removeSnapshot(id, options.force === true);
  }

  /** This sandbox's name, for a method that needs a named one. */
  private named(what: string): string {
    const name = this.options.sandbox;
    if (name === undefined) {
      throw new UsageError(`${what} needs a named sandbox: new Sandbox({ sandbox: NAME })`);
    }
    return name;
  }
}

/** The size of a spawn's terminal, or undefined without one. */
function ttySize(t: SpawnOptions["tty"]): { cols: number; rows: number } | undefined {
  if (t === undefined || t === false) return undefined;
  if (t === true) return { cols: 80, rows: 24 };
  const ok = (n: number | undefined): boolean => n === undefined || (Number.isInteger(n) && n > 0);
  if (typeof t !== "object" || !ok(t.cols) || !ok(t.rows)) {
    throw new UsageError("spawn: tty is true or { cols, rows } (positive integers)");
  }
  return { cols: t.cols ?? 80, rows: t.rows ?? 24 };
}
