// The `cvisor` command line with real guests: output, exit codes, stdin, -e, -C, --json and the
// one-line errors. Every test runs under the host guard (fixture and $HOME unchanged).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT } from "../helpers/fixture.js";
import {
  cliPath,
  cvisor,
  runCli,
  runProcess,
  show,
  tempRoot,
  type CliResult,
} from "../helpers/repo.js";

/** stderr is exactly one line `cvisor: ...`, with no stack trace. */
function assertOneLineError(r: CliResult, mention?: string): void {
  const lines = r.err.split("\n").filter((l) => l !== "");
  assert.equal(lines.length, 1, `want exactly one line on stderr\n${show(r)}`);
  assert.match(lines[0] ?? "", /^cvisor: \S/, `want "cvisor: ..."\n${show(r)}`);
  assert.doesNotMatch(r.err, /^\s+at /m, `no stack trace\n${show(r)}`);
  assert.doesNotMatch(r.err, /Error:|node:internal|\.js:\d+/, `no stack trace\n${show(r)}`);
  if (mention !== undefined)
    assert.ok(r.err.includes(mention), `should mention ${mention}\n${show(r)}`);
}

gtest("output reaches stdout and stderr, exit code 0", async () => {
  const r = await cvisor([], ["sh", "-c", "echo out; echo err >&2"]);
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "out\n", show(r));
  assert.equal(r.err, "err\n", show(r));
});

gtest("the guest's own exit codes: 0, 1, 3, 255", async () => {
  for (const [argv, want] of [
    [["true"], 0],
    [["false"], 1],
    [["sh", "-c", "echo three; exit 3"], 3],
    [["sh", "-c", "exit 255"], 255],
  ] as const) {
    const r = await cvisor([], argv);
    assert.equal(r.code, want, `${argv.join(" ")}\n${show(r)}`);
    assert.equal(r.err, "", `no message for a guest's own exit code\n${show(r)}`);
  }
});

gtest("killed by signal N: exit 128+N", async () => {
  for (const [sig, want] of [
    ["TERM", 143],
    ["KILL", 137],
    ["SEGV", 139],
    ["USR1", 138],
  ] as const) {
    const r = await cvisor([], ["sh", "-c", `echo before; kill -${sig} $$; echo after`]);
    assert.equal(r.code, want, `SIG${sig}\n${show(r)}`);
    assert.equal(r.out, "before\n", show(r));
  }
});

gtest("command not found: 127 with a one-line message", async (fx) => {
  for (const cmd of ["cvisor-e2e-no-such-command", "/nonexistent/dir/prog", fx.p("missing")]) {
    const r = await cvisor([], [cmd, "arg"]);
    assert.equal(r.code, 127, `${cmd}\n${show(r)}`);
    assertOneLineError(r, cmd);
    assert.equal(r.out, "", show(r));
  }
});

gtest("not executable: 126 with a one-line message", async (fx) => {
  for (const cmd of [fx.p("noexec.sh"), fx.p("sub"), fx.p("hello.txt")]) {
    const r = await cvisor([], [cmd]);
    assert.equal(r.code, 126, `${cmd}\n${show(r)}`);
    assertOneLineError(r, cmd);
    assert.equal(r.out, "", `nothing may run\n${show(r)}`);
  }
});

gtest(
  "bad options and failures before the guest runs: 125, one line, no stack trace",
  async (fx) => {
    const cases: string[][] = [
      ["--bogus-option", "--", "true"],
      ["--timeout", "soon", "--", "true"],
      ["--timeout", "-5s", "--", "true"],
      ["--timeout"],
      ["-e", "=value", "--", "true"],
      ["-C", fx.p("does-not-exist"), "--", "true"],
      ["--workdir", fx.p("hello.txt"), "--", "true"],
    ];
    for (const args of cases) {
      const r = await runCli(args);
      assert.equal(r.code, 125, `cvisor ${args.join(" ")}\n${show(r)}`);
      assertOneLineError(r);
      assert.equal(r.out, "", `cvisor ${args.join(" ")}: nothing on stdout\n${show(r)}`);
    }
  },
);

