// Pseudo-terminals in the sandbox (issue 12): a guest makes ptys and uses them as on the host
// (openpty, the slave by its path, pty.fork with job control, script, tmux), while a pty it did
// not make, its host's sessions' included, stays out of reach, even at an index the guest once
// had. Each program runs natively too, and the lines it prints are compared.
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { gtest } from "../helpers/guard.js";
import {
  cliPath,
  cvisor,
  fixtureSources,
  repoRoot,
  runProcess,
  show,
  uniqueToken,
  which,
} from "../helpers/repo.js";

const probe = path.join(fixtureSources, "pty-probe.py");
const python = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : which("python3");
const noPython = python ? false : "python3 is not installed";

/** The probe's lines, natively and in an ephemeral sandbox, asserted equal; the sandbox's. */
async function both(args: readonly string[]): Promise<string> {
  assert.ok(python);
  const native = await runProcess(python, [probe, ...args], { timeoutMs: 30_000 });
  assert.equal(native.code, 0, `native run:\n${show(native)}`);
  const boxed = await cvisor([], [python, probe, ...args], { timeoutMs: 30_000 });
  assert.equal(boxed.code, 0, show(boxed));
  assert.equal(boxed.out, native.out, show(boxed));
  return boxed.out;
}

gtest(
  "a pty the guest makes works both ways, by fd and by its path",
  async () => {
    const out = await both(["roundtrip"]);
    assert.match(out, /^isatty True\n/);
    assert.match(out, /same tty by path True\nmaster read b'via-path\\r\\n'\n$/);
  },
  { skip: noPython },
);

gtest(
  "pty.fork: the child leads a session whose controlling terminal is the new pty",
  async () => {
    const out = await both(["fork"]);
    assert.equal(out, "child: session leader with the pty as its terminal: True\nchild exit 0\n");
  },
  { skip: noPython },
);

const script = which("script");
gtest(
  "script -qc runs a command on a pty of its own",
  async () => {
    assert.ok(script);
    const r = await cvisor([], [script, "-qc", "tty; echo on-a-pty", "/dev/null"], {
      timeoutMs: 30_000,
    });
    assert.equal(r.code, 0, show(r));
    assert.match(r.out, /^\/dev\/pts\/\d+\r?\non-a-pty\r?\n$/, show(r));
  },
  { skip: script ? false : "script (util-linux) is not installed" },
);

const tmux = which("tmux");
gtest(
  "tmux: a detached session starts, is listed and is killed",
  async () => {
    assert.ok(tmux);
    const sock = uniqueToken("cvisor-tmux");
    const r = await cvisor(
      [],
      [
        "sh",
        "-c",
        `"$0" -L "$1" new -d -s work 'sleep 60' && "$0" -L "$1" ls && "$0" -L "$1" kill-server && echo done`,
        tmux,
        sock,
      ],
      { timeoutMs: 30_000 },
    );
    assert.equal(r.code, 0, show(r));
    assert.match(r.out, /^work: 1 windows .*\ndone\n$/, show(r));
  },
  { skip: tmux ? false : "tmux is not installed (.ci/run installs it)" },
);

// ---- ptys the guest did not make ----------------------------------------------------------

/** A host process holding a pty of its own; resolves with its slave's path. */
function hostPty(): Promise<{ path: string; child: ChildProcessWithoutNullStreams }> {
  assert.ok(python);
  const child = spawn(python, [
    "-c",
    "import os, sys; m, s = os.openpty(); print(os.ttyname(s), flush=True); sys.stdin.read()",
  ]);
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    createInterface({ input: child.stdout }).once("line", (line) =>
      resolve({ path: line.trim(), child }),
    );
  });
}

gtest(
  "a host pty the sandbox did not make cannot be opened",
  async () => {
    const host = await hostPty();
    try {
      assert.match(host.path, /^\/dev\/pts\/\d+$/);
      const native = await runProcess(python ?? "", [probe, "open", host.path]);
      assert.equal(native.out, "opened\n", "the host pty must be openable natively");
      const r = await cvisor(["--json"], [python ?? "", probe, "open", host.path]);
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, "refused Permission denied\n", show(r));
      assert.match(r.err, /"why":"a terminal the sandbox did not make"/, show(r));
    } finally {
      host.child.kill();
    }
  },
  { skip: noPython },
);

gtest(
  "a pty index the guest gave back and the host took is out of the guest's reach",
  async () => {
    assert.ok(python);
    const guest = spawn(process.execPath, [cliPath, "--", python, probe, "reuse"], {
      cwd: repoRoot,
    });
    const holders: ChildProcessWithoutNullStreams[] = [];
    try {
      const lines = createInterface({ input: guest.stdout })[Symbol.asyncIterator]();
      const first = await lines.next();
      const index = /^index (\d+)$/.exec(String(first.value))?.[1];
      assert.ok(index, `no index from the guest: ${String(first.value)}`);
      // The host allocates the lowest free index: hold ptys until one has the guest's old one.
      let taken = false;
      for (let i = 0; i < 64 && !taken; i++) {
        const h = await hostPty();
        holders.push(h.child);
        taken = h.path === `/dev/pts/${index}`;
      }
      assert.ok(taken, `the host never got /dev/pts/${index}`);
      guest.stdin.write("go\n");
      const second = await lines.next();
      assert.equal(second.value, "reopen refused Permission denied");
    } finally {
      guest.kill();
      for (const h of holders) h.kill();
    }
  },
  { skip: noPython },
);
