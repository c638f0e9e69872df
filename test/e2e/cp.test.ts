// `cvisor cp`, both ways, through the real CLI: docker cp's rules (trailing `/`, `/.`, existing
// destinations, several sources), modes, mtimes and symlinks kept, nested .gitignore and
// .dockerignore rules (and --no-ignore), the upper layer's format (whiteouts removed, opaque
// directories), what guest runs and `diff` see of a copied-in tree, a hostile sandbox copied
// out without anything outside the destination changing, --json, and bad usage.
// Each test has its own $CVISOR_HOME in its scratch dir; the guard checks the fixture and $HOME.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import type { Fixture } from "../helpers/fixture.js";
import { diffSnapshots, gtest, snapshot } from "../helpers/guard.js";
import {
  cliPath,
  cvisor,
  runCli,
  runProcess,
  shellQuote,
  show,
  which,
  waitFor,
  type CliResult,
} from "../helpers/repo.js";
import { assertOneLineError, storeHome } from "../helpers/store.js";

const T1 = 1_100_000_000;
const T2 = 1_200_000_000;

interface Env {
  home: string;
  env: Record<string, string>;
  /** The upper layer of a sandbox. */
  upper(name?: string): string;
  /** `cvisor --sandbox NAME cp ARGS...`, run in the scratch dir. */
  cp(args: string[], name?: string): Promise<CliResult>;
  /** `cvisor --sandbox NAME -- sh -c SCRIPT`. */
  sh(script: string, name?: string): Promise<CliResult>;
}

function setup(fx: Fixture): Env {
  const { dir: home, env, sandbox } = storeHome(fx);
  return {
    home,
    env,
    upper: (name = "s") => join(sandbox(name), "upper"),
    cp: (args, name = "s") =>
      runCli(["--sandbox", name, "cp", ...args], { extraEnv: env, cwd: fx.scratch }),
    sh: (script, name = "s") =>
      cvisor(["--sandbox", name], ["sh", "-c", script], { extraEnv: env, cwd: fx.scratch }),
  };
}

function ok(r: CliResult): void {
  assert.equal(r.code, 0, show(r));
}

/** Every entry below dir: "a.txt", "sub/", "link -> target", "fifo|" (sorted). */
function tree(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const name of readdirSync(rel ? join(dir, rel) : dir).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, r));
      if (st.isDirectory()) {
        out.push(`${r}/`);
        walk(r);
      } else if (st.isSymbolicLink()) out.push(`${r} -> ${readlinkSync(join(dir, r))}`);
      else if (st.isFIFO()) out.push(`${r}|`);
      else out.push(r);
    }
  };
  walk("");
  return out;
}

function mode(p: string): number {
  return lstatSync(p).mode & 0o7777;
}

function mtime(p: string): number {
  return Math.round(lstatSync(p).mtimeMs / 1000);
}

function file(p: string, text: string, m = 0o644, time = T1): void {
  writeFileSync(p, text);
  chmodSync(p, m);
  utimesSync(p, time, time);
}

/**
 * A source tree in scratch/src with nested ignore files:
 *   .gitignore: *.log, build/          .dockerignore: secret.txt
 *   sub/.gitignore: !keep.log          sub/deeper/.dockerignore: *, !want.txt
 */
function sourceTree(fx: Fixture): string {
  const src = join(fx.scratch, "src");
  mkdirSync(join(src, "sub", "deeper"), { recursive: true });
  mkdirSync(join(src, "build"));
  file(join(src, ".gitignore"), "*.log\nbuild/\n");
  file(join(src, ".dockerignore"), "secret.txt\n");
  file(join(src, "a.txt"), "alpha\n", 0o640, T1);
  file(join(src, "run.sh"), "#!/bin/sh\necho ran\n", 0o755, T2);
  file(join(src, "debug.log"), "noise\n");
  file(join(src, "secret.txt"), "secret\n");
  file(join(src, "build", "out.o"), "obj\n");
  file(join(src, "sub", ".gitignore"), "!keep.log\n");
  file(join(src, "sub", "keep.log"), "kept\n");
  file(join(src, "sub", "other.log"), "dropped\n");
  file(join(src, "sub", "secret.txt"), "also dropped\n");
  file(join(src, "sub", "deeper", ".dockerignore"), "*\n!want.txt\n!.dockerignore\n");
  file(join(src, "sub", "deeper", "want.txt"), "wanted\n");
  file(join(src, "sub", "deeper", "nope.txt"), "not wanted\n");
  symlinkSync("a.txt", join(src, "link"));
  symlinkSync("/nonexistent/abs", join(src, "abs-link"));
  lutimesSync(join(src, "link"), T2, T2);
  chmodSync(join(src, "sub"), 0o750);
  utimesSync(join(src, "sub", "deeper"), T1, T1);
  utimesSync(join(src, "sub"), T2, T2);
  return src;
}

