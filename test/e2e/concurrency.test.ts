// Concurrent runs of one named sandbox share one consistent layer: CLI processes appending to
// a copied-up host file under flock while creating files, and many library runs in one process
// renaming and creating in their own directories while all of them copy up the same host file.
// Afterwards one run sees every change exactly once, the sandbox's work/ dir holds no temp
// files, and the guard proves the host unchanged.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Sandbox } from "../../src/index.js";
import { treeDumper } from "../helpers/cc.js";
import { diffTrees, parseDump } from "../helpers/differential.js";
import { FIXED_TIME, HELLO_TEXT, type Fixture } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import { cvisor, runProcess, show, which } from "../helpers/repo.js";

interface Store {
  home: string;
  env: Record<string, string>;
  dir(name: string, ...rel: string[]): string;
}

function store(fx: Fixture): Store {
  const home = path.join(fx.scratch, "cvisor-home");
  const runtime = path.join(fx.scratch, "runtime");
  mkdirSync(runtime, { mode: 0o700 });
  return {
    home,
    env: { CVISOR_HOME: home, XDG_RUNTIME_DIR: runtime },
    dir: (name, ...rel) => path.join(home, "sandboxes", name, ...rel),
  };
}

const PROCESSES = 4;
const FILES = 50;

/** Process $1: FILES new files in out/, and a line appended to hello.txt under flock for each. */
const APPENDER = [
  'i="$1"',
  "mkdir -p out",
  "j=1",
  `while [ "$j" -le ${FILES} ]; do`,
  '  echo "file $i $j" > "out/p$i-$j" || exit 1',
  '  flock hello.txt sh -c \'echo "line $0 $1" >> hello.txt\' "$i" "$j" || exit 1',
  "  j=$((j + 1))",
  "done",
].join("\n");

gtest(
  `${PROCESSES} CLI runs of one sandbox at once: ${PROCESSES * FILES} new files, every flock'ed append to a copied-up host file kept`,
  async (fx) => {
    const s = store(fx);
    const opts = { extraEnv: s.env, cwd: fx.root, timeoutMs: 60_000 };
    // The sandbox does not exist yet: the runs also race to create it.
    const runs = await Promise.all(
      Array.from({ length: PROCESSES }, (_, k) =>
        cvisor(["--sandbox", "conc"], ["sh", "-c", APPENDER, "sh", String(k + 1)], opts),
      ),
    );
    for (const r of runs) {
      assert.equal(r.code, 0, show(r));
      assert.equal(r.err, "", show(r));
    }
    const look = await cvisor(["--sandbox", "conc"], ["sh", "-c", "ls out; cat hello.txt"], opts);
    assert.equal(look.code, 0, show(look));
    const names: string[] = [];
    const lines: string[] = [];
    for (let i = 1; i <= PROCESSES; i++) {
      for (let j = 1; j <= FILES; j++) {
        names.push(`p${i}-${j}`);
        lines.push(`line ${i} ${j}`);
      }
    }
    const out = look.out.split("\n");
    const listed = out.slice(0, names.length);
    // Sorted here: ls sorts by the guest's locale.
    assert.deepEqual([...listed].sort(), [...names].sort(), show(look));
    const shared = out.slice(names.length).join("\n");
    assert.ok(shared.startsWith(HELLO_TEXT), `the original content is gone:\n${shared}`);
    const appended = shared
      .slice(HELLO_TEXT.length)
      .split("\n")
      .filter((l) => l !== "");
    assert.equal(appended.length, PROCESSES * FILES, `appended lines:\n${shared}`);
    assert.deepEqual([...appended].sort(), [...lines].sort(), `appended lines:\n${shared}`);
    // Each process's own lines in its own order.
    for (let i = 1; i <= PROCESSES; i++) {
      const mine = appended.filter((l) => l.startsWith(`line ${i} `));
      assert.deepEqual(
        mine,
        lines.filter((l) => l.startsWith(`line ${i} `)),
        `process ${i}'s lines out of order`,
      );
    }
    const contents = await cvisor(["--sandbox", "conc"], ["sh", "-c", "cat out/*"], opts);
    assert.equal(
      contents.out.split("\n").filter((l) => l !== "").length,
      PROCESSES * FILES,
      show(contents),
    );
    assert.deepEqual(readdirSync(s.dir("conc", "work")), [], "temp files left in work/");
    assert.deepEqual(readdirSync(path.join(s.home, "sandboxes")), ["conc"]);
  },
  { skip: which("flock") ? false : "no flock(1) on this host", timeout: 120_000 },
);