gtest("a #! script on the host runs, with its arguments", async (fx) => {
  const r = await cvisor([], [fx.p("exec.sh"), "a", "b c"]);
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "script-ran a b c\n", show(r));
});

gtest("a script without #! runs with /bin/sh, as execvp runs it", async (fx) => {
  // The helper may be linked against glibc or musl; only glibc's execvp does this itself.
  const script = join(fx.scratch, "plain-script");
  writeFileSync(script, 'echo no-shebang "$0" "$@"\n', { mode: 0o755 });
  const r = await cvisor([], [script, "a", "b c"]);
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, `no-shebang ${script} a b c\n`, show(r));
});

gtest("stdin is piped through to the guest", async () => {
  const text = "line one\nline two\n";
  const r = await cvisor([], ["cat"], { input: text });
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, text, show(r));

  const bytes = randomBytes(1 << 20);
  const big = await cvisor([], ["cat"], { input: bytes });
  assert.equal(big.code, 0, show(big));
  assert.ok(
    big.stdout.equals(bytes),
    `1 MiB of binary stdin came back changed (${big.stdout.length} bytes)`,
  );

  const wc = await cvisor([], ["sh", "-c", 'read first; echo "got:$first"; wc -l'], {
    input: "alpha\nbeta\ngamma\n",
  });
  assert.equal(wc.out.replace(/ +/g, ""), "got:alpha\n2\n", show(wc));
});

gtest("no command: a shell reads the script from stdin", async () => {
  const script = "echo from-shell $((40 + 2))\nexit 4\n";
  const r = await runCli([], { input: script, extraEnv: { SHELL: "/bin/sh" } });
  assert.equal(r.code, 4, show(r));
  assert.equal(r.out, "from-shell 42\n", show(r));

  const env = { ...process.env };
  delete env.SHELL;
  const noShell = await runCli([], { input: "echo fallback-sh\n", env });
  assert.equal(noShell.code, 0, show(noShell));
  assert.equal(noShell.out, "fallback-sh\n", show(noShell));
});

gtest("-e KEY=VAL, -e KEY (host value), --env; other host variables stay out", async () => {
  const r = await cvisor(
    [
      "-e",
      "FOO=bar",
      "-e",
      "CVISOR_E2E_HOSTVAR",
      "-e",
      "EMPTY=",
      "-e",
      "EQ=a=b",
      "--env",
      "LONG=yes",
    ],
    [
      "sh",
      "-c",
      'printf "%s|%s|%s|%s|%s|%s\\n" "$FOO" "$CVISOR_E2E_HOSTVAR" "${EMPTY-unset}" "$EQ" "$LONG" "${CVISOR_E2E_NOT_PASSED-unset}"',
    ],
    { extraEnv: { CVISOR_E2E_HOSTVAR: "host value", CVISOR_E2E_NOT_PASSED: "secret" } },
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "bar|host value||a=b|yes|unset\n", show(r));
});

gtest("-C / --workdir sets the guest's working directory", async (fx) => {
  const r = await cvisor(["-C", fx.p("sub")], ["sh", "-c", "pwd; cat nested.txt"]);
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, `${fx.p("sub")}\n${NESTED_TEXT}`, show(r));

  const rel = await cvisor(["--workdir", "sub/deeper"], ["pwd"], { cwd: fx.root });
  assert.equal(rel.code, 0, show(rel));
  assert.equal(rel.out, `${fx.p("sub", "deeper")}\n`, show(rel));

  const dflt = await cvisor([], ["cat", "hello.txt"], { cwd: fx.root });
  assert.equal(dflt.out, HELLO_TEXT, `default cwd is cvisor's own\n${show(dflt)}`);
});

