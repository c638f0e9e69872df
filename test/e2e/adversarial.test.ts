// Adversarial guests against the copy-on-write overlay: symlinks and hard links aimed at the
// sandbox storage and at hidden credentials, symlinks out of the fixture, renames of whole host
// subtrees (one under /), metadata calls on a host file reopened for writing through
// /proc/self/fd, and racing threads that flip a path buffer during rename, chdir and exec.
// Each test asserts what the guest sees; the guard (gtest) proves the fixture tree and $HOME
// unchanged, and each test checks the other host directories it uses (a fake $HOME with
// credentials, a directory outside the fixture, another sandbox's layer) itself.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import {
  overlayProbe,
  prober,
  racer,
  RACE_EXEC_ROUNDS,
  RACE_ROUNDS,
  RACE_TIMEOUT,
  treeDumper,
} from "../helpers/cc.js";
import { diffTrees, parseDump } from "../helpers/differential.js";
import { HELLO_TEXT, type Fixture } from "../helpers/fixture.js";
import { diffSnapshots, gtest, snapshot, type WalkOptions } from "../helpers/guard.js";
import {
  cvisor,
  runProcess,
  show,
  tempRoot,
  uniqueToken,
  which,
  type CliResult,
} from "../helpers/repo.js";

// ---- helpers ------------------------------------------------------------------------------

/** A private world for one test: a fake $HOME with credentials, a cvisor home, a runtime dir. */
interface World {
  home: string;
  cvHome: string;
  runtime: string;
  /** The CLI's environment additions (HOME, CVISOR_HOME, XDG_RUNTIME_DIR). */
  env: Record<string, string>;
  /** Secrets planted in the fake $HOME (by relative path). */
  secrets: Record<string, string>;
  /** The upper directory of the named sandbox NAME, as it is on disk. */
  upper(name: string, ...virtual: string[]): string;
}

const HIDDEN_SCRIPT = (secret: string): string => `#!/bin/sh\necho ${secret}\nexit 42\n`;

function world(fx: Fixture): World {
  const home = path.join(fx.scratch, "home");
  const cvHome = path.join(fx.scratch, "cvisor-home");
  const runtime = path.join(fx.scratch, "runtime");
  mkdirSync(runtime, { mode: 0o700 });
  const secrets: Record<string, string> = {};
  const plant = (rel: string, content: (secret: string) => string, mode = 0o600): void => {
    const file = path.join(home, rel);
    mkdirSync(path.dirname(file), { recursive: true });
    secrets[rel] = uniqueToken("cvisor-adv-secret");
    writeFileSync(file, content(secrets[rel]));
    chmodSync(file, mode);
  };
  plant(".ssh/id", (s) => `${s}\n`);
  plant(".ssh/run.sh", HIDDEN_SCRIPT, 0o755);
  plant(".aws/credentials", (s) => `${s}\n`);
  writeFileSync(path.join(home, "notes.txt"), "visible\n");
  return {
    home,
    cvHome,
    runtime,
    env: { HOME: home, CVISOR_HOME: cvHome, XDG_RUNTIME_DIR: runtime },
    secrets,
    upper: (name, ...virtual) => path.join(cvHome, "sandboxes", name, "upper", ...virtual),
  };
}

const DIR_WALK: WalkOptions = {
  maxEntries: 100_000,
  maxDepth: 64,
  hashMaxBytes: 64 << 20,
  skip: () => false,
};

/** Snapshots `dir` now; the returned function asserts it is exactly the same later. */
function watchDir(dir: string, what: string): () => void {
  const before = snapshot(dir, DIR_WALK);
  return () => {
    const changes = diffSnapshots(before, snapshot(dir, DIR_WALK));
    assert.deepEqual(changes, [], `${what} (${dir}) changed:\n${changes.join("\n")}`);
  };
}

/** Fails when any secret of the world (or `extra`) shows up in the run's output. */
function assertNoSecret(r: CliResult, w: World, ...extra: string[]): void {
  for (const secret of [...Object.values(w.secrets), ...extra]) {
    assert.ok(!r.out.includes(secret) && !r.err.includes(secret), `leaked ${secret}:\n${show(r)}`);
  }
}

