#!/usr/bin/env node
// Benchmark harness for cvisor (`npm run bench`).
//
// Runs each workload natively, under cvisor, and under every installed peer
// (bubblewrap, proot, gVisor `runsc do`), alternating runners round by round,
// and prints one table of medians, ratios to native and cvisor's ratio to
// proot and runsc, with each row's target (PASS/FAIL); then cvisor's
// notifications per workload by syscall (from one extra, untimed library run),
// and the performance targets. Method (see shared/design/peers.md): this VM
// drops page cache that sits unused for about a minute, so every workload is
// warmed natively right before it is timed; quote medians and ratios.
//
// Targets: data-bound rows (cat 200 MB, gcc) ≤ 1.10 × native (in-sandbox
// time); metadata-heavy rows (find, ls -lR, tar, git status, make -j2) faster
// than proot and runsc measured in the same run.
//
// Usage: node scripts/bench.mjs [--rounds N] [--json FILE] [--only REGEX]
//                               [--runners native,cvisor,bwrap,proot,runsc]
//                               [--budget SECONDS]
//        node scripts/bench.mjs --only snapshots   (scripts/bench/snapshots.mjs)
//        node scripts/bench.mjs --only layers      (scripts/bench/layers.mjs)
// Per-run fixtures (a 200 MB file, a C source) live in a temp dir under
// $CVISOR_BENCH_DIR (default /var/tmp), removed at exit and on SIGINT. The
// git repository and the C project (scripts/bench/fixtures.mjs) are generated
// once, deterministically, into $CVISOR_BENCH_DIR/cvisor-bench-cache and kept.

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import {
  GIT_FILES,
  MAKE_UNITS,
  ensureGitRepo,
  ensureMakeProject,
  FILL_ITEMS,
  gitRepoDir,
  makeProjectDir,
} from "./bench/fixtures.mjs";

const SELF = fileURLToPath(import.meta.url);
const REPO = path.resolve(path.dirname(SELF), "..");
const CLI = path.join(REPO, "dist/cvisor.cjs"); // the package's bin
const LIB = path.join(REPO, "dist/src/index.js");
const CORE = path.join(REPO, "native/build/libcvisor.so");

// Levels of the deep-tree row: its path stays under PATH_MAX (4 096), so every peer can run it.
const DEEP_LEVELS = 1000;
const LIB_WARMUP = 20;
const LIB_ITERATIONS = 200;
const MIN_SAMPLES = 3; // a slow runner still gets this many rounds
// A runner is given up on a workload once it has failed MAX_FAILURES times and
// more often than it succeeded; an occasional failure is counted (f=K) but
// keeps the runner's samples.
const MAX_FAILURES = 2;

// Every runner, and the guest, gets the same small environment: the host
// variables cvisor passes to a guest by default (src/sandbox/env.ts, read from
// the build). The host environment may hold variables that change a program's
// own cost (e.g. NODE_EXTRA_CA_CERTS adds tens of ms to every node start) and
// cvisor drops them, so native and peers must not see them either.
const ENV_MODULE = path.join(REPO, "dist/src/sandbox/env.js");
if (!fs.existsSync(ENV_MODULE)) {
  console.error("bench: cvisor is not built here: run `npm install` first");
  process.exit(1);
}
const { DEFAULT_ENV_KEYS, FALLBACK_PATH } = await import(pathToFileURL(ENV_MODULE).href);
const BENCH_ENV = Object.fromEntries(
  Object.entries(process.env).filter(
    ([key, value]) =>
      value !== undefined && (DEFAULT_ENV_KEYS.includes(key) || key.startsWith("LC_")),
  ),
);
BENCH_ENV.PATH ??= FALLBACK_PATH;
const RUN_TIMEOUT_MS = 180_000; // one run longer than this is a failure
const STDERR_KEEP = 64 * 1024;

const TARGETS = {
  libraryMs: 2,
  cliStartRatio: 1.25,
  dataRatio: 1.1,
  // Metadata-heavy workloads: cvisor's median below each of these peers'
  // (those installed and working), measured in the same run.
  fasterThan: ["proot", "runsc"],
};
// Ids and names of the workloads graded against TARGETS.fasterThan.
const METADATA_TARGETS = [
  ["find", "find /usr/lib"],
  ["ls-lR", "ls -lR /usr/include"],
  ["tar", "tar of /usr/include"],
  ["git-status", "git status"],
  ["make", "make -j2"],
];

// ---------------------------------------------------------------- child mode
// `bench.mjs --library-child` runs the library workload in its own warm Node
// process and writes the samples as one JSON line on fd 3.

if (process.argv[2] === "--library-child") {
  await libraryChild();
  process.exit(0);
}

// `bench.mjs --count-child JSON_ARGV` runs argv once through the library (an
// ephemeral Sandbox without network, like the CLI runs) and writes the run's
// stats as one JSON line on fd 3: the notifications per syscall.
if (process.argv[2] === "--count-child") {
  await countChild(JSON.parse(process.argv[3]));
  process.exit(0);
}

async function countChild(argv) {
  const out = (obj) => fs.writeSync(3, JSON.stringify(obj) + "\n");
  try {
    const { Sandbox } = await import(pathToFileURL(LIB).href);
    const r = await new Sandbox({ network: false }).run(argv, {
      cwd: "/",
      stdout: "ignore",
      stderr: "pipe",
    });
    out({
      exitCode: r.exitCode,
      signal: r.signal,
      execError: r.execError ?? null,
      durationMs: r.durationMs,
      notifications: r.stats?.notifications ?? {},
      totalNotifications: r.stats?.totalNotifications ?? null,
      stderr: lastLines(r.stderr ?? "", 1),
    });
  } catch (err) {
    out({ error: oneLine(err) });
  }
}