gtest("-C into a directory only the named sandbox has (made by an earlier run)", async (fx) => {
  const home = { CVISOR_HOME: join(fx.scratch, "cvisor-home") };
  const made = await cvisor(
    ["--sandbox", "wd"],
    ["sh", "-c", "mkdir -p new/deeper && echo hi > new/deeper/f"],
    { cwd: fx.root, extraEnv: home },
  );
  assert.equal(made.code, 0, show(made));
  const r = await cvisor(
    ["--sandbox", "wd", "-C", fx.p("new", "deeper")],
    ["sh", "-c", "pwd; cat f; ls .."],
    {
      extraEnv: home,
    },
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, `${fx.p("new", "deeper")}\nhi\ndeeper\n`, show(r));

  const missing = await cvisor(["--sandbox", "wd", "-C", fx.p("nothere")], ["true"], {
    extraEnv: home,
  });
  assert.equal(missing.code, 125, show(missing));
  assertOneLineError(missing, fx.p("nothere"));
  // Without --sandbox the run starts from the host alone: the host decides, before anything runs.
  const ephemeral = await cvisor(["-C", fx.p("new")], ["true"], { extraEnv: home });
  assert.equal(ephemeral.code, 125, show(ephemeral));
  assertOneLineError(ephemeral, "no such directory");
});

interface JsonReport {
  exitCode: number;
  signal: string | null;
  timedOut: boolean;
  durationMs: number;
  notifications: Record<string, number>;
  totalNotifications: number;
}

function parseReport(r: CliResult): JsonReport {
  const lines = r.err.split("\n").filter((l) => l !== "");
  const last = lines[lines.length - 1] ?? "";
  let value: unknown;
  try {
    value = JSON.parse(last);
  } catch {
    assert.fail(`the last stderr line is not JSON\n${show(r)}`);
  }
  assert.ok(typeof value === "object" && value !== null, show(r));
  const o = value as Record<string, unknown>;
  assert.equal(typeof o.exitCode, "number", show(r));
  assert.ok(o.signal === null || typeof o.signal === "string", show(r));
  assert.equal(typeof o.timedOut, "boolean", show(r));
  assert.equal(typeof o.durationMs, "number", show(r));
  assert.equal(typeof o.totalNotifications, "number", show(r));
  assert.ok(typeof o.notifications === "object" && o.notifications !== null, show(r));
  for (const [name, count] of Object.entries(o.notifications as Record<string, unknown>)) {
    assert.match(name, /^[a-z0-9_]+$/, `syscall name ${name}`);
    assert.ok(Number.isInteger(count) && (count as number) > 0, `${name}: ${String(count)}`);
  }
  return o as unknown as JsonReport;
}

gtest("--json prints one report line on stderr at the end", async (fx) => {
  const r = await cvisor(
    ["--json"],
    ["sh", "-c", `cat ${fx.p("hello.txt")}; echo err >&2; exit 3`],
  );
  assert.equal(r.code, 3, show(r));
  assert.equal(r.out, HELLO_TEXT, show(r));
  const lines = r.err.split("\n").filter((l) => l !== "");
  assert.equal(lines.length, 2, `the guest's line, then the report\n${show(r)}`);
  assert.equal(lines[0], "err");
  const report = parseReport(r);
  assert.equal(report.exitCode, 3);
  assert.equal(report.signal, null);
  assert.equal(report.timedOut, false);
  assert.ok(report.durationMs > 0 && report.durationMs < 30_000, `durationMs ${report.durationMs}`);
  const sum = Object.values(report.notifications).reduce((a, b) => a + b, 0);
  assert.ok(report.totalNotifications > 0, "a shell that execs cat makes notified calls");
  assert.equal(report.totalNotifications, sum, "totalNotifications is the sum per syscall");

  const killed = await cvisor(["--json"], ["sh", "-c", "kill -KILL $$"]);
  assert.equal(killed.code, 137, show(killed));
  const k = parseReport(killed);
  assert.equal(k.exitCode, 137);
  assert.equal(k.signal, "SIGKILL");
  assert.equal(k.timedOut, false);
});