interface StepResult {
  cmd: string;
  out: string;
  rc: number;
}

/**
 * A script that runs each command with its stderr on stdout and prints a marker with its exit
 * status after it, so the output splits into one block per command (see `splitSteps`).
 */
function stepsScript(cmds: readonly string[]): string {
  return cmds.map((c, i) => `{ ${c}\n} 2>&1; echo "@@step ${i} rc=$?"`).join("\n");
}

function splitSteps(cmds: readonly string[], r: CliResult): StepResult[] {
  const steps: StepResult[] = [];
  let rest = r.out;
  cmds.forEach((cmd, i) => {
    const m = new RegExp(`^@@step ${i} rc=(\\d+)$`, "m").exec(rest);
    assert.ok(m, `no marker for step ${i} (${cmd}):\n${show(r)}`);
    steps.push({ cmd, out: rest.slice(0, m.index), rc: Number(m[1]) });
    rest = rest.slice(m.index + m[0].length + 1);
  });
  return steps;
}

/** Asserts a step failed with one of the given messages (default: No such file or directory). */
function assertFailed(s: StepResult, re = /No such file or directory/): void {
  assert.notEqual(s.rc, 0, `\`${s.cmd}\` succeeded:\n${s.out}`);
  assert.match(s.out, re, `\`${s.cmd}\`:\n${s.out}`);
}

/** The racer's summary line. */
function summary(r: CliResult, mode: string): { opens: number; good: number; bad: number } {
  const m = new RegExp(`^racer ${mode} opens=(\\d+) good=(\\d+) bad=(\\d+)$`, "m").exec(r.out);
  assert.ok(m, `no racer summary:\n${show(r)}`);
  return { opens: Number(m[1]), good: Number(m[2]), bad: Number(m[3]) };
}

const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** Files in the sandbox's work/ dir (temp files of copy-ups must not stay there). */
function workLeftovers(w: World, name: string): string[] {
  return readdirSync(path.join(w.cvHome, "sandboxes", name, "work"));
}

// ---- the sandbox storage ------------------------------------------------------------------

