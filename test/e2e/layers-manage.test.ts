// diff, export and cp of a named sandbox whose upper (made by a real guest run) lies over a
// chain of read-only layers built by hand in the scratch dir (no snapshot command needed), over
// the real host: the fixture. The commands get their chain from sandboxLowers() (a stub until
// the store records it), so these tests call what the commands are built from, with the chain.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  createWriteStream,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  chmodSync,
  utimesSync,
} from "node:fs";
import { join } from "node:path";
import { writeLayer } from "../../src/sandbox/export-layer.js";
import { CvisorError } from "../../src/core/errors.js";
import { layerChanges } from "../../src/sandbox/changes.js";
import { copyIn } from "../../src/sandbox/copy-in.js";
import { copyOut } from "../../src/sandbox/copy-out.js";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { build, dumpLayers } from "../helpers/layers.js";
import { cvisor, show } from "../helpers/repo.js";
import { storeHome } from "../helpers/store.js";

interface Chain {
  upper: string;
  work: string;
  lowers: string[];
  /** The fixture root as a path relative to a layer root. */
  r: string;
}

/**
 * Sandbox s: the guest adds empty-dir/u; by hand, the upper deletes l2made (made in layer 1) and
 * ldir (a directory of layer 1) and lfile (a file of layer 1).
 * Layer 0: deletes data.bin, makes noexec.sh again (layer 1 deleted it), replaces sub (opaque)
 * with sub/fromlayer, adds newdir/f (newdir 0750).
 * Layer 1: adds l2made, ldir/x, lfile, keepfile; deletes noexec.sh; changes hello.txt.
 */
async function chain(fx: Fixture): Promise<Chain> {
  const home = storeHome(fx);
  const r = await cvisor(
    ["--sandbox", "s"],
    ["sh", "-c", 'echo up > "$1/empty-dir/u"', "sh", fx.root],
    {
      extraEnv: home.env,
    },
  );
  assert.equal(r.code, 0, show(r));
  const rel = fx.root.slice(1);
  const upper = join(home.sandbox("s"), "upper");
  const work = join(home.sandbox("s"), "work");
  build(upper, { [`${rel}/.wh.l2made`]: "", [`${rel}/.wh.ldir`]: "", [`${rel}/.wh.lfile`]: "" });
  const l0 = join(fx.scratch, "layers", "l0", "tree");
  const l1 = join(fx.scratch, "layers", "l1", "tree");
  build(l0, {
    [`${rel}/.wh.data.bin`]: "",
    [`${rel}/noexec.sh`]: "made again in layer 0\n",
    [`${rel}/sub/.wh..wh..opq`]: "",
    [`${rel}/sub/fromlayer`]: "from layer 0\n",
    [`${rel}/newdir/f`]: "f\n",
  });
  chmodSync(join(l0, rel, "newdir"), 0o750);
  utimesSync(join(l0, rel, "newdir"), 1_234_567_890, 1_234_567_890);
  build(l1, {
    [`${rel}/l2made`]: "made in layer 1\n",
    [`${rel}/ldir/x`]: "x\n",
    [`${rel}/lfile`]: "lfile\n",
    [`${rel}/keepfile`]: "keep\n",
    [`${rel}/.wh.noexec.sh`]: "",
    [`${rel}/hello.txt`]: "hello from layer 1\n",
  });
  return { upper, work, lowers: [l0, l1], r: rel };
}

gtest("diff of an upper over layers: their merged effect against the host", async (fx) => {
  const c = await chain(fx);
  const mine = layerChanges([c.upper, ...c.lowers])
    .filter((x) => x.path.startsWith(`${fx.root}/`))
    .map((x) => `${x.kind} ${x.path.slice(fx.root.length + 1)}`);
  assert.deepEqual(mine, [
    "D data.bin", // deleted in layer 0
    "C empty-dir",
    "A empty-dir/u", // the guest's
    "C hello.txt", // changed in layer 1
    "A keepfile",
    "A newdir",
    "A newdir/f",
    "C noexec.sh", // deleted in layer 1, made again in layer 0
    "C sub",
    "D sub/deeper", // sub is opaque in layer 0
    "A sub/fromlayer",
    "D sub/nested.txt",
    // l2made, ldir, lfile: made in layer 1 and deleted in the upper: no change
  ]);
  // The upper alone says less.
  const upperOnly = layerChanges([c.upper]).filter((x) => x.path.startsWith(`${fx.root}/`));
  assert.deepEqual(
    upperOnly.map((x) => `${x.kind} ${x.path.slice(fx.root.length + 1)}`),
    ["C empty-dir", "A empty-dir/u"],
  );
});

