// The CLI grammar, through the pure parser.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fastParse } from "../../src/cli/fast-parse.js";
import { parseCli, type Plan, type RunPlan } from "../../src/cli/parse.js";
import { VERSION } from "../../src/version.js";
import { repoRoot } from "../helpers/repo.js";

const host = { SHELL: "/bin/zsh", HOME: "/home/u", TOKEN: "t0k" };

function run(args: string[], env: Record<string, string | undefined> = host): RunPlan {
  const plan = parseCli(args, env);
  assert.equal(plan.kind, "run", JSON.stringify(plan));
  return plan as RunPlan;
}

function error(args: string[]): Extract<Plan, { kind: "error" }> {
  const plan = parseCli(args, host);
  assert.equal(plan.kind, "error", JSON.stringify(plan));
  return plan as Extract<Plan, { kind: "error" }>;
}

test("everything after -- is the command, verbatim", () => {
  const plan = run(["--", "ls", "-la", "--", "--json", "-e", "X=1", "doctor"]);
  assert.deepEqual(plan.argv, ["ls", "-la", "--", "--json", "-e", "X=1", "doctor"]);
  assert.equal(plan.json, false);
  assert.deepEqual(plan.env, {});
  assert.equal(plan.shell, false);
});

test("defaults", () => {
  const plan = run(["--", "true"]);
  assert.equal(plan.network, undefined);
  assert.deepEqual(plan.allowNet, []);
  assert.deepEqual(plan.addHosts, []);
  assert.equal(plan.listen, "loopback");
  assert.equal(plan.timeoutMs, 0);
  assert.equal(plan.workdir, undefined);
});

test("--no-listen, and --allow-listen with it in one line", () => {
  assert.equal(run(["--no-listen", "--", "x"]).listen, "none");
  const both = parseCli(["--allow-listen", "--no-listen", "--", "x"], host);
  assert.equal(both.kind, "error");
  assert.match(
    both.kind === "error" ? both.message : "",
    /^--allow-listen and --no-listen cannot be used together/,
  );
});

test("-e repeats; KEY alone takes the host's value when set", () => {
  const plan = run([
    "-e",
    "A=1",
    "--env",
    "B=x=y",
    "-eC=",
    "-e",
    "TOKEN",
    "-e",
    "MISSING",
    "--",
    "env",
  ]);
  assert.deepEqual(plan.env, { A: "1", B: "x=y", C: "", TOKEN: "t0k" });
});

test("-e -- takes -- as its value, the next -- separates", () => {
  const plan = run(["-e", "--", "--", "true"]);
  assert.deepEqual(plan.argv, ["true"]);
});

test("options", () => {
  const plan = run([
    "--no-network",
    "--allow-listen",
    "--timeout",
    "1.5s",
    "-C",
    "/tmp",
    "--json",
    "--",
    "x",
  ]);
  assert.equal(plan.network, "none");
  assert.equal(plan.listen, "any");
  assert.equal(plan.timeoutMs, 1500);
  assert.equal(plan.timeoutText, "1.5s");
  assert.equal(plan.workdir, "/tmp");
  assert.equal(plan.json, true);
});

test("--network, --allow-net and --add-host; a bad rule or mode is one line", () => {
  assert.equal(run(["--network", "host", "--", "x"]).network, "host");
  assert.equal(run(["--network=none", "--", "x"]).network, "none");
  const plan = run([
    "--allow-net",
    "api.example.com:443",
    "--allow-net=10.0.0.0/8:8000-8100",
    "--allow-net",
    "[::1]:80",
    "--add-host",
    "api.test:127.0.0.1",
    "--",
    "x",
  ]);
  assert.deepEqual(plan.allowNet, ["api.example.com:443", "10.0.0.0/8:8000-8100", "[::1]:80"]);
  assert.deepEqual(plan.addHosts, ["api.test:127.0.0.1"]);
  for (const [args, message] of [
    [["--network", "bridge"], /^invalid --network mode 'bridge': use host or none/],
    [["--no-network", "--allow-net", "1.2.3.4"], /^--allow-net needs the network/],
    [["--allow-net", "a b"], /^invalid --allow-net rule 'a b'/],
    [["--add-host", "x:not-an-ip"], /^invalid --add-host 'x:not-an-ip'/],
  ] as const) {
    const p = parseCli([...args, "--", "x"], host);
    assert.equal(p.kind, "error", String(args));
    assert.match(p.kind === "error" ? p.message : "", message);
  }
});

test("no command starts $SHELL, else /bin/sh", () => {
  const plan = run(["--no-network"]);
  assert.deepEqual(plan.argv, ["/bin/zsh"]);
  assert.equal(plan.shell, true);
  assert.deepEqual(run([], {}).argv, ["/bin/sh"]);
  assert.deepEqual(run(["--"], {}).argv, ["/bin/sh"]);
});

test("a bad duration is exit 125 with the duration message", () => {
  const plan = error(["--timeout", "5x", "--", "true"]);
  assert.equal(plan.exitCode, 125);
  assert.equal(plan.message, "invalid duration: 5x (use e.g. 500ms, 5s, 2m)");
});

