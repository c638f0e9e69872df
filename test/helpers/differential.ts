// The differential harness of the copy-on-write overlay. A case is a list of steps (a bash
// script, or the overlay probe with arguments), each run with cwd = the root of a fixture tree:
//   - natively, on a scratch copy of the fixture (`cp -a`), one copy per sandbox label;
//   - in a named sandbox over the original fixture, `cvisor --sandbox NAME -C ROOT -- ...`,
//     one name per label, with CVISOR_HOME in the test's scratch dir.
// Then everything the guest can observe is compared: each step's exit code, stdout and stderr
// (the tree's absolute path replaced by <ROOT>), and, per label, the tree as the guest sees it
// at the end (test/fixtures/tree-dump.c, run natively in the copy and in the same named
// sandbox over the original). The guard (gtest) proves the original fixture and $HOME are
// unchanged afterwards.
//
// CVISOR_TEST_OVERLAY chooses what the other side is:
//   (unset)                      native vs sandbox: the suite
//   CVISOR_TEST_OVERLAY=native   native vs a second native run: checks that every case is
//                                deterministic and that the harness itself works, no sandbox
//   CVISOR_TEST_OVERLAY=layers   native vs a named sandbox whose copy of the fixture lives in its
//                                snapshot layers, at a path the host does not have: two layers
//                                (the lower one stale, the upper one correcting it with changed
//                                files and whiteouts), an empty upper over them
//                                (test/e2e/overlay/layered.test.ts runs the suite this way)
//   CVISOR_TEST_OVERLAY=off      every case skipped
// (CVISOR_TEST_OVERLAY_SHOW=1 also prints each case's native outcome, to review a case.)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  realpathSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { constants } from "node:os";
import path from "node:path";
import { overlayProbe, treeDumper } from "./cc.js";
import { FIXED_TIME, type Fixture } from "./fixture.js";
import { gtest } from "./guard.js";
import { cliBuilt, homeDir, runCli, runProcess, uniqueToken, type CliResult } from "./repo.js";

// ---- the gate -----------------------------------------------------------------------------

export type OverlayMode = "off" | "sandbox" | "native" | "layers";

/** How the differential suite runs, from CVISOR_TEST_OVERLAY (see the top of this file). */
export function overlayMode(env: NodeJS.ProcessEnv = process.env): OverlayMode {
  const value = env.CVISOR_TEST_OVERLAY;
  if (value === "native") return "native";
  if (value === "off") return "off";
  if (value === "layers") return "layers";
  return "sandbox";
}

export const GATE_REASON = "CVISOR_TEST_OVERLAY=off";

// ---- cases --------------------------------------------------------------------------------

/** The label of the default sandbox (and of its native copy). */
export const MAIN = "main";
/** What the tree's absolute path becomes in every compared text. */
export const ROOT_PLACEHOLDER = "<ROOT>";

export interface Step {
  /**
   * Which sandbox the step runs in. Each label is one named sandbox (and, natively, one copy
   * of the fixture), kept across the steps of the case: steps with the same label see each
   * other's changes, steps with different labels do not. Default MAIN.
   */
  sandbox?: string;
  /** A bash script: `bash --norc --noprofile -c SCRIPT`. */
  script?: string;
  /** Or the overlay probe (test/fixtures/overlay-probe.c) with these arguments. */
  probe?: readonly string[];
  /** Or any argv (argv[0] a path or a name on PATH). */
  argv?: readonly string[];
  /** Fed to stdin (else /dev/null). */
  input?: string;
}

export interface DiffCase {
  steps: readonly Step[];
  /** Added to the guest environment on both sides. */
  env?: Readonly<Record<string, string>>;
  /**
   * Tree entries (relative paths: "hello.txt", "sub/x", "." for the root) whose mtime is
   * compared too. Only for cases that set times explicitly: other times differ naturally.
   */
  mtimes?: readonly string[];
  /** Tree entries left out of the comparison (tested against the dumped path, "./x/y"). */
  ignore?: RegExp;
  /** Tree entries whose size and content are not compared (e.g. git's index, stat data). */
  ignoreContent?: RegExp;
  /**
   * Tree entries whose bytes follow a directory's listing order (an archive's member order): in
   * layers mode, where merged directories list in name order and the host in its own, their
   * size and content are not compared.
   */
  listingOrder?: RegExp;
  /** Applied to stdout and stderr of both sides (after the root placeholder). */
  normalize?: (text: string) => string;
  /** Sanity checks on the native run, so that a broken case cannot pass by failing alike. */
  expectNative?: (native: RunRecord) => void;
  /** Deadline of each process (default 30 s). */
  timeoutMs?: number;
}

