// The cache benchmark (`node scripts/bench.mjs --only cache [--rounds N]`): `cvisor cache save`
// and `cache restore` of a node_modules-like tree (20 000 small files, 300 MB) on the disk
// backend, per format, against `tar | gzip` and `tar | zstd` (the zstd CLI, if installed) on the
// same tree: medians of wall time and of peak RSS (GNU time's %M, the CLI process and its
// children). Targets: each format within 1.3 x its baseline (gzip, estargz: tar|gzip; zstd:
// tar|zstd; none: tar), peak RSS under 200 MB.
//
// The tree is generated once, deterministically, into $CVISOR_BENCH_DIR/cvisor-bench-cache/
// cache-tree (kept, with a stamp file); archives and restored trees go to a temp dir removed at
// the end. Before each timed command the tree is read once (this VM drops idle page cache).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { median, prng } from "./fixtures.mjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const CLI = path.join(REPO, "dist", "cvisor.cjs");
const FILES = 20_000;
const TOTAL = 300 * 1024 * 1024;
const VERSION = 1;
const TARGET_RATIO = 1.3;
const TARGET_RSS_MB = 200;

const WORDS = (
  "const let var function return if else for while import export default from require " +
  "module exports this new class extends super async await yield null undefined true false " +
  "object array string number length push map filter reduce value key index options callback " +
  "error result data buffer stream node path file read write promise resolve reject"
).split(" ");

/** A 16 MB JS-looking corpus that files are cut from (compresses about like real code). */
function corpus(rand) {
  const parts = [];
  let n = 0;
  while (n < 16 << 20) {
    let line = "  ".repeat(Math.floor(rand() * 4));
    const words = 3 + Math.floor(rand() * 9);
    for (let i = 0; i < words; i++) {
      line += WORDS[Math.floor(rand() * WORDS.length)];
      line += rand() < 0.2 ? `_${Math.floor(rand() * 1000)}` : "";
      line += i + 1 < words ? (rand() < 0.3 ? "." : " ") : rand() < 0.5 ? ";\n" : " {\n";
    }
    parts.push(line);
    n += line.length;
  }
  return Buffer.from(parts.join(""));
}

