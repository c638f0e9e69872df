// Fixtures of the metadata-heavy bench workloads (scripts/bench.mjs): a git
// repository of 5 000 files and a 40-file C project with a Makefile.
//
// Both are generated once into a cache directory and reused by later runs:
// generation is deterministic (fixed contents, names, mtimes, author, dates:
// the commit id is the same on every machine) and is never timed. Each fixture
// is built in a temporary directory beside its final place and renamed into
// place, then a stamp file `<fixture>.ok` is written beside it: an interrupted
// generation is never reused.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

/** Bump when a generator changes: the old cache entry is then rebuilt. */
const VERSION = 1;
/** `<fixture>.ok` beside the fixture: written last, so a half-built one is never used. */
const STAMP_SUFFIX = ".ok";
/** Every generated file and directory gets this mtime (racy-git free index). */
const EPOCH = new Date("2024-01-01T00:00:00Z");

export const GIT_FILES = 5000;
export const MAKE_UNITS = 40;

/** A small deterministic PRNG (mulberry32). */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The median of a list of numbers (the mean of the middle two for an even count). */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const WORDS = (
  "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho " +
  "sigma tau upsilon phi chi psi omega cache index tree blob commit merge branch remote"
).split(" ");

function fixtureDir(cacheDir, name) {
  return path.join(cacheDir, `${name}-v${VERSION}`);
}

/** Where ensureGitRepo(cacheDir) puts the repository. */
export const gitRepoDir = (cacheDir) => fixtureDir(cacheDir, `git-${GIT_FILES}`);
/** Where ensureMakeProject(cacheDir) puts the C project. */
export const makeProjectDir = (cacheDir) => fixtureDir(cacheDir, `make-${MAKE_UNITS}`);

/**
 * Returns the fixture directory `<cacheDir>/<name>-v<VERSION>`, generating it
 * with build(dir) first when it is missing or incomplete.
 */
function ensure(cacheDir, name, build) {
  const final = fixtureDir(cacheDir, name);
  const stamp = final + STAMP_SUFFIX;
  if (fs.existsSync(stamp) && fs.existsSync(final)) return final;
  fs.rmSync(stamp, { force: true });
  fs.mkdirSync(cacheDir, { recursive: true, mode: 0o755 });
  fs.rmSync(final, { recursive: true, force: true }); // an incomplete one
  const work = `${final}.tmp-${process.pid}`;
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { mode: 0o755 });
  try {
    const what = build(work);
    fs.renameSync(work, final);
    fs.writeFileSync(stamp, `${name} v${VERSION}${what ? ` ${what}` : ""}\n`, { mode: 0o644 });
  } catch (err) {
    fs.rmSync(work, { recursive: true, force: true });
    throw err;
  }
  return final;
}

function writeFile(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
  fs.writeFileSync(file, text, { mode: 0o644 });
}

/** Sets EPOCH as the mtime of everything under dir (except .git). */
function settleTimes(dir) {
  for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
    if (ent.name === ".git") continue;
    const p = path.join(dir, ent.name);
    if (ent.isDirectory()) settleTimes(p);
    fs.utimesSync(p, EPOCH, EPOCH);
  }
  fs.utimesSync(dir, EPOCH, EPOCH);
}

function git(dir, args) {
  const date = EPOCH.toISOString();
  const r = spawnSync("git", ["-C", dir, ...args], {
    encoding: "utf8",
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: dir, // no user configuration
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_AUTHOR_NAME: "cvisor bench",
      GIT_AUTHOR_EMAIL: "bench@cvisor.invalid",
      GIT_AUTHOR_DATE: date,
      GIT_COMMITTER_NAME: "cvisor bench",
      GIT_COMMITTER_EMAIL: "bench@cvisor.invalid",
      GIT_COMMITTER_DATE: date,
      LC_ALL: "C",
    },
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.error || r.status !== 0) {
    const why = r.error?.message ?? (r.stderr || `exit ${r.status}`).trim().split("\n").pop();
    throw new Error(`git ${args[0]}: ${why}`);
  }
  return r.stdout.trim();
}

/**
 * A git repository with GIT_FILES committed text files in 50 directories of
 * 10 subdirectories each; the work tree is clean and the index fresh, so
 * `git status` stats every file and writes nothing but its index.lock.
 */
export function ensureGitRepo(cacheDir) {
  return ensure(cacheDir, `git-${GIT_FILES}`, (dir) => {
    const rand = prng(5000);
    const exts = [".c", ".h", ".md", ".txt", ".json", ".py"];
    for (let i = 0; i < GIT_FILES; i++) {
      const d = String(Math.floor(i / 100)).padStart(2, "0");
      const sub = String(Math.floor(i / 10) % 10);
      const name = `file${String(i).padStart(4, "0")}${exts[i % exts.length]}`;
      const lines = [];
      const n = 4 + Math.floor(rand() * 12);
      for (let k = 0; k < n; k++) {
        const words = [];
        for (let j = 0; j < 8; j++) words.push(WORDS[Math.floor(rand() * WORDS.length)]);
        lines.push(`${i}.${k} ${words.join(" ")}`);
      }
      writeFile(path.join(dir, `pkg${d}`, `mod${sub}`, name), lines.join("\n") + "\n");
    }
    writeFile(path.join(dir, "README.md"), "Generated by cvisor's scripts/bench/fixtures.mjs.\n");
    settleTimes(dir);
    git(dir, ["init", "-q", "-b", "main"]);
    git(dir, ["add", "-A"]);
    git(dir, ["commit", "-q", "-m", "bench fixture"]);
    git(dir, ["status", "--porcelain"]); // refreshes the index once
    const head = git(dir, ["rev-parse", "HEAD"]);
    const tracked = git(dir, ["ls-files"]).split("\n").length;
    if (tracked !== GIT_FILES + 1) throw new Error(`git fixture: ${tracked} files tracked`);
    return head;
  });
}

