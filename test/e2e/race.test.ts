// Adversarial: a guest thread flips the path buffer while another thread opens it, so the
// path the supervisor checked is not the one the kernel opens when the open is continued.
// The Landlock domain must make that race worthless: the supervisor's environment is never
// read, a host file is never opened for writing, and nothing is ever created. Every third flip
// names a symlink of the sandbox that a second process keeps swapping between the two.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { racer, RACE_ROUNDS, RACE_TIMEOUT } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { cvisor, show, uniqueToken } from "../helpers/repo.js";

/** The racer's summary line: opens attempted, how many got the good path, how many the bad. */
function summary(out: string, mode: string): { opens: number; good: number; bad: number } {
  const m = new RegExp(`^racer ${mode} opens=(\\d+) good=(\\d+) bad=(\\d+)$`, "m").exec(out);
  assert.ok(m, `no racer summary in:\n${out}`);
  return { opens: Number(m[1]), good: Number(m[2]), bad: Number(m[3]) };
}

gtest(
  "racing read-only opens never reach the supervisor's /proc/<pid>/environ",
  async () => {
    const secret = uniqueToken("cvisor-race-secret");
    const r = await cvisor(
      [],
      [racer(), "read", "/etc/hostname", "supervisor-environ", RACE_ROUNDS],
      {
        extraEnv: { CVISOR_RACE_SECRET: secret },
        timeoutMs: RACE_TIMEOUT,
      },
    );
    assert.equal(r.code, 0, show(r));
    assert.ok(!r.out.includes(secret) && !r.err.includes(secret), `leaked:\n${show(r)}`);
    const s = summary(r.out, "read");
    assert.equal(s.bad, 0, show(r));
    // The race was real: many opens, and the good path did open.
    assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
  },
  { timeout: RACE_TIMEOUT },
);

gtest(
  "racing write opens between /dev/null and a host file never write the file",
  async (fx) => {
    const r = await cvisor([], [racer(), "write", "/dev/null", fx.p("hello.txt"), RACE_ROUNDS], {
      timeoutMs: RACE_TIMEOUT,
    });
    assert.equal(r.code, 0, show(r));
    const s = summary(r.out, "write");
    assert.equal(s.bad, 0, show(r));
    assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
    // The guard checks that hello.txt is byte-for-byte and metadata-unchanged.
  },
  { timeout: RACE_TIMEOUT },
);

gtest(
  "racing creating opens never create a host file",
  async (fx) => {
    const target = fx.p("sub", "created-by-race");
    const r = await cvisor([], [racer(), "create", "/dev/null", target, RACE_ROUNDS], {
      timeoutMs: RACE_TIMEOUT,
    });
    assert.equal(r.code, 0, show(r));
    const s = summary(r.out, "create");
    // Creating the file is allowed: it lands in the sandbox's upper layer, not on the host.
    assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
    assert.ok(!existsSync(target), `${target} was created`);
  },
  { timeout: RACE_TIMEOUT },
);

// Landlock does not check O_PATH opens: a continued one would give an fd of whatever the path
// named by then, a hidden file too, and fstat (a call with no path) tells its size and times.
gtest(
  "racing O_PATH opens never give an fd of a hidden file",
  async (fx) => {
    const home = path.join(fx.scratch, "home");
    mkdirSync(path.join(home, ".ssh"), { recursive: true });
    writeFileSync(path.join(home, ".ssh", "id_ed25519"), "secret key\n");
    writeFileSync(path.join(home, "visible.txt"), "v\n");
    const r = await cvisor(
      [],
      [
        racer(),
        "opath",
        path.join(home, "visible.txt"),
        path.join(home, ".ssh", "id_ed25519"),
        RACE_ROUNDS,
      ],
      {
        extraEnv: { HOME: home, CVISOR_HOME: path.join(fx.scratch, "cvisor-home") },
        timeoutMs: RACE_TIMEOUT,
      },
    );
    assert.equal(r.code, 0, show(r));
    const s = summary(r.out, "opath");
    assert.equal(s.bad, 0, show(r));
    assert.ok(s.opens >= Number(RACE_ROUNDS) && s.good > 0, show(r));
  },
  { timeout: RACE_TIMEOUT },
);
