// `cvisor cache` through the real CLI: a tree a guest made in a named sandbox saved from its
// merged view (sb:/DIR), restored into another sandbox's upper layer, and read there by a real
// guest; restore replacing a host directory of the view (opaque: none of the host's entries show
// through) and a directory the sandbox already had; host directories both ways with --json,
// prefix and restore-key hits, misses (exit 0, or 1 with --fail-on-miss); no overwrite without
// --force; --read-only; a bad backend named with where it came from; a corrupt entry refused
// with the sandbox untouched. The fixture tree and $HOME are guarded: nothing on the host
// changes but the scratch dir.
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import type { Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { cvisor, runCli, show, type CliResult } from "../helpers/repo.js";
import { s3ClientEnv, startS3Server } from "../helpers/s3-server.js";

interface Env {
  home: string;
  env: Record<string, string>;
  cache(args: string[], sandbox?: string, extra?: Record<string, string>): Promise<CliResult>;
  sh(script: string, sandbox: string): Promise<CliResult>;
}

function setup(fx: Fixture): Env {
  const home = join(fx.scratch, "cvisor-home");
  const env = { CVISOR_HOME: home };
  return {
    home,
    env,
    cache: (args, sandbox, extra = {}) =>
      runCli([...(sandbox ? ["--sandbox", sandbox] : []), "cache", ...args], {
        extraEnv: { ...env, ...extra },
        cwd: fx.scratch,
        timeoutMs: 60_000,
      }),
    sh: (script, sandbox) =>
      cvisor(["--sandbox", sandbox], ["sh", "-c", script], { extraEnv: env, cwd: fx.scratch }),
  };
}

function ok(r: CliResult): void {
  assert.equal(r.code, 0, show(r));
}

function json(r: CliResult): Record<string, unknown> {
  ok(r);
  return JSON.parse(r.out) as Record<string, unknown>;
}

gtest(
  "cache: sb: save from one sandbox, restore into another, a guest reads it",
  async (fx) => {
    const e = setup(fx);
    const app = fx.p("app");
    ok(
      await e.sh(
        `mkdir -p ${app}/sub/empty && echo hello > ${app}/x && ln -s x ${app}/l && ` +
          `ln ${app}/x ${app}/hard && echo deep > ${app}/sub/y && chmod 750 ${app}/sub && ` +
          `echo '*.log' > ${app}/.gitignore && echo noise > ${app}/debug.log`,
        "ci",
      ),
    );
    const saved = json(
      await e.cache(["save", "deps-1", `sb:${app}`, "--format", "zstd", "--json"], "ci"),
    );
    assert.equal(saved.saved, true);
    assert.equal(saved.files, 3); // x, sub/y, .gitignore (hard is a link, debug.log ignored)
    assert.equal(saved.hardlinks, 1);
    assert.equal(saved.ignored, 1);

    // Into a sandbox that does not exist yet: made, and the tree lands in its upper layer.
    const restored = json(await e.cache(["restore", "deps-1", `sb:${app}`, "--json"], "ci2"));
    assert.equal(restored.hit, "exact");
    const r = await e.sh(
      `cat ${app}/x ${app}/sub/y; readlink ${app}/l; stat -c '%a %h' ${app}/sub ${app}/x; ` +
        `ls -A ${app}; ls ${app}/sub`,
      "ci2",
    );
    ok(r);
    assert.equal(
      r.out,
      "hello\ndeep\nx\n750 3\n644 2\n.gitignore\nhard\nl\nsub\nx\nempty\ny\n",
      show(r),
    );
    const upper = join(e.home, "sandboxes", "ci2", "upper");
    assert.ok(readdirSync(join(upper, ...app.split("/").filter(Boolean))).includes("x"));
    assert.deepEqual(readdirSync(join(e.home, "sandboxes", "ci2", "work")), []);

    // Restore replaces what the sandbox had there: files the guest added are gone.
    ok(await e.sh(`echo stale > ${app}/stale && rm ${app}/x`, "ci2"));
    ok(await e.cache(["restore", "deps-1", `sb:${app}`], "ci2"));
    const again = await e.sh(`ls -A ${app}; cat ${app}/x`, "ci2");
    assert.equal(again.out, ".gitignore\nhard\nl\nsub\nx\nhello\n", show(again));

    // Over a host directory of the view: the restored directory is opaque in the upper.
    ok(await e.cache(["restore", "deps-1", `sb:${fx.p("sub")}`], "ci3"));
    const over = await e.sh(`ls -A ${fx.p("sub")}; cat ${fx.p("sub")}/x`, "ci3");
    assert.equal(over.out, ".gitignore\nhard\nl\nsub\nx\nhello\n", show(over));
    assert.deepEqual(readdirSync(fx.p("sub")).sort(), ["deeper", "nested.txt"], "host unchanged");

    // Snapshot layers: save reads them under the upper, restore hides what they hold there.
    ok(await e.sh(`mkdir -p ${app} && echo old > ${app}/from-snapshot`, "ci4"));
    ok(await runCli(["--sandbox", "ci4", "snapshot", "s1"], { extraEnv: e.env, cwd: fx.scratch }));
    ok(await e.sh(`echo new > ${app}/from-upper`, "ci4"));
    const layered = json(await e.cache(["save", "layered", `sb:${app}`, "--json"], "ci4"));
    assert.equal(layered.files, 2);
    ok(await e.cache(["restore", "layered", `sb:${fx.p("restored")}`], "ci2"));
    const both = await e.sh(`ls ${fx.p("restored")}`, "ci2");
    assert.equal(both.out, "from-snapshot\nfrom-upper\n", show(both));
    ok(await e.cache(["restore", "deps-1", `sb:${app}`], "ci4"));
    const hidden = await e.sh(`ls -A ${app}`, "ci4");
    assert.equal(hidden.out, ".gitignore\nhard\nl\nsub\nx\n", show(hidden));

    // A corrupt entry: refused in one line, the sandbox as it was.
    const entries = join(e.home, "cache", "entries");
    const dir = join(
      entries,
      readdirSync(entries).find((d) =>
        readFileSync(join(entries, d, "meta.json"), "utf8").includes('"deps-1"'),
      ) ?? "",
    );
    const bytes = readFileSync(join(dir, "archive"));
    bytes[bytes.length >> 1] = (bytes[bytes.length >> 1] ?? 0) ^ 0xff;
    writeFileSync(join(dir, "archive"), bytes);
    const bad = await e.cache(["restore", "deps-1", `sb:${app}`], "ci2");
    assert.equal(bad.code, 125, show(bad));
    assert.match(
      bad.err,
      /^cvisor: cache entry deps-1 in disk:.* is corrupt or truncated .*; nothing was restored\n$/,
    );
    const after = await e.sh(`ls -A ${app}; cat ${app}/x`, "ci2");
    assert.equal(after.out, again.out, show(after));
    assert.deepEqual(readdirSync(join(e.home, "sandboxes", "ci2", "work")), []);
  },
  { timeout: 120_000 },
);

gtest(
  "cache: host directories, lookups, misses, no overwrite, read-only, bad backends",
  async (fx) => {
    const e = setup(fx);
    const src = join(fx.scratch, "node_modules");
    mkdirSync(join(src, "pkg"), { recursive: true });
    writeFileSync(join(src, "pkg", "index.js"), "v1\n");
    const save = (key: string, extra: string[] = []) =>
      e.cache(["save", key, src, "--json", ...extra]);
    assert.equal(json(await save("npm-linux-aaa")).saved, true);
    writeFileSync(join(src, "pkg", "index.js"), "v2\n");
    assert.equal(json(await save("npm-linux-bbb", ["--format", "estargz"])).saved, true);

    // An existing key: not replaced (exit 0, says so), unless --force.
    writeFileSync(join(src, "pkg", "index.js"), "v3\n");
    const again = await save("npm-linux-aaa");
    assert.deepEqual(json(again), {
      saved: false,
      key: "npm-linux-aaa",
      backend: `disk:${join(e.home, "cache")}`,
      reason: "exists",
    });
    assert.match(again.err, /already exists .*not saved/);

    const out = join(fx.scratch, "out", "node_modules");
    const restore = (key: string, extra: string[] = []) =>
      e.cache(["restore", key, out, "--json", ...extra]);
    let r = json(await restore("npm-linux-aaa"));
    assert.equal(r.hit, "exact");
    assert.equal(readFileSync(join(out, "pkg", "index.js"), "utf8"), "v1\n");
    r = json(await restore("npm-linux-"));
    assert.equal(r.hit, "prefix");
    assert.equal(r.matchedKey, "npm-linux-bbb");
    assert.equal(readFileSync(join(out, "pkg", "index.js"), "utf8"), "v2\n");
    r = json(
      await restore("npm-linux-ccc", ["--restore-key", "npm-mac-", "--restore-key", "npm-linux-a"]),
    );
    assert.equal(r.hit, "prefix");
    assert.equal(r.matchedKey, "npm-linux-aaa");
    assert.equal(r.matchedPrefix, "npm-linux-a");
    const miss = await restore("pip-", ["--restore-key", "cargo-"]);
    assert.deepEqual(json(miss), {
      hit: "miss",
      key: "pip-",
      backend: `disk:${join(e.home, "cache")}`,
      path: out,
    });
    assert.match(miss.err, /cache miss/);
    const failed = await e.cache(["restore", "pip-", out, "--fail-on-miss"]);
    assert.equal(failed.code, 1, show(failed));
    assert.equal(readFileSync(join(out, "pkg", "index.js"), "utf8"), "v1\n");

    // ls (newest first), --read-only, rm.
    // The table has a header and the dates `cvisor ls` shows (issue 13, item 7).
    const table = await e.cache(["ls", "npm-"]);
    ok(table);
    const [head, ...rows] = table.out.trimEnd().split("\n");
    assert.match(head ?? "", /^KEY +FORMAT +SIZE +CREATED$/);
    assert.equal(rows.length, 2, table.out);
    for (const row of rows) {
      assert.match(
        row,
        /^npm-linux-(aaa|bbb) +(gzip|estargz) +[\d.]+ [KM]?B +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/,
      );
    }
    const ls = await e.cache(["ls", "npm-", "--json"]);
    assert.deepEqual(
      (JSON.parse(ls.out) as { key: string }[]).map((x) => x.key),
      ["npm-linux-bbb", "npm-linux-aaa"],
    );
    const ro = await e.cache(["save", "new", src, "--read-only"]);
    assert.equal(ro.code, 125, show(ro));
    assert.match(ro.err, /^cvisor: cache backend disk:.* is read-only/);
    ok(await e.cache(["rm", "npm-linux-aaa"]));
    const gone = await e.cache(["rm", "npm-linux-aaa"]);
    assert.equal(gone.code, 125, show(gone));
    assert.deepEqual(json(await e.cache(["rm", "--all", "--json"])).removed, ["npm-linux-bbb"]);

    // Backends: from the environment, named with where the bad value came from.
    const other = join(fx.scratch, "other-cache");
    ok(await e.cache(["save", "k", src], undefined, { CVISOR_CACHE_BACKEND: `disk:${other}` }));
    assert.ok(readdirSync(join(other, "entries")).length === 1);
    const bad = await e.cache(["ls"], undefined, { CVISOR_CACHE_BACKEND: "ftp://x" });
    assert.equal(bad.code, 125, show(bad));
    assert.match(
      bad.err,
      /^cvisor: invalid cache backend "ftp:\/\/x" \(from CVISOR_CACHE_BACKEND\)/,
    );
    const bad2 = await e.cache(["ls", "--cache-backend", "nope"]);
    assert.match(bad2.err, /\(from --cache-backend\)/);
    const fmt = await e.cache(["save", "k2", src, "--format", "xz"]);
    assert.equal(fmt.code, 125, show(fmt));
    assert.match(fmt.err, /unknown --format xz/);
    const key = await e.cache(["save", "../x", src]);
    assert.match(key.err, /invalid cache key/);
  },
);

// A restore replaces its destination whole, so it must never be pointed at a directory that
// holds what the user did not name (issue 13): the state directory (every sandbox and the cache
// itself), $HOME, the current directory or one of its ancestors, or /. Each is refused with one
// line, and nothing changes; a directory beside them still restores.
gtest(
  "cache: restore refuses /, $HOME, $CVISOR_HOME, the current directory and its ancestors",
  async (fx) => {
    const e = setup(fx);
    const src = join(fx.scratch, "deps");
    mkdirSync(src);
    writeFileSync(join(src, "a.txt"), "a\n");
    writeFileSync(join(src, ".gitignore"), "*.log\n");
    writeFileSync(join(src, "debug.log"), "noise\n");
    const saved = await e.cache(["save", "k1", src]);
    ok(saved);
    assert.match(
      saved.err,
      /; left out 1 entry that \.gitignore or \.dockerignore exclude \(--no-ignore saves them\)\n$/,
    );
    const home = join(fx.scratch, "home");
    const cwd = join(fx.scratch, "work", "project");
    mkdirSync(home);
    mkdirSync(cwd, { recursive: true });
    writeFileSync(join(home, "keep"), "mine\n");
    writeFileSync(join(cwd, "keep"), "mine\n");
    const restore = (dest: string, key = "k1") =>
      runCli(["cache", "restore", key, dest], {
        extraEnv: { ...e.env, HOME: home },
        cwd,
        timeoutMs: 60_000,
      });
    const cases: [string, RegExp][] = [
      [".", /it is the current directory/],
      [cwd, /it is the current directory/],
      [join(fx.scratch, "work"), /it holds the current directory/],
      ["..", /it holds the current directory/],
      [home, /it is \$HOME/],
      [e.home, /it is cvisor's state directory/],
      [join(e.home, "cache"), /it is inside cvisor's state directory/],
      [fx.scratch, /it holds the current directory/],
      ["/", /it is \/,/],
    ];
    for (const [dest, why] of cases) {
      const r = await restore(dest);
      assert.equal(r.code, 125, `${dest}\n${show(r)}`);
      assert.match(r.err, /^cvisor: cache restore: refusing to replace .*\n$/, dest);
      assert.match(r.err, why, dest);
    }
    // Refused before the lookup: a miss says so too, not "cache miss".
    const miss = await restore(".", "no-such-key");
    assert.equal(miss.code, 125, show(miss));
    assert.match(miss.err, /refusing to replace \.: it is the current directory/);
    assert.equal(readFileSync(join(cwd, "keep"), "utf8"), "mine\n");
    assert.equal(readFileSync(join(home, "keep"), "utf8"), "mine\n");
    assert.ok(existsSync(join(e.home, "cache")), "the state directory is still there");
    assert.deepEqual(readdirSync(join(fx.scratch, "work")), ["project"]);
    // Beside them, and below the current directory: restored.
    ok(await restore("out"));
    assert.equal(readFileSync(join(cwd, "out", "a.txt"), "utf8"), "a\n");
  },
);

gtest(
  "cache: the CLI on an s3:// backend (a loopback S3 server): save, lookup, restore",
  async (fx) => {
    const e = setup(fx);
    const server = await startS3Server();
    try {
      const s3 = { ...s3ClientEnv(server), CVISOR_CACHE_BACKEND: `s3://${server.bucket}/ci` };
      const src = join(fx.scratch, "deps");
      mkdirSync(join(src, "d"), { recursive: true });
      writeFileSync(join(src, "d", "f.txt"), "from s3\n");
      for (const format of ["estargz", "zstd"]) {
        const saved = await e.cache(
          ["save", `k-${format}`, src, "--format", format, "--json"],
          undefined,
          s3,
        );
        assert.equal(json(saved).saved, true);
      }
      const listed = JSON.parse((await e.cache(["ls", "--json"], undefined, s3)).out) as {
        key: string;
        extra?: { tocDigest?: string };
      }[];
      assert.deepEqual(listed.map((m) => m.key).sort(), ["k-estargz", "k-zstd"]);
      assert.match(
        listed.find((m) => m.key === "k-estargz")?.extra?.tocDigest ?? "",
        /^sha256:[0-9a-f]{64}$/,
      );
      for (const key of ["k-estargz", "k-z"]) {
        const out = join(fx.scratch, `out-${key}`);
        const r = json(await e.cache(["restore", key, out, "--json"], undefined, s3));
        assert.equal(r.hit, key === "k-z" ? "prefix" : "exact");
        assert.equal(readFileSync(join(out, "d", "f.txt"), "utf8"), "from s3\n");
      }
    } finally {
      await server.stop();
    }
  },
);

gtest(
  "cache: a symlink leading outside the restored directory needs --allow-external-links",
  async (fx) => {
    const e = setup(fx);
    const venv = join(fx.scratch, "venv");
    mkdirSync(join(venv, "bin"), { recursive: true });
    symlinkSync("/usr/bin/python3", join(venv, "bin", "python"));
    ok(await e.cache(["save", "venv-1", venv]));
    const out = join(fx.scratch, "restored");
    const refused = await e.cache(["restore", "venv-1", out]);
    assert.equal(refused.code, 125, show(refused));
    assert.match(
      refused.err,
      /^cvisor: .*the symlink "bin\/python" -> "\/usr\/bin\/python3" leads outside the restored directory .*nothing was restored\n$/,
    );
    assert.ok(!existsSync(out), "nothing restored");
    ok(await e.cache(["restore", "venv-1", out, "--allow-external-links"]));
    assert.equal(readlinkSync(join(out, "bin", "python")), "/usr/bin/python3");
  },
);

gtest(
  "cache: restoring into a sandbox skips names a layer reserves (.wh.*), with a warning",
  async (fx) => {
    const e = setup(fx);
    const src = join(fx.scratch, "tree");
    mkdirSync(join(src, ".wh.dir"), { recursive: true });
    writeFileSync(join(src, ".wh.keep"), "");
    writeFileSync(join(src, ".wh.dir", "f"), "f\n");
    writeFileSync(join(src, "keep"), "kept\n");
    ok(await e.cache(["save", "tree-1", src]));
    const app = fx.p("restored");
    const r = await e.cache(["restore", "tree-1", `sb:${app}`], "ci");
    ok(r);
    assert.match(r.err, /\.wh\.keep.*reserved in the sandbox's layer: not restored/);
    assert.match(r.err, /\.wh\.dir.*reserved in the sandbox's layer: not restored/);
    const upper = join(e.home, "sandboxes", "ci", "upper", ...app.split("/").filter(Boolean));
    assert.deepEqual(readdirSync(upper).sort(), ["keep"]);
    // A host directory restore keeps them: there they are ordinary names.
    const out = join(fx.scratch, "out");
    ok(await e.cache(["restore", "tree-1", out]));
    assert.deepEqual(readdirSync(out).sort(), [".wh.dir", ".wh.keep", "keep"]);
  },
);

// A damaged entry is reported the same way by every command (issue 13, item 4): not a miss for
// restore nor "exists" for save, marked by ls, and rm removes it.
gtest(
  "cache: an entry whose metadata is damaged: ls says so, restore and save refuse, rm removes it",
  async (fx) => {
    const e = setup(fx);
    const src = join(fx.scratch, "deps");
    mkdirSync(src);
    writeFileSync(join(src, "a.txt"), "a\n");
    ok(await e.cache(["save", "k1", src]));
    ok(await e.cache(["save", "k2", src]));
    const entries = join(e.home, "cache", "entries");
    const k2 = readdirSync(entries).find((d) =>
      readFileSync(join(entries, d, "meta.json"), "utf8").includes('"k2"'),
    );
    assert.ok(k2);
    writeFileSync(join(entries, k2, "meta.json"), "{ damaged");
    const ls = await e.cache(["ls"]);
    ok(ls);
    assert.match(ls.out, /^k1 /m);
    assert.match(ls.err, /^cvisor: 1 cache entry in disk:.* is damaged .*cache rm --all/m);
    const out = join(fx.scratch, "out");
    const restore = await e.cache(["restore", "k2", out]);
    assert.equal(restore.code, 125, show(restore));
    assert.match(
      restore.err,
      /^cvisor: cache entry k2 in disk:.* is damaged .*cvisor cache rm k2 removes it/,
    );
    assert.ok(!existsSync(out));
    const save = await e.cache(["save", "k2", src]);
    assert.equal(save.code, 125, show(save));
    assert.match(save.err, /is damaged .*--force replaces it/);
    const rm = await e.cache(["rm", "k2"]);
    ok(rm);
    assert.equal(readdirSync(entries).length, 1);
    ok(await e.cache(["save", "k2", src]));
    // rm --all takes damaged entries too, whose keys nobody can read.
    writeFileSync(join(entries, k2, "meta.json"), "{ damaged");
    const all = await e.cache(["rm", "--all"]);
    ok(all);
    assert.deepEqual(readdirSync(entries), []);
  },
);