gtest("a plain run loads no ESM module and neither node:net nor node:tty", async () => {
  // Start-up time: the run path of the bin is CommonJS only and blocks in the forwarding wait.
  const dir = mkdtempSync(join(tempRoot(), "cvisor-e2e-loaded-"));
  try {
    const preload = join(dir, "record.cjs");
    writeFileSync(
      preload,
      `process.on("exit", () => require("fs").writeFileSync(process.env.CVISOR_E2E_LOADED, ` +
        `process.moduleLoadList.join("\\n")));\n`,
    );
    writeFileSync(join(dir, "empty.cjs"), "");
    const loaded = async (name: string, args: string[]): Promise<Set<string>> => {
      const out = join(dir, `${name}.txt`);
      const r = await runProcess(process.execPath, ["-r", preload, ...args], {
        extraEnv: { CVISOR_E2E_LOADED: out },
      });
      assert.ok(!r.hung && r.signal === null, show(r));
      return new Set(readFileSync(out, "utf8").split("\n"));
    };
    const baseline = await loaded("empty", [join(dir, "empty.cjs")]);
    for (const args of [
      ["--", "true"],
      ["--json", "--no-network", "--timeout", "5s", "-e", "A=1", "--", "sh", "-c", "exit 3"],
      ["--", "cvisor-e2e-no-such-command"],
    ]) {
      const extra = [...(await loaded("cli", [cliPath, ...args]))].filter((m) => !baseline.has(m));
      const bad = extra.filter((m) =>
        /esm|module_wrap|\b(net|tty|tty_wrap|tcp_wrap|pipe_wrap)$/.test(m),
      );
      assert.deepEqual(bad, [], `cvisor ${args.join(" ")} also loaded: ${extra.join(", ")}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

gtest("the guest knows it is sandboxed: CVISOR_SANDBOX and the nodename", async () => {
  const r = await cvisor(
    [],
    ["sh", "-c", 'echo "$CVISOR_SANDBOX"; uname -n; hostname; cat /proc/sys/kernel/hostname'],
  );
  assert.equal(r.code, 0, show(r));
  assert.equal(r.out, "cvisor\ncvisor\ncvisor\ncvisor\n", show(r));
});

// Parse errors name the real problem and the help that explains it (issue 13, item 6).
gtest(
  "parse errors: a missing value, an unknown option, cvisor cache, help CMD, subcommand help",
  async (fx) => {
    const cli = (args: string[]) =>
      runCli(args, { cwd: fx.scratch, extraEnv: { CVISOR_HOME: join(fx.scratch, "home") } });
    const noValue = await cli(["--timeout", "--", "true"]);
    assert.equal(noValue.code, 125, show(noValue));
    assert.match(
      noValue.err,
      /^cvisor: option '--timeout <duration>' argument missing \(see cvisor --help\)\n$/,
    );
    const unknown = await cli(["--memroy", "100m", "--", "true"]);
    assert.equal(unknown.code, 125, show(unknown));
    assert.match(unknown.err, /^cvisor: unknown option '--memroy' \(see cvisor --help\)\n$/);
    // A command that only groups others prints its help, as `docker image` does.
    const cache = await cli(["cache"]);
    assert.equal(cache.code, 0, show(cache));
    assert.match(cache.out, /^Usage: cvisor cache .*\n[\s\S]*\bsave\b[\s\S]*\brestore\b/);
    assert.equal(cache.err, "");
    for (const [args, usage] of [
      [["help", "cp"], "cvisor cp"],
      [["help", "cache"], "cvisor cache"],
      [["cache", "help", "save"], "cvisor cache save"],
    ] as const) {
      const r = await cli([...args]);
      assert.equal(r.code, 0, show(r));
      assert.match(r.out, new RegExp(`^Usage: ${usage} `), args.join(" "));
    }
    // A command that acts on a sandbox says how to name it.
    for (const sub of [
      ["cp"],
      ["diff"],
      ["export"],
      ["snapshot"],
      ["rollback"],
      ["branch"],
      ["cache", "save"],
    ]) {
      const r = await cli([...sub, "--help"]);
      assert.match(r.out, /--sandbox <name>/, sub.join(" "));
    }
    // A missing argument points at the subcommand's own help.
    const cp = await cli(["cp"]);
    assert.equal(cp.code, 125, show(cp));
    assert.match(cp.err, /^cvisor: missing required argument 'paths' \(see cvisor cp --help\)\n$/);
    const save = await cli(["cache", "save", "k"]);
    assert.match(
      save.err,
      /^cvisor: missing required argument 'path' \(see cvisor cache save --help\)\n$/,
    );
  },
);