/** What sourceTree leaves after the ignore rules. */
const KEPT = [
  ".dockerignore",
  ".gitignore",
  "a.txt",
  "abs-link -> /nonexistent/abs",
  "link -> a.txt",
  "run.sh",
  "sub/",
  "sub/.gitignore",
  "sub/deeper/",
  "sub/deeper/.dockerignore",
  "sub/deeper/want.txt",
  "sub/keep.log",
];

function checkMeta(root: string): void {
  assert.equal(readFileSync(join(root, "a.txt"), "utf8"), "alpha\n");
  assert.equal(mode(join(root, "a.txt")), 0o640);
  assert.equal(mode(join(root, "run.sh")), 0o755);
  assert.equal(mode(join(root, "sub")), 0o750);
  assert.equal(mtime(join(root, "a.txt")), T1);
  assert.equal(mtime(join(root, "run.sh")), T2);
  assert.equal(mtime(join(root, "link")), T2);
  assert.equal(mtime(join(root, "sub")), T2);
  assert.equal(mtime(join(root, "sub", "deeper")), T1);
}

interface Summary {
  sandbox: string;
  direction: string;
  files: number;
  dirs: number;
  symlinks: number;
  bytes: number;
  ignored: number;
  skipped: { path: string; reason: string }[];
}

gtest(
  "cp in: a tree with nested ignore files lands in the upper; guests and diff see it",
  async (fx) => {
    const e = setup(fx);
    const src = sourceTree(fx);
    const app = join(fx.scratch, "app");
    const r = await e.cp(["--json", "src", `sb:${app}`]);
    ok(r);
    const sum = JSON.parse(r.out) as Summary;
    assert.deepEqual(
      { ...sum, bytes: 0 },
      {
        sandbox: "s",
        direction: "in",
        files: 8,
        dirs: 3,
        symlinks: 2,
        bytes: 0,
        ignored: 6,
        skipped: [],
      },
    );
    assert.equal(sum.bytes, 98);
    const inUpper = e.upper() + app;
    assert.deepEqual(tree(inUpper), KEPT);
    checkMeta(inUpper);
    assert.ok(!existsSync(app), "nothing was written on the host");
    assert.deepEqual(readdirSync(join(e.home, "sandboxes", "s", "work")), []);
    // Upper directories made on the way have the host directory's mode.
    assert.equal(mode(e.upper() + fx.scratch), statSync(fx.scratch).mode & 0o7777);

    const seen = await e.sh(`cat ${app}/a.txt; ${app}/run.sh; cat ${app}/link; ls -A ${app}/sub`);
    ok(seen);
    assert.equal(seen.out, "alpha\nran\nalpha\n.gitignore\ndeeper\nkeep.log\n");
    const diff = await runCli(["--sandbox", "s", "diff"], { extraEnv: e.env });
    ok(diff);
    const lines = diff.out.split("\n");
    for (const rel of ["", "/a.txt", "/sub/keep.log", "/sub/deeper/want.txt", "/link"]) {
      assert.ok(lines.includes(`A ${app}${rel}`), `A ${app}${rel}\n${diff.out}`);
    }
    assert.ok(!diff.out.includes("debug.log") && !diff.out.includes("secret"), diff.out);

    // Without --json, what the ignore files left out is said, once (issue 13, item 7).
    const plain = await e.cp(["src", `sb:${fx.scratch}/plain`]);
    ok(plain);
    assert.equal(
      plain.err,
      "cvisor: cp: left out 6 entries that .gitignore or .dockerignore exclude (--no-ignore copies them)\n",
    );
    assert.equal(plain.out, "");

    // --no-ignore copies everything.
    const all = await e.cp(["--no-ignore", "--json", `${src}/.`, `sb:${fx.scratch}/all`]);
    ok(all);
    assert.equal(all.err, "");
    assert.equal((JSON.parse(all.out) as Summary).ignored, 0);
    assert.deepEqual(tree(e.upper() + join(fx.scratch, "all")), tree(src));
  },
);