export interface StepOutcome {
  label: string;
  /** Exit code; 128+N for a signal; -1 when the process hung and was killed. */
  code: number;
  stdout: string;
  stderr: string;
}

/** The one entry of a tree whose dump failed (exit code and stderr). */
export const DUMP_FAILED = "(dump failed)";

/** The tree as the guest sees it: dumped path → the rest of the dump line. */
export type Tree = Map<string, string>;

export interface RunRecord {
  /** "native", "sandbox", "native (second run)". */
  side: string;
  steps: StepOutcome[];
  trees: Map<string, Tree>;
}

/** Shorthands for steps. */
export const sh = (script: string, sandbox?: string): Step => ({ script, sandbox });
export const probe = (args: readonly string[], sandbox?: string): Step => ({
  probe: args,
  sandbox,
});

// ---- pure parts (unit-tested in test/unit/differential.test.ts) ----------------------------

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A lookahead: the next character could not continue a file name (or there is none). */
const NAME_GOES_ON = String.raw`(?![A-Za-z0-9_.~+@%\-]|[^\x00-\x7f])`;

/**
 * Replaces each root (longest first) by the placeholder where it is a whole path prefix: the
 * next character is not one that could continue a file name (so "/tmp/a" leaves "/tmp/ab").
 */
export function replaceRoots(
  text: string,
  roots: readonly string[],
  placeholder = ROOT_PLACEHOLDER,
): string {
  const sorted = [...new Set(roots.filter((r) => r.length > 1))].sort(
    (a, b) => b.length - a.length,
  );
  let out = text;
  for (const root of sorted) {
    const re = new RegExp(escapeRegExp(root) + NAME_GOES_ON, "g");
    out = out.replace(re, placeholder);
  }
  return out;
}

/** Parses tree-dump's output: one entry per line, the path, a tab, then the fields. */
export function parseDump(text: string): Tree {
  const tree: Tree = new Map();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const tab = line.indexOf("\t");
    if (tab < 0) tree.set(line, "(malformed line)");
    else tree.set(line.slice(0, tab), line.slice(tab + 1));
  }
  return tree;
}

/** "x/y" → "./x/y", "." → "." (the dumper's spelling). */
export function dumpPath(rel: string): string {
  const clean = rel.replace(/^\.\/+/, "").replace(/\/+$/, "");
  return clean === "" || clean === "." ? "." : `./${clean}`;
}

export interface TreeOptions {
  mtimes?: readonly string[];
  ignore?: RegExp;
  ignoreContent?: RegExp;
}

/** Drops the fields a case does not compare: mtimes not asked for, ignored entries, contents. */
export function filterTree(tree: Tree, opts: TreeOptions): Tree {
  const keepMtime = new Set((opts.mtimes ?? []).map(dumpPath));
  const out: Tree = new Map();
  for (const [p, rest] of tree) {
    if (opts.ignore?.test(p)) continue;
    let fields = rest.split("\t");
    if (!keepMtime.has(p)) fields = fields.filter((f) => !f.startsWith("mtime="));
    if (opts.ignoreContent?.test(p)) {
      fields = fields.map((f) =>
        f.startsWith("size=") || f.startsWith("fnv=") ? `${f.split("=")[0] ?? ""}=(ignored)` : f,
      );
    }
    out.set(p, fields.join("\t"));
  }
  return out;
}

/** What differs between two trees, one line (or block) per entry, sorted by path. */
export function diffTrees(a: Tree, b: Tree, left = "native", right = "sandbox"): string[] {
  const lines: string[] = [];
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  for (const p of paths) {
    const x = a.get(p);
    const y = b.get(p);
    if (x === y) continue;
    if (y === undefined) lines.push(`only in ${left}: ${p}\t${x ?? ""}`);
    else if (x === undefined) lines.push(`only in ${right}: ${p}\t${y}`);
    else lines.push(`differs: ${p}\n      ${left}:\t${x}\n      ${right}:\t${y}`);
  }
  return lines;
}

