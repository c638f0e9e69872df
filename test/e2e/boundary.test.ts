// The sandbox is a boundary: nothing a guest changes after the supervisor's check may change
// what the check decided. Each test here is an attack that got out once (issue 11): an fd,
// a socket address or the filesystem flipped between the check and the act, the sandbox's
// init reached through /proc, host unix sockets, a tree that outlived its supervisor. Races
// run $CVISOR_RACE_ITERATIONS times (default 20 000) with a thread flipping the guest's fd table
// or memory and a second process flipping the filesystem; the guard proves the fixture tree
// and $HOME unchanged after each test.
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { flipper, probeArgs, prober, RACE_ROUNDS, RACE_TIMEOUT, sleeper } from "../helpers/cc.js";
import { HELLO_TEXT } from "../helpers/fixture.js";
import { gtest } from "../helpers/guard.js";
import {
  cvisor,
  isAlive,
  repoRoot,
  runProcess,
  killAllWith,
  processesWith,
  runCli,
  show,
  uniqueToken,
  waitFor,
  type CliResult,
} from "../helpers/repo.js";

const RACE_ENV = ["-e", `CVISOR_RACE_ITERATIONS=${RACE_ROUNDS}`];

/** The flipper's summary: calls made, calls that succeeded, calls that got what they must not. */
function flipped(r: CliResult | string, mode: string): { tries: number; ok: number; bad: number } {
  const out = typeof r === "string" ? r : r.out;
  const m = new RegExp(`^flipper ${mode} tries=(\\d+) ok=(\\d+) bad=(\\d+)$`, "m").exec(out);
  assert.ok(m, `no flipper summary:\n${typeof r === "string" ? r : show(r)}`);
  return { tries: Number(m[1]), ok: Number(m[2]), bad: Number(m[3]) };
}

/** Runs `flipper MODE ARGS...` in an ephemeral sandbox started in the fixture, after `setup`. */
function flip(root: string, setup: string, args: readonly string[], extra: string[] = []) {
  const script = `${setup}\nexec "$0" "$@"`;
  return cvisor([...RACE_ENV, ...extra, "-C", root], ["sh", "-c", script, flipper(), ...args], {
    timeoutMs: RACE_TIMEOUT,
  });
}

function assertRaced(r: CliResult, mode: string): void {
  assert.equal(r.code, 0, show(r));
  const s = flipped(r, mode);
  assert.equal(s.bad, 0, show(r));
  assert.ok(s.tries >= Number(RACE_ROUNDS) && s.ok > 0, `the race did not run:\n${show(r)}`);
}

// ---- one fd, flipping between a file of the sandbox and a host file ----------------------

gtest(
  "a flipping fd: reopening /proc/self/fd/K for writing never writes the host file",
  async (fx) => {
    const r = await flip(fx.root, "echo sandbox > sb.txt", ["fd-open", "sb.txt", "hello.txt"]);
    assertRaced(r, "fd-open");
    // The guard proves hello.txt unchanged on the host.
  },
  { timeout: RACE_TIMEOUT },
);

for (const op of ["fchmod", "fchown", "fsetxattr", "futimens"]) {
  gtest(
    `a flipping fd: ${op} never changes the host file`,
    async (fx) => {
      const r = await flip(fx.root, "echo sandbox > sb.txt", [
        "fd-meta",
        "sb.txt",
        "hello.txt",
        op,
      ]);
      assertRaced(r, "fd-meta");
    },
    { timeout: RACE_TIMEOUT },
  );
}

gtest(
  "a flipping fd: a hard link made through /proc/self/fd/K never names the host inode",
  async (fx) => {
    const r = await flip(fx.root, "echo sandbox > sb.txt", [
      "fd-link",
      "sb.txt",
      "hello.txt",
      "alias",
    ]);
    assertRaced(r, "fd-link");
  },
  { timeout: RACE_TIMEOUT },
);

gtest(
  "a flipping dirfd: a write open relative to it never writes the host file",
  async (fx) => {
    const r = await flip(fx.root, "mkdir sbdir && echo sandbox > sbdir/hello.txt", [
      "fd-openat",
      "sbdir",
      fx.root,
      "hello.txt",
    ]);
    assertRaced(r, "fd-openat");
  },
  { timeout: RACE_TIMEOUT },
);

gtest(
  "a flipping fd: listing it never shows a hidden name or another process",
  async (fx) => {
    // A fake $HOME whose .ssh is hidden by default, and /proc with this test's own pid.
    const home = path.join(fx.scratch, "home");
    mkdirSync(path.join(home, ".ssh"), { recursive: true });
    writeFileSync(path.join(home, "visible.txt"), "v\n");
    const env = { extraEnv: { HOME: home } };
    for (const [bad, name] of [
      [home, ".ssh"],
      ["/proc", String(process.pid)],
    ] as const) {
      const r = await cvisor(
        [...RACE_ENV, "-C", fx.root],
        [flipper(), "fd-dirent", fx.p("sub"), bad, name],
        { ...env, timeoutMs: RACE_TIMEOUT },
      );
      assertRaced(r, "fd-dirent");
    }
  },
  { timeout: RACE_TIMEOUT },
);

/** Runs the host-side lock checker on `file` for `seconds`; resolves to its output. */
function hostLockCheck(file: string, seconds: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(flipper(), ["host-lockcheck", file, String(seconds)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.on("error", reject);
    child.on("close", () => resolve(out));
  });
}