gtest(
  "cp out: the merged view (whiteouts, opaque dirs), ignore rules, modes, mtimes",
  async (fx) => {
    const e = setup(fx);
    const src = sourceTree(fx);
    const box = join(fx.scratch, "box");
    ok(await e.cp(["--no-ignore", "src", `sb:${box}`]));
    // The guest changes a host directory: deletes a file, replaces a directory, adds a file.
    ok(
      await e.sh(
        `cd ${fx.root}/sub && rm nested.txt && rm -r deeper && mkdir deeper && ` +
          `echo fresh > deeper/fresh.txt && echo new > new.txt`,
      ),
    );
    const out = join(fx.scratch, "out");
    mkdirSync(out);
    const r = await e.cp(["--json", `sb:${box}`, "out"]);
    ok(r);
    assert.deepEqual(tree(join(out, "box")), KEPT);
    checkMeta(join(out, "box"));
    const sum = JSON.parse(r.out) as Summary;
    assert.equal(sum.direction, "out");
    assert.equal(sum.ignored, 6);
    assert.deepEqual(sum.skipped, []);

    const merged = await e.cp([`sb:${fx.root}/sub`, "out/sub"]);
    ok(merged);
    assert.deepEqual(tree(join(out, "sub")), ["deeper/", "deeper/fresh.txt", "new.txt"]);
    assert.equal(readFileSync(join(out, "sub", "new.txt"), "utf8"), "new\n");
    // A host directory reached through the view keeps its host mode and times.
    const whole = await e.cp([`sb:${fx.root}/.`, "out/root"]);
    ok(whole);
    assert.equal(readFileSync(join(out, "root", "hello.txt"), "utf8"), "hello from the host\n");
    assert.equal(mode(join(out, "root", "exec.sh")), 0o755);
    assert.equal(mode(join(out, "root", "readonly.txt")), 0o444);
    assert.equal(mtime(join(out, "root", "hello.txt")), 1_000_000_000);
    assert.equal(readlinkSync(join(out, "root", "dir-link")), "sub");
    assert.ok(!existsSync(join(out, "root", "sub", "nested.txt")));
    assert.deepEqual(readdirSync(join(out, "root", "sub", "deeper")), ["fresh.txt"]);
    assert.equal(readdirSync(src).length, 10, "the source is unchanged");
  },
);