/** A small line diff (LCS), "-" for left only, "+" for right only, " " for both. */
export function lineDiff(a: string, b: string, maxLines = 400): string[] {
  const x = a.split("\n").slice(0, maxLines);
  const y = b.split("\n").slice(0, maxLines);
  const n = x.length;
  const m = y.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  const at = (i: number, j: number): number => lcs[i]?.[j] ?? 0;
  for (let i = n - 1; i >= 0; i--) {
    const row = lcs[i];
    if (!row) continue;
    for (let j = m - 1; j >= 0; j--) {
      row[j] = x[i] === y[j] ? at(i + 1, j + 1) + 1 : Math.max(at(i + 1, j), at(i, j + 1));
    }
  }
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) {
      out.push(`  ${x[i] ?? ""}`);
      i++;
      j++;
    } else if (i < n && (j >= m || at(i + 1, j) >= at(i, j + 1))) {
      out.push(`- ${x[i] ?? ""}`);
      i++;
    } else {
      out.push(`+ ${y[j] ?? ""}`);
      j++;
    }
  }
  return out;
}

function clip(lines: readonly string[], max = 120): string[] {
  return lines.length > max
    ? [...lines.slice(0, max), `… (${lines.length - max} more)`]
    : [...lines];
}

/** Every difference between two runs of the same case; empty when they agree. */
export function compareRuns(a: RunRecord, b: RunRecord): string[] {
  const out: string[] = [];
  const count = Math.max(a.steps.length, b.steps.length);
  for (let i = 0; i < count; i++) {
    const x = a.steps[i];
    const y = b.steps[i];
    const name = `step ${i + 1} [${x?.label ?? y?.label ?? "?"}]`;
    if (!x || !y) {
      out.push(`${name}: ran only on ${x ? a.side : b.side}`);
      continue;
    }
    if (x.code !== y.code) out.push(`${name}: exit code ${a.side} ${x.code}, ${b.side} ${y.code}`);
    for (const stream of ["stdout", "stderr"] as const) {
      if (x[stream] === y[stream]) continue;
      out.push(
        `${name}: ${stream} differs (- ${a.side}, + ${b.side}):`,
        ...clip(lineDiff(x[stream], y[stream])).map((l) => `    ${l}`),
      );
    }
  }
  const labels = [...new Set([...a.trees.keys(), ...b.trees.keys()])];
  for (const label of labels) {
    const failed = [a, b].filter((r) => r.trees.get(label)?.has(DUMP_FAILED));
    if (failed.length > 0) {
      for (const r of failed) {
        out.push(
          `tree [${label}]: the dump failed on ${r.side}: ${r.trees.get(label)?.get(DUMP_FAILED) ?? ""}`,
        );
      }
      continue;
    }
    const diff = diffTrees(
      a.trees.get(label) ?? new Map(),
      b.trees.get(label) ?? new Map(),
      a.side,
      b.side,
    );
    if (diff.length > 0) {
      out.push(`tree [${label}] differs:`, ...clip(diff).map((l) => `    ${l}`));
    }
  }
  return out;
}

// ---- running ------------------------------------------------------------------------------

/** The guest's environment, the same on both sides (cvisor adds CVISOR_SANDBOX itself). */
function guestEnv(name: string, extra: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: homeDir(),
    LANG: "C",
    LC_ALL: "C",
    TZ: "UTC",
    PYTHONDONTWRITEBYTECODE: "1",
    OVERLAY_PROBE: overlayProbe(),
    TREE_DUMP: treeDumper(),
  };
  for (const key of ["USER", "LOGNAME", "SHELL", "TMPDIR"]) {
    const value = process.env[key];
    if (value) env[key] = value;
  }
  return { ...env, ...extra, CVISOR_SANDBOX: name };
}

function stepArgv(step: Step): string[] {
  // --norc: stdin given as `input` is a socket, and bash then reads ~/.bashrc as if started by
  // sshd (which, e.g., runs `pyenv rehash`): the user's rc files must stay out of both sides.
  if (step.script !== undefined) return ["bash", "--norc", "--noprofile", "-c", step.script];
  if (step.probe) return [overlayProbe(), ...step.probe];
  if (step.argv && step.argv.length > 0) return [...step.argv];
  throw new Error("differential step without script, probe or argv");
}

function exitCode(r: CliResult): number {
  if (r.hung) return -1;
  if (r.code !== null) return r.code;
  const n = r.signal ? constants.signals[r.signal] : undefined;
  return n === undefined ? -2 : 128 + n;
}