gtest(
  "a flipping fd: locks and leases never reach the host file, which stays lockable",
  async (fx) => {
    const checker = hostLockCheck(fx.p("hello.txt"), 8);
    const race = flip(fx.root, "echo sandbox > sb.txt", ["fd-lock", "sb.txt", "hello.txt"]);
    const held = cvisor(
      ["-C", fx.root],
      [
        prober(),
        "flock-hold",
        "hello.txt",
        "2",
        ";",
        "posix-lock-hold",
        "hello.txt",
        "2",
        ";",
        "lease",
        "hello.txt",
        "2",
      ],
    );
    const [r, h, out] = await Promise.all([race, held, checker]);
    assertRaced(r, "fd-lock");
    assert.equal(h.code, 0, show(h));
    // Locks on a file the guest only reads succeed in the sandbox; leases are refused.
    assert.deepEqual(h.out.trim().split("\n"), ["OK", "OK", "EACCES"], show(h));
    const s = flipped(out, "host-lockcheck");
    assert.equal(s.bad, 0, `the host file was locked by a guest:\n${out}`);
    assert.ok(s.ok > 10, out);
  },
  { timeout: RACE_TIMEOUT },
);

// ---- a hard link of a host file (overlay/alias.c) -------------------------------------------

// A link of a host file stands for that file until it changes, and a read-only open of it is an
// open of the host file itself (so fstat agrees with stat). Everything the guest can do through
// that fd must land on the sandbox's copy or be refused as it would be for any read-only fd:
// write, truncate, a writable shared mapping, a write reopen through /proc/self/fd, chmod, times,
// xattrs, and locks (a host process can still lock the file).
const ALIAS_PY = String.raw`
import errno, fcntl, mmap, os, time
os.link("hello.txt", "alias")
fd = os.open("alias", os.O_RDONLY)
def t(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
t("write", lambda: os.write(fd, b"x"))
t("mmap", lambda: mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_WRITE))
fcntl.flock(fd, fcntl.LOCK_EX)
time.sleep(2)
fcntl.flock(fd, fcntl.LOCK_UN)
w = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_APPEND)
os.write(w, b"through the fd\n")
t("fchmod", lambda: os.fchmod(fd, 0o777))
t("utime", lambda: os.utime(fd, (1, 1)))
t("xattr", lambda: os.setxattr(fd, "user.attack", b"1"))
print(open("alias").read(), end="")
`;

gtest(
  "a hard link of a host file: nothing done through its read-only fd reaches the host file",
  async (fx) => {
    const host = fx.p("hello.txt");
    const before = statSync(host);
    const checker = hostLockCheck(host, 6);
    const r = await cvisor(["-C", fx.root], ["python3", "-c", ALIAS_PY]);
    const out = await checker;
    assert.equal(r.code, 0, show(r));
    assert.deepEqual(r.out.split("\n").slice(0, 2), ["write EBADF", "mmap EACCES"], show(r));
    assert.match(r.out, /^fchmod ok\nutime ok\nxattr ok\nhello from the host\nthrough the fd\n$/m);
    const s = flipped(out, "host-lockcheck");
    assert.equal(s.bad, 0, `the host file was locked by a guest:\n${out}`);
    assert.ok(s.ok > 10, out);
    const after = statSync(host);
    assert.equal(readFileSync(host, "utf8"), HELLO_TEXT);
    assert.deepEqual(
      [after.mode, after.mtimeMs, after.ino, after.nlink],
      [before.mode, before.mtimeMs, before.ino, before.nlink],
    );
    const xattr = spawnSync(
      "python3",
      [
        "-c",
        "import errno, os, sys\ntry: os.getxattr(sys.argv[1], 'user.attack'); print('SET')\nexcept OSError as e: print(errno.errorcode[e.errno])",
        host,
      ],
      { encoding: "utf8" },
    );
    assert.equal(
      xattr.stdout,
      "ENODATA\n",
      `the host file's user.attack xattr: ${xattr.stdout}${xattr.stderr}`,
    );
  },
  { timeout: RACE_TIMEOUT },
);

// ---- the sandbox's init -------------------------------------------------------------------

gtest("the init is out of reach: its memory, fds and environment cannot be opened", async () => {
  const ops = [
    "open-rdwr /proc/$PPID/mem",
    "read-file /proc/$PPID/mem",
    "open-wronly /proc/$PPID/fd/3",
    "read-file /proc/$PPID/environ",
    "open-read /proc/$PPID/task/$PPID/mem",
    "proc-read $PPID status",
  ];
  const r = await cvisor([], ["sh", "-c", ops.map((op) => `"$0" ${op}`).join("; "), prober()]);
  assert.equal(r.code, 0, show(r));
  const lines = r.out.trim().split("\n");
  assert.equal(lines.length, ops.length, show(r));
  for (const [i, line] of lines.slice(0, -1).entries()) {
    assert.match(line, /^E[A-Z]+$/, `${ops[i]}: ${line}\n${show(r)}`);
  }
  // Harmless entries stay readable (ps, a parent's name).
  assert.match(lines.at(-1) ?? "", /^OK Name:.cvisor-helper/, show(r));
});

// ---- the tree dies with its supervisor ----------------------------------------------------