gtest("export of an upper over layers: one layer tar, equivalent to the chain", async (fx) => {
  const c = await chain(fx);
  const file = join(fx.scratch, "layer.tar");
  const summary = { entries: 0, bytes: 0 };
  await writeLayer([c.upper, ...c.lowers], createWriteStream(file, { flags: "wx" }), summary);
  const names = execFileSync("tar", ["-tf", file], { encoding: "utf8" })
    .split("\n")
    .map((n) => n.replace(/\/$/, ""))
    .filter((n) => n.startsWith(`${c.r}/`))
    .map((n) => n.slice(c.r.length + 1))
    .sort();
  assert.deepEqual(names, [
    ".wh.data.bin",
    ".wh.l2made", // the host might have had it: kept, it hides nothing there
    ".wh.ldir",
    ".wh.lfile",
    "empty-dir",
    "empty-dir/u",
    "hello.txt",
    "keepfile",
    "newdir",
    "newdir/f",
    "noexec.sh",
    "sub",
    "sub/.wh..wh..opq",
    "sub/fromlayer",
  ]);
  // Extracted as a layer tree, it shows over the host what the chain shows.
  const extracted = join(fx.scratch, "extracted");
  mkdirSync(extracted);
  execFileSync("tar", ["-xf", file, "-C", extracted]);
  const empty = join(fx.scratch, "empty-upper");
  mkdirSync(empty);
  assert.deepEqual(
    dumpLayers(empty, [extracted], "", { under: fx.root }),
    dumpLayers(c.upper, c.lowers, "", { under: fx.root }),
  );
});

gtest(
  "cp out reads the chain; cp in writes the upper, opaque where a lower's directory hides",
  async (fx) => {
    const c = await chain(fx);
    const R = fx.root;
    const out = join(fx.scratch, "out");
    mkdirSync(out);
    const rOut = await copyOut(c.upper, [`${R}/sub`, `${R}/hello.txt`, `${R}/newdir`], out, {
      lowers: c.lowers,
      host: "",
    });
    assert.equal(rOut.skipped.length, 0);
    assert.deepEqual(readdirSync(out).sort(), ["hello.txt", "newdir", "sub"]);
    assert.deepEqual(readdirSync(join(out, "sub")), ["fromlayer"], "layer 0's sub is opaque");
    assert.equal(readFileSync(join(out, "hello.txt"), "utf8"), "hello from layer 1\n");

    const src = join(fx.scratch, "src");
    build(src, { "d/y": "y\n", plain: "plain\n" });
    const cp = async (from: string, to: string): Promise<void> => {
      await copyIn({ upper: c.upper, work: c.work }, [from], to, { lowers: c.lowers });
    };
    // ldir: a directory of layer 1 the upper deleted; a directory copied there must not show x.
    await cp(join(src, "d"), `${R}/ldir`);
    assert.ok(existsSync(join(c.upper, c.r, "ldir", ".wh..wh..opq")), "opaque");
    assert.ok(!existsSync(join(c.upper, c.r, ".wh.ldir")), "its whiteout removed");
    // lfile: a file of layer 1 the upper deleted; a directory there needs no marker.
    await cp(join(src, "d"), `${R}/lfile`);
    assert.deepEqual(readdirSync(join(c.upper, c.r, "lfile")), ["y"]);
    // l2made: a file of layer 1 the upper deleted, replaced by a file.
    await cp(join(src, "plain"), `${R}/l2made`);
    // Into a directory that exists only in layer 0: its upper twin gets layer 0's mode (and its
    // times, until the copy adds its entry).
    await cp(join(src, "plain"), `${R}/newdir/`);
    const twin = lstatSync(join(c.upper, c.r, "newdir"));
    assert.equal(twin.mode & 0o7777, 0o750);
    // Over a file a lower shows: a directory cannot replace it (docker cp's rule), nothing is made.
    await assert.rejects(
      () => cp(join(src, "d"), `${R}/keepfile`),
      (e: unknown) => e instanceof CvisorError && /to the file/.test(e.message),
    );
    assert.ok(!existsSync(join(c.upper, c.r, "keepfile")));
    const view = dumpLayers(c.upper, c.lowers, "", { under: R });
    const pick = (prefix: string): Record<string, string> =>
      Object.fromEntries(
        Object.entries(view)
          .filter(([p]) => p.startsWith(`${R}/${prefix}`))
          .map(([p, v]) => [p.slice(R.length + 1), v]),
      );
    assert.deepEqual(pick("ldir"), { ldir: "dir", "ldir/y": "file:y\n" });
    assert.deepEqual(pick("lfile"), { lfile: "dir", "lfile/y": "file:y\n" });
    assert.deepEqual(pick("l2made"), { l2made: "file:plain\n" });
    assert.deepEqual(pick("newdir"), {
      newdir: "dir",
      "newdir/f": "file:f\n",
      "newdir/plain": "file:plain\n",
    });
    assert.deepEqual(readdirSync(c.work), [], "nothing left in work/");
    // Nothing was written into the lower layers.
    assert.deepEqual(readdirSync(join(c.lowers[1] as string, c.r, "ldir")), ["x"]);
  },
);
