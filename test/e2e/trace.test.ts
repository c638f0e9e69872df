// `cvisor --trace SYSCALLS` (issue 14): one strace-like line per call of those syscalls, with
// the arguments decoded from the supervisor's own read and the result where cvisor answered the
// call, on stderr or in --trace-file; compared here with what the guest did.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT } from "../helpers/fixture.js";
import { assertOneLineError } from "../helpers/store.js";
import { cvisor, runCli, show } from "../helpers/repo.js";

gtest(
  "--trace prints each call of the syscalls named, decoded, with cvisor's result",
  async (fx) => {
    const missing = fx.p("no-such-file");
    const made = fx.p("made-in-sandbox.txt");
    const r = await cvisor(
      ["--trace", "openat,unlinkat", "--trace", "mkdir,mkdirat"],
      [
        "sh",
        "-c",
        'cat "$0"; rm -f "$1"; echo x > "$2"; mkdir "$2.d"',
        fx.p("hello.txt"),
        missing,
        made,
      ],
    );
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, HELLO_TEXT);
    const lines = r.err.split("\n").filter(Boolean);
    const esc = (p: string): string => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const line = (re: RegExp): string | undefined => lines.find((l) => re.test(l));
    assert.ok(
      line(new RegExp(`^\\d+ openat\\(AT_FDCWD, "${esc(fx.p("hello.txt"))}", O_RDONLY\\) = `)),
      show(r),
    );
    assert.ok(
      line(
        new RegExp(
          `^\\d+ unlinkat\\(AT_FDCWD, "${esc(missing)}", 0\\) = -1 ENOENT \\(No such file or directory\\)$`,
        ),
      ),
      show(r),
    );
    // A file the guest creates is made by cvisor in the sandbox's layer: its fd is the result.
    assert.ok(
      line(
        new RegExp(
          `^\\d+ openat\\(AT_FDCWD, "${esc(made)}", O_WRONLY\\|O_CREAT\\|O_TRUNC, 0666\\) = \\d+$`,
        ),
      ),
      show(r),
    );
    assert.ok(
      line(new RegExp(`^\\d+ mkdir(at\\(AT_FDCWD, |\\()"${esc(made)}\\.d", 0777\\) = 0$`)),
      show(r),
    );
    assert.ok(!lines.some((l) => / (read|write|close)\(/.test(l)), "only the syscalls named");
  },
);

gtest(
  "--trace-file takes the lines; bad names and a lone --trace-file are usage errors",
  async (fx) => {
    const file = join(fx.scratch, "trace.txt");
    const r = await cvisor(["--trace", "execve", "--trace-file", file], ["true"]);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.err, "");
    assert.match(
      readFileSync(file, "utf8"),
      /^\d+ execve\("\/usr\/bin\/true", \["true"\], 0x[0-9a-f]+\) = \?\n$/,
    );
    assertOneLineError(
      await cvisor(["--trace", "nosuchcall"], ["true"]),
      /--trace: unknown syscall nosuchcall/,
    );
    const lone = await runCli(["--trace-file", file, "--", "true"]);
    assertOneLineError(lone, /--trace-file goes with --trace/);
  },
);
