// Lookups through snapshot layers (`node scripts/bench.mjs --only layers`): a guest stats a path
// in a named sandbox over a chain of 1 and of 8 snapshot layers, each layer holding the
// directories on the way (every snapshot wrote a file there), so each component of the path is
// looked up in every layer. The guest times its own loop of stat() calls (a small C program
// built here), which leaves out start-up; reported: median µs per stat, and the 8-layer cost
// over the 1-layer cost (target ≤ 1.10). Two paths: a file of the bottom layer, and a host
// file below a directory every layer holds.
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { median } from "./fixtures.mjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const CLI = path.join(REPO, "dist/cvisor.cjs");
export const CHAINS = [1, 8];
export const TARGET_RATIO = 1.1;
const STATS_PER_RUN = 20000;

const STAT_LOOP = `#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
int main(int argc, char **argv) {
    int n = atoi(argv[2]);
    struct stat st;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++)
        if (stat(argv[1], &st) < 0) { perror(argv[1]); return 1; }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.4f\\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n);
    return 0;
}
`;

function cvisor(env, args) {
  const r = spawnSync(process.execPath, [CLI, ...args], { env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cvisor ${args.join(" ")}: exit ${r.status}\n${r.stderr}`);
  return r.stdout;
}

/**
 * Runs the benchmark; returns { chains: { [n]: { layerFile, hostFile } } } in median µs per
 * stat, the ratios of the longest chain to one layer, and the raw samples. opts.rounds
 * (default 7), opts.base (a directory for the temp store and fixture).
 */
export async function benchLayers(opts = {}) {
  const rounds = opts.rounds ?? 7;
  const base = opts.base ?? process.env.CVISOR_BENCH_DIR ?? "/var/tmp";
  const work = fs.mkdtempSync(path.join(base, "cvisor-bench-layers-"));
  const env = { ...process.env, CVISOR_HOME: path.join(work, "home") };
  const result = { chains: {}, samples: {}, targetRatio: TARGET_RATIO };
  try {
    const loop = path.join(work, "statloop");
    fs.writeFileSync(`${loop}.c`, STAT_LOOP);
    execFileSync("gcc", ["-O2", "-o", loop, `${loop}.c`]);
    // The project directory exists on the host (with a host file) and in every layer.
    const proj = path.join(work, "proj", "src", "deep");
    fs.mkdirSync(proj, { recursive: true });
    fs.writeFileSync(path.join(proj, "host.txt"), "host\n");
    for (const n of CHAINS) {
      for (let i = 0; i < n; i++) {
        cvisor(env, [
          "--sandbox",
          `chain${n}`,
          "--",
          "sh",
          "-c",
          `echo ${i} > ${proj}/layer${i}.txt`,
        ]);
        cvisor(env, ["--sandbox", `chain${n}`, "snapshot"]);
      }
      result.samples[n] = { layerFile: [], hostFile: [] };
    }
    // Rounds alternate between the chains, so a busy moment weighs on both alike.
    for (let r = 0; r < rounds; r++) {
      for (const n of CHAINS) {
        for (const [key, file] of [
          ["layerFile", path.join(proj, "layer0.txt")],
          ["hostFile", path.join(proj, "host.txt")],
        ]) {
          const out = cvisor(env, [
            "--sandbox",
            `chain${n}`,
            "--",
            loop,
            file,
            String(STATS_PER_RUN),
          ]);
          result.samples[n][key].push(Number(out.trim()));
        }
      }
    }
    for (const n of CHAINS) {
      const samples = result.samples[n];
      result.chains[n] = {
        layerFile: median(samples.layerFile),
        hostFile: median(samples.hostFile),
      };
    }
    const one = result.chains[CHAINS[0]];
    const many = result.chains[CHAINS[CHAINS.length - 1]];
    result.ratio = {
      layerFile: many.layerFile / one.layerFile,
      hostFile: many.hostFile / one.hostFile,
    };
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return result;
}

export function formatLayers(res) {
  const lines = ["stat() through snapshot layers (µs per call, median, the guest's own timing)"];
  const fmt = (x) => x.toFixed(2).padStart(8);
  lines.push(`${"layers".padEnd(8)}${"layer file".padStart(12)}${"host file".padStart(12)}`);
  for (const n of CHAINS) {
    const c = res.chains[n];
    lines.push(
      `${String(n).padEnd(8)}${fmt(c.layerFile).padStart(12)}${fmt(c.hostFile).padStart(12)}`,
    );
  }
  const verdict = (r) => `${r.toFixed(2)}x ${r <= res.targetRatio ? "PASS" : "FAIL"}`;
  lines.push(
    `${CHAINS[CHAINS.length - 1]} vs 1: layer file ${verdict(res.ratio.layerFile)}, host file ` +
      `${verdict(res.ratio.hostFile)} (target ≤ ${res.targetRatio}x)`,
  );
  return lines.join(os.EOL);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const res = await benchLayers();
  console.log(formatLayers(res));
}