function unitSource(u) {
  const parts = [
    "#include <stdio.h>",
    "#include <stdlib.h>",
    "#include <string.h>",
    "#include <math.h>",
    '#include "common.h"',
    "",
  ];
  const F = 5;
  for (let i = 0; i < F; i++) {
    const f = `u${u}_f${i}`;
    parts.push(
      `static uint64_t ${f}_mix(uint64_t h, const char *s, size_t n) {`,
      `  for (size_t k = 0; k < n; k++) {`,
      `    h ^= (uint64_t)(unsigned char)s[k] * ${2 * (u + i) + 3}u;`,
      `    h = (h << ${((u + i) % 13) + 5}) | (h >> ${64 - (((u + i) % 13) + 5)});`,
      `    h *= 0x9e3779b97f4a7c15ull;`,
      `  }`,
      `  return h;`,
      `}`,
      ``,
      `static double ${f}(struct item *items, size_t n, double acc) {`,
      `  qsort(items, n, sizeof *items, item_cmp);`,
      `  for (size_t k = 0; k < n; k++) {`,
      `    switch ((items[k].key + ${u + i}) % 5) {`,
      `    case 0: acc += sqrt(fabs(items[k].weight)) * ${i + 1}.0; break;`,
      `    case 1: acc -= items[k].weight / (k + ${u + 1}.0); break;`,
      `    case 2: acc *= 1.0 + 1.0 / (double)(k + ${i + 2}); break;`,
      `    case 3: acc += (double)${f}_mix(${u}u, items[k].name, strlen(items[k].name)); break;`,
      `    default: acc = fmod(acc, ${1000 + u}.0);`,
      `    }`,
      `  }`,
      `  return acc;`,
      `}`,
      ``,
    );
  }
  parts.push(`double unit${u}(struct item *items, size_t n) {`, `  double acc = ${u}.0;`);
  for (let i = 0; i < F; i++) parts.push(`  acc = u${u}_f${i}(items, n, acc);`);
  parts.push("  return acc;", "}", "");
  return parts.join("\n");
}

/**
 * A C project of MAKE_UNITS .c files (main.c and unit01.c … ) and a common
 * header; `make` compiles each to build/*.o and links build/app. The fixture
 * holds no build output: the bench removes build/ between runs.
 */
/** C lines that make and fill n `struct item`s and start a total: the generated sources share them. */
export const FILL_ITEMS = [
  "  struct item *items = calloc(n, sizeof *items);",
  "  if (!items) return 1;",
  "  for (size_t k = 0; k < n; k++) {",
  "    items[k].key = (int)((k * 2654435761u) % 1000);",
  "    items[k].weight = (double)k / 3.0;",
  '    snprintf(items[k].name, sizeof items[k].name, "item-%zu", k);',
  "  }",
  "  double total = 0;",
];

export function ensureMakeProject(cacheDir) {
  return ensure(cacheDir, `make-${MAKE_UNITS}`, (dir) => {
    const units = [];
    for (let u = 1; u < MAKE_UNITS; u++) units.push(u);
    const header = [
      "#ifndef COMMON_H",
      "#define COMMON_H",
      "#include <stddef.h>",
      "#include <stdint.h>",
      "struct item { int key; double weight; char name[32]; };",
      "static inline int item_cmp(const void *a, const void *b) {",
      "  const struct item *x = a, *y = b;",
      "  return (x->key > y->key) - (x->key < y->key);",
      "}",
      ...units.map((u) => `double unit${u}(struct item *items, size_t n);`),
      "#endif",
      "",
    ];
    writeFile(path.join(dir, "include/common.h"), header.join("\n"));
    for (const u of units) {
      writeFile(path.join(dir, `src/unit${String(u).padStart(2, "0")}.c`), unitSource(u));
    }
    const main = [
      "#include <stdio.h>",
      "#include <stdlib.h>",
      '#include "common.h"',
      "int main(void) {",
      "  size_t n = 1000;",
      ...FILL_ITEMS,
      ...units.map((u) => `  total += unit${u}(items, n);`),
      '  printf("%f\\n", total);',
      "  free(items);",
      "  return 0;",
      "}",
      "",
    ];
    writeFile(path.join(dir, "src/main.c"), main.join("\n"));
    const objs = ["main", ...units.map((u) => `unit${String(u).padStart(2, "0")}`)];
    const makefile = [
      "# Generated by cvisor's scripts/bench/fixtures.mjs.",
      "CC = gcc",
      "CFLAGS = -O2 -Wall -Iinclude",
      `OBJS = ${objs.map((o) => `build/${o}.o`).join(" ")}`,
      "",
      "build/app: $(OBJS)",
      "\t$(CC) -o $@ $(OBJS) -lm",
      "",
      "build/%.o: src/%.c include/common.h | build",
      "\t$(CC) $(CFLAGS) -c $< -o $@",
      "",
      "build:",
      "\tmkdir -p build",
      "",
      "clean:",
      "\trm -rf build",
      "",
      ".PHONY: clean",
      "",
    ];
    writeFile(path.join(dir, "Makefile"), makefile.join("\n"));
    settleTimes(dir);
    return `${objs.length} units`;
  });
}
