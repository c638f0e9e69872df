// Large output stays byte-exact (CLI through a pipe and into a file, library capture), and
// the writable device nodes and inherited stdio work while the rest of the host is read-only.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { closeSync, openSync, readFileSync } from "node:fs";
import path from "node:path";
import { Sandbox } from "../../src/index.js";
import { prober, probeArgs } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import {
  cliPath,
  cvisor,
  runProcess,
  shellQuote,
  show,
  which,
  type CliResult,
} from "../helpers/repo.js";

const TEN_MB = 10 * 1024 * 1024;
const sha = (b: Uint8Array | string): string => createHash("sha256").update(b).digest("hex");

function assertSameBytes(got: Buffer, want: Buffer, what: string): void {
  if (got.equals(want)) return;
  let i = 0;
  while (i < got.length && i < want.length && got[i] === want[i]) i++;
  assert.fail(
    `${what}: ${got.length} bytes (sha256 ${sha(got).slice(0, 12)}), want ${want.length} ` +
      `(sha256 ${sha(want).slice(0, 12)}); first difference at byte ${i}`,
  );
}

gtest(
  "10 MB of stdout through the CLI's pipe is byte-exact (and of stderr)",
  async (fx) => {
    const want = readFileSync(fx.p("big.txt"));
    const r = await cvisor([], ["cat", fx.p("big.txt")]);
    assert.equal(r.code, 0, show(r));
    assertSameBytes(r.stdout, want, "stdout");

    const piped = await throughPipe(["cat", fx.p("big.txt")]);
    assert.equal(piped.code, 0, `exit ${String(piped.code)}`);
    assertSameBytes(piped.stdout, want, "stdout through a shell pipe");

    const e = await cvisor([], ["sh", "-c", `cat "$0" >&2`, fx.p("big.txt")]);
    assert.equal(e.code, 0, `exit ${String(e.code)}`);
    assertSameBytes(e.stderr, want, "stderr");
  },
  { fixture: { bigFileBytes: TEN_MB } },
);

gtest(
  "10 MB of stdout into a file the caller redirected is byte-exact",
  async (fx) => {
    const want = readFileSync(fx.p("big.txt"));
    const outFile = path.join(fx.scratch, "out.bin");
    const fd = openSync(outFile, "w");
    try {
      const r = await cvisor([], ["dd", `if=${fx.p("big.txt")}`, "bs=65536", "status=none"], {
        stdoutFd: fd,
      });
      assert.equal(r.code, 0, show(r));
    } finally {
      closeSync(fd);
    }
    assertSameBytes(readFileSync(outFile), want, "redirected stdout");
  },
  { fixture: { bigFileBytes: TEN_MB } },
);

gtest(
  "10 MB captured by the library is exact",
  async (fx) => {
    const want = readFileSync(fx.p("big.txt"), "utf8");
    const result = await new Sandbox().run(["cat", fx.p("big.txt")]);
    assert.equal(result.exitCode, 0, result.stderr);
    assert.equal(result.stdout.length, want.length, "length");
    assert.ok(
      result.stdout === want,
      `content differs (sha256 ${sha(result.stdout)} vs ${sha(want)})`,
    );
  },
  { fixture: { bigFileBytes: TEN_MB } },
);

// Node gives a child socketpairs for "pipe" stdio, and Linux refuses to reopen a socket
// through /proc/self/fd (ENXIO, sandbox or not); a shell pipeline gives the CLI a real pipe.
function throughPipe(argv: readonly string[]): Promise<CliResult> {
  return runProcess("/bin/sh", [
    "-c",
    '"$@" 2>&1 | cat',
    "sh",
    process.execPath,
    cliPath,
    "--",
    ...argv,
  ]);
}

gtest(
  "writes to /dev/null, /dev/zero, /dev/full, /dev/stdout, /dev/stderr (a pipe) behave as on the host",
  async () => {
    const script = [
      "echo x > /dev/null && echo null-ok",
      "echo x > /dev/zero && echo zero-ok",
      "head -c 5 /dev/zero | od -An -c | tr -d ' \\n'; echo",
      "echo hi > /dev/stdout",
      "echo to-stderr > /dev/stderr",
      "echo x > /dev/full; echo full-rc=$?",
    ].join("\n");
    const r = await throughPipe(["sh", "-c", script]);
    assert.equal(r.code, 0, show(r));
    const lines = r.out.split("\n").filter((l) => !/echo: I\/O error|No space left/.test(l));
    assert.deepEqual(
      lines,
      ["null-ok", "zero-ok", "\\0\\0\\0\\0\\0", "hi", "to-stderr", "full-rc=1", ""],
      show(r),
    );
    assert.doesNotMatch(r.out, /Read-only file system|Permission denied|cannot create/, show(r));

    const p = await throughPipe([
      prober(),
      ...probeArgs([
        ["write-dev", "/dev/null"],
        ["write-dev", "/dev/zero"],
        ["write-dev", "/dev/full"],
        ["write-dev", "/dev/stdout"],
        ["write-dev", "/dev/stderr"],
        ["write-dev", "/proc/self/fd/1"],
      ]),
    ]);
    assert.equal(p.code, 0, show(p));
    const results = p.out.split("\n").filter((l) => l.trim() !== "");
    assert.deepEqual(results, ["OK", "OK", "ENOSPC", "OK", "OK", "OK"], show(p));
  },
);

gtest("echo hi > /dev/stdout works when stdout is a file the caller redirected", async (fx) => {
  const outFile = path.join(fx.scratch, "stdout.txt");
  const fd = openSync(outFile, "w");
  try {
    const r = await cvisor([], ["sh", "-c", "echo first; echo hi > /dev/stdout"], { stdoutFd: fd });
    assert.equal(r.code, 0, show(r));
    assert.doesNotMatch(r.err, /Read-only|denied/, show(r));
  } finally {
    closeSync(fd);
  }
  // `>` reopens the file with O_TRUNC: the caller's file now holds just "hi".
  assert.equal(readFileSync(outFile, "utf8"), "hi\n");

  const appendFile = path.join(fx.scratch, "append.txt");
  const afd = openSync(appendFile, "a");
  try {
    const r = await cvisor([], ["sh", "-c", "echo one; echo two >> /dev/stdout"], {
      stdoutFd: afd,
    });
    assert.equal(r.code, 0, show(r));
  } finally {
    closeSync(afd);
  }
  assert.equal(readFileSync(appendFile, "utf8"), "one\ntwo\n");
});

gtest("library: echo hi > /dev/stdout lands in the captured stdout", async () => {
  const result = await new Sandbox().run([
    "sh",
    "-c",
    "echo hi > /dev/stdout; echo e > /dev/stderr",
  ]);
  assert.equal(result.exitCode, 0, result.stderr);
  assert.equal(result.stdout, "hi\n");
  assert.equal(result.stderr, "e\n");
});

gtest(
  "/dev/tty is writable on a real terminal",
  async () => {
    const r = await runProcess(which("script") ?? "script", [
      "-qec",
      `${shellQuote(process.execPath)} ${shellQuote(cliPath)} -- sh -c 'echo tty-ok > /dev/tty'`,
      "/dev/null",
    ]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.out, /tty-ok/, show(r));
  },
  { skip: which("script") ? false : "util-linux `script` is not installed" },
);