async function libraryChild() {
  const out = (obj) => fs.writeSync(3, JSON.stringify(obj) + "\n");
  let Sandbox;
  try {
    ({ Sandbox } = await import(pathToFileURL(LIB).href));
    if (typeof Sandbox !== "function") throw new Error("no Sandbox export");
  } catch (err) {
    out({ error: `cannot import ${LIB}: ${oneLine(err)}` });
    return;
  }
  const spawnTrue = () =>
    new Promise((resolve, reject) => {
      const child = spawn("/bin/true", [], { stdio: "ignore" });
      child.on("error", reject);
      child.on("close", (code, signal) =>
        code === 0 ? resolve() : reject(new Error(`/bin/true: exit ${code ?? signal}`)),
      );
    });
  const sandboxTrue = async () => {
    const r = await new Sandbox().run(["/bin/true"], {
      stdout: "ignore",
      stderr: "ignore",
    });
    if (!r || r.exitCode !== 0) {
      throw new Error(`sandboxed /bin/true: exitCode ${r?.exitCode} signal ${r?.signal}`);
    }
  };
  const fns = { native: spawnTrue, cvisor: sandboxTrue };
  const res = { native: [], cvisor: [], errors: {} };
  for (let i = 0; i < LIB_WARMUP + LIB_ITERATIONS; i++) {
    const order = i % 2 ? ["cvisor", "native"] : ["native", "cvisor"];
    for (const name of order) {
      const e = res.errors[name];
      if (e?.count >= MAX_FAILURES && e.count > res[name].length) continue;
      const t0 = process.hrtime.bigint();
      try {
        await fns[name]();
      } catch (err) {
        const failure = (res.errors[name] ??= { count: 0, message: oneLine(err) });
        failure.count += 1;
        continue;
      }
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (i >= LIB_WARMUP) res[name].push(ms);
    }
  }
  out(res);
}

// ------------------------------------------------------------------ helpers

function oneLine(err) {
  const s = err instanceof Error ? err.message : String(err);
  return s.split("\n")[0].slice(0, 200);
}

function which(name) {
  if (name.includes("/")) return isExecutable(name) ? name : null;
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (!dir) continue;
    const p = path.join(dir, name);
    if (isExecutable(p)) return p;
  }
  return null;
}

function isExecutable(p) {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

function versionOf(argv) {
  const r = spawnSync(argv[0], argv.slice(1), {
    encoding: "utf8",
    timeout: 10_000,
  });
  const m = `${r.stdout ?? ""}\n${r.stderr ?? ""}`.match(/v?\d+\.\d+[\w.~+-]*/);
  return m ? m[0] : "?";
}

function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    median: quantile(s, 0.5),
    p90: quantile(s, 0.9),
    min: s[0],
    max: s[s.length - 1],
  };
}

function fmtMs(ms) {
  if (!Number.isFinite(ms)) return "?";
  const digits = ms < 10 ? 2 : ms < 100 ? 1 : 0;
  return `${ms.toFixed(digits)} ms`;
}

function fmtRatio(r) {
  if (!Number.isFinite(r)) return "?";
  const digits = r < 10 ? 2 : r < 100 ? 1 : 0;
  return `${r.toFixed(digits)}×`;
}

function fmtCount(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function log(msg) {
  process.stderr.write(`bench: ${msg}\n`);
}

// ------------------------------------------------------ processes & cleanup

const children = new Set();
let tempDir = null;
let interrupted = false;

function removeTemp() {
  if (!tempDir) return;
  try {
    fs.rmSync(tempDir, { recursive: true, force: true });
  } catch {
    // best effort: nothing else to do at exit
  }
  tempDir = null;
}

function killChildren(signal) {
  for (const child of children) {
    try {
      process.kill(-child.pid, signal); // each run is its own process group
    } catch {
      // already gone
    }
  }
}

function onSignal(signal) {
  if (interrupted) return;
  interrupted = true;
  process.stderr.write(`\nbench: ${signal}, stopping and cleaning up\n`);
  killChildren("SIGTERM");
  setTimeout(() => {
    killChildren("SIGKILL");
    removeTemp();
    process.exit(signal === "SIGINT" ? 130 : 143);
  }, 300).unref();
}

process.on("SIGINT", () => onSignal("SIGINT"));
process.on("SIGTERM", () => onSignal("SIGTERM"));
process.on("SIGHUP", () => onSignal("SIGHUP"));
process.on("exit", () => {
  killChildren("SIGKILL");
  removeTemp();
});

/**
 * Runs argv once, stdout and stderr piped (gVisor rewrites a regular-file
 * stdout, so nothing is ever given a file) and drained; stdout is discarded,
 * the tail of stderr is kept. Resolves with the wall time from spawn to the
 * close of both pipes and the exit status. Never rejects.
 */
function runOnce(argv, { timeoutMs = RUN_TIMEOUT_MS } = {}) {
  return new Promise((resolve) => {
    let stderr = "";
    let timedOut = false;
    let settled = false;
    const t0 = process.hrtime.bigint();
    let child;
    try {
      child = spawn(argv[0], argv.slice(1), {
        cwd: "/",
        env: BENCH_ENV,
        stdio: ["ignore", "pipe", "pipe"],
        detached: true, // own process group: killable as a whole
      });
    } catch (err) {
      resolve({ ms: NaN, error: oneLine(err), code: null, stderr: "" });
      return;
    }
    children.add(child);
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }, timeoutMs);
    child.stdout.resume();
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (d) => {
      stderr += d;
      if (stderr.length > 2 * STDERR_KEEP) stderr = stderr.slice(-STDERR_KEEP);
    });
    const finish = (result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      children.delete(child);
      resolve({ ...result, stderr: stderr.slice(-STDERR_KEEP) });
    };
    child.on("error", (err) => finish({ ms: NaN, error: oneLine(err) }));
    child.on("close", (code, signal) => {
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      let error = null;
      if (timedOut) error = `timed out after ${timeoutMs / 1000} s`;
      else if (signal) error = `killed by ${signal}`;
      else if (code !== 0) error = `exit ${code}`;
      if (error) {
        const last = lastLines(stderr, 1);
        if (last) error += `: ${last}`;
      }
      finish({ ms, code, signal, error });
    });
  });
}

function lastLines(text, n) {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  return lines.slice(-n).join(" / ").slice(0, 200);
}

// ------------------------------------------------------------------ runners