/** Makes (once) the tree: 400 packages of 50 files in lib/ and lib/sub/, 300 MB in all. */
export function ensureTree(cacheRoot) {
  const dir = path.join(cacheRoot, "cache-tree");
  const stamp = `${dir}.ok`;
  if (fs.existsSync(stamp) && fs.readFileSync(stamp, "utf8") === String(VERSION)) return dir;
  fs.rmSync(dir, { recursive: true, force: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  const rand = prng(20_000);
  const text = corpus(rand);
  const sizes = Array.from({ length: FILES }, () => 0.2 + rand() * rand() * 3.6);
  const scale = TOTAL / sizes.reduce((a, b) => a + b, 0);
  const date = new Date("2024-01-01T00:00:00Z");
  for (let i = 0; i < FILES; i++) {
    const pkg = `pkg-${String(Math.floor(i / 50)).padStart(3, "0")}`;
    const sub = i % 50 < 25 ? "lib" : "lib/sub";
    const d = path.join(tmp, pkg, sub);
    if (i % 25 === 0) {
      fs.mkdirSync(d, { recursive: true });
      if (i % 50 === 0) {
        fs.writeFileSync(path.join(tmp, pkg, "package.json"), `{"name":"${pkg}"}\n`);
        fs.mkdirSync(path.join(tmp, pkg, ".bin"), { recursive: true });
        fs.symlinkSync(`../lib/f${i}.js`, path.join(tmp, pkg, ".bin", pkg));
      }
    }
    const size = Math.max(64, Math.round(sizes[i] * scale));
    const at = Math.floor(rand() * (text.length - size));
    const f = path.join(d, `f${i}.js`);
    fs.writeFileSync(f, text.subarray(at, at + size));
    fs.utimesSync(f, date, date);
  }
  fs.renameSync(tmp, dir);
  fs.writeFileSync(stamp, String(VERSION));
  return dir;
}

/** Runs argv (or a shell line) under GNU time: seconds and peak RSS in MB. */
function timed(argv, opts = {}) {
  const r = spawnSync("/usr/bin/time", ["-f", "%e %M %U %S", ...argv], {
    encoding: "utf8",
    maxBuffer: 64 << 20,
    ...opts,
  });
  const lines = (r.stderr ?? "").trim().split("\n");
  const m = /^([\d.]+) (\d+) ([\d.]+) ([\d.]+)$/.exec(lines[lines.length - 1] ?? "");
  if (r.status !== 0 || !m) {
    throw new Error(`${argv.join(" ")} failed (${r.status}): ${(r.stderr ?? "").slice(-500)}`);
  }
  return { s: Number(m[1]), rssMb: Number(m[2]) / 1024, cpu: Number(m[3]), sys: Number(m[4]) };
}

function warm(tree) {
  spawnSync("tar", ["-cf", "/dev/null", "-C", tree, "."]);
}

function have(bin) {
  return spawnSync("sh", ["-c", `command -v ${bin}`]).status === 0;
}

/**
 * Runs the benchmark and prints its table; resolves to an exit code (1 when a target is missed).
 * base: where the kept tree and the temp dir go.
 */
export async function benchCache({ rounds = 3, base = "/var/tmp", log = console.error } = {}) {
  if (!fs.existsSync(CLI)) {
    log("bench cache: cvisor is not built: run `npm install` first");
    return 1;
  }
  const cacheRoot = path.join(base, "cvisor-bench-cache");
  fs.mkdirSync(cacheRoot, { recursive: true });
  log("bench cache: preparing the tree (20 000 files, 300 MB; generated once)");
  const tree = ensureTree(cacheRoot);
  const tmp = fs.mkdtempSync(path.join(base, "cvisor-bench-cache-run-"));
  const zstd = have("zstd");
  if (!zstd) log("bench cache: the zstd CLI is not installed: no tar|zstd baseline");
  const env = { ...process.env, CVISOR_HOME: path.join(tmp, "home") };
  const backend = `disk:${path.join(tmp, "store")}`;
  const rows = [];
  try {
    /** Timings (ms), CPU times and peak RSS of each run. */
    const samples = () => ({ save: [], restore: [], saveCpu: [], restoreCpu: [], rss: [] });
    const runs = {
      gzip: { ...samples(), size: 0, base: "tar|gzip" },
      zstd: { ...samples(), size: 0, base: zstd ? "tar|zstd" : undefined },
      estargz: { ...samples(), size: 0, base: "tar|gzip" },
      none: { ...samples(), size: 0, base: "tar" },
    };
    const baselines = {
      "tar|gzip": { ...samples(), ext: "tgz", c: "gzip", d: "gzip -dc" },
      "tar|zstd": { ...samples(), ext: "tzst", c: "zstd -q -3", d: "zstd -dcq" },
      tar: { ...samples(), ext: "tar", c: "cat", d: "cat" },
    };
    const out = path.join(tmp, "out");
    for (let round = 0; round < rounds; round++) {
      // Odd rounds run cvisor first: the kernel's cost of writing a tree grows run after run.
      if (round % 2 === 1) runFormats(round);
      for (const [name, b] of Object.entries(baselines)) {
        if (name === "tar|zstd" && !zstd) continue;
        const file = path.join(tmp, `base.${b.ext}`);
        warm(tree);
        const s = timed(["sh", "-c", `tar -cf - -C '${tree}' . | ${b.c} > '${file}'`]);
        fs.rmSync(out, { recursive: true, force: true });
        fs.mkdirSync(out);
        spawnSync("sync");
        const r = timed(["sh", "-c", `${b.d} '${file}' | tar -xf - -C '${out}'`]);
        b.save.push(s.s);
        b.restore.push(r.s);
        b.saveCpu.push(s.cpu);
        b.restoreCpu.push(r.cpu);
        b.rss.push(Math.max(s.rssMb, r.rssMb));
        b.size = fs.statSync(file).size;
        fs.rmSync(file);
      }
      if (round % 2 === 0) runFormats(round);
      log(`bench cache: round ${round + 1}/${rounds} done`);
    }
    function runFormats(round) {
      for (const [format, f] of Object.entries(runs)) {
        const key = `bench-${format}-${round}`;
        warm(tree);
        const s = timed(
          [process.execPath, CLI, "cache", "save", key, tree, "--format", format, "--no-ignore"],
          { env: { ...env, CVISOR_CACHE_BACKEND: backend } },
        );
        fs.rmSync(out, { recursive: true, force: true });
        spawnSync("sync");
        const r = timed([process.execPath, CLI, "cache", "restore", key, out], {
          env: { ...env, CVISOR_CACHE_BACKEND: backend },
        });
        const listed = JSON.parse(
          spawnSync(process.execPath, [CLI, "cache", "ls", key, "--json"], {
            encoding: "utf8",
            env: { ...env, CVISOR_CACHE_BACKEND: backend },
          }).stdout,
        );
        f.size = listed[0]?.size ?? 0;
        spawnSync(process.execPath, [CLI, "cache", "rm", key], {
          env: { ...env, CVISOR_CACHE_BACKEND: backend },
        });
        f.save.push(s.s);
        f.restore.push(r.s);
        f.saveCpu.push(s.cpu);
        f.restoreCpu.push(r.cpu);
        f.rss.push(Math.max(s.rssMb, r.rssMb));
      }
    }
    const mb = (n) => (n / 1048576).toFixed(0);
    for (const [format, f] of Object.entries(runs)) {
      const b = f.base ? baselines[f.base] : undefined;
      const save = median(f.save);
      const restore = median(f.restore);
      const bs = b && b.save.length ? median(b.save) : undefined;
      const br = b && b.restore.length ? median(b.restore) : undefined;
      const rss = Math.max(...f.rss);
      const ok =
        (bs === undefined || save <= bs * TARGET_RATIO) &&
        (br === undefined || restore <= br * TARGET_RATIO) &&
        rss < TARGET_RSS_MB;
      rows.push({
        cpu: [median(f.saveCpu), median(f.restoreCpu)],
        baseCpu: b && b.saveCpu.length ? [median(b.saveCpu), median(b.restoreCpu)] : undefined,
        format,
        save,
        restore,
        baseline: f.base ?? "-",
        baseSave: bs,
        baseRestore: br,
        saveRatio: bs ? save / bs : undefined,
        restoreRatio: br ? restore / br : undefined,
        rssMb: rss,
        sizeMb: mb(f.size),
        baseSizeMb: b ? mb(b.size ?? 0) : "-",
        ok,
      });
    }
    const fx = (n, d = 2) => (n === undefined ? "-" : n.toFixed(d));
    const lines = [
      `cache: ${FILES} files, ${mb(TOTAL)} MB, ${rounds} rounds, medians (wall s); RSS: max of save and restore`,
      "format   save   restore | baseline  save   restore | save x  restore x | peak RSS MB | size MB (base) | target",
      ...rows.map(
        (r) =>
          `${r.format.padEnd(8)} ${fx(r.save).padStart(5)} ${fx(r.restore).padStart(8)} | ` +
          `${r.baseline.padEnd(9)} ${fx(r.baseSave).padStart(5)} ${fx(r.baseRestore).padStart(8)} | ` +
          `${fx(r.saveRatio).padStart(6)} ${fx(r.restoreRatio).padStart(9)} | ` +
          `${fx(r.rssMb, 0).padStart(11)} | ${`${r.sizeMb} (${r.baseSizeMb})`.padStart(14)} | ` +
          `${r.ok ? "PASS" : "FAIL"}`,
      ),
      "user CPU seconds, medians: format save/restore vs baseline save/restore (sys time on this VM",
      "grows with every 300 MB tree written and deleted, whichever tool writes it: see wall times)",
      ...rows.map(
        (r) =>
          `${r.format.padEnd(8)} ${fx(r.cpu[0])} / ${fx(r.cpu[1])}  vs  ${r.baseCpu ? `${fx(r.baseCpu[0])} / ${fx(r.baseCpu[1])}` : "-"}`,
      ),
      `targets: save and restore <= ${TARGET_RATIO} x the baseline, peak RSS < ${TARGET_RSS_MB} MB` +
        (zstd ? "" : "; no zstd CLI: zstd has no baseline"),
    ];
    console.log(lines.join("\n"));
    return rows.every((r) => r.ok) ? 0 : 1;
  } finally {
    spawnSync("chmod", ["-R", "u+rwx", tmp]);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