/** One way of running a case: natively on copies, or in named sandboxes over the original. */
interface Side {
  name: string;
  /** The absolute paths of the tree this label's processes see as their root. */
  roots(label: string): string[];
  run(
    label: string,
    argv: readonly string[],
    env: Record<string, string>,
    step: Step,
  ): Promise<CliResult>;
}

function realRoots(dir: string): string[] {
  try {
    return [dir, realpathSync(dir)];
  } catch {
    return [dir];
  }
}

function nativeSide(fx: Fixture, name: string, tag: string, timeoutMs: number): Side {
  const copies = new Map<string, string>();
  const copyOf = (label: string): string => {
    let copy = copies.get(label);
    if (copy === undefined) {
      copy = path.join(fx.scratch, `${tag}-${label}`);
      execFileSync("cp", ["-a", "--", fx.root, copy], { stdio: ["ignore", "ignore", "pipe"] });
      copies.set(label, copy);
    }
    return copy;
  };
  return {
    name,
    roots: (label) => realRoots(copyOf(label)),
    run: (label, argv, env, step) => {
      const [file, ...args] = argv;
      return runProcess(file ?? "false", args, {
        cwd: copyOf(label),
        env,
        input: step.input,
        timeoutMs,
      });
    },
  };
}

function sandboxSide(fx: Fixture, names: Map<string, string>, timeoutMs: number): Side {
  const home = path.join(fx.scratch, "cvisor-home");
  mkdirSync(home, { recursive: true });
  return {
    name: "sandbox",
    roots: () => realRoots(fx.root),
    run: (label, argv, env, step) => {
      const name = names.get(label) ?? label;
      const flags: string[] = [];
      for (const [key, value] of Object.entries(env)) {
        if (key !== "CVISOR_SANDBOX") flags.push("-e", `${key}=${value}`);
      }
      return runCli(["--sandbox", name, "-C", fx.root, ...flags, "--", ...argv], {
        env: { ...env, CVISOR_HOME: home },
        input: step.input,
        timeoutMs,
      });
    },
  };
}

/** Upper twins of the host directories on the way to dir (made where missing, host mode and times). */
function upperTwins(upper: string, dir: string): void {
  let host = "/";
  for (const part of dir.split("/").filter((p) => p !== "")) {
    host = path.join(host, part);
    const twin = path.join(upper, host);
    if (existsSync(twin)) continue;
    mkdirSync(twin);
    const st = statSync(host);
    chmodSync(twin, st.mode & 0o7777);
    utimesSync(twin, st.atime, st.mtime);
  }
}

/**
 * Named sandboxes whose fixture comes from snapshot layers: the fixture is copied (cp -a) into
 * the upper at a path only the sandbox has, with a stale hello.txt and an extra file; snapshot;
 * then the upper gets the right hello.txt and a whiteout of the extra file; snapshot again. The
 * guest's view of that path is then the fixture, served by two layers over an empty upper.
 */
function layeredSide(fx: Fixture, names: Map<string, string>, timeoutMs: number): Side {
  const home = path.join(fx.scratch, "cvisor-home-layers");
  mkdirSync(home, { recursive: true });
  const rootOf = (label: string): string => path.join(fx.scratch, `layered-${label}`);
  const env = (extra: Record<string, string>): Record<string, string> => ({
    ...extra,
    CVISOR_HOME: home,
  });
  const ready = new Map<string, Promise<void>>();
  const cli = async (args: readonly string[]): Promise<void> => {
    const r = await runCli(args, { extraEnv: { CVISOR_HOME: home }, timeoutMs });
    assert.equal(r.code, 0, `cvisor ${args.join(" ")}: exit ${String(r.code)}\n${r.err}`);
  };
  const prepare = async (label: string, name: string): Promise<void> => {
    await cli(["--sandbox", name, "--", "true"]);
    const upper = path.join(home, "sandboxes", name, "upper");
    const root = rootOf(label);
    upperTwins(upper, path.dirname(root));
    const copy = path.join(upper, root);
    execFileSync("cp", ["-a", "--", fx.root, copy], { stdio: ["ignore", "ignore", "pipe"] });
    writeFileSync(path.join(copy, "hello.txt"), "stale content from an older layer\n");
    writeFileSync(path.join(copy, "gone.txt"), "deleted by the next layer\n");
    await cli(["--sandbox", name, "snapshot"]);
    upperTwins(upper, path.dirname(root));
    mkdirSync(copy);
    execFileSync("cp", ["-a", "--", fx.p("hello.txt"), path.join(copy, "hello.txt")]);
    writeFileSync(path.join(copy, ".wh.gone.txt"), "");
    const top = statSync(fx.root);
    chmodSync(copy, top.mode & 0o7777);
    utimesSync(copy, top.atime, top.mtime);
    await cli(["--sandbox", name, "snapshot"]);
  };
  return {
    name: "sandbox (layers)",
    roots: (label) => [rootOf(label)],
    run: async (label, argv, guest, step) => {
      const name = names.get(label) ?? label;
      let done = ready.get(label);
      if (done === undefined) {
        done = prepare(label, name);
        ready.set(label, done);
      }
      await done;
      const flags: string[] = [];
      for (const [key, value] of Object.entries(guest)) {
        if (key !== "CVISOR_SANDBOX") flags.push("-e", `${key}=${value}`);
      }
      return runCli(["--sandbox", name, "-C", rootOf(label), ...flags, "--", ...argv], {
        env: env(guest),
        input: step.input,
        timeoutMs,
      });
    },
  };
}

