// Compiles the C guests of test/fixtures/*.c with gcc, once per content: the binary lives in a
// per-user cache dir under the temp dir, named by a hash of the source and the flags, so every
// test file (each its own process) reuses it and a changed source is rebuilt.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
} from "node:fs";
import path from "node:path";
import { fixtureSources, tempRoot } from "./repo.js";

export const CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"];

const built = new Map<string, string>();
let cacheDir: string | undefined;

/** A cache directory that is ours: owned by this uid, not writable by anyone else. */
function ownCacheDir(): string {
  if (cacheDir) return cacheDir;
  const uid = process.getuid?.() ?? 0;
  const dir = path.join(tempRoot(), `cvisor-e2e-cc-${uid}`);
  try {
    mkdirSync(dir, { mode: 0o755 });
  } catch {
    // Exists already (checked below).
  }
  const st = lstatSync(dir);
  if (st.isDirectory() && st.uid === uid && (st.mode & 0o022) === 0) {
    cacheDir = dir;
  } else {
    // Someone else's (or a symlink): do not trust it; build into a fresh private dir.
    cacheDir = mkdtempSync(path.join(tempRoot(), `cvisor-e2e-cc-${uid}-`));
    chmodSync(cacheDir, 0o755);
  }
  return cacheDir;
}

/**
 * The path of the compiled fixture `name` (test/fixtures/NAME.c), compiling it if needed.
 * Throws with gcc's output when it does not compile.
 */
export function compileFixture(name: string, extra: readonly string[] = []): string {
  const key = [name, ...extra].join(" ");
  const cached = built.get(key);
  if (cached) return cached;
  const source = path.join(fixtureSources, `${name}.c`);
  const text = readFileSync(source);
  const hash = createHash("sha256")
    .update([...CFLAGS, ...extra].join(" "))
    .update("\0")
    .update(text)
    .digest("hex")
    .slice(0, 16);
  const dir = ownCacheDir();
  const out = path.join(dir, `${name}-${hash}`);
  if (!existsSync(out)) {
    const tmp = `${out}.tmp-${process.pid}`;
    try {
      execFileSync("gcc", [...CFLAGS, ...extra, "-o", tmp, source], {
        stdio: ["ignore", "pipe", "pipe"],
      });
    } catch (err) {
      const e = err as { stderr?: Buffer; message?: string };
      throw new Error(`gcc failed on ${source}:\n${e.stderr?.toString() ?? e.message ?? ""}`);
    }
    chmodSync(tmp, 0o755);
    renameSync(tmp, out); // atomic: a concurrent builder of the same hash wins either way
  }
  built.set(key, out);
  return out;
}

/**
 * How many calls each race makes: $CVISOR_RACE_ITERATIONS (default 20 000). The exec race
 * forks a child per round, each flipping until an execve works, so it counts children:
 * $CVISOR_RACE_EXEC_ROUNDS (default 200).
 */
export const RACE_ROUNDS = process.env.CVISOR_RACE_ITERATIONS ?? "20000";
export const RACE_EXEC_ROUNDS = process.env.CVISOR_RACE_EXEC_ROUNDS ?? "200";
/** Time for one race run (a CLI run) and for a test of several. */
export const RACE_TIMEOUT = 240_000;

/** The races against the supervisor's decisions (test/fixtures/flipper.c). */
export function flipper(): string {
  return compileFixture("flipper");
}

/** The probe program (test/fixtures/try-syscall.c). */
export function prober(): string {
  return compileFixture("try-syscall");
}

/** The probe program linked statically: no dynamic loader, so no preloaded shim. */
export function staticProber(): string {
  return compileFixture("try-syscall", ["-static"]);
}

/** The unkillable-but-by-SIGKILL sleeper (test/fixtures/sleeper.c). */
export function sleeper(): string {
  return compileFixture("sleeper");
}

/** The address-flipping connect/send racer (test/fixtures/netracer.c). */
export function netracer(): string {
  return compileFixture("netracer");
}

/** The path-flipping racer (test/fixtures/racer.c), built with threads. */
export function racer(): string {
  return compileFixture("racer");
}

/** The host-side xattr helper (test/fixtures/xattr-tool.c). */
export function xattrTool(): string {
  return compileFixture("xattr-tool");
}

/** The tree dumper of the differential suite (test/fixtures/tree-dump.c). */
export function treeDumper(): string {
  return compileFixture("tree-dump");
}

/** The overlay's system-call probes (test/fixtures/overlay-probe.c). */
export function overlayProbe(): string {
  return compileFixture("overlay-probe");
}

/** Argv for try-syscall running several ops: [["op", "arg"], ["op2"]] → op arg ; op2 */
export function probeArgs(ops: readonly (readonly string[])[]): string[] {
  const args: string[] = [];
  ops.forEach((op, i) => {
    if (i > 0) args.push(";");
    args.push(...op);
  });
  return args;
}
