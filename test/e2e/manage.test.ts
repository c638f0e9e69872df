// Managing named sandboxes with real guests: `cvisor ls`, `rm` (refused while a run uses the
// sandbox), `diff` (A/C/D against the host, like docker diff) and `export` (an OCI image layer
// tarball whose whiteouts `tar -t` lists). Each test has its own $CVISOR_HOME.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sleeper } from "../helpers/cc.js";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { storeHome as home } from "../helpers/store.js";
import { cvisor, killAllWith, runCli, show, uniqueToken, waitFor } from "../helpers/repo.js";

/** A guest in sandbox s changes the fixture: adds, changes, deletes, replaces a directory. */
async function changeFixture(fx: Fixture, env: Record<string, string>): Promise<void> {
  const script = [
    'cd "$1"',
    "echo new > added.txt",
    "echo more >> hello.txt",
    "rm data.bin",
    "rm -rf sub && mkdir sub && echo fresh > sub/fresh.txt",
    "mkdir -p newdir/deep && echo x > newdir/deep/x",
    "ln -s hello.txt newlink",
  ].join(" && ");
  const r = await cvisor(["--sandbox", "s"], ["sh", "-c", script, "sh", fx.root], {
    extraEnv: env,
  });
  assert.equal(r.code, 0, show(r));
}

gtest("diff lists what the guest added, changed and deleted, like docker diff", async (fx) => {
  const { env } = home(fx);
  await changeFixture(fx, env);
  const d = await runCli(["--sandbox", "s", "diff"], { extraEnv: env });
  assert.equal(d.code, 0, show(d));
  const lines = d.out
    .split("\n")
    .filter((l) => l.startsWith("A ") || l.startsWith("C ") || l.startsWith("D "));
  const mine = lines.filter((l) => l.slice(2).startsWith(`${fx.root}/`));
  assert.deepEqual(mine, [
    `A ${fx.root}/added.txt`,
    `D ${fx.root}/data.bin`,
    `C ${fx.root}/hello.txt`,
    `A ${fx.root}/newdir`,
    `A ${fx.root}/newdir/deep`,
    `A ${fx.root}/newdir/deep/x`,
    `A ${fx.root}/newlink`,
    `C ${fx.root}/sub`,
    `D ${fx.root}/sub/deeper`,
    `A ${fx.root}/sub/fresh.txt`,
    `D ${fx.root}/sub/nested.txt`,
  ]);
  // The parents of the changes show as changed, as in docker diff.
  assert.ok(lines.includes(`C ${fx.root}`), d.out);
  const j = await runCli(["--sandbox", "s", "diff", "--json"], { extraEnv: env });
  const parsed = JSON.parse(j.out) as { kind: string; path: string }[];
  assert.deepEqual(
    parsed.filter((c) => c.path.startsWith(`${fx.root}/`)).map((c) => `${c.kind} ${c.path}`),
    mine,
  );
});

gtest("export writes an OCI layer: tar -t lists the changes with .wh. whiteouts", async (fx) => {
  const { env } = home(fx);
  await changeFixture(fx, env);
  const file = join(fx.scratch, "layer.tar");
  const r = await runCli(["--sandbox", "s", "export", file, "--json"], { extraEnv: env });
  assert.equal(r.code, 0, show(r));
  const summary = JSON.parse(r.err.trim()) as { entries: number; bytes: number };
  assert.ok(summary.entries > 5, r.err);
  const rel = fx.root.slice(1);
  const names = execFileSync("tar", ["-tf", file], { encoding: "utf8" }).split("\n");
  for (const want of [
    `${rel}/added.txt`,
    `${rel}/hello.txt`,
    `${rel}/.wh.data.bin`,
    `${rel}/sub/.wh..wh..opq`,
    `${rel}/sub/fresh.txt`,
    `${rel}/newdir/deep/x`,
    `${rel}/newlink`,
  ]) {
    assert.ok(
      names.some((n) => n.replace(/\/$/, "") === want),
      `${want} missing from:\n${names.join("\n")}`,
    );
  }
  const verbose = execFileSync("tar", ["-tvf", file], { encoding: "utf8" });
  assert.match(verbose, new RegExp(`^l.* ${rel}/newlink -> hello.txt$`, "m"));
  // Extracted, the changed file holds the sandbox's content.
  const out = join(fx.scratch, "extracted");
  mkdirSync(out);
  execFileSync("tar", ["-xf", file, "-C", out]);
  assert.equal(
    execFileSync("cat", [join(out, rel, "hello.txt")], { encoding: "utf8" }).split("\n")[1],
    "more",
  );
  // Without a sandbox of that name: one line, exit 125, nothing written.
  const missing = await runCli(["--sandbox", "nope", "export", join(fx.scratch, "x.tar")], {
    extraEnv: env,
  });
  assert.equal(missing.code, 125, show(missing));
  assert.match(missing.err, /no sandbox named nope/);
  assert.ok(!existsSync(join(fx.scratch, "x.tar")));
});