gtest("cp: trailing slashes, /., existing and missing destinations (both ways)", async (fx) => {
  const e = setup(fx);
  const s = fx.scratch;
  mkdirSync(join(s, "d", "inner"), { recursive: true });
  file(join(s, "d", "x.txt"), "x\n");
  file(join(s, "d", "inner", "y.txt"), "y\n");
  file(join(s, "f.txt"), "file\n");
  const sb = (p: string): string => `sb:${s}/in/${p}`;
  const U = (p: string): string => `${e.upper()}${s}/in/${p}`;
  ok(await e.cp(["d", `sb:${s}/in`])); // missing: made with d's contents
  assert.deepEqual(tree(U("")), ["inner/", "inner/y.txt", "x.txt"]);

  ok(await e.cp(["f.txt", sb("new.txt")])); // file → missing: the new file
  assert.equal(readFileSync(U("new.txt"), "utf8"), "file\n");
  ok(await e.cp(["f.txt", sb("inner")])); // file → existing dir: inside it
  assert.equal(readFileSync(U("inner/f.txt"), "utf8"), "file\n");
  ok(await e.cp(["f.txt", sb("x.txt")])); // file → existing file: replaced
  assert.equal(readFileSync(U("x.txt"), "utf8"), "file\n");
  ok(await e.cp(["d", sb("inner")])); // dir → existing dir: dir/basename
  assert.ok(existsSync(U("inner/d/inner/y.txt")));
  ok(await e.cp(["d/.", sb("inner")])); // dir/. → existing dir: the contents, merged
  assert.ok(existsSync(U("inner/x.txt")) && existsSync(U("inner/inner/y.txt")));
  ok(await e.cp(["d/", sb("copy/")])); // dir/ → missing: made
  assert.ok(existsSync(U("copy/x.txt")));

  assertOneLineError(await e.cp(["f.txt", sb("missing/")]), /no such directory/);
  assertOneLineError(await e.cp(["f.txt", sb("nope/deeper/f")]), /no such file or directory/);
  assertOneLineError(await e.cp(["d", sb("x.txt")]), /cannot copy the directory .* to the file/);
  assertOneLineError(await e.cp(["f.txt/", sb("")]), /not a directory/);
  assertOneLineError(await e.cp(["f.txt/.", sb("")]), /not a directory/);

  // Out: the same rules with a host destination.
  const src = `sb:${s}/in`;
  ok(await e.cp([src, "o1"]));
  assert.ok(existsSync(join(s, "o1", "x.txt")), "missing: made with the contents");
  mkdirSync(join(s, "o2"));
  ok(await e.cp([src, "o2"]));
  assert.ok(existsSync(join(s, "o2", "in", "x.txt")), "existing dir: dir/basename");
  ok(await e.cp([`${src}/.`, "o2"]));
  assert.ok(existsSync(join(s, "o2", "x.txt")), "dir/.: the contents");
  ok(await e.cp([`${src}/x.txt`, "o2/renamed.txt"]));
  assert.equal(readFileSync(join(s, "o2", "renamed.txt"), "utf8"), "file\n");
  ok(await e.cp([`${src}/new.txt`, "o2/renamed.txt"]));
  assert.equal(readFileSync(join(s, "o2", "renamed.txt"), "utf8"), "file\n");
  assertOneLineError(await e.cp([`${src}/x.txt`, "o3/"]), /no such directory/);
  assertOneLineError(await e.cp([`${src}/x.txt`, "o3/deep/f"]), /no such directory/);
  assertOneLineError(await e.cp([src, "o2/x.txt"]), /cannot copy the directory/);
  assertOneLineError(await e.cp([`${src}/x.txt/`, "o4"]), /not a directory/);
  assertOneLineError(await e.cp([`${src}/missing`, "o4"]), /no such file or directory/);
  assert.ok(!existsSync(join(s, "o3")) && !existsSync(join(s, "o4")));
});

gtest("cp: several sources go into an existing directory, else it is an error", async (fx) => {
  const e = setup(fx);
  const s = fx.scratch;
  file(join(s, "a.txt"), "a\n");
  mkdirSync(join(s, "d"));
  file(join(s, "d", "b.txt"), "b\n");
  ok(await e.cp([fx.p("hello.txt"), `sb:${s}/target`])); // a file: target is a file now
  assertOneLineError(
    await e.cp(["a.txt", "d", `sb:${s}/target`]),
    /several sources the destination must be a directory/,
  );
  assertOneLineError(await e.cp(["a.txt", "d", `sb:${s}/none`]), /must be a directory/);
  ok(await e.cp(["a.txt", "d", `sb:${s}`]));
  assert.deepEqual(tree(e.upper() + s), ["a.txt", "d/", "d/b.txt", "target"]);
  mkdirSync(join(s, "back"));
  ok(await e.cp([`sb:${s}/a.txt`, `sb:${s}/d`, `sb:${s}/target`, "back"]));
  assert.deepEqual(tree(join(s, "back")), ["a.txt", "d/", "d/b.txt", "target"]);
  assertOneLineError(await e.cp([`sb:${s}/a.txt`, `sb:${s}/d`, "nothere"]), /must be a dir/);
});

