// What the next command does with a killed copy's leftovers (src/sandbox/staged-dest.ts): a
// recorded copy is finished, unrecorded staging of dead owners is removed, and staging that a
// record still names (a live process is finishing a dead one's copy) is left alone.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { settleStaged } from "../../src/sandbox/staged-dest.js";
import { ownerRecord } from "../../src/store/owner.js";
import { tempRoot } from "../helpers/repo.js";

/** An owner record whose owner is gone: a pid above the kernel's limit (2^22). */
const DEAD = "4194305-0-dead";

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-staged-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function record(
  path: string,
  steps: { dir: string; name: string; obj: string }[],
  areas: string[],
) {
  writeFileSync(path, JSON.stringify({ version: 1, steps, areas }));
}

test("a dead copy's record is finished; its staging and unrecorded staging go", (t) => {
  const dir = tempDir(t);
  const live = join(dir, "live");
  const work = join(dir, "work");
  mkdirSync(join(live, "sub"), { recursive: true });
  mkdirSync(join(work, `cp~${DEAD}`), { recursive: true });
  writeFileSync(join(work, `cp~${DEAD}`, "o0"), "new\n");
  writeFileSync(join(work, `cp~${DEAD}`, "o1"), "second\n");
  writeFileSync(join(live, "sub", "f"), "old\n");
  record(
    join(work, `cp~${DEAD}.json`),
    [
      { dir: "sub", name: "f", obj: `cp~${DEAD}/o0` },
      { dir: "", name: "g", obj: `cp~${DEAD}/o1` },
    ],
    [`cp~${DEAD}`],
  );
  mkdirSync(join(work, "cp~4194305-0-other")); // staging a dead copy left before its record
  const placed: string[] = [];
  assert.equal(
    settleStaged(work, "cp~", live, (_fd, name) => placed.push(name)),
    1,
  );
  assert.equal(readFileSync(join(live, "sub", "f"), "utf8"), "new\n");
  assert.equal(readFileSync(join(live, "g"), "utf8"), "second\n");
  assert.deepEqual(placed, ["f", "g"]);
  assert.deepEqual(
    [`cp~${DEAD}`, `cp~${DEAD}.json`, "cp~4194305-0-other"].filter((n) =>
      existsSync(join(work, n)),
    ),
    [],
  );
});

test("staging that a claimed record names is left to the process finishing it", (t) => {
  const dir = tempDir(t);
  const live = join(dir, "live");
  const work = join(dir, "work");
  mkdirSync(live);
  mkdirSync(join(work, `cp~${DEAD}`), { recursive: true });
  writeFileSync(join(work, `cp~${DEAD}`, "o0"), "x\n");
  // This process claimed the dead copy's record (renamed to its own owner record): it is alive.
  record(
    join(work, `cp~${ownerRecord()}.json`),
    [{ dir: "", name: "x", obj: `cp~${DEAD}/o0` }],
    [`cp~${DEAD}`],
  );
  assert.equal(settleStaged(work, "cp~", live), 0);
  assert.ok(existsSync(join(work, `cp~${DEAD}`, "o0")), "the area it is finishing from");
  assert.ok(!existsSync(join(live, "x")), "a live owner's record is not finished by others");
});