gtest("ls lists the named sandboxes; rm removes them, and refuses one in use", async (fx) => {
  const { env, dir } = home(fx);
  const empty = await runCli(["ls"], { extraEnv: env });
  assert.equal(empty.code, 0, show(empty));
  assert.match(empty.out, /no sandboxes yet/);
  for (const name of ["alpha", "beta"]) {
    const r = await cvisor(["--sandbox", name], ["sh", "-c", `echo ${name} > "${fx.p("f")}"`], {
      extraEnv: env,
    });
    assert.equal(r.code, 0, show(r));
  }
  const table = await runCli(["ls"], { extraEnv: env });
  assert.match(table.out, /^NAME\s+SIZE\s+LAYERS\s+CREATED\s+LAST RUN\s+RUNNING$/m);
  assert.match(table.out, /^alpha\s+\d/m);
  assert.match(table.out, /^beta\s+\d/m);
  const json = JSON.parse((await runCli(["ls", "--json"], { extraEnv: env })).out) as {
    name: string;
    sizeBytes: number;
    layers: number;
    lastRun: string | null;
    running: number;
  }[];
  assert.deepEqual(
    json.map((s) => s.name),
    ["alpha", "beta"],
  );
  assert.ok(json.every((s) => s.sizeBytes > 0 && s.layers === 1 && s.lastRun && s.running === 0));

  // A run in progress: rm is refused, ls counts it; after it ends, rm works.
  const marker = uniqueToken("cvisor-e2e-manage");
  try {
    const busy = runCli(["--sandbox", "beta", "--", sleeper(), "30", marker], { extraEnv: env });
    assert.ok(
      await waitFor(
        () =>
          existsSync(join(dir, "sandboxes", "beta", "runs")) &&
          readdirSync(join(dir, "sandboxes", "beta", "runs")).length === 1,
        10_000,
      ),
    );
    const refused = await runCli(["rm", "beta"], { extraEnv: env });
    assert.equal(refused.code, 125, show(refused));
    assert.match(refused.err, /in use by a run/);
    assert.ok(existsSync(join(dir, "sandboxes", "beta", "meta.json")), "left whole");
    const running = JSON.parse((await runCli(["ls", "--json"], { extraEnv: env })).out) as {
      name: string;
      running: number;
    }[];
    assert.equal(running.find((s) => s.name === "beta")?.running, 1);
    killAllWith(marker);
    await busy;
  } finally {
    killAllWith(marker);
  }
  const removed = await runCli(["rm", "alpha", "beta"], { extraEnv: env });
  assert.equal(removed.code, 0, show(removed));
  assert.deepEqual(removed.out.split("\n").filter(Boolean), ["alpha", "beta"]);
  assert.deepEqual(
    readdirSync(join(dir, "sandboxes")).filter((n) => !n.startsWith(".")),
    [],
  );
  const again = await runCli(["rm", "alpha"], { extraEnv: env });
  assert.equal(again.code, 125, show(again));
  assert.match(again.err, /no sandbox named alpha/);
});

// A sandbox whose meta.json is damaged is reported the same way by every command, and `rm`
// removes it (issue 13, item 4): ls lists the others and marks it, a run in it names the way
// out, rm takes it away.
gtest(
  "a damaged sandbox: ls still lists, marks it and says how to remove it; rm removes it",
  async (fx) => {
    const h = home(fx);
    for (const name of ["a", "b"]) {
      const r = await cvisor(["--sandbox", name], ["true"], { extraEnv: h.env });
      assert.equal(r.code, 0, show(r));
    }
    writeFileSync(join(h.sandbox("a"), "meta.json"), "{ not json");
    const ls = await runCli(["ls"], { extraEnv: h.env });
    assert.equal(ls.code, 0, show(ls));
    assert.match(ls.out, /^a +\S+ .*damaged/m, show(ls));
    assert.match(ls.out, /^b +[\d.]+ \w+ +1 /m, show(ls));
    assert.match(ls.err, /^cvisor: sandbox a: .*meta\.json is damaged; cvisor rm a removes it\n$/);
    const json = JSON.parse((await runCli(["ls", "--json"], { extraEnv: h.env })).out) as {
      name: string;
      damaged?: string;
    }[];
    assert.deepEqual(
      json.map((s) => [s.name, typeof s.damaged]),
      [
        ["a", "string"],
        ["b", "undefined"],
      ],
    );
    const run = await cvisor(["--sandbox", "a"], ["true"], { extraEnv: h.env });
    assert.equal(run.code, 125, show(run));
    assert.match(run.err, /^cvisor: sandbox a: .*is damaged; cvisor rm a removes it\n$/);
    const rm = await runCli(["rm", "a"], { extraEnv: h.env });
    assert.equal(rm.code, 0, show(rm));
    assert.ok(!existsSync(h.sandbox("a")));
    const after = await runCli(["ls"], { extraEnv: h.env });
    assert.equal(after.err, "", show(after));
    assert.doesNotMatch(after.out, /^a /m);
  },
);