// wrap(argv, bin, writable): writable lists the directories a workload writes
// into (its fixture, e.g. the C project's build/). cvisor writes them into the
// sandbox's copy-on-write layer and runsc into its own in-memory overlay; proot
// (no copy-on-write) writes to the host anyway; bwrap binds them writable over
// its read-only root, so its writes reach the host too. WRITES says where.
const WRITES = {
  native: "the host",
  cvisor: "its copy-on-write layer (ephemeral sandbox, thrown away)",
  bwrap: "the host (a --bind of the directory: bwrap 0.8 has no overlay)",
  proot: "the host (no copy-on-write)",
  runsc: "its in-memory overlay",
};

function runnerTable(tmp) {
  return {
    native: {
      wrap: (argv) => argv,
    },
    cvisor: {
      wrap: (argv) => [process.execPath, CLI, "--json", "--no-network", "--", ...argv],
    },
    bwrap: {
      bin: "bwrap",
      version: ["--version"],
      wrap: (argv, bin, writable = []) => [
        bin,
        "--ro-bind",
        "/",
        "/",
        ...writable.flatMap((dir) => ["--bind", dir, dir]),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-all",
        "--die-with-parent",
        ...argv,
      ],
    },
    proot: {
      bin: "proot",
      version: ["--version"],
      wrap: (argv, bin) => [bin, "-r", "/", "-b", `${tmp.scratch}:/tmp`, ...argv],
    },
    runsc: {
      bin: "runsc",
      version: ["--version"],
      wrap: (argv, bin) => [
        bin,
        "--rootless",
        "--network=none",
        "--platform=ptrace",
        "do",
        ...argv,
      ],
    },
  };
}

// ---------------------------------------------------------------- workloads

function cSource() {
  // A few hundred lines of ordinary C with real headers, loops and switches,
  // so gcc -O2 does some optimisation work.
  const parts = [
    "#include <stdio.h>",
    "#include <stdlib.h>",
    "#include <string.h>",
    "#include <math.h>",
    "#include <stdint.h>",
    "",
    "struct item { int key; double weight; char name[32]; struct item *next; };",
    "",
    "static int cmp_items(const void *a, const void *b) {",
    "  const struct item *x = a, *y = b;",
    "  return (x->key > y->key) - (x->key < y->key);",
    "}",
    "",
  ];
  const N = 24;
  for (let i = 0; i < N; i++) {
    parts.push(
      `static uint64_t mix${i}(uint64_t h, const char *s, size_t n) {`,
      `  for (size_t k = 0; k < n; k++) {`,
      `    h ^= (uint64_t)(unsigned char)s[k] * ${2 * i + 3}u;`,
      `    h = (h << ${(i % 13) + 5}) | (h >> ${64 - ((i % 13) + 5)});`,
      `    h *= 0x9e3779b97f4a7c15ull;`,
      `  }`,
      `  return h;`,
      `}`,
      ``,
      `double stage${i}(struct item *items, size_t n, double bias) {`,
      `  double acc = bias;`,
      `  qsort(items, n, sizeof *items, cmp_items);`,
      `  for (size_t k = 0; k < n; k++) {`,
      `    switch ((items[k].key + ${i}) % 5) {`,
      `    case 0: acc += sqrt(fabs(items[k].weight)) * ${i + 1}.0; break;`,
      `    case 1: acc -= items[k].weight / (k + ${i + 1}.0); break;`,
      `    case 2: acc *= 1.0 + 1.0 / (double)(k + ${i + 2}); break;`,
      `    case 3: acc += (double)mix${i}(${i}u, items[k].name, strlen(items[k].name)); break;`,
      `    default: acc = fmod(acc, ${1000 + i}.0);`,
      `    }`,
      `  }`,
      `  return acc;`,
      `}`,
      ``,
    );
  }
  parts.push("int run_all(size_t n) {", ...FILL_ITEMS);
  for (let i = 0; i < N; i++) {
    parts.push(`  total += stage${i}(items, n, total);`);
  }
  parts.push('  printf("%f\\n", total);', "  free(items);", "  return total > 0;", "}", "");
  return parts.join("\n");
}

function pythonPath() {
  // Prefer the system interpreter: a pyenv shim is a bash script, which would
  // measure bash and pyenv rather than Python.
  if (isExecutable("/usr/bin/python3")) return "/usr/bin/python3";
  const p = which("python3");
  if (!p) return null;
  const r = spawnSync(p, ["-c", "import sys; print(sys.executable)"], {
    encoding: "utf8",
    timeout: 10_000,
  });
  const exe = r.stdout?.trim();
  return exe && isExecutable(exe) ? exe : p;
}