const RUNS = 20;

/** conc/d0..d19, each with f1..f5 and sub/{x,y}: host files the runs rename and delete. */
function addRunDirs(fx: Fixture): void {
  for (let i = 0; i < RUNS; i++) {
    const d = fx.p("conc", `d${i}`);
    mkdirSync(path.join(d, "sub"), { recursive: true });
    for (let f = 1; f <= 5; f++) writeFileSync(path.join(d, `f${f}`), `d${i} f${f}\n`);
    writeFileSync(path.join(d, "sub", "x"), `d${i} x\n`);
    writeFileSync(path.join(d, "sub", "y"), `d${i} y\n`);
    for (const p of [path.join(d, "sub"), d]) utimesSync(p, FIXED_TIME, FIXED_TIME);
  }
  utimesSync(fx.p("conc"), FIXED_TIME, FIXED_TIME);
}

/** Run $1 in conc/d$1: renames and deletes host entries, makes new ones; copies up hello.txt. */
const WORKER = [
  "set -e",
  'cd "conc/d$1"',
  // Open the shared host file for reading and writing, write nothing: a copy-up.
  "exec 3<>../../hello.txt",
  "exec 3>&-",
  "mv f1 f1-renamed",
  "mv sub sub-renamed",
  "mv f3 sub-renamed/f3",
  "rm f2",
  "echo more >> f4",
  'echo "new $1" > created.txt',
  "mkdir newdir",
  'echo "n $1" > newdir/n.txt',
  "mv newdir newdir2",
  "mv sub-renamed/x newdir2/x",
  'echo "done $1"',
].join("\n");

gtest(
  `${RUNS} concurrent library runs of one sandbox: renames in their own dirs, one shared copy-up; consistent tree, no temp files left`,
  async (fx) => {
    const s = store(fx);
    const saved = { home: process.env.CVISOR_HOME, runtime: process.env.XDG_RUNTIME_DIR };
    process.env.CVISOR_HOME = s.env.CVISOR_HOME;
    process.env.XDG_RUNTIME_DIR = s.env.XDG_RUNTIME_DIR;
    try {
      const sb = new Sandbox({ sandbox: "lib-conc" });
      const results = await Promise.all(
        Array.from({ length: RUNS }, (_, i) =>
          sb.run(["sh", "-c", WORKER, "sh", String(i)], { cwd: fx.root, timeout: "60s" }),
        ),
      );
      results.forEach((r, i) => {
        assert.equal(r.exitCode, 0, `run ${i}: ${r.stderr}`);
        assert.equal(r.stderr, "", `run ${i}`);
        assert.equal(r.stdout, `done ${i}\n`, `run ${i}`);
      });

      // Natively on a copy, the same workers (each in its own directory).
      const copy = path.join(fx.scratch, "copy");
      execFileSync("cp", ["-a", "--", fx.root, copy]);
      const native = await Promise.all(
        Array.from({ length: RUNS }, (_, i) =>
          runProcess("sh", ["-c", WORKER, "sh", String(i)], { cwd: copy }),
        ),
      );
      native.forEach((r) => assert.equal(r.code, 0, show(r)));
      const nativeDump = await runProcess(treeDumper(), ["."], { cwd: copy });
      const dump = await sb.run([treeDumper(), "."], { cwd: fx.root });
      assert.equal(dump.exitCode, 0, dump.stderr);
      const diff = diffTrees(parseDump(nativeDump.out), parseDump(dump.stdout));
      assert.deepEqual(diff, [], `the sandbox's tree differs from native:\n${diff.join("\n")}`);

      // The shared file was copied up once, intact; nothing is left in work/.
      const upperHello = s.dir("lib-conc", "upper", fx.p("hello.txt"));
      assert.equal(readFileSync(upperHello, "utf8"), HELLO_TEXT);
      assert.deepEqual(readdirSync(s.dir("lib-conc", "work")), [], "temp files left in work/");
      const again = await sb.run(["cat", "hello.txt"], { cwd: fx.root });
      assert.equal(again.stdout, HELLO_TEXT);
    } finally {
      for (const [key, value] of [
        ["CVISOR_HOME", saved.home],
        ["XDG_RUNTIME_DIR", saved.runtime],
      ] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  },
  { setup: addRunDirs, timeout: 120_000 },
);