/** The guest sleepers carrying `mark` (the CLI's own command line holds it too). */
function sleepers(mark: string): number[] {
  return processesWith(mark)
    .filter((p) => p.cmdline.startsWith(sleeper()))
    .map((p) => p.pid);
}

/** A sleeper in the background and a setsid daemon, both carrying `mark`, as a guest's argv. */
function orphanGuest(mark: string): string[] {
  return ["sh", "-c", `"$0" 300 "$1" & "$0" --daemon 300 "$1"; wait`, sleeper(), mark];
}

/**
 * Starts the supervisor (`start` reports its pid), waits for both guests, kills the supervisor
 * with SIGKILL and asserts the guests are gone within a second.
 */
async function treeDiesWithSupervisor(
  mark: string,
  start: (onSpawn: (pid: number) => void) => Promise<unknown>,
): Promise<void> {
  try {
    let pid = 0;
    const run = start((p) => (pid = p));
    assert.ok(await waitFor(() => sleepers(mark).length >= 2, 10_000), "the guests never started");
    const guests = sleepers(mark);
    process.kill(pid, "SIGKILL");
    await run;
    const gone = await waitFor(() => guests.every((g) => !isAlive(g)), 1000);
    assert.ok(gone, `still alive after 1 s: ${guests.filter((g) => isAlive(g)).join(" ")}`);
  } finally {
    killAllWith(mark);
  }
}

gtest(
  "kill -9 of the CLI: the whole tree, setsid daemons included, is dead within a second",
  async () => {
    const mark = uniqueToken("cvisor-orphan");
    await treeDiesWithSupervisor(mark, (onSpawn) =>
      runCli(["--", ...orphanGuest(mark)], { onSpawn, timeoutMs: 60_000 }),
    );
  },
);

gtest(
  "kill -9 of a program using the library: its sandbox's tree is dead within a second",
  async () => {
    const mark = uniqueToken("cvisor-lib-orphan");
    const child = path.join(repoRoot, "dist", "test", "helpers", "lib-child.js");
    await treeDiesWithSupervisor(mark, (onSpawn) =>
      runProcess(process.execPath, [child, JSON.stringify(orphanGuest(mark))], {
        onSpawn,
        timeoutMs: 60_000,
      }),
    );
  },
);

for (const [signal, code] of [
  ["SIGTERM", 143],
  ["SIGHUP", 129],
  ["SIGINT", 130],
] as const) {
  gtest(`${signal} to the CLI ends the run with ${code} and kills the tree`, async () => {
    const mark = uniqueToken("cvisor-signal");
    try {
      let cliPid = 0;
      const run = runCli(["--", "sh", "-c", `"$0" 300 "$1"; echo after`, sleeper(), mark], {
        onSpawn: (pid) => (cliPid = pid),
        timeoutMs: 30_000,
      });
      assert.ok(await waitFor(() => sleepers(mark).length >= 1, 10_000));
      const guests = sleepers(mark);
      process.kill(cliPid, signal);
      const r = await run;
      assert.equal(r.code, code, show(r));
      assert.ok(!r.out.includes("after"), show(r));
      assert.ok(await waitFor(() => guests.every((pid) => !isAlive(pid)), 1000));
    } finally {
      killAllWith(mark);
    }
  });
}

// ---- sockets ------------------------------------------------------------------------------

interface TokenServer {
  path: string;
  token: string;
  connections: () => number;
  close: () => Promise<void>;
}

/** A unix stream server on the host that sends `TOKEN\n` to every connection. */
function tokenServer(file: string, prefix: string): Promise<TokenServer> {
  const token = uniqueToken(prefix);
  let count = 0;
  const server = net.createServer((sock) => {
    count++;
    sock.on("error", () => undefined);
    sock.end(`${token}\n`);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(file, () =>
      resolve({
        path: file,
        token,
        connections: () => count,
        close: () => new Promise<void>((r) => server.close(() => r())),
      }),
    );
  });
}

/** An inet stream server on 127.0.0.1 that sends `TOKEN\n` to every connection. */
function inetTokenServer(prefix: string): Promise<TokenServer & { port: number }> {
  const token = uniqueToken(prefix);
  let count = 0;
  const server = net.createServer((sock) => {
    count++;
    sock.on("error", () => undefined);
    sock.end(`${token}\n`);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const a = server.address();
      if (a === null || typeof a === "string") return reject(new Error("no address"));
      resolve({
        path: "",
        port: a.port,
        token,
        connections: () => count,
        close: () => new Promise<void>((r) => server.close(() => r())),
      });
    });
  });
}

/** A host datagram socket at `file` counting what arrives until stop() (flipper dgram-count). */
function dgramCounter(file: string): { ready: Promise<void>; stop: () => Promise<number> } {
  const child: ChildProcess = spawn(flipper(), ["dgram-count", file, "600"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  let ready!: () => void;
  const readyP = new Promise<void>((r) => (ready = r));
  child.stdout?.on("data", (chunk: Buffer) => {
    out += chunk.toString();
    if (out.includes("ready")) ready();
  });
  const got = new Promise<number>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", () => {
      const m = /got=(\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
      else reject(new Error(`dgram-count said: ${out}`));
    });
  });
  return {
    ready: readyP,
    stop: () => {
      child.kill("SIGTERM");
      return got;
    },
  };
}