gtest(
  "symlinks into the sandbox storage: reading, listing and writing through them fail",
  async (fx) => {
    const w = world(fx);
    const otherSecret = uniqueToken("cvisor-adv-other");
    // The other sandbox keeps a file of its own; an ephemeral run makes the ephemeral root.
    const made = await cvisor(["--sandbox", "other"], ["sh", "-c", `echo ${otherSecret} > o.txt`], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(made.code, 0, show(made));
    const mine = await cvisor(["--sandbox", "s"], ["sh", "-c", "echo mine > m.txt"], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(mine.code, 0, show(mine));
    const eph = await cvisor([], ["true"], { extraEnv: w.env });
    assert.equal(eph.code, 0, show(eph));
    const otherFile = w.upper("other", fx.p("o.txt"));
    const ownFile = w.upper("s", fx.p("m.txt"));
    assert.equal(readFileSync(otherFile, "utf8"), `${otherSecret}\n`);
    assert.equal(readFileSync(ownFile, "utf8"), "mine\n");
    const otherUpper = w.upper("other");
    const unchangedOther = watchDir(otherUpper, "the other sandbox's layer");
    const sandboxes = path.join(w.cvHome, "sandboxes");

    const links = [
      `ln -s ${q(ownFile)} l-own`,
      `ln -s ${q(otherFile)} l-other`,
      `ln -s ${q(sandboxes)} l-store`,
      `ln -s ${q(otherUpper)} l-other-upper`,
      `ln -s ${q(path.relative(fx.root, otherFile))} l-other-rel`,
    ].join(" && ");
    const cmds = [
      links,
      /* 1 */ "cat l-own",
      /* 2 */ "cat l-other",
      /* 3 */ "cat l-other-rel",
      /* 4 */ `cat ${q(ownFile)}`,
      /* 5 */ `cat ${q(otherFile)}`,
      /* 6 */ `cat /proc/self/root${q(otherFile)}`,
      /* 7 */ `cat ${q(`${w.home}/../cvisor-home/sandboxes/./other/upper${fx.p("o.txt")}`)}`,
      /* 8 */ "ls l-store/",
      /* 9 */ `ls ${q(sandboxes)}`,
      /* 10 */ `ls ${q(w.cvHome)}`,
      /* 11 */ "ls l-other-upper/",
      /* 12 */ `ls ${q(path.join(w.cvHome, "ephemeral"))}`,
      /* 13 */ `stat ${q(otherFile)}`,
      /* 14 */ `ln ${q(otherFile)} hard-other`,
      /* 15 */ "echo pwned > l-other",
      /* 16 */ `echo pwned >> ${q(otherFile)}`,
      /* 17 */ "echo pwned > l-store/other/upper/planted",
      /* 18 */ "echo pwned > l-own",
      /* 19 */ `ls -a ${q(fx.scratch)}`,
      // A symlink the host made (in the fixture) into the storage.
      /* 20 */ `cat host-store-link/other/upper${q(fx.p("o.txt"))}`,
      /* 21 */ "ls host-store-link/",
      /* 22 */ "echo pwned > host-store-link/other/upper/planted",
      // Making the storage path in this sandbox: it can only ever be this sandbox's own copy.
      /* 23 */ `mkdir -p ${q(path.dirname(otherFile))} && echo pwned > l-other; cat l-other`,
    ];
    const r = await cvisor(["--sandbox", "s"], ["sh", "-c", stepsScript(cmds)], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(r.code, 0, show(r));
    assertNoSecret(r, w, otherSecret);
    const s = splitSteps(cmds, r);
    assert.equal(s[0]?.rc, 0, show(r));
    for (const i of [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]) {
      const step = s[i];
      assert.ok(step);
      assertFailed(step, /No such file or directory|Permission denied/);
    }
    for (const i of [15, 16, 17, 18]) {
      const step = s[i];
      assert.ok(step);
      assertFailed(step, /No such file or directory|Permission denied|nonexistent/);
    }
    assert.doesNotMatch(s[19]?.out ?? "", /cvisor-home/, "the storage is not listed");
    assert.match(s[19]?.out ?? "", /^home$/m, show(r));
    assert.ok(!(s[23]?.out ?? "").includes(otherSecret), show(r));
    for (const i of [20, 21, 22]) {
      const step = s[i];
      assert.ok(step);
      assertFailed(step, /No such file or directory|Permission denied|nonexistent/);
    }

    // On disk: the other sandbox and this sandbox's own files are as they were.
    unchangedOther();
    assert.equal(readFileSync(otherFile, "utf8"), `${otherSecret}\n`);
    assert.equal(readFileSync(ownFile, "utf8"), "mine\n");
    // And the other sandbox still sees its own file.
    const again = await cvisor(["--sandbox", "other"], ["cat", "o.txt"], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(again.out, `${otherSecret}\n`, show(again));
    unchangedOther();
  },
  {
    setup: (fx) => {
      // world() puts the store here; the link is part of the guarded fixture.
      symlinkSync(path.join(fx.scratch, "cvisor-home", "sandboxes"), fx.p("host-store-link"));
    },
  },
);

gtest(
  "mv of a host directory holding hidden credentials and the sandbox storage leaves them behind",
  async (fx) => {
    const w = world(fx);
    const other = await cvisor(["--sandbox", "other"], ["sh", "-c", "echo other > o.txt"], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(other.code, 0, show(other));
    const unchangedHome = watchDir(w.home, "the fake $HOME");
    const unchangedOther = watchDir(w.upper("other"), "the other sandbox's layer");
    const moved = path.join(tempRoot(), uniqueToken("cvisor-e2e-adv-moved"));
    const script = [
      'mv "$1" "$2"; echo "mv=$?"',
      'ls -A "$2"',
      'ls -A "$2/home"',
      'cat "$2/home/.ssh/id" 2>&1',
      'ls "$2/cvisor-home" 2>&1',
      // And back under the first name: still nothing hidden in it.
      'mv "$2" "$1"; echo "back=$?"',
      'ls -A "$1/home"',
      'cat "$1/home/.ssh/id" 2>&1',
    ].join("; ");
    const r = await cvisor(["--sandbox", "s"], ["sh", "-c", script, "sh", fx.scratch, moved], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assertNoSecret(r, w);
    assert.equal(
      r.out,
      [
        "mv=0",
        "home",
        "runtime",
        "notes.txt",
        `cat: ${moved}/home/.ssh/id: No such file or directory`,
        `ls: cannot access '${moved}/cvisor-home': No such file or directory`,
        "back=0",
        "notes.txt",
        `cat: ${fx.scratch}/home/.ssh/id: No such file or directory`,
        "",
      ].join("\n"),
      show(r),
    );
    assert.ok(!existsSync(moved), `${moved} appeared on the host`);
    unchangedHome();
    unchangedOther();
  },
);

// ---- symlinks and hard links out of the fixture -------------------------------------------

gtest(
  "a symlink to a host file outside the fixture: reads work, writes change the sandbox's view only",
  async (fx) => {
    const w = world(fx);
    const outside = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-adv-out-"));
    try {
      const target = path.join(outside, "target.txt");
      const target2 = path.join(outside, "target2.txt");
      writeFileSync(target, "outside original\n");
      writeFileSync(target2, "second original\n");
      chmodSync(outside, 0o755);
      const unchanged = watchDir(outside, "the directory outside the fixture");
      const opts = { extraEnv: w.env, cwd: fx.root };
      const first = await cvisor(
        ["--sandbox", "s"],
        [
          "sh",
          "-c",
          [
            'ln -s "$1" lnk',
            "cat lnk",
            "echo changed > lnk",
            "cat lnk",
            'cat "$1"',
            // A relative symlink that climbs out of the fixture to the second file.
            `ln -s ${q(path.relative(fx.root, target2))} rel`,
            "echo appended >> rel",
            'cat "$2"',
          ].join(" && "),
          "sh",
          target,
          target2,
        ],
        opts,
      );
      assert.equal(first.code, 0, show(first));
      assert.equal(
        first.out,
        "outside original\nchanged\nchanged\nsecond original\nappended\n",
        show(first),
      );
      unchanged();
      assert.equal(readFileSync(target, "utf8"), "outside original\n");

      const second = await cvisor(
        ["--sandbox", "s"],
        ["sh", "-c", 'cat lnk; readlink lnk; cat "$1"; cat rel', "sh", target],
        opts,
      );
      assert.equal(second.code, 0, show(second));
      assert.equal(
        second.out,
        `changed\n${target}\nchanged\nsecond original\nappended\n`,
        show(second),
      );
      // Another sandbox sees the host as it is.
      const other = await cvisor(
        ["--sandbox", "t"],
        ["sh", "-c", 'cat "$1" "$2"; test -e lnk || echo no-link', "sh", target, target2],
        opts,
      );
      assert.equal(other.out, "outside original\nsecond original\nno-link\n", show(other));
      unchanged();
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  },
);

gtest(
  "a hard link to a hidden credential fails; cat, ls and stat of it say No such file or directory",
  async (fx) => {
    const w = world(fx);
    const unchangedHome = watchDir(w.home, "the fake $HOME");
    const id = path.join(w.home, ".ssh", "id");
    const cmds = [
      /* 0 */ `ln ${q(id)} stolen`,
      /* 1 */ "cat stolen",
      /* 2 */ "ls stolen",
      /* 3 */ "stat stolen",
      /* 4 */ `cat ${q(id)}`,
      /* 5 */ `ls ${q(id)}`,
      /* 6 */ `stat ${q(id)}`,
      /* 7 */ `ln ${q(path.join(w.home, ".ssh", "..", ".ssh", "id"))} stolen2`,
      /* 8 */ `(cd ${q(w.home)} && ln .ssh/id ${q(fx.p("stolen3"))})`,
      /* 9 */ `ln -L ${q(`/proc/self/root${id}`)} stolen4`,
      /* 10 */ `ln ${q(path.join(w.home, ".aws", "credentials"))} stolen5`,
      /* 11 */ `ln -s ${q(id)} sym && cat sym`,
      /* 12 */ `mv ${q(id)} moved`,
      /* 13 */ `mv ${q(path.join(w.home, ".ssh"))} moved-ssh`,
      /* 14 */ `cp ${q(id)} copied`,
      /* 15 */ `ls -a ${q(w.home)}`,
      /* 16 */ "ls -a",
    ];
    const r = await cvisor(["--sandbox", "s"], ["sh", "-c", stepsScript(cmds)], {
      extraEnv: w.env,
      cwd: fx.root,
    });
    assert.equal(r.code, 0, show(r));
    assertNoSecret(r, w);
    const s = splitSteps(cmds, r);
    for (const i of [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]) {
      const step = s[i];
      assert.ok(step);
      assertFailed(step);
    }
    const homeListing = s[15]?.out ?? "";
    assert.match(homeListing, /^notes\.txt$/m, show(r));
    assert.doesNotMatch(homeListing, /^\.(ssh|aws)$/m, show(r));
    assert.match(s[16]?.out ?? "", /^hello\.txt$/m, show(r));
    assert.doesNotMatch(s[16]?.out ?? "", /stolen|moved|copied/, show(r));
    // The next run of the same sandbox: nothing was made, the credentials are still hidden.
    const next = await cvisor(
      ["--sandbox", "s"],
      ["sh", "-c", `ls -a; cat ${q(id)} 2>&1; test -e ${q(id)} || echo still-hidden`],
      { extraEnv: w.env, cwd: fx.root },
    );
    assertNoSecret(next, w);
    assert.doesNotMatch(next.out, /stolen|moved|copied/, show(next));
    assert.match(next.out, /No such file or directory\nstill-hidden\n$/, show(next));
    unchangedHome();
  },
);

// ---- renames of host subtrees -------------------------------------------------------------

/**
 * A host tree of 300 files: tree/{a,b/deep,c}/ (100 files each, in nested dirs), symlinks
 * (relative, absolute, dangling, to a dir), an empty dir, a few modes.
 */
function makeTree(root: string): void {
  const t = (...rel: string[]): string => path.join(root, "tree", ...rel);
  for (const dir of ["a/sub1", "a/sub2", "b/deep/er", "c", "empty"]) {
    mkdirSync(t(dir), { recursive: true });
  }
  const homes = ["a", "a/sub1", "a/sub2", "b/deep", "b/deep/er", "c"];
  for (let i = 0; i < 300; i++) {
    const dir = i < 100 ? homes[i % 3] : i < 200 ? homes[3 + (i % 2)] : homes[5];
    writeFileSync(t(dir ?? "c", `f${String(i).padStart(3, "0")}.txt`), `file ${i}\n`);
  }
  chmodSync(t("a", "f000.txt"), 0o600);
  chmodSync(t("c", "f299.txt"), 0o755);
  chmodSync(t("b", "deep", "er"), 0o700);
  symlinkSync("sub1/f004.txt", t("a", "rel-link"));
  symlinkSync(t("c", "f200.txt"), t("b", "abs-link"));
  symlinkSync("nowhere", t("c", "dangling"));
  symlinkSync("../a", t("c", "dir-link"));
}

const MV_SCRIPT = [
  "set -e",
  'cd "$1"',
  "mv tree tree-moved",
  "test ! -e tree",
  "mkdir tree",
  // Back, partially: a whole subtree, a nested one, a symlink, a file.
  "mv tree-moved/a tree/a",
  "mv tree-moved/b/deep tree/b-deep",
  "mv tree-moved/c/dir-link tree/b-deep/",
  "mv tree-moved/c/f250.txt tree/",
  // Delete parts of both names.
  "rm -rf tree-moved/c",
  "rm -rf tree/a/sub2",
  "rm tree/b-deep/er/f101.txt",
  // Change a little in what stayed.
  "echo new > tree-moved/new.txt",
  "echo more >> tree/a/sub1/f001.txt",
  "mv tree-moved tree/back-inside",
  "cat tree/b-deep/dir-link/rel-link",
  "find . | LC_ALL=C sort | md5sum",
].join("\n");

gtest(
  "mv of a host subtree outside the fixture, partial moves back and rm -rf: the next run sees the same tree as a native run on a copy",
  async (fx) => {
    const w = world(fx);
    const outside = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-adv-mv-"));
    const copy = path.join(fx.scratch, "mv-copy");
    try {
      chmodSync(outside, 0o755);
      makeTree(outside);
      execFileSync("cp", ["-a", "--", outside, copy]);
      const unchanged = watchDir(outside, "the host tree");
      const native = await runProcess("sh", ["-c", MV_SCRIPT, "sh", copy]);
      assert.equal(native.code, 0, show(native));
      const sandboxed = await cvisor(["--sandbox", "mv"], ["sh", "-c", MV_SCRIPT, "sh", outside], {
        extraEnv: w.env,
      });
      assert.equal(sandboxed.code, 0, show(sandboxed));
      assert.equal(sandboxed.out, native.out, `${show(native)}\n${show(sandboxed)}`);
      unchanged();

      // The next run of the sandbox sees what the native run left on the copy.
      const nativeDump = await runProcess(treeDumper(), [copy]);
      const sandboxDump = await cvisor(["--sandbox", "mv"], [treeDumper(), outside], {
        extraEnv: w.env,
      });
      assert.equal(sandboxDump.code, 0, show(sandboxDump));
      // Dumped paths are relative; symlink targets are the same text on both (cp -a).
      const a = parseDump(nativeDump.out);
      const b = parseDump(sandboxDump.out);
      assert.ok(a.size > 150, `the native tree is too small:\n${nativeDump.out}`);
      const diff = diffTrees(a, b);
      assert.deepEqual(diff, [], `the sandbox's tree differs:\n${diff.join("\n")}`);
      unchanged();
      assert.deepEqual(workLeftovers(w, "mv"), []);
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  },
);

const etcSsl = "/etc/ssl";
function etcSslSkip(): string | false {
  if (!existsSync(etcSsl)) return "no /etc/ssl on this host";
  try {
    accessSync("/etc", constants.W_OK);
  } catch {
    return "/etc is not writable by this user (the sandbox checks the host's permissions)";
  }
  return false;
}

gtest(
  "mv /etc/ssl to /tmp in a sandbox: gone from /etc there, all its files moved; the host keeps it",
  async (fx) => {
    const w = world(fx);
    const walk: WalkOptions = { ...DIR_WALK, hashMaxBytes: 1 << 20 };
    const before = snapshot(etcSsl, walk);
    const count = before.entries.size;
    const moved = `/tmp/ssl-moved-${uniqueToken("x")}`;
    const opts = { extraEnv: w.env, timeoutMs: 60_000 };
    const r = await cvisor(
      ["--sandbox", "ssl"],
      [
        "sh",
        "-c",
        'find /etc/ssl | wc -l; mv /etc/ssl "$1"; echo "mv=$?"; test -e /etc/ssl && echo still-there || echo gone; find "$1" | wc -l; ls /etc | grep -cx ssl',
        "sh",
        moved,
      ],
      opts,
    );
    assert.equal(r.err, "", show(r));
    assert.equal(r.out, `${count}\nmv=0\ngone\n${count}\n0\n`, show(r));
    const next = await cvisor(
      ["--sandbox", "ssl"],
      ["sh", "-c", 'test -e /etc/ssl || echo gone; find "$1" | wc -l', "sh", moved],
      opts,
    );
    assert.equal(next.out, `gone\n${count}\n`, show(next));
    const elsewhere = await cvisor([], ["sh", "-c", "find /etc/ssl | wc -l"], opts);
    assert.equal(elsewhere.out, `${count}\n`, show(elsewhere));
    assert.ok(!existsSync(moved), `${moved} appeared on the host`);
    const changes = diffSnapshots(before, snapshot(etcSsl, walk));
    assert.deepEqual(changes, [], `the host's /etc/ssl changed:\n${changes.join("\n")}`);
    assert.deepEqual(workLeftovers(w, "ssl"), []);
  },
  { skip: etcSslSkip(), timeout: 120_000 },
);

// ---- metadata through a reopened fd -------------------------------------------------------

gtest(
  "fchmod, fsetxattr and ftruncate on a host file reopened O_RDWR via /proc/self/fd: the sandbox sees them, the host does not",
  async (fx) => {
    const w = world(fx);
    const opts = { extraEnv: w.env, cwd: fx.root };
    const r = await cvisor(
      ["--sandbox", "s"],
      [overlayProbe(), "reopen-meta", "hello.txt", "600", "5"],
      opts,
    );
    assert.equal(r.code, 0, show(r));
    assert.equal(
      r.out,
      [
        "open-rdonly: OK",
        "reopen-rdwr: OK",
        "fchmod: OK",
        "fsetxattr: OK",
        "ftruncate: OK",
        "pwrite: OK",
        "fstat-rw: mode=0600 size=5",
        'fgetxattr-rw: "reopened"',
        "stat-by-path: file mode=0600 size=5 nlink=1",
        'getxattr-by-path: "reopened"',
        'content-by-path: "Wello"',
        "",
      ].join("\n"),
      show(r),
    );
    // The next run sees the changes (tree-dump lists mode, size and user xattrs).
    const dump = await cvisor(["--sandbox", "s"], [treeDumper(), "."], opts);
    const line = parseDump(dump.out).get("./hello.txt") ?? "";
    assert.match(line, /^file\tmode=0600\t/, show(dump));
    assert.match(line, /\tsize=5\t/, show(dump));
    assert.match(line, /\txattr:user\.reopen=reopened/, show(dump));
    const cat = await cvisor(["--sandbox", "s"], ["cat", "hello.txt"], opts);
    assert.equal(cat.out, "Wello", show(cat));
    // Another sandbox, and the host (the guard), see the original.
    const other = await cvisor(["--sandbox", "t"], ["cat", "hello.txt"], opts);
    assert.equal(other.out, HELLO_TEXT, show(other));
  },
);

// ---- races --------------------------------------------------------------------------------

/** The other sandbox of the race tests, holding a secret file and a script that prints it. */
async function otherSandbox(
  fx: Fixture,
  w: World,
): Promise<{ secret: string; file: string; dir: string; script: string }> {
  const secret = uniqueToken("cvisor-adv-other");
  const r = await cvisor(
    ["--sandbox", "other"],
    [
      "sh",
      "-c",
      'mkdir od && echo "$1" > od/id && printf "#!/bin/sh\\necho %s\\nexit 42\\n" "$1" > od/run.sh && chmod 755 od/run.sh && od/run.sh',
      "sh",
      secret,
    ],
    { extraEnv: w.env, cwd: fx.root },
  );
  // The script works there: a leak would show.
  assert.equal(r.code, 42, show(r));
  assert.equal(r.out, `${secret}\n`, show(r));
  return {
    secret,
    file: w.upper("other", fx.p("od", "id")),
    dir: w.upper("other", fx.p("od")),
    script: w.upper("other", fx.p("od", "run.sh")),
  };
}

gtest(
  "racing renames: the source flips to a hidden credential or another sandbox's file, which never moves",
  async (fx) => {
    const w = world(fx);
    const other = await otherSandbox(fx, w);
    const unchangedHome = watchDir(w.home, "the fake $HOME");
    const unchangedOther = watchDir(w.upper("other"), "the other sandbox's layer");
    const opts = { extraEnv: w.env, cwd: fx.root, timeoutMs: RACE_TIMEOUT };
    for (const bad of [path.join(w.home, ".ssh", "id"), other.file]) {
      const r = await cvisor(
        ["--sandbox", "s"],
        [racer(), "rename", fx.p("race-good.txt"), bad, RACE_ROUNDS, fx.p("race-dest.txt")],
        opts,
      );
      assert.equal(r.code, 0, show(r));
      assertNoSecret(r, w, other.secret);
      const s = summary(r, "rename");
      assert.equal(s.bad, 0, show(r));
      assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
    }
    const after = await cvisor(
      ["--sandbox", "s"],
      ["sh", "-c", "cat race-good.txt race-dest.txt 2>&1; ls"],
      opts,
    );
    assertNoSecret(after, w, other.secret);
    assert.match(after.out, /^good\n.*race-dest\.txt: No such file/, show(after));
    unchangedHome();
    unchangedOther();
  },
  { timeout: 2 * RACE_TIMEOUT },
);

gtest(
  "racing chdirs into a hidden or another sandbox's directory never read what is there",
  async (fx) => {
    const w = world(fx);
    const other = await otherSandbox(fx, w);
    // The good directory holds an `id` too: a host directory, and one only in this sandbox.
    const good = path.join(fx.scratch, "good-dir");
    mkdirSync(good);
    writeFileSync(path.join(good, "id"), "good id\n");
    const opts = { extraEnv: w.env, cwd: fx.root, timeoutMs: RACE_TIMEOUT };
    const made = await cvisor(
      ["--sandbox", "s"],
      ["sh", "-c", "mkdir upper-dir && echo upper id > upper-dir/id"],
      opts,
    );
    assert.equal(made.code, 0, show(made));
    const unchangedHome = watchDir(w.home, "the fake $HOME");
    const unchangedOther = watchDir(w.upper("other"), "the other sandbox's layer");
    for (const goodDir of [good, fx.p("upper-dir")]) {
      for (const bad of [path.join(w.home, ".ssh"), other.dir]) {
        const r = await cvisor(
          ["--sandbox", "s"],
          [racer(), "chdir", goodDir, bad, RACE_ROUNDS, "id"],
          opts,
        );
        assert.equal(r.code, 0, show(r));
        assertNoSecret(r, w, other.secret);
        const s = summary(r, "chdir");
        assert.equal(s.bad, 0, show(r));
        assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
      }
    }
    unchangedHome();
    unchangedOther();
  },
  { timeout: 4 * RACE_TIMEOUT },
);

gtest(
  "racing execs between /bin/true and a hidden script never run the script",
  async (fx) => {
    const w = world(fx);
    const other = await otherSandbox(fx, w);
    const hidden = path.join(w.home, ".ssh", "run.sh");
    // Natively the hidden script runs and prints its secret: a leak would show.
    const direct = spawnSync(hidden, [], { encoding: "utf8" });
    assert.equal(direct.status, 42);
    assert.equal(direct.stdout, `${w.secrets[".ssh/run.sh"]}\n`);
    const truePath = which("true");
    assert.ok(truePath, "no true on PATH");
    const opts = { extraEnv: w.env, cwd: fx.root, timeoutMs: RACE_TIMEOUT };
    const unchangedHome = watchDir(w.home, "the fake $HOME");
    const unchangedOther = watchDir(w.upper("other"), "the other sandbox's layer");
    for (const bad of [hidden, other.script]) {
      const r = await cvisor(
        ["--sandbox", "s"],
        [racer(), "exec", truePath, bad, RACE_EXEC_ROUNDS],
        opts,
      );
      assert.equal(r.code, 0, show(r));
      assertNoSecret(r, w, other.secret);
      const s = summary(r, "exec");
      assert.equal(s.bad, 0, show(r));
      assert.ok(s.opens >= Number(RACE_EXEC_ROUNDS) && s.good > 0, show(r));
    }
    unchangedHome();
    unchangedOther();
  },
  { timeout: 4 * RACE_TIMEOUT },
);

gtest(
  "a hard link made through /proc/self/fd of a host file links the sandbox's copy, never the host inode",
  async (fx) => {
    const r = await cvisor(
      ["-C", fx.root],
      [
        "sh",
        "-c",
        `"$0" link-proc-fd hello.txt alias && echo appended >> alias && cat hello.txt alias`,
        prober(),
      ],
    );
    assert.equal(r.code, 0, show(r));
    const want = `OK\n${HELLO_TEXT}appended\n${HELLO_TEXT}appended\n`;
    assert.equal(r.out, want, show(r));
    // The guard proves hello.txt on the host is unchanged; and no alias appeared there.
    assert.ok(!existsSync(fx.p("alias")), show(r));
  },
);
