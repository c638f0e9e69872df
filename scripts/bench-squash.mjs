// `node scripts/bench-squash.mjs [FILES] [LAYERS] [distinct]`: times squashLayers on a generated
// stack (default 50 000 files over 8 layers: 100-file directories, each layer's overlapping its
// neighbours' by half unless `distinct`, some whiteouts and opaque directories), in a temp dir
// removed after. Needs `npm run build:ts`.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { squashLayers } from "../dist/snapshots/squash.js";

const files = Number(process.argv[2] ?? 50_000);
const layers = Number(process.argv[3] ?? 8);
const distinct = process.argv[4] === "distinct";
const perDir = 100;
const dirsPerLayer = Math.ceil(files / layers / perDir);
const base = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "cvisor-bench-squash-"));
try {
  const trees = [];
  let made = 0;
  for (let l = 0; l < layers; l++) {
    const tree = join(base, `layer${l}`, "tree");
    trees.push(tree);
    for (let d = 0; d < dirsPerLayer; d++) {
      // Layer l covers directories l*dirsPerLayer/2 ...: each overlaps its neighbours by half.
      const dir = join(tree, "usr", `d${Math.floor((l * dirsPerLayer) / (distinct ? 1 : 2)) + d}`);
      mkdirSync(dir, { recursive: true });
      for (let f = 0; f < perDir && made < files; f++, made++) {
        writeFileSync(join(dir, `f${f}`), `${l}:${d}:${f}\n`);
      }
      if (d % 10 === 0) writeFileSync(join(dir, ".wh.f0"), "");
      if (d % 25 === 1) writeFileSync(join(dir, ".wh..wh..opq"), "");
    }
  }
  const out = join(base, "squashed");
  const t0 = process.hrtime.bigint();
  squashLayers(trees, out);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  let kept = 0;
  const count = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) count(join(dir, e.name));
      else kept++;
    }
  };
  count(out);
  console.log(
    `squashLayers: ${made} files in ${layers} layers -> ${kept} entries: ${ms.toFixed(0)} ms`,
  );
} finally {
  rmSync(base, { recursive: true, force: true });
}