gtest(
  "host unix sockets are refused by default; --allow-unix lets exactly that one through",
  async (fx) => {
    const sock = await tokenServer(path.join(fx.scratch, "agent.sock"), "agent");
    const other = await tokenServer(path.join(fx.scratch, "docker.sock"), "docker");
    try {
      symlinkSync(sock.path, path.join(fx.scratch, "agent-link"));
      const probe = (p: string): string[] => [prober(), "connect-unix", p];
      const denied = await cvisor([], probe(sock.path));
      assert.equal(denied.code, 0, show(denied));
      assert.equal(denied.out, "EACCES\n", show(denied));
      assert.match(denied.err, /host unix socket .*agent\.sock.*--allow-unix/, show(denied));
      const viaLink = await cvisor([], probe(path.join(fx.scratch, "agent-link")));
      assert.equal(viaLink.out, "EACCES\n", show(viaLink));
      const allowed = await cvisor(
        ["--allow-unix", sock.path],
        [
          "sh",
          "-c",
          `"$0" connect-unix "$1"; "$0" connect-unix "$2"; "$0" connect-unix "$3"`,
          prober(),
          sock.path,
          path.join(fx.scratch, "agent-link"),
          other.path,
        ],
      );
      assert.equal(allowed.code, 0, show(allowed));
      assert.deepEqual(
        allowed.out.trim().split("\n"),
        [`OK ${sock.token}`, `OK ${sock.token}`, "EACCES"],
        show(allowed),
      );
      assert.equal(other.connections(), 0);
      // Sockets made inside the sandbox keep working.
      const inside = await cvisor(["-C", fx.root], [prober(), "listen-unix"]);
      assert.equal(inside.out, "OK\n", show(inside));
    } finally {
      await sock.close();
      await other.close();
    }
  },
);

gtest("datagrams to a host unix socket are refused unless it is allowed", async (fx) => {
  const file = path.join(fx.scratch, "log.sock");
  for (const allow of [false, true]) {
    const counter = dgramCounter(file);
    await counter.ready;
    const r = await cvisor(allow ? ["--allow-unix", file] : [], [
      prober(),
      "sendto-unix",
      file,
      ";",
      "sendmsg-unix",
      file,
    ]);
    assert.equal(r.code, 0, show(r));
    assert.equal(r.out, allow ? "OK\nOK\n" : "EACCES\nEACCES\n", show(r));
    assert.equal(await counter.stop(), allow ? 2 : 0);
  }
});

gtest(
  "a flipping socket address never reaches a host socket that is not allowed",
  async (fx) => {
    const good = await tokenServer(path.join(fx.scratch, "good.sock"), "good");
    const bad = await tokenServer(path.join(fx.scratch, "bad.sock"), "bad");
    const inet = await inetTokenServer("inet");
    try {
      const allow = ["--allow-unix", good.path];
      const r = await cvisor(
        [...RACE_ENV, ...allow, "-C", fx.root],
        [flipper(), "sock-connect", good.path, bad.path, bad.token],
        { timeoutMs: RACE_TIMEOUT },
      );
      assertRaced(r, "sock-connect");
      const f = await cvisor(
        [...RACE_ENV, ...allow, "-C", fx.root],
        [flipper(), "sock-family", String(inet.port), bad.path, bad.token],
        { timeoutMs: RACE_TIMEOUT },
      );
      assertRaced(f, "sock-family");
      assert.equal(bad.connections(), 0, "the bad socket saw a connection");
    } finally {
      await good.close();
      await bad.close();
      await inet.close();
    }
  },
  { timeout: RACE_TIMEOUT },
);

gtest(
  "a flipping datagram address never reaches a host socket that is not allowed",
  async (fx) => {
    const goodFile = path.join(fx.scratch, "good.dgram");
    const badFile = path.join(fx.scratch, "bad.dgram");
    const good = dgramCounter(goodFile);
    const bad = dgramCounter(badFile);
    await Promise.all([good.ready, bad.ready]);
    const r = await cvisor(
      [...RACE_ENV, "--allow-unix", goodFile, "-C", fx.root],
      [flipper(), "sock-sendto", goodFile, badFile],
      { timeoutMs: RACE_TIMEOUT },
    );
    assertRaced(r, "sock-sendto");
    // Everything sent is in the counters' sockets by now: the bad one must have got nothing.
    assert.equal(await bad.stop(), 0);
    assert.ok((await good.stop()) > 0);
  },
  { timeout: RACE_TIMEOUT },
);

gtest("bind with AF_UNSPEC on an inet socket (the any-address) needs --allow-listen", async () => {
  const port = String(20_000 + Math.floor(Math.random() * 20_000));
  const denied = await cvisor([], [prober(), "bind-unspec", port, ";", "bind-unspec", "0"]);
  assert.equal(denied.out, "EACCES\nOK\n", show(denied));
  const allowed = await cvisor(["--allow-listen"], [prober(), "bind-unspec", port]);
  assert.equal(allowed.out, "OK\n", show(allowed));
});

// ---- ioctls -------------------------------------------------------------------------------

gtest(
  "ioctls that change a host inode are refused on a read-only host fd; queries work",
  async (fx) => {
    const r = await cvisor(
      ["-C", fx.root],
      [prober(), "ioctl-setversion", "hello.txt", ";", "ioctl-fionread", "hello.txt"],
    );
    assert.equal(r.code, 0, show(r));
    const [set, fionread] = r.out.trim().split("\n");
    assert.match(set ?? "", /^E[A-Z]+$/, show(r));
    assert.equal(fionread, "OK", show(r));
    // The guard proves hello.txt's generation and ctime unchanged (its ctime would move).
  },
);

