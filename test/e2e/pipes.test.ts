// Store commands whose reader stops early (`cvisor ls | head -1`) end quietly with the status a C
// tool gets from SIGPIPE (141), and an export to a path that cannot be written is one line with
// exit 125 (issue 13, item 3): never a stack trace. The reader here closes its end before the
// command writes, so every write meets EPIPE, whatever the size of the output.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { cliPath, cvisor, runCli, show } from "../helpers/repo.js";

interface Closed {
  code: number | null;
  err: string;
}

/** The CLI with its stdout a pipe nobody reads. */
function withClosedStdout(
  args: string[],
  env: Record<string, string>,
  cwd: string,
): Promise<Closed> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliPath, ...args], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.destroy();
    let err = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, err }));
  });
}

gtest(
  "ls, cache ls, diff and export - whose reader went away end quietly with 141; a bad export path is one line",
  async (fx) => {
    const env = { CVISOR_HOME: join(fx.scratch, "home") };
    const made = await cvisor(["--sandbox", "s1"], ["sh", "-c", "echo x > made.txt"], {
      extraEnv: env,
      cwd: fx.root,
    });
    assert.equal(made.code, 0, show(made));
    const deps = join(fx.scratch, "deps");
    mkdirSync(deps);
    const saved = await runCli(["cache", "save", "k", deps], { extraEnv: env, cwd: fx.scratch });
    assert.equal(saved.code, 0, show(saved));
    for (const args of [
      ["ls"],
      ["cache", "ls"],
      ["--sandbox", "s1", "diff"],
      ["--sandbox", "s1", "export", "-"],
    ]) {
      const r = await withClosedStdout(args, env, fx.scratch);
      assert.deepEqual(r, { code: 141, err: "" }, args.join(" "));
    }
    const bad = await runCli(["--sandbox", "s1", "export", "/nonexistent/dir/x.tar"], {
      extraEnv: env,
      cwd: fx.scratch,
    });
    assert.equal(bad.code, 125, show(bad));
    assert.match(bad.err, /^cvisor: cannot write \/nonexistent\/dir\/x\.tar: .+\n$/);
    assert.ok(!existsSync("/nonexistent"), "nothing made");
  },
);

// A state directory that cannot be made (procfs answers ENOENT to mkdir under it, and Node's
// recursive mkdir retries that forever) is one line and exit 125, at once (issue 13, item 5).
gtest(
  "CVISOR_HOME under /proc: every command that needs it fails at once with one line",
  async (fx) => {
    const env = { CVISOR_HOME: "/proc/cvisor-nope/home" };
    // More than the pipes between the packer and the backend hold, so the packer must be stopped.
    const tree = join(fx.scratch, "tree");
    mkdirSync(tree);
    writeFileSync(join(tree, "big.bin"), randomBytes(3 << 20)); // incompressible
    for (let d = 0; d < 30; d++) {
      mkdirSync(join(tree, `d${d}`));
      for (let i = 0; i < 100; i++) writeFileSync(join(tree, `d${d}`, `f${i}`), `${d} ${i}\n`);
    }
    const runs: string[][] = [
      ["--", "true"],
      ["--sandbox", "x", "--", "true"],
      ["cache", "save", "k", tree],
      ["snapshot"],
    ];
    for (const args of runs) {
      const r = await runCli(args, { extraEnv: env, cwd: fx.scratch, timeoutMs: 20_000 });
      assert.equal(r.code, 125, `${args.join(" ")}\n${show(r)}`);
      assert.match(r.err, /^cvisor: .*\/proc\/cvisor-nope.*\n$/, args.join(" "));
    }
    const doctor = await runCli(["doctor"], { extraEnv: env, cwd: fx.scratch, timeoutMs: 20_000 });
    assert.match(doctor.out + doctor.err, /state directory/, show(doctor));
    assert.notEqual(doctor.code, null, show(doctor));
  },
);