async function runSide(side: Side, c: DiffCase, names: Map<string, string>): Promise<RunRecord> {
  const normalize = (text: string, label: string): string => {
    const replaced = replaceRoots(text, side.roots(label));
    return c.normalize ? c.normalize(replaced) : replaced;
  };
  const envFor = (label: string): Record<string, string> =>
    guestEnv(names.get(label) ?? label, c.env ?? {});
  const record: RunRecord = { side: side.name, steps: [], trees: new Map() };
  for (const step of c.steps) {
    const label = step.sandbox ?? MAIN;
    const r = await side.run(label, stepArgv(step), envFor(label), step);
    record.steps.push({
      label,
      code: exitCode(r),
      stdout: normalize(r.out, label),
      stderr: normalize(r.err, label),
    });
  }
  const dumpArgs = [treeDumper(), ...(c.mtimes && c.mtimes.length > 0 ? ["-t"] : [])];
  for (const label of new Set(record.steps.map((s) => s.label))) {
    const r = await side.run(label, dumpArgs, envFor(label), {});
    const tree =
      exitCode(r) === 0
        ? filterTree(parseDump(r.out), c)
        : new Map([[DUMP_FAILED, `exit=${exitCode(r)} ${r.err.trim()}`]]);
    record.trees.set(label, tree);
  }
  return record;
}

function describeCase(c: DiffCase): string {
  return c.steps
    .map((s, i) => {
      const what =
        s.script !== undefined
          ? `bash -c:\n${s.script.replace(/^/gm, "      ")}`
          : `${(s.probe ? ["overlay-probe", ...s.probe] : (s.argv ?? [])).join(" ")}`;
      return `  step ${i + 1} [${s.sandbox ?? MAIN}]: ${what}`;
    })
    .join("\n");
}

function describeRun(r: RunRecord): string {
  return r.steps
    .map(
      (s, i) =>
        `  step ${i + 1} [${s.label}] exit=${s.code}\n` +
        `    stdout: ${JSON.stringify(s.stdout.slice(0, 1500))}\n` +
        `    stderr: ${JSON.stringify(s.stderr.slice(0, 1500))}`,
    )
    .join("\n");
}

/** A case as layers mode compares it: listing-order bytes are not compared. */
function forLayers(c: DiffCase): DiffCase {
  const order = c.listingOrder;
  const content = c.ignoreContent;
  return {
    ...c,
    ignoreContent:
      order && content ? new RegExp(`${content.source}|${order.source}`) : (order ?? content),
  };
}