// ---- devices held without access, reopened -------------------------------------------------

/** A host process holding a pty of its own (another session's terminal); its slave's path. */
function hostPty(): Promise<{ path: string; child: ChildProcess }> {
  const child = spawn("python3", [
    "-c",
    "import os, sys; m, s = os.openpty(); print(os.ttyname(s), flush=True); sys.stdin.read()",
  ]);
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.stdout?.once("data", (chunk: Buffer) =>
      resolve({ path: chunk.toString().trim(), child }),
    );
  });
}

gtest(
  "an O_PATH fd of a host device gives no access, reopened through /proc/self/fd or behind a symlink",
  async () => {
    const pty = await hostPty();
    try {
      const ops = [
        ["/dev/null", "rw"],
        [pty.path, "r"],
        [pty.path, "rw"],
        ["/dev/kmsg", "r"],
      ];
      const args = ops.flatMap(([dev, mode], i) => [
        ...(i ? [";"] : []),
        "reopen-opath",
        dev ?? "",
        mode ?? "",
      ]);
      const native = await runProcess(prober(), args);
      assert.match(native.out, /^OK\nOK\nOK\n/, `natively the reopens work:\n${show(native)}`);
      const r = await cvisor(["--json"], [prober(), ...args]);
      assert.equal(r.code, 0, show(r));
      // Refused at the O_PATH open itself (served by the supervisor, which gives no such device)
      // or, at the latest, at the reopen.
      const lines = r.out.trim().split("\n");
      assert.equal(lines[0], "OK", show(r));
      assert.equal(lines.length, 4, show(r));
      for (const line of lines.slice(1)) assert.match(line, /^(SETUP-opath-)?EACCES$/, show(r));
      assert.match(r.err, /"target":"\/dev\/kmsg"/, show(r));
      // The same devices behind a symlink of the sandbox, opened O_PATH: nothing to read.
      const linked = await cvisor(
        [],
        [
          "sh",
          "-c",
          `ln -s "$1" /tmp/kmsg-link && ln -s "$2" /tmp/pty-link && ` +
            `"$0" opath-read /tmp/kmsg-link ";" opath-read /tmp/pty-link`,
          prober(),
          "/dev/kmsg",
          pty.path,
        ],
      );
      assert.equal(linked.code, 0, show(linked));
      for (const line of linked.out.trim().split("\n")) {
        assert.match(line, /^(EBADF|EACCES)$/, show(linked));
      }
    } finally {
      pty.child.kill();
    }
  },
);

// ---- what was refused, readable -----------------------------------------------------------

gtest(
  "the --json report lists what the sandbox refused: a hidden file, a host socket, the init",
  async (fx) => {
    const { home, key, env } = homeWithKey(fx);
    const sock = await tokenServer(path.join(fx.scratch, "agent.sock"), "agent");
    try {
      const r = await cvisor(
        ["--json"],
        [
          "sh",
          "-c",
          `cat "$1"; "$0" connect-unix "$2"; cat /proc/$PPID/environ; exit 0`,
          prober(),
          key,
          sock.path,
        ],
        env,
      );
      assert.equal(r.code, 0, show(r));
      const report = JSON.parse(r.err.trim().split("\n").at(-1) ?? "{}") as {
        denials?: { syscall: string; target: string; why: string; count: number }[];
      };
      const denials = report.denials ?? [];
      const find = (target: string): unknown => denials.find((d) => d.target === target);
      assert.ok(find(path.join(home, ".ssh")), `no denial for ~/.ssh:\n${show(r)}`);
      assert.ok(find(sock.path), `no denial for the socket:\n${show(r)}`);
      assert.ok(
        denials.some((d) => /\/proc\/\d+\/environ$/.test(d.target) && d.why.includes("init")),
        `no denial for the init:\n${show(r)}`,
      );
    } finally {
      await sock.close();
    }
  },
);

// ---- hidden means hidden ------------------------------------------------------------------

/** A fake $HOME whose .ssh (hidden by default) holds a key, beside a visible file. */
function homeWithKey(fx: { scratch: string }): {
  home: string;
  key: string;
  env: { extraEnv: Record<string, string> };
} {
  const home = path.join(fx.scratch, "home");
  mkdirSync(path.join(home, ".ssh"), { recursive: true });
  writeFileSync(path.join(home, ".ssh", "id_ed25519"), "secret key\n");
  writeFileSync(path.join(home, "visible.txt"), "v\n");
  // cvisor's own state elsewhere: it would make ~/.local/share/cvisor in the fake $HOME
  const env = { extraEnv: { HOME: home, CVISOR_HOME: path.join(fx.scratch, "cvisor-home") } };
  return { home, key: path.join(home, ".ssh", "id_ed25519"), env };
}

gtest("the legacy getdents lists no hidden name, on host and merged directories", async (fx) => {
  const { home, env } = homeWithKey(fx);
  const list = [prober(), "getdents-legacy", home];
  const host = await cvisor([], list, env);
  assert.equal(host.code, 0, show(host));
  const names = (out: string): string[] => out.trim().split(" ").slice(1).sort();
  assert.deepEqual(names(host.out), [".", "..", "visible.txt"], show(host));
  // A directory the guest changed is listed from a merged snapshot, in the legacy format too.
  const merged = await cvisor(
    [],
    ["sh", "-c", `touch "$1/new.txt" && "$0" getdents-legacy "$1"`, prober(), home],
    env,
  );
  assert.equal(merged.code, 0, show(merged));
  assert.deepEqual(names(merged.out), [".", "..", "new.txt", "visible.txt"], show(merged));
});