function workloads(tmp) {
  const sh = "/bin/sh";
  const python = pythonPath();
  const gcc = which("gcc");
  const git = which("git");
  const make = which("make");
  const repo = gitRepoDir(tmp.cache);
  const project = makeProjectDir(tmp.cache);
  const build = path.join(project, "build");
  return [
    {
      id: "library",
      label: "library: Sandbox.run(/bin/true) vs spawn",
      library: true,
    },
    {
      id: "cli-start",
      label: "CLI start: `node -e 0` vs `cvisor -- true`",
      argv: [process.execPath, "-e", "0"],
      cvisorGuest: ["true"],
      cvisorPlain: true,
      // A ratio of two ~20 ms starts, graded against a target: three times the rounds (each
      // costs well under 0.1 s) so the median does not move with one noisy round.
      roundsFactor: 3,
      only: ["native", "cvisor"],
    },
    { id: "true", label: "/bin/true", argv: ["/bin/true"] },
    {
      id: "sh-loop",
      label: "sh loop (20000 iterations)",
      argv: [sh, "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"],
    },
    {
      id: "fork-exec",
      label: "fork/exec loop (200 × /bin/true)",
      argv: [sh, "-c", "for i in $(seq 200); do /bin/true; done"],
    },
    {
      id: "find",
      label: "find /usr/lib -type f",
      argv: [sh, "-c", "find /usr/lib -type f > /dev/null"],
      kind: "metadata",
    },
    {
      id: "ls-lR",
      label: "ls -lR /usr/include",
      argv: [sh, "-c", "ls -lR /usr/include > /dev/null"],
      kind: "metadata",
    },
    {
      id: "tar",
      label: "tar cf - /usr/include | wc -c",
      argv: [sh, "-c", "tar cf - /usr/include 2>/dev/null | wc -c"],
      kind: "metadata",
    },
    {
      id: "git-status",
      label: `git status (${fmtCount(GIT_FILES)}-file repo)`,
      argv: git ? [git, "-C", repo, "status"] : null,
      missing: "git not found",
      kind: "metadata",
      prepare: () => ensureGitRepo(tmp.cache),
      // A run killed mid-way would leave the lock; git status itself takes and
      // drops it on every run (native, proot: on the host).
      reset: () => fs.rmSync(path.join(repo, ".git/index.lock"), { force: true }),
    },
    {
      id: "make",
      label: `make -j2 (${MAKE_UNITS} C files → .o, link)`,
      argv: make && gcc ? [make, "-s", "-j2", "-C", project] : null,
      missing: make ? "gcc not found" : "make not found",
      kind: "metadata",
      writable: [project],
      prepare: () => ensureMakeProject(tmp.cache),
      // Every run builds from scratch: the outputs a run left on the host
      // (native, bwrap, proot) are removed before the next one, untimed.
      reset: () => fs.rmSync(build, { recursive: true, force: true }),
    },
    {
      id: "deep-tree",
      label: `deep tree (${DEEP_LEVELS} × mkdir d; cd d, then rm -rf)`,
      argv: [
        sh,
        "-c",
        `cd "$1" && i=0; while [ $i -lt ${DEEP_LEVELS} ]; do mkdir d && cd d || exit 1; i=$((i+1)); done; cd "$1" && rm -rf d`,
        "sh",
        tmp.deep,
      ],
      kind: "metadata",
      writable: [tmp.deep],
      prepare: () => fs.mkdirSync(tmp.deep, { recursive: true, mode: 0o777 }),
      reset: () => fs.rmSync(path.join(tmp.deep, "d"), { recursive: true, force: true }),
    },
    {
      id: "cat-200M",
      label: "cat 200 MB file",
      argv: [sh, "-c", `cat ${tmp.bigFile} > /dev/null`],
      kind: "data",
      prepare: () => makeBigFile(tmp.bigFile),
    },
    {
      id: "python3",
      label: "python3 -c 'import json,os'",
      argv: python ? [python, "-c", "import json,os"] : null,
      missing: "python3 not found",
    },
    {
      id: "gcc",
      label: `gcc -pipe -O2 -c (${cSource().split("\n").length}-line file)`,
      argv: gcc ? [gcc, "-pipe", "-O2", "-c", tmp.cFile, "-o", "/dev/null"] : null,
      missing: "gcc not found",
      kind: "data",
      prepare: () => fs.writeFileSync(tmp.cFile, cSource(), { mode: 0o644 }),
    },
    { id: "node", label: "node -e 1", argv: [process.execPath, "-e", "1"] },
  ];
}

function makeBigFile(file) {
  if (fs.existsSync(file)) return;
  const r = spawnSync("/bin/sh", ["-c", 'head -c 200M /dev/urandom > "$1"', "sh", file], {
    stdio: "ignore",
  });
  if (r.status !== 0 || fs.statSync(file).size !== 200 * 1024 * 1024) {
    throw new Error(`could not create ${file}`);
  }
  fs.chmodSync(file, 0o644);
}

// ---------------------------------------------------------- notifications

/** Parses the `--json` report from cvisor's stderr (its last JSON line). */
function parseReport(stderr) {
  const lines = stderr.split("\n").filter((l) => l.trim());
  for (let i = lines.length - 1; i >= 0 && i >= lines.length - 5; i--) {
    const l = lines[i].trim();
    if (!l.startsWith("{")) continue;
    try {
      return JSON.parse(l);
    } catch {
      // not the report; keep looking
    }
  }
  return null;
}

function notificationCounts(report) {
  if (!report) return null;
  const src = report.notifications ?? report.stats?.notifications ?? {};
  const per = {};
  if (Array.isArray(src)) {
    for (const e of src) {
      const name = e.syscall ?? e.name;
      if (name != null) per[name] = Number(e.count ?? e.n ?? 0);
    }
  } else if (src && typeof src === "object") {
    for (const [k, v] of Object.entries(src)) per[k] = Number(v);
  }
  let total = report.totalNotifications ?? report.stats?.totalNotifications ?? null;
  if (total == null) total = Object.values(per).reduce((a, b) => a + b, 0);
  return { total: Number(total), per };
}

// --------------------------------------------------------------------- main