gtest("cp in over what the sandbox deleted: whiteout removed, opaque directory", async (fx) => {
  const e = setup(fx);
  const s = fx.scratch;
  ok(await e.sh(`rm ${fx.p("hello.txt")} && rm -r ${fx.p("sub")}`));
  const up = e.upper() + fx.root;
  assert.ok(existsSync(join(up, ".wh.hello.txt")) && existsSync(join(up, ".wh.sub")));
  file(join(s, "hello.txt"), "new hello\n");
  mkdirSync(join(s, "sub"));
  file(join(s, "sub", "only.txt"), "only\n");
  file(join(s, "sub", ".wh.evil"), "");
  ok(await e.cp(["hello.txt", `sb:${fx.root}`]));
  const r = await e.cp(["--json", "sub", `sb:${fx.root}`]);
  ok(r);
  assert.match(r.err, /skipped .*\.wh\.evil: names starting with \.wh\. are reserved/);
  assert.equal((JSON.parse(r.out) as Summary).skipped.length, 1);
  assert.ok(!existsSync(join(up, ".wh.hello.txt")), "the whiteout is gone");
  assert.ok(!existsSync(join(up, ".wh.sub")));
  assert.ok(statSync(join(up, "sub", ".wh..wh..opq")).isFile(), "the new sub is opaque");
  assert.ok(!existsSync(join(up, "sub", ".wh.evil")));
  const seen = await e.sh(`cat ${fx.p("hello.txt")}; ls -A ${fx.p("sub")}`);
  ok(seen);
  assert.equal(seen.out, "new hello\nonly.txt\n");
  const diff = await runCli(["--sandbox", "s", "diff"], { extraEnv: e.env });
  assert.match(diff.out, new RegExp(`^C ${fx.p("hello.txt")}$`, "m"));
  assert.match(diff.out, new RegExp(`^D ${fx.p("sub", "nested.txt")}$`, "m"));
  // Into a host directory that is still there: merged, not opaque.
  ok(await e.cp(["hello.txt", `sb:${fx.p("empty-dir")}`]));
  assert.ok(!existsSync(join(up, "empty-dir", ".wh..wh..opq")));
  assert.equal(mode(join(up, "empty-dir")), 0o755);
});

gtest("cp out of a hostile sandbox writes nothing outside the destination", async (fx) => {
  const e = setup(fx);
  const s = fx.scratch;
  const outside = join(s, "outside");
  mkdirSync(outside);
  file(join(outside, "canary"), "canary\n");
  const evil = join(s, "evil");
  const deepName = "d".repeat(40);
  const made = await e.sh(
    [
      `mkdir -p ${evil}/trap ${evil}/sub && cd ${evil}`,
      "ln -s /etc etc",
      "ln -s ../../outside up",
      `ln -s ${outside}/canary abs`,
      "ln -s .. dotdot",
      `ln -s ${outside} trap/escape`,
      "mkfifo fifo",
      "echo payload > sub/f && chmod 6755 sub/f",
      `cd sub && for i in $(seq 1 90); do mkdir ${deepName} && cd ${deepName} || exit 1; done`,
      "echo bottom > x",
    ].join(" && "),
  );
  ok(made);
  const devices = process.getuid?.() === 0 && which("mknod") !== null;
  if (devices) {
    const dev = spawnSync("mknod", [join(e.upper() + evil, "null"), "c", "1", "3"]);
    assert.equal(dev.status, 0, dev.stderr.toString());
  }
  const siblings = (): ReturnType<typeof snapshot> =>
    snapshot(
      s,
      {
        maxEntries: 10_000,
        maxDepth: 8,
        hashMaxBytes: 1 << 20,
        skip: (rel) => rel === "dst" || rel.startsWith("dst/") || rel.startsWith("cvisor-home"),
      },
      false,
    );
  mkdirSync(join(s, "dst"));
  const before = siblings();
  const etcBefore = statSync("/etc").mtimeMs;
  const r = await e.cp(["--json", `sb:${evil}`, "dst"]);
  ok(r);
  assert.deepEqual(diffSnapshots(before, siblings()), []);
  assert.equal(statSync("/etc").mtimeMs, etcBefore);
  const got = join(s, "dst", "evil");
  assert.equal(readlinkSync(join(got, "etc")), "/etc");
  assert.equal(readlinkSync(join(got, "up")), "../../outside");
  assert.equal(readlinkSync(join(got, "abs")), `${outside}/canary`);
  assert.equal(readlinkSync(join(got, "dotdot")), "..");
  assert.equal(readlinkSync(join(got, "trap", "escape")), outside);
  assert.equal(mode(join(got, "sub", "f")), 0o755, "setuid and setgid are dropped");
  assert.ok(!existsSync(join(got, "fifo")) && !existsSync(join(got, "null")));
  let deep = join(got, "sub");
  for (let i = 0; i < 90; i++) deep = join(deep, deepName);
  assert.ok(deep.length > 3600);
  const sum = JSON.parse(r.out) as Summary;
  const skipped = sum.skipped.map((k) => k.path).sort();
  assert.deepEqual(skipped, [`sb:${evil}/fifo`, ...(devices ? [`sb:${evil}/null`] : [])]);
  assert.match(r.err, /skipped sb:.*\/fifo: a FIFO/);
  if (devices) assert.match(r.err, /skipped sb:.*\/null: a character device/);
  assert.equal(readFileSync(join(outside, "canary"), "utf8"), "canary\n");
  // The deep tree came out whole (fd-relative: its path is beyond PATH_MAX in the upper).
  const bottom = spawnSync("sh", [
    "-c",
    `cd ${join(got, "sub")} && for i in $(seq 1 90); do cd ${deepName}; done && cat x`,
  ]);
  assert.equal(bottom.stdout.toString(), "bottom\n");
});