test("unknown options and stray words are 125, one line, with a --help hint", () => {
  for (const args of [["--frobnicate", "--", "true"], ["frob"], ["-e"], ["-e", "=1", "--", "x"]]) {
    const plan = error(args);
    assert.equal(plan.exitCode, 125);
    assert.ok(!plan.message.includes("\n"), plan.message);
    assert.match(plan.message, /--help/);
  }
  assert.match(error(["make", "-j2"]).message, /cvisor \[options\] -- make/);
});

test("--sandbox NAME: the named sandbox; a bad name is 125 with one line naming the rules", () => {
  assert.equal(run(["--", "true"]).sandbox, undefined);
  assert.equal(run(["--sandbox", "my.box_1-x", "--", "true"]).sandbox, "my.box_1-x");
  assert.equal(run(["--sandbox=a", "--sandbox", "b", "--", "true"]).sandbox, "b");
  // The token after --sandbox is its value, even "--" (a valid name: '-' is allowed).
  assert.deepEqual(run(["--sandbox", "--", "--", "true"]).sandbox, "--");
  for (const bad of ["bad/name", "..", ".", "", "x".repeat(65), "sp ace"]) {
    const plan = error(["--sandbox", bad, "--", "true"]);
    assert.equal(plan.exitCode, 125);
    assert.ok(!plan.message.includes("\n"), plan.message);
    assert.match(plan.message, /^invalid sandbox name .*letters, digits/);
  }
  const help = parseCli(["--help"], host);
  assert.ok(help.kind === "print" && help.text.includes("--sandbox <name>"));
});

test("doctor", () => {
  const doctor = (args: string[]) => {
    const plan = parseCli(args, host);
    assert.equal(plan.kind, "command");
    return plan.kind === "command" ? [plan.command, plan.json, plan.options.store] : [];
  };
  assert.deepEqual(doctor(["doctor"]), ["doctor", false, undefined]);
  assert.deepEqual(doctor(["doctor", "--json"]), ["doctor", true, undefined]);
  assert.deepEqual(doctor(["doctor", "--store"]), ["doctor", false, true]);
  assert.equal(parseCli(["doctor", "--", "x"], host).kind, "error");
  // After --, "doctor" is a program name like any other.
  assert.deepEqual(run(["--", "doctor"]).argv, ["doctor"]);
});

test("help and version print and exit 0", () => {
  const help = parseCli(["--help"], host);
  assert.equal(help.kind, "print");
  if (help.kind === "print") {
    assert.equal(help.exitCode, 0);
    assert.match(help.text, /--no-network/);
    assert.match(help.text, /doctor/);
  }
  assert.deepEqual(parseCli(["-V"], host), { kind: "print", text: `${VERSION}\n`, exitCode: 0 });
});

test("VERSION matches package.json", () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
    version: string;
  };
  assert.equal(VERSION, pkg.version);
});

test("-t and -T: a pty forced or refused; unset by default (the shell on a terminal gets one)", () => {
  assert.equal(run(["--", "x"]).tty, undefined);
  assert.equal(run(["-t", "--", "vim"]).tty, true);
  assert.equal(run(["--no-tty"]).tty, false);
  assert.equal(run(["-T", "-t", "--", "x"]).tty, true, "the last one wins");
});

test("the fast path agrees with the full parser, or defers to it", () => {
  const lines = [
    [],
    ["--"],
    ["--", "true"],
    ["--json", "--", "ls", "-la"],
    ["-e", "A=1", "--env", "B", "--env=C=3", "-e", "TOKEN", "--", "env"],
    ["-e", "--", "--", "x"],
    ["--no-network", "--allow-listen", "--timeout", "2s", "-C", "/tmp", "--", "x"],
    ["--timeout=500ms", "--workdir=/", "--", "x"],
    ["--sandbox", "box-1", "--", "x"],
    ["--sandbox=a.b_c", "--sandbox", "last", "--", "x"],
    ["--sandbox", "bad/name", "--", "x"],
    ["--sandbox=", "--", "x"],
    ["--sandbox", "--", "--", "x"],
    ["--sandbox"],
    ["--timeout", "5x", "--", "x"],
    ["--timeout="],
    ["-e", "=1", "--", "x"],
    ["-e"],
    ["-eA=1", "--", "x"],
    ["-CX", "--", "x"],
    ["--json=1"],
    ["--help"],
    ["-V"],
    ["doctor"],
    ["ls"],
    ["--frob", "--", "x"],
    ["-t", "--", "vim"],
    ["-T"],
    ["--tty", "--no-tty", "--", "x"],
    ["-tT", "--", "x"],
  ];
  let fastCount = 0;
  for (const args of lines) {
    const fast = fastParse(args, host);
    if (fast === null) continue;
    fastCount++;
    assert.deepEqual(fast, parseCli(args, host), JSON.stringify(args));
  }
  assert.ok(fastCount >= 9, `the fast path took only ${fastCount} lines`);
  for (const args of [["--help"], ["-V"], ["doctor"], ["ls"], ["--frob"], ["-e"]]) {
    assert.equal(fastParse(args, host), null, JSON.stringify(args));
  }
});