async function main() {
  let args;
  try {
    ({ values: args } = parseArgs({
      options: {
        rounds: { type: "string", default: "7" },
        json: { type: "string" },
        only: { type: "string" },
        runners: { type: "string" },
        budget: { type: "string", default: "20" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`bench: ${oneLine(err)} (try --help)`);
    return 2;
  }
  if (args.help) {
    console.log(
      [
        "usage: node scripts/bench.mjs [options]",
        "  --rounds N        timed rounds per workload and runner (default 7)",
        "  --json FILE       write every raw sample to FILE",
        "  --only REGEX      only workloads whose id or label matches (--only cache: the cache benchmark)",
        "  --runners LIST    comma list of native,cvisor,bwrap,proot,runsc",
        "                    (default: all; missing peers are skipped)",
        "  --budget SECONDS  stop a slow runner on a workload after this much",
        `                    time, once it has ${MIN_SAMPLES} samples (default 20)`,
      ].join("\n"),
    );
    return 0;
  }
  const rounds = Number.parseInt(args.rounds, 10);
  const budgetMs = Number(args.budget) * 1000;
  if (!(rounds >= 1) || !(budgetMs > 0)) {
    console.error("bench: --rounds and --budget must be positive numbers");
    return 2;
  }
  if (args.only === "cache") {
    // The cache benchmark has its own table (scripts/bench/cache.mjs); 3 rounds unless asked.
    const { benchCache } = await import("./bench/cache.mjs");
    const cacheRounds = process.argv.includes("--rounds") ? rounds : 3;
    return benchCache({ rounds: cacheRounds, base: process.env.CVISOR_BENCH_DIR || "/var/tmp" });
  }
  if (args.json) {
    try {
      fs.accessSync(path.dirname(path.resolve(args.json)), fs.constants.W_OK);
    } catch {
      console.error(`bench: cannot write --json ${args.json}: its directory is not writable`);
      return 2;
    }
  }
  let only = null;
  if (args.only) {
    try {
      only = new RegExp(args.only, "i");
    } catch (err) {
      console.error(`bench: bad --only: ${oneLine(err)}`);
      return 2;
    }
  }

  // stat() through a chain of 8 snapshot layers vs 1 (the guest's own timing).
  if (args.only === "layers") {
    const { benchLayers, formatLayers } = await import("./bench/layers.mjs");
    const res = await benchLayers({ rounds: Math.min(rounds, 7) });
    console.log(formatLayers(res));
    if (args.json) fs.writeFileSync(args.json, JSON.stringify(res, null, 2) + "\n");
    return 0;
  }

  // Store operations, not workloads: snapshot, branch, rollback on 100 vs 50 000 files.
  if (args.only === "snapshots") {
    const { benchSnapshots, formatSnapshots } = await import("./bench/snapshots.mjs");
    const res = await benchSnapshots({ rounds: Math.min(rounds, 5) });
    console.log(formatSnapshots(res));
    if (args.json) fs.writeFileSync(args.json, JSON.stringify(res, null, 2) + "\n");
    return 0;
  }

  const known = ["native", "cvisor", "bwrap", "proot", "runsc"];
  const asked = args.runners
    ? args.runners
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean)
    : known;
  const unknown = asked.filter((r) => !known.includes(r));
  if (unknown.length) {
    console.error(`bench: unknown runner ${unknown.join(", ")}`);
    return 2;
  }

  if (asked.includes("cvisor")) {
    const missing = [CLI, LIB, CORE].filter((f) => !fs.existsSync(f));
    if (missing.length) {
      console.error(
        `bench: cvisor is not built (missing ${missing.map((f) => path.relative(REPO, f)).join(", ")}): run \`npm install\` first`,
      );
      return 1;
    }
  }

  // Not under /tmp: bwrap mounts a tmpfs there and proot binds a scratch dir
  // over it, so neither would see the fixtures.
  const base = process.env.CVISOR_BENCH_DIR || "/var/tmp";
  tempDir = fs.mkdtempSync(path.join(base, "cvisor-bench-"));
  fs.chmodSync(tempDir, 0o755); // fixtures readable by any sandbox user
  const tmp = {
    dir: tempDir,
    scratch: path.join(tempDir, "proot-tmp"),
    bigFile: path.join(tempDir, "200M.bin"),
    cFile: path.join(tempDir, "bench.c"),
    deep: path.join(tempDir, "deep"),
    cache: path.join(base, "cvisor-bench-cache"), // kept: generated once
  };
  fs.mkdirSync(tmp.scratch, { mode: 0o1777 });

  const table = runnerTable(tmp);
  const runners = ["native"]; // always: every ratio is to native
  const bins = {};
  const versions = { native: `${os.type()} ${os.release()}` };
  for (const name of asked) {
    if (name === "native") continue;
    const r = table[name];
    if (r.bin) {
      const bin = which(r.bin);
      if (!bin) continue; // peer not installed: skip silently
      bins[name] = bin;
      versions[name] = `${path.basename(bin)} ${versionOf([bin, ...r.version])}`;
    } else {
      versions[name] = `cvisor (node ${process.version})`;
    }
    runners.push(name);
  }

  const all = workloads(tmp).filter(
    (w) =>
      (!w.library || runners.includes("cvisor")) &&
      (!only || only.test(w.id) || only.test(w.label)),
  );
  if (all.length === 0) {
    console.error(`bench: no workload matches --only ${args.only}`);
    return 2;
  }

  const started = Date.now();
  const loadBefore = os.loadavg()[0];
  let loadMax = loadBefore;
  log(`runners: ${runners.join(", ")}; ${rounds} rounds; ${all.length} workloads`);
  const results = [];
  for (const [i, w] of all.entries()) {
    if (interrupted) break;
    const t = Date.now();
    process.stderr.write(`bench: [${i + 1}/${all.length}] ${w.label} `);
    const res = w.library
      ? await benchLibrary(w, runners)
      : await benchCli(w, runners, table, bins, rounds * (w.roundsFactor ?? 1), budgetMs);
    results.push(res);
    loadMax = Math.max(loadMax, os.loadavg()[0]);
    process.stderr.write(` ${((Date.now() - t) / 1000).toFixed(1)} s\n`);
  }
  if (interrupted) return 130;
  log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);

  const load = [loadBefore, os.loadavg()[0], loadMax];
  const targets = evaluateTargets(results, runners);
  printTable(results, runners, rounds, load, targets);
  printNotifications(results);
  printTargets(targets);

  if (args.json) {
    const out = {
      date: new Date().toISOString(),
      host: {
        loadavg: { start: load[0], end: load[1], max: load[2] },
        kernel: os.release(),
        cpus: os.cpus().length,
        node: process.version,
      },
      rounds,
      runners: Object.fromEntries(runners.map((r) => [r, versions[r] ?? ""])),
      workloads: results.map((r) => ({
        id: r.id,
        label: r.label,
        argv: r.argv,
        samplesMs: r.samples,
        cvisorInSandboxMs: r.inSandbox,
        failures: r.failures,
        stopped: r.stopped,
        kind: r.kind,
        notifications: r.notifications,
        libraryNotifications: r.libraryCount,
        skipped: r.skipped,
      })),
      targets,
    };
    fs.writeFileSync(args.json, JSON.stringify(out, null, 2) + "\n");
    log(`raw samples written to ${args.json}`);
  }
  return 0;
}

async function benchLibrary(w, runners) {
  const res = {
    id: w.id,
    label: w.label,
    library: true,
    samples: {},
    failures: {},
    stopped: [],
  };
  if (!runners.includes("cvisor")) {
    res.skipped = "needs the cvisor runner";
    return res;
  }
  const { data, why } = await jsonChild(["--library-child"], REPO);
  if (!data) {
    res.failures.cvisor = { count: 1, message: why };
    res.stopped.push("cvisor");
    return res;
  }
  for (const name of ["native", "cvisor"]) {
    res.samples[name] = data[name];
    const e = data.errors?.[name];
    if (e) {
      res.failures[name] = e;
      if (!data[name]?.length) res.stopped.push(name);
    }
  }
  return res;
}

async function benchCli(w, runners, table, bins, rounds, budgetMs) {
  const res = {
    id: w.id,
    label: w.label,
    argv: w.argv,
    kind: w.kind ?? null,
    writable: w.writable ?? null,
    samples: {},
    failures: {},
    stopped: [],
    inSandbox: [],
    notifications: null, // from the --json reports of the timed CLI runs
    libraryCount: null, // from one extra, untimed library run
  };
  if (!w.argv) {
    res.skipped = w.missing;
    process.stderr.write(`(skipped: ${w.missing})`);
    return res;
  }
  try {
    w.prepare?.();
  } catch (err) {
    res.skipped = oneLine(err);
    return res;
  }
  const active = runners.filter((r) => !w.only || w.only.includes(r));
  const alive = new Set(active);
  const fail = (name, message) => {
    const f = (res.failures[name] ??= { count: 0, message });
    f.count += 1;
    if (f.count >= MAX_FAILURES && f.count > (res.samples[name]?.length ?? 0)) {
      alive.delete(name);
      res.stopped.push(name);
    }
  };
  // cvisor runs with --json: its report (the last line on stderr) gives the
  // notification counts and the in-sandbox duration. A missing or unparsable
  // report only loses those numbers, never the wall-time sample. The CLI-start
  // row times exactly `cvisor -- true`, so it runs without the report.
  const argvFor = (name) => {
    if (name !== "cvisor") return table[name].wrap(w.argv, bins[name], w.writable);
    if (w.cvisorPlain) return [process.execPath, CLI, "--", ...(w.cvisorGuest ?? w.argv)];
    return table.cvisor.wrap(w.cvisorGuest ?? w.argv);
  };
  const takeReport = (r) => {
    const report = parseReport(r.stderr);
    const counts = notificationCounts(report);
    if (counts) res.notifications = counts;
    return typeof report?.durationMs === "number" ? report.durationMs : null;
  };

  // Warm the workload natively right before timing it (the VM drops page
  // cache that sits unused), then each runner: cvisor on the workload itself,
  // the peers on /bin/true (their own binaries; a slow peer would otherwise
  // pay for the workload twice).
  const run = (argv) => {
    w.reset?.(); // untimed: the previous run's outputs on the host
    return runOnce(argv);
  };
  const warm = await run(w.argv);
  if (warm.error) {
    res.failures.native = { count: 1, message: warm.error };
    res.stopped.push("native");
    process.stderr.write("(fails natively)");
    return res;
  }
  for (const name of active) {
    if (name === "native") continue;
    if (name === "cvisor") {
      const r = await run(argvFor(name));
      takeReport(r);
      if (r.error) fail(name, r.error);
    } else {
      await runOnce(table[name].wrap(["/bin/true"], bins[name]));
    }
  }

  const spent = Object.fromEntries(active.map((r) => [r, 0]));
  for (const name of active) res.samples[name] = [];
  for (let round = 0; round < rounds && !interrupted; round++) {
    // Alternate the order round by round.
    const order = active.map((_, k) => active[(k + round) % active.length]);
    for (const name of order) {
      if (!alive.has(name) || interrupted) continue;
      const samples = res.samples[name];
      if (name !== "native" && samples.length >= MIN_SAMPLES && spent[name] > budgetMs) {
        continue; // slow runner: enough samples within the time budget
      }
      const r = await run(argvFor(name));
      if (r.error) {
        fail(name, r.error);
        continue;
      }
      samples.push(r.ms);
      spent[name] += r.ms;
      if (name === "cvisor") {
        const inner = takeReport(r);
        if (inner != null) res.inSandbox.push(inner);
      }
    }
    process.stderr.write(".");
  }
  // One more cvisor run, untimed, through the library: its notifications by
  // syscall (RunResult.stats).
  if (active.includes("cvisor") && !interrupted) {
    w.reset?.();
    res.libraryCount = await countNotifications(w.cvisorGuest ?? w.argv);
    process.stderr.write(res.libraryCount.error ? "x" : "+");
  }
  w.reset?.();
  return res;
}

/**
 * Runs `node bench.mjs ...args` (a child mode) and reads the JSON line it
 * writes on fd 3: { data } or, when it failed or reported an error, { why }.
 */
async function jsonChild(args, cwd) {
  const child = spawn(process.execPath, [SELF, ...args], {
    cwd,
    env: BENCH_ENV,
    stdio: ["ignore", "ignore", "pipe", "pipe"],
    detached: true,
  });
  children.add(child);
  let out = "";
  let err = "";
  child.stdio[3].setEncoding("utf8").on("data", (d) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d) => {
    err = (err + d).slice(-STDERR_KEEP);
  });
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // gone
    }
  }, RUN_TIMEOUT_MS);
  const status = await new Promise((resolve) => {
    child.on("error", (e) => resolve(oneLine(e)));
    child.on("close", (code, signal) => resolve(code === 0 ? null : `exit ${code ?? signal}`));
  });
  clearTimeout(timer);
  children.delete(child);
  let data = null;
  try {
    data = JSON.parse(out.trim().split("\n").pop());
  } catch {
    // reported below
  }
  if (!data || data.error) {
    return { why: data?.error ?? `${status ?? "no result"}: ${lastLines(err, 1)}`.trim() };
  }
  return { data };
}