/** Runs the case on both sides (per the mode) and fails with every difference found. */
export async function runDifferential(
  fx: Fixture,
  spec: DiffCase,
  mode: Exclude<OverlayMode, "off">,
): Promise<{ native: RunRecord; other: RunRecord }> {
  const c = mode === "layers" ? forLayers(spec) : spec;
  const timeoutMs = c.timeoutMs ?? 30_000;
  const names = new Map<string, string>();
  for (const step of c.steps) {
    const label = step.sandbox ?? MAIN;
    if (!names.has(label)) names.set(label, uniqueToken(`diff-${label}`).toLowerCase());
  }
  const native = await runSide(nativeSide(fx, "native", "native", timeoutMs), c, names);
  // The case must work natively, else both sides could fail alike and "agree".
  native.steps.forEach((s, i) => {
    assert.ok(
      s.code !== 126 && s.code !== 127 && s.code >= 0,
      `the case is broken natively (step ${i + 1} exit ${s.code}):\n${describeRun(native)}\n${describeCase(c)}`,
    );
  });
  for (const [label, tree] of native.trees) {
    assert.ok(
      !tree.has("(dump failed)"),
      `native dump of [${label}] failed: ${tree.get("(dump failed)") ?? ""}`,
    );
  }
  c.expectNative?.(native);
  if (process.env.CVISOR_TEST_OVERLAY_SHOW) {
    console.log(`--- the case ---\n${describeCase(c)}\n--- native ---\n${describeRun(native)}`);
  }
  const otherSide =
    mode === "sandbox"
      ? sandboxSide(fx, names, timeoutMs)
      : mode === "layers"
        ? layeredSide(fx, names, timeoutMs)
        : nativeSide(fx, "native (second run)", "native2", timeoutMs);
  const other = await runSide(otherSide, c, names);
  const diffs = compareRuns(native, other);
  if (diffs.length > 0) {
    assert.fail(
      `${other.side} differs from native:\n${diffs.join("\n")}\n\n--- the case ---\n${describeCase(c)}\n` +
        `--- native ---\n${describeRun(native)}\n--- ${other.side} ---\n${describeRun(other)}`,
    );
  }
  return { native, other };
}

export interface DiffTestOptions {
  /** node:test timeout (default 120 s). */
  timeout?: number;
  /** Extra host files for this test, made before the guard's snapshot. */
  setup?: (fx: Fixture) => void;
  /** Skip with this reason (e.g. a tool that is not installed). */
  skip?: string | false;
}

/**
 * A guarded differential test: `diffTest("name", "bash script")`, or a DiffCase with steps.
 * Skipped (with the reason) while the gate is closed.
 */
export function diffTest(name: string, spec: string | DiffCase, opts: DiffTestOptions = {}): void {
  const mode = overlayMode();
  const c: DiffCase = typeof spec === "string" ? { steps: [sh(spec)] } : spec;
  let skip: string | false = opts.skip ?? false;
  if (mode === "off") skip = GATE_REASON;
  else if (mode !== "native" && !skip && !cliBuilt()) skip = "the CLI is not built (npm run build)";
  gtest(
    name,
    async (fx) => {
      if (mode === "off") return;
      await runDifferential(fx, c, mode);
    },
    { timeout: opts.timeout ?? 120_000, skip, setup: opts.setup },
  );
}

// ---- extra host files for `setup` ---------------------------------------------------------

/**
 * `many/`: `count` files with long names (so a listing takes several getdents64 calls: the
 * readdir-while-deleting pattern needs more than one buffer), plus `many/nested/{a,b}`.
 */
export function addManyFiles(fx: Fixture, count = 200): void {
  const dir = fx.p("many");
  mkdirSync(path.join(dir, "nested"), { recursive: true });
  for (let i = 0; i < count; i++) {
    writeFileSync(path.join(dir, manyName(i)), `file ${i}\n`);
  }
  writeFileSync(path.join(dir, "nested", "a"), "a\n");
  writeFileSync(path.join(dir, "nested", "b"), "b\n");
  for (const p of [path.join(dir, "nested"), dir]) utimesSync(p, FIXED_TIME, FIXED_TIME);
}

/** The name of the i-th file of `many/` (155 bytes). */
export function manyName(i: number): string {
  return `f${String(i).padStart(3, "0")}-${"x".repeat(150)}`;
}

export const HELLO_C = '#include <stdio.h>\nint main(void) { puts("built and ran"); return 0; }\n';
export const MAKEFILE =
  "hello.o: hello.c\n\tgcc -c -o hello.o hello.c\n\nhello: hello.o\n\tgcc -o hello hello.o\n";

/** `build/`: hello.c and a Makefile that compiles it (hello.o) and links it (hello). */
export function addBuildFiles(fx: Fixture): void {
  mkdirSync(fx.p("build"));
  writeFileSync(fx.p("build", "hello.c"), HELLO_C);
  writeFileSync(fx.p("build", "Makefile"), MAKEFILE);
  for (const rel of ["build/hello.c", "build/Makefile", "build"]) {
    utimesSync(fx.p(rel), FIXED_TIME, FIXED_TIME);
  }
}
