// Snapshot benchmarks (`node scripts/bench.mjs --only snapshots`, or this file alone): the
// median wall time of the library's snapshot, branch and rollback (snapshots/ops.ts, the code
// behind the CLI commands, in this process) on a named sandbox whose upper holds 100 and
// 50 000 files. Each is O(1) in the number of files (renames and a meta.json), so both sizes
// should take about the same, under TARGET_MS. The files are written straight into the
// sandbox's upper (no guest) before each timed call, outside the timing; the background
// removal of a dropped upper is waited for between rounds, so it does not load the next one.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { median } from "./fixtures.mjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const SIZES = [100, 50_000];
export const TARGET_MS = 50;

/** Writes n small files under dir (100 per directory). */
function fill(dir, n) {
  for (let i = 0; i < n; i += 100) {
    const sub = path.join(dir, "bench", `d${i / 100}`);
    fs.mkdirSync(sub, { recursive: true });
    for (let j = i; j < Math.min(n, i + 100); j++)
      fs.writeFileSync(path.join(sub, `f${j}`), `${j}\n`);
  }
}

async function waitNoReapers(dir) {
  for (let t = 0; t < 6000; t++) {
    if (!fs.readdirSync(dir).some((e) => /^\.(trash|reap)~/.test(e))) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Runs the benchmark; returns { sizes: { [n]: { snapshot, branch, rollback } } } in median ms,
 * plus the raw samples. opts.rounds (default 5), opts.base (a directory for the temp store).
 */
export async function benchSnapshots(opts = {}) {
  const rounds = opts.rounds ?? 5;
  // 50 000 files take seconds to write and to remove on each round: fewer rounds there.
  const roundsFor = (n) => (n > 1000 ? Math.min(rounds, 3) : rounds);
  const log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
  const ops = await import(pathToFileURL(path.join(REPO, "dist/snapshots/ops.js")).href);
  const store = await import(pathToFileURL(path.join(REPO, "dist/src/store/sandboxes.js")).href);
  const base = opts.base ?? process.env.CVISOR_BENCH_DIR ?? "/var/tmp";
  const home = fs.mkdtempSync(path.join(base, "cvisor-bench-snap-"));
  const env = { ...process.env, CVISOR_HOME: home };
  const result = { sizes: {}, samples: {}, targetMs: TARGET_MS };
  try {
    for (const n of SIZES) {
      const samples = { snapshot: [], branch: [], rollback: [] };
      for (let r = 0; r < roundsFor(n); r++) {
        const name = `n${n}-r${r}`;
        const sb = store.openNamed(name, env);
        fill(sb.upper, n);
        let t = performance.now();
        const { id } = await ops.snapshot(name, `snap-${name}`, { env });
        samples.snapshot.push(performance.now() - t);

        t = performance.now();
        ops.branch(`b-${name}`, id, { env });
        samples.branch.push(performance.now() - t);

        fill(sb.upper, n); // changes after the snapshot, for rollback to drop
        t = performance.now();
        ops.rollback(name, id, { env });
        samples.rollback.push(performance.now() - t);
        await waitNoReapers(sb.dir);
      }
      result.samples[n] = samples;
      result.sizes[n] = Object.fromEntries(
        Object.entries(samples).map(([k, v]) => [k, Number(median(v).toFixed(2))]),
      );
      log(
        `snapshots: ${n} files: ${JSON.stringify(result.sizes[n])} (median ms of ${roundsFor(n)})`,
      );
    }
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
  return result;
}

/** The table bench.mjs prints. */
export function formatSnapshots(result) {
  const ops = ["snapshot", "branch", "rollback"];
  const lines = [`${"files".padEnd(8)}${ops.map((o) => o.padStart(12)).join("")}   target`];
  for (const n of SIZES) {
    const row = result.sizes[n];
    const pass = ops.every((o) => row[o] < TARGET_MS) ? "PASS" : "FAIL";
    lines.push(
      `${String(n).padEnd(8)}${ops.map((o) => `${row[o].toFixed(2)} ms`.padStart(12)).join("")}   < ${TARGET_MS} ms ${pass}`,
    );
  }
  return lines.join("\n");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const rounds = Number(process.argv[2] ?? 5);
  const r = await benchSnapshots({ rounds });
  console.log(formatSnapshots(r));
}