/** Runs argv once under `bench.mjs --count-child` and returns its stats. */
async function countNotifications(argv) {
  const { data, why } = await jsonChild(["--count-child", JSON.stringify(argv)], "/");
  if (!data) return { error: why };
  const per = {};
  for (const [k, v] of Object.entries(data.notifications ?? {})) per[k] = Number(v);
  const total = data.totalNotifications ?? Object.values(per).reduce((a, b) => a + b, 0);
  const guestFailed = data.exitCode !== 0 || data.signal || data.execError;
  return {
    total: Number(total),
    per,
    durationMs: data.durationMs,
    error: null,
    guestError: guestFailed
      ? `exit ${data.execError ?? data.signal ?? data.exitCode}${data.stderr ? `: ${data.stderr}` : ""}`
      : null,
  };
}

// ------------------------------------------------------------------- output

function median(res, name) {
  const s = res.samples?.[name];
  return s && s.length ? summary(s).median : NaN;
}

/** The runner produced usable samples (it did not fail for good). */
function usable(res, name) {
  return Boolean(res?.samples?.[name]?.length) && !res.stopped?.includes(name);
}

function evaluateTargets(results, runners) {
  const byId = Object.fromEntries(results.map((r) => [r.id, r]));
  const targets = [];
  const lib = byId.library;
  const libS = usable(lib, "cvisor") ? summary(lib.samples.cvisor) : null;
  targets.push({
    id: "library",
    name: `library create→exit of /bin/true, median ≤ ${TARGETS.libraryMs} ms`,
    value: libS?.median ?? null,
    pass: libS ? libS.median <= TARGETS.libraryMs : null,
    shown: libS ? `${fmtMs(libS.median)} (p90 ${fmtMs(libS.p90)})` : null,
    cell: `≤ ${TARGETS.libraryMs} ms`,
  });
  const ratioTarget = (id, name, limit, withInner) => {
    const r = byId[id];
    const ok = usable(r, "cvisor") && usable(r, "native");
    const ratio = ok ? median(r, "cvisor") / median(r, "native") : null;
    let shown = ok
      ? `${fmtRatio(ratio)} (${fmtMs(median(r, "cvisor"))} vs ${fmtMs(median(r, "native"))})`
      : null;
    let inner = null;
    if (ok && withInner && r.inSandbox.length) {
      inner = summary(r.inSandbox).median / median(r, "native");
      shown +=
        `\n         in-sandbox: ${fmtRatio(inner)} (${fmtMs(summary(r.inSandbox).median)},` +
        ` --json durationMs, i.e. without the CLI's own start)`;
    }
    targets.push({
      id,
      name,
      value: ratio,
      inSandboxRatio: inner,
      // Data-bound targets measure what the sandbox adds to the guest, judged on the
      // in-sandbox time: the CLI's own Node start-up has its own target above.
      pass: ok ? (inner !== null ? inner <= limit : ratio <= limit) : null,
      shown,
      cell: `≤ ${limit.toFixed(2)}× native${inner !== null ? " (in-sandbox)" : ""}`,
    });
  };
  ratioTarget(
    "cli-start",
    `\`cvisor -- true\` ≤ ${TARGETS.cliStartRatio} × \`node -e 0\``,
    TARGETS.cliStartRatio,
    false,
  );
  ratioTarget(
    "cat-200M",
    `cat 200 MB ≤ ${TARGETS.dataRatio.toFixed(2)} × native (in-sandbox)`,
    TARGETS.dataRatio,
    true,
  );
  ratioTarget(
    "gcc",
    `gcc ≤ ${TARGETS.dataRatio.toFixed(2)} × native (in-sandbox)`,
    TARGETS.dataRatio,
    true,
  );

  // Metadata-heavy: faster than each peer that is installed and produced samples;
  // a peer that fails the workload is named, not graded against.
  const peers = TARGETS.fasterThan.filter((p) => runners.includes(p));
  for (const [id, what] of METADATA_TARGETS) {
    const r = byId[id];
    const name = `${what} faster than ${peers.length ? peers.join(" and ") : "proot and runsc"}`;
    if (!peers.length || !usable(r, "cvisor")) {
      targets.push({
        id,
        name,
        value: null,
        pass: null,
        shown: peers.length ? null : "no peer installed",
      });
      continue;
    }
    const cv = median(r, "cvisor");
    const parts = [];
    const graded = [];
    for (const p of peers) {
      if (usable(r, p)) {
        const ratio = cv / median(r, p);
        graded.push(ratio);
        parts.push(`${p} ${fmtMs(median(r, p))} (cvisor ${fmtRatio(ratio)})`);
      } else {
        parts.push(`${p} ${r.failures?.[p] ? "fails" : "not measured"}`);
      }
    }
    targets.push({
      id,
      name,
      value: graded.length ? Math.max(...graded) : null,
      pass: graded.length ? graded.every((x) => x < 1) : null,
      shown: `cvisor ${fmtMs(cv)} vs ${parts.join(", ")}`,
      cell: `< ${peers.join(", ")}`,
    });
  }
  return targets;
}