gtest("cp out never writes through a symlink already below the destination", async (fx) => {
  const e = setup(fx);
  const s = fx.scratch;
  const outside = join(s, "outside");
  mkdirSync(outside);
  file(join(outside, "canary"), "canary\n");
  ok(await e.sh(`mkdir -p ${s}/t/trap && echo data > ${s}/t/f && echo pwn > ${s}/t/trap/pwn`));
  mkdirSync(join(s, "dst", "t"), { recursive: true });
  symlinkSync(join(outside, "canary"), join(s, "dst", "t", "f"));
  symlinkSync(outside, join(s, "dst", "t", "trap"));
  const before = snapshot(
    outside,
    { maxEntries: 100, maxDepth: 4, hashMaxBytes: 1 << 20, skip: () => false },
    false,
  );
  const r = await e.cp([`sb:${s}/t`, "dst"]);
  assertOneLineError(r, /over the symlink .*dst\/t\/trap .*never followed/);
  assert.deepEqual(
    diffSnapshots(
      before,
      snapshot(
        outside,
        { maxEntries: 100, maxDepth: 4, hashMaxBytes: 1 << 20, skip: () => false },
        false,
      ),
    ),
    [],
  );
  // The copy failed whole: f is still the link it was.
  assert.ok(lstatSync(join(s, "dst", "t", "f")).isSymbolicLink());
  // Without the trap it goes through, and f is replaced by a file (the link), not written through.
  unlinkSync(join(s, "dst", "t", "trap"));
  ok(await e.cp([`sb:${s}/t`, "dst"]));
  assert.equal(readFileSync(join(outside, "canary"), "utf8"), "canary\n");
  assert.ok(lstatSync(join(s, "dst", "t", "f")).isFile());
  assert.equal(readFileSync(join(s, "dst", "t", "f"), "utf8"), "data\n");
  assert.deepEqual(
    readdirSync(join(s, "dst", "t")).filter((n) => n.startsWith(".cvisor")),
    [],
  );
});

gtest("cp: bad usage and missing things exit 125 with one line", async (fx) => {
  const e = setup(fx);
  file(join(fx.scratch, "a.txt"), "a\n");
  assertOneLineError(await e.cp(["a.txt", "b.txt"]), /exactly one `sb:` side/);
  assertOneLineError(await e.cp(["sb:/a", "sb:/b"]), /exactly one `sb:` side/);
  assertOneLineError(await e.cp(["sb:/a", "a.txt", "out"]), /exactly one `sb:` side/);
  assertOneLineError(await e.cp(["a.txt"]), /cp needs SRC\.\.\. DST/);
  assertOneLineError(await e.cp(["a.txt", "sb:relative"]), /sandbox paths are absolute/);
  assertOneLineError(await e.cp(["missing.txt", "sb:/tmp/x"]), /missing\.txt: no such file/);
  assert.ok(!existsSync(join(e.home, "sandboxes", "s")), "a failed copy-in made no sandbox");
  assertOneLineError(await e.cp(["sb:/etc/hostname", "out"], "nobox"), /no sandbox named nobox/);
  assertOneLineError(await e.cp(["-", "sb:/tmp/x"]), /not supported/);
  // Without --sandbox: the sandbox named default, made by copying in.
  const r = await runCli(["cp", "a.txt", `sb:${fx.scratch}/a2.txt`], {
    extraEnv: e.env,
    cwd: fx.scratch,
  });
  ok(r);
  assert.ok(existsSync(join(e.upper("default") + fx.scratch, "a2.txt")));
  assertOneLineError(await e.cp(["sb:/nonexistent/x", "out"], "default"), /no such file/);
});