// The shim asks for a real O_PATH fd by a bit in the open's flags (native/src/common/
// opath_proto.h), and the supervisor sends it over a socket it injects. Any guest can set the
// bit: made here by the probe's own syscall, past the shim, it gives an fd of what the view
// resolves and nothing more: no hidden file, no way into one behind a sandbox symlink, and a
// host device's fd that reopens to nothing.
gtest(
  "an O_PATH open asking for the real fd itself gets nothing a path would not give",
  async (fx) => {
    const { home, key, env } = homeWithKey(fx);
    const link = path.join(home, "to-key");
    const ops = [
      ["opath-socket", key],
      ["opath-socket", path.join(home, "visible.txt")],
      ["opath-socket", "/dev/kmsg"],
      ["opath-socket", link],
      ["opath-socket", path.join(home, ".ssh")],
    ];
    const r = await cvisor(
      [],
      [
        "sh",
        "-c",
        `ln -s "$1" "$2" && shift 2 && exec "$@"`,
        "sh",
        key,
        link,
        prober(),
        ...probeArgs(ops),
      ],
      env,
    );
    assert.equal(r.code, 0, show(r));
    assert.deepEqual(
      r.out.trim().split("\n"),
      ["ENOENT", "OK file OK", "OK chardev EACCES", "OK symlink ELOOP", "ENOENT"],
      show(r),
    );
    const native = await runProcess(prober(), probeArgs([["opath-socket", "/dev/kmsg"]]));
    assert.equal(
      native.out.trim(),
      "NOT-A-SOCKET",
      "natively the bit is dropped: an O_PATH fd, no socket",
    );
  },
);

// newfstatat/statx with AT_EMPTY_PATH run natively only with a NULL path (Linux 6.11+: the fd
// alone); with a path, even "", the supervisor answers, so a path there cannot name a hidden
// file. glibc's fstat ("" ) stays native through the shim (native/src/shim/shim.c), which makes
// its "" a NULL; these probes make the raw calls too (try-syscall), past any shim.
for (const shim of ["on", "off"]) {
  gtest(
    `stat with AT_EMPTY_PATH and a path does not show a hidden file (shim ${shim})`,
    async (fx) => {
      const { home, key, env } = homeWithKey(fx);
      const visible = path.join(home, "visible.txt");
      if (shim === "off") env.extraEnv.CVISOR_SHIM = "off";
      const ops = [
        ["fstatat-empty", key], // glibc's fstatat, through the shim when it is on
        ["statx-empty", key],
        ["fstatat-empty-asm", key], // its own syscall instruction: past libc and the shim
        ["fstatat-empty", visible],
        ["fstatat-empty-asm", visible],
        ["fstat-fd", visible], // "" and NULL on an fd: the fd's own file
        ["fstatat-empty-asm", "-"], // NULL at AT_FDCWD: the cwd, answered by the supervisor
      ];
      const r = await cvisor(
        [],
        ["sh", "-c", `cd "$1" && shift && exec "$@"`, "sh", home, prober(), ...probeArgs(ops)],
        env,
      );
      assert.equal(r.code, 0, show(r));
      assert.deepEqual(
        r.out.trim().split("\n"),
        [
          "ENOENT",
          "ENOENT",
          "ENOENT",
          "OK size=2",
          "OK size=2",
          "OK size=2 same=yes",
          "OK cwd=yes",
        ],
        show(r),
      );
    },
  );
}

// The answer table (native/src/common/answers_fmt.h) is shared by a run's guests: the shim
// serves readlink from it. It holds only what the supervisor told this run's guests, and no
// guest can write it: every way to a writable view of it is tried (an open for writing, a
// writable mapping, mprotect, a reopen through /proc/self/fd, /proc/self/mem), then the whole
// table is read back: a visible link's target is there, a hidden one's is not (the hidden path
// the guest asked about may be, with the ENOENT it was given).
const ANSWERS_PY = String.raw`
import ctypes, errno, mmap, os, sys
home, token = sys.argv[1], sys.argv[2]
def rl(p):
    try: return os.readlink(p)
    except OSError as e: return "E" + errno.errorcode[e.errno]
def tryit(tag, f):
    try: f(); print(tag, "OK")
    except OSError as e: print(tag, errno.errorcode.get(e.errno, e.errno))
print("hidden", *[rl(home + "/.ssh/link") for _ in range(3)])
print("visible", *[rl(home + "/vlink") for _ in range(3)])
tryit("open-rw", lambda: os.open("/.cvisor-answers", os.O_RDWR))
fd = os.open("/.cvisor-answers", os.O_RDONLY)
tryit("write", lambda: os.write(fd, b"x"))
tryit("mmap-w", lambda: mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
def reopen():
    w = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
    os.write(w, b"x")
tryit("reopen-write", reopen)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
def mprot():
    if libc.mprotect(ctypes.c_void_p(addr), 4096, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
tryit("mprotect-w", mprot)
def procmem():
    m = os.open("/proc/self/mem", os.O_RDWR)
    os.pwrite(m, b"x", addr)
tryit("proc-mem", procmem)
data = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ)[:]
print("holds-visible", token.encode() in data)
print("holds-hidden", b"HIDDEN-TARGET" in data)
`;