function cell(res, name, rounds) {
  if (res.skipped) return name === "native" ? `skipped` : "—";
  const s = res.samples[name];
  const failed = res.failures[name];
  if (res.stopped?.includes(name) || (failed && !s?.length)) return "fail";
  if (!s?.length) return "—";
  const st = summary(s);
  let text = fmtMs(st.median);
  if (name !== "native") text += ` (${fmtRatio(st.median / median(res, "native"))})`;
  if (res.library) text += ` p90 ${fmtMs(st.p90)}`;
  else if (st.n < rounds) text += ` n=${st.n}`;
  if (failed) text += ` f=${failed.count}`;
  return text;
}

/** cvisor's median over a peer's, or why there is none. */
function peerRatioCell(res, peer) {
  if (res.skipped || !res.samples?.cvisor) return "—";
  if (!usable(res, "cvisor")) return "cvisor fails";
  if (!res.samples[peer]) return "—";
  if (!usable(res, peer)) return `${peer} fails`;
  return fmtRatio(median(res, "cvisor") / median(res, peer));
}

function targetCell(t) {
  if (!t) return "";
  const mark = t.pass == null ? "n/a" : t.pass ? "PASS" : "FAIL";
  return `${mark} ${t.cell ?? ""}`.trim();
}

function printTable(results, runners, rounds, load, targets) {
  const peerCols = runners.includes("cvisor")
    ? TARGETS.fasterThan.filter((p) => runners.includes(p))
    : [];
  const byTarget = Object.fromEntries(targets.map((t) => [t.id, t]));
  const head = ["workload", ...runners, ...peerCols.map((p) => `cvisor/${p}`), "target (cvisor)"];
  const rows = results.map((r) => [
    r.label,
    ...runners.map((n) => cell(r, n, rounds)),
    ...peerCols.map((p) => peerRatioCell(r, p)),
    targetCell(byTarget[r.id]),
  ]);
  const width = head.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c].length)));
  const line = (cells) =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join(" | ")} |`;
  console.log("");
  console.log(
    `Median wall time (ratio to native; cvisor/PEER: cvisor's median over the peer's), ${rounds} rounds, ` +
      `${os.cpus().length} CPUs, Linux ${os.release()}, Node ${process.version}, ` +
      `load ${load[0].toFixed(2)} → ${load[1].toFixed(2)}`,
  );
  console.log("");
  console.log(line(head));
  console.log(
    `|${width.map((w, i) => (i === 0 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")).join("|")}|`,
  );
  for (const row of rows) console.log(line(row));
  const notes = [];
  if (results.some((r) => r.library && !r.skipped)) {
    notes.push(
      `library row: ${LIB_ITERATIONS} runs after ${LIB_WARMUP} warm-ups in one warm process; native = child_process.spawn('/bin/true')`,
    );
  }
  if (results.some((r) => r.id === "cli-start" && !r.skipped)) {
    notes.push("CLI start row: native = `node -e 0`, cvisor = `cvisor -- true` (no --json)");
  }
  if (runners.includes("cvisor")) {
    notes.push(
      "cvisor = `node dist/cvisor.cjs --json --no-network -- CMD…` (wall time), the default ephemeral sandbox",
    );
  }
  for (const r of results) {
    if (!r.writable || r.skipped) continue;
    const where = runners
      .filter((n) => r.samples?.[n])
      .map((n) => `${n} → ${WRITES[n]}`)
      .join("; ");
    notes.push(`${r.label} builds from scratch every run; its outputs go to: ${where}`);
  }
  if (results.some((r) => r.id === "git-status" && !r.skipped)) {
    const ro = runners.includes("bwrap")
      ? "; under bwrap (read-only) it cannot, and git goes on without it"
      : "";
    notes.push(
      `git status takes and drops .git/index.lock on every run (native, proot: on the host; cvisor, runsc: in their overlays${ro})`,
    );
  }
  notes.push(
    `targets: data-bound rows ≤ ${TARGETS.dataRatio.toFixed(2)}× native (in-sandbox time); metadata-heavy rows faster than ${TARGETS.fasterThan.join(" and ")} (those installed; a peer that fails a row is not graded against)`,
  );
  notes.push(
    `every runner gets the same environment: only ${DEFAULT_ENV_KEYS.join(", ")}, LC_* of the host`,
  );
  notes.push(
    `n=K: a slow runner stopped after K samples (time budget); f=K: K runs failed; ` +
      `fail: the runner kept failing on that workload`,
  );
  console.log("");
  if (load[2] > os.cpus().length) {
    notes.push(
      `warning: the machine was busy (1-min load up to ${load[2].toFixed(2)} on ${os.cpus().length} CPUs, ` +
        `the benchmark itself counts ≈1): ratios are noisy, re-run when it is idle`,
    );
  }
  for (const n of notes) console.log(`  ${n}`);
  const fails = [];
  for (const r of results) {
    for (const [name, f] of Object.entries(r.failures)) {
      fails.push(`  ${r.label} under ${name}: ${f.count}× ${f.message}`);
    }
    if (r.skipped) fails.push(`  ${r.label}: skipped (${r.skipped})`);
  }
  if (fails.length) {
    console.log("");
    console.log("failures:");
    for (const f of fails) console.log(f);
  }
}

function printNotifications(results) {
  const rows = results.filter(
    (r) => !r.skipped && (r.libraryCount || r.notifications || r.inSandbox?.length),
  );
  if (!rows.length) return;
  let fromCli = false;
  const cells = rows.map((r) => {
    // The untimed library run (RunResult.stats); the timed runs' --json report
    // stands in when it failed.
    let n = r.libraryCount && !r.libraryCount.error ? r.libraryCount : null;
    let mark = "";
    if (!n && r.notifications) {
      n = r.notifications;
      mark = " *";
      fromCli = true;
    }
    const inner = r.inSandbox?.length ? summary(r.inSandbox).median : NaN;
    const native = median(r, "native");
    const innerText = Number.isFinite(inner)
      ? `${fmtMs(inner)}${r.id === "cli-start" ? "" : ` (${fmtRatio(inner / native)})`}`
      : "—";
    const top = n
      ? Object.entries(n.per)
          .filter(([, c]) => c > 0)
          .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
          .slice(0, 5)
          .map(([k, c]) => `${k} ${fmtCount(c)}`)
          .join(", ")
      : r.libraryCount?.error
        ? `library run failed: ${r.libraryCount.error}`
        : "";
    const guest = r.libraryCount?.guestError ? ` (guest: ${r.libraryCount.guestError})` : "";
    return [r.label, innerText, n ? `${fmtCount(n.total)}${mark}` : "?", top + guest];
  });
  const head = ["workload", "cvisor in-sandbox", "notifications", "top syscalls"];
  const width = head.map((h, c) => Math.max(h.length, ...cells.map((row) => row[c].length)));
  const line = (row) =>
    `| ${row.map((c, i) => (i === 1 || i === 2 ? c.padStart(width[i]) : c.padEnd(width[i]))).join(" | ")} |`;
  console.log("");
  console.log(
    "cvisor notifications per workload, by syscall (one untimed library run: Sandbox.run → stats.notifications);",
  );
  console.log("in-sandbox: median --json durationMs of the timed runs and its ratio to native");
  console.log("");
  console.log(line(head));
  console.log(
    `|${width.map((w, i) => (i === 1 || i === 2 ? "-".repeat(w + 1) + ":" : "-".repeat(w + 2))).join("|")}|`,
  );
  for (const row of cells) console.log(line(row));
  if (fromCli) {
    console.log("");
    console.log("  *: the library run failed; counts from the timed CLI runs' --json report");
  }
}

function printTargets(targets) {
  console.log("");
  console.log("targets:");
  for (const t of targets) {
    const mark = t.pass == null ? "n/a " : t.pass ? "PASS" : "FAIL";
    console.log(`  [${mark}] ${t.name}: ${t.shown ?? "not measured"}`);
  }
}

let code;
try {
  code = await main();
} catch (err) {
  console.error(`bench: ${oneLine(err)}`);
  code = 1;
} finally {
  removeTemp();
}
process.exitCode = code;