// On a terminal, long commands draw one progress line on stderr and clear it at the end
// (src/cli/progress.ts, shared by cp and cache); off a terminal they print none.
gtest(
  "a large cp and a cache save show a progress line on a terminal, and clear it",
  async (fx) => {
    const e = setup(fx);
    const big = join(fx.scratch, "big");
    for (let d = 0; d < 25; d++) {
      mkdirSync(join(big, `d${d}`), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(big, `d${d}`, `f${f}`), "x\n");
    }
    writeFileSync(join(big, "noise"), randomBytes(48 << 20));
    const onTerminal = (args: string[]): Promise<CliResult> => {
      const line = [process.execPath, cliPath, ...args].map(shellQuote).join(" ");
      return runProcess(which("script") ?? "script", ["-qec", line, "/dev/null"], {
        extraEnv: e.env,
        cwd: fx.scratch,
        timeoutMs: 120_000,
      });
    };
    // "\x1b[K" (erase the line) shown as <EL>.
    const shown = (r: CliResult): string => r.out.replaceAll("\x1b[K", "<EL>");
    const cp = await onTerminal(["--sandbox", "s", "cp", big, "sb:/big"]);
    ok(cp);
    assert.match(shown(cp), /\r<EL>cp \[ *= *\] \d+ files, [\d.]+ [KMG]?B, [\d.]+ [KMG]?B\/s/);
    assert.match(shown(cp), /\r<EL>$/, "the line is cleared at the end");
    const save = await onTerminal(["cache", "save", "k", big]);
    ok(save);
    assert.match(shown(save), /\r<EL>cache save: [\d.]+ [KMG]?B read, [\d.]+ [KMG]?B written, /);
    assert.match(shown(save), /\r<EL>cvisor: saved /, "cleared before the summary");
    // Off a terminal: no progress line.
    const plain = await e.cp([big, "sb:/again"]);
    ok(plain);
    assert.ok(!plain.err.includes("\x1b[K"), plain.err);
  },
  { skip: which("script") ? false : "util-linux `script` is not installed", timeout: 300_000 },
);

// While a copy into a sandbox is under way, the sandbox counts as running (a run record): a
// snapshot, rollback or rm cannot move its upper from under the copy. The copy is held still
// (SIGSTOP) once its staging exists, so the check does not race its end.
gtest(
  "while a cp runs, snapshot and rm of its sandbox are refused; after it, they work",
  async (fx) => {
    const e = setup(fx);
    ok(await e.sh("true"));
    const big = join(fx.scratch, "big");
    for (let d = 0; d < 20; d++) {
      mkdirSync(join(big, `d${d}`), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(big, `d${d}`, `f${f}`), "x\n");
    }
    const work = join(e.home, "sandboxes", "s", "work");
    const child = spawn(process.execPath, [cliPath, "--sandbox", "s", "cp", big, "sb:/big"], {
      env: { ...process.env, ...e.env },
      cwd: fx.scratch,
      stdio: "ignore",
    });
    const done = new Promise<number | null>((resolve) =>
      child.on("close", (code) => resolve(code)),
    );
    try {
      assert.ok(
        await waitFor(() => readdirSync(work).some((n) => n.startsWith("cp~")), 20_000),
        "the copy never started staging",
      );
      child.kill("SIGSTOP");
      const snap = await runCli(["--sandbox", "s", "snapshot", "during"], { extraEnv: e.env });
      assertOneLineError(snap, /sandbox s is running \(pid \d+\): snapshot refused/);
      const rm = await runCli(["rm", "s"], { extraEnv: e.env });
      assertOneLineError(rm, /sandbox s is in use by a run \(pid \d+\)/);
    } finally {
      child.kill("SIGCONT");
    }
    assert.equal(await done, 0);
    ok(await runCli(["--sandbox", "s", "snapshot", "after"], { extraEnv: e.env }));
    assert.ok(existsSync(join(e.home, "layers", "after", "tree", "big", "d19", "f99")));
  },
);