gtest("the answer table: no guest can write it, it holds nothing hidden", async (fx) => {
  const { home, env } = homeWithKey(fx);
  const token = uniqueToken("VISIBLE-TARGET");
  symlinkSync("HIDDEN-TARGET", path.join(home, ".ssh", "link"));
  symlinkSync(token, path.join(home, "vlink"));
  const r = await cvisor([], ["python3", "-c", ANSWERS_PY, home, token], env);
  assert.equal(r.code, 0, show(r));
  const got = new Map(
    r.out
      .trim()
      .split("\n")
      .map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
  );
  assert.equal(got.get("hidden"), "EENOENT EENOENT EENOENT", show(r));
  assert.equal(got.get("visible"), `${token} ${token} ${token}`, show(r));
  for (const k of ["open-rw", "write", "mmap-w", "reopen-write", "mprotect-w", "proc-mem"])
    assert.match(got.get(k) ?? "", /^E[A-Z]+$/, `${k} must fail\n${show(r)}`);
  assert.equal(got.get("holds-visible"), "True", show(r));
  assert.equal(got.get("holds-hidden"), "False", show(r));
});

gtest("the answer table: a sandbox's table holds nothing of another sandbox's", async (fx) => {
  const { home, env } = homeWithKey(fx);
  const mine = uniqueToken("VISIBLE-TARGET");
  symlinkSync(mine, path.join(home, "vlink"));
  const theirs = uniqueToken("OTHER-SANDBOX");
  // The other sandbox makes a link of its own (in its own overlay) and keeps reading it.
  const other = cvisor(
    [],
    [
      "python3",
      "-c",
      `import os, time\nos.symlink(${JSON.stringify(theirs)}, "/tmp/cvisor-other-link")\nt = time.monotonic()\nwhile time.monotonic() - t < 4: os.readlink("/tmp/cvisor-other-link")\nprint("done")`,
    ],
    env,
  );
  await new Promise((res) => setTimeout(res, 1500));
  const r = await cvisor([], ["python3", "-c", ANSWERS_PY, home, theirs], env);
  const o = await other;
  assert.equal(o.code, 0, show(o));
  assert.equal(r.code, 0, show(r));
  assert.match(r.out, /^holds-visible False$/m, show(r));
  const own = await cvisor([], ["python3", "-c", ANSWERS_PY, home, mine], env);
  assert.match(own.out, /^holds-visible True$/m, show(own));
});

// The shim answers stat, getxattr and getdents64 from the entries and listings the supervisor
// published of host directories (native/src/handlers/statpub.c). A directory that holds a
// hidden name is never published: after missing names were probed in it (which publishes a
// small directory), and after every visible entry of one was looked up each way and the
// directory listed, the table's bytes hold no hidden name, the listings leave it out, and
// it stays missing however it is asked (then it may be recorded, with the ENOENT it was given).
const PUBLISHED_PY = String.raw`
import errno, mmap, os, sys
home, tree = sys.argv[1], sys.argv[2]
def st(f):
    try: f(); return "OK"
    except OSError as e: return errno.errorcode[e.errno]
control = os.path.join(tree, "sub")  # holds nothing hidden: published
def table():
    t = os.open("/.cvisor-answers", os.O_RDONLY)
    return mmap.mmap(t, os.fstat(t).st_size, mmap.MAP_SHARED, mmap.PROT_READ)[:]
# missing names probed in each, before any is listed: the control is published for the probes
for d in (home, tree, control):
    for n in ("nope-a", "nope-b", "nope-c"):
        st(lambda: os.stat(os.path.join(d, n)))
data = table()
print("probed-holds-ssh", b".ssh" in data, "holds-readonly", b"readonly.txt" in data, "holds-control", b"nested.txt" in data)
for d, visible in ((home, ["visible.txt"]), (tree, ["sub", "hello.txt", "link-to-hello"]), (control, ["nested.txt"])):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.chdir(d)
    for _ in range(3):
        for name in visible:
            print(name, st(lambda: os.stat(os.path.join(d, name), follow_symlinks=False)),
                  st(lambda: os.stat(name, dir_fd=fd, follow_symlinks=False)), st(lambda: os.lstat(name)),
                  st(lambda: os.getxattr(os.path.join(d, name), "security.selinux", follow_symlinks=False)))
    print("lists", os.path.basename(d), sorted(n for n in os.listdir(d) if n in (".ssh", "readonly.txt", "nested.txt")))
data = table()
print("holds-ssh", b".ssh" in data, "holds-readonly", b"readonly.txt" in data, "holds-control", b"nested.txt" in data)
for d, hidden in ((home, ".ssh"), (tree, "readonly.txt")):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.chdir(d)
    print(hidden, *[st(f) for f in (lambda: os.stat(os.path.join(d, hidden), follow_symlinks=False),
                                     lambda: os.stat(hidden, dir_fd=fd, follow_symlinks=False),
                                     lambda: os.stat(hidden, dir_fd=fd), lambda: os.lstat(hidden),
                                     lambda: os.getxattr(os.path.join(d, hidden), "security.selinux"))])
`;

gtest("published stat records: no directory holding a hidden name is published", async (fx) => {
  const { home, env } = homeWithKey(fx);
  const r = await cvisor(
    ["--hide", fx.p("readonly.txt")],
    ["python3", "-c", PUBLISHED_PY, home, fx.p()],
    env,
  );
  assert.equal(r.code, 0, show(r));
  assert.match(r.out, /^visible\.txt OK OK OK E(NODATA|OPNOTSUPP)$/m, show(r));
  assert.match(r.out, /^hello\.txt OK OK OK E(NODATA|OPNOTSUPP)$/m, show(r));
  const lists = r.out.split("\n").filter((l) => l.startsWith("lists "));
  const base = (p: string): string => path.basename(p);
  assert.deepEqual(
    lists,
    [`lists ${base(home)} []`, `lists ${base(fx.p())} []`, "lists sub ['nested.txt']"],
    show(r),
  );
  assert.match(r.out, /^probed-holds-ssh False holds-readonly False holds-control True$/m, show(r));
  assert.match(r.out, /^holds-ssh False holds-readonly False holds-control True$/m, show(r));
  assert.match(r.out, /^\.ssh ENOENT ENOENT ENOENT ENOENT ENOENT$/m, show(r));
  assert.match(r.out, /^readonly\.txt ENOENT ENOENT ENOENT ENOENT ENOENT$/m, show(r));
});

// The shim's ask to make one fd follow a copy-up (/.cvisor-follow-copies/<fd>) made by the
// guest itself for fds that must stay as they are: a write fd, a host file nobody copied up, a
// pipe, a directory, an O_PATH fd of a file since copied up, numbers that are no fd and texts
// that are no number. Each answers ENOENT and leaves every fd the open file it was (same inode,
// same flags, same offset).
const FOLLOW_ASK_PY = String.raw`
import fcntl, os
w = os.open("new.txt", os.O_WRONLY | os.O_CREAT)
os.write(w, b"mine")
r = os.open("hello.txt", os.O_RDONLY)
os.read(r, 3)
p, q = os.pipe()
d = os.open("sub", os.O_RDONLY | os.O_DIRECTORY)
o = os.open("data.bin", os.O_PATH)  # the old inode, then copied up: an O_PATH fd is no reader
o_was = (os.fstat(o).st_ino, fcntl.fcntl(o, fcntl.F_GETFL))
with open("data.bin", "r+b") as f:
    f.write(b"X")
fds = [w, r, p, q, d, o]
def state():
    return [(os.fstat(f).st_ino, fcntl.fcntl(f, fcntl.F_GETFL), os.lseek(f, 0, os.SEEK_CUR) if f in (w, r, d) else 0)
            for f in fds]
before = state()
asks = [str(f) for f in fds] + ["-1", "99999", "4294967299", "3x", "", "/", "0"]
answers = set()
for a in asks:
    try:
        os.close(os.open("/.cvisor-follow-copies/" + a if a != "/" else "/.cvisor-follow-copies//", os.O_RDONLY))
        answers.add("opened " + a)
    except OSError as e:
        answers.add(os.strerror(e.errno))
print("answers", sorted(answers))
print("same", state() == before, state()[-1][:2] == o_was)
`;

gtest(
  "the shim's ask to follow a copy-up, made for fds that must not change, changes none",
  async (fx) => {
    const r = await cvisor(["-C", fx.p()], ["python3", "-c", FOLLOW_ASK_PY]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.out, /^answers \['No such file or directory'\]$/m, show(r));
    assert.match(r.out, /^same True True$/m, show(r));
  },
);

// A walk across sibling directories publishes each small one at its first miss
// (native/src/handlers/statpub.c): never one that holds a hidden name.
const SIBLINGS_PY = String.raw`
import errno, mmap, os, sys
tree = sys.argv[1]
def look(p):
    try: os.lstat(p); return "OK"
    except OSError as e: return errno.errorcode[e.errno]
for _ in range(2):
    for d in ["s1", "s2", "s3", "s4"]:
        for f in ["a.txt", "b.txt"]:
            look(os.path.join(tree, d, f))
t = os.open("/.cvisor-answers", os.O_RDONLY)
data = mmap.mmap(t, os.fstat(t).st_size, mmap.MAP_SHARED, mmap.PROT_READ)[:]
print("holds-secret", b"secret-name" in data, "holds-s4", b"s4-only" in data)
print("secret", look(os.path.join(tree, "s3", "secret-name")), sorted(os.listdir(os.path.join(tree, "s3"))))
`;

gtest("a walk across sibling directories publishes none that holds a hidden name", async (fx) => {
  const tree = path.join(fx.scratch, "walk");
  for (const d of ["s1", "s2", "s3", "s4"]) {
    mkdirSync(path.join(tree, d), { recursive: true });
    for (const f of ["a.txt", "b.txt"]) writeFileSync(path.join(tree, d, f), f);
  }
  writeFileSync(path.join(tree, "s3", "secret-name"), "hidden\n");
  writeFileSync(path.join(tree, "s4", "s4-only"), "visible\n");
  const r = await cvisor(
    ["--hide", path.join(tree, "s3", "secret-name")],
    ["python3", "-c", SIBLINGS_PY, tree],
  );
  assert.equal(r.code, 0, show(r));
  assert.match(r.out, /^holds-secret False holds-s4 True$/m, show(r));
  assert.match(r.out, /^secret ENOENT \['a\.txt', 'b\.txt'\]$/m, show(r));
});
