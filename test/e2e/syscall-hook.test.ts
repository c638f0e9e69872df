// The per-syscall hook (onSyscall, issue 14) with real guests: the handler sees each hooked call
// decoded (paths, open flags, an exec's argv, a socket address, what cvisor would do), `deny`
// fails exactly that call with its errno, `allow` changes nothing, a hook can never make the
// sandbox weaker (hidden paths stay hidden, a denied network stays denied), a handler that
// throws fails its call closed and is reported, a slow (async) handler holds the call until it
// answers, and a run without a hook is not notified of anything more.
import assert from "node:assert/strict";
import { once } from "node:events";
import fs from "node:fs";
import net from "node:net";
import {
  allow,
  deny,
  result,
  Sandbox,
  UsageError,
  type SyscallCall,
  type SyscallHook,
} from "../../src/index.js";
import { gtest } from "../helpers/guard.js";
import { HELLO_TEXT, NESTED_TEXT } from "../helpers/fixture.js";

/** A hook that records every call and answers with decide (allow by default). */
function recorder(
  syscalls: string[],
  decide: (c: SyscallCall) => ReturnType<SyscallHook["handler"]> = () => allow,
): { hook: SyscallHook; calls: SyscallCall[] } {
  const calls: SyscallCall[] = [];
  return {
    calls,
    hook: {
      syscalls,
      handler: (c) => {
        calls.push(c);
        return decide(c);
      },
    },
  };
}

gtest(
  "onSyscall: deny of one path's openat fails that cat with the errno, nothing else",
  async (fx) => {
    const target = fx.p("hello.txt");
    const { hook, calls } = recorder(["openat"], (c) =>
      c.paths[0] === target ? deny("EACCES") : allow,
    );
    const sb = new Sandbox({ onSyscall: hook });
    const script = 'cat "$0"; echo "rc=$?"; cat "$1"';
    const r = await sb.run(["sh", "-c", script, target, fx.p("sub", "nested.txt")]);
    assert.equal(r.stdout, `rc=1\n${NESTED_TEXT}`);
    assert.match(r.stderr, /^cat: .*hello\.txt: Permission denied\n$/);
    assert.deepEqual(r.hookErrors, []);
    const mine = calls.find((c) => c.paths[0] === target);
    assert.ok(mine, "the handler saw the openat of the file");
    assert.equal(mine.name, "openat");
    assert.equal(mine.nr, 257);
    assert.deepEqual(mine.flags, ["O_RDONLY"]);
    assert.equal(mine.cvisor, "handled");
    assert.ok(mine.pid > 0 && mine.tid > 0);

    // The same line without the hook: the file reads, so the hook made the only difference.
    const plain = await new Sandbox().run(["sh", "-c", script, target, fx.p("sub", "nested.txt")]);
    assert.equal(plain.stdout, `${HELLO_TEXT}rc=0\n${NESTED_TEXT}`);
    assert.equal(plain.hookErrors, undefined);
  },
);

gtest("onSyscall: an exec's argv and a connect's address, decoded; deny a connect", async () => {
  const server = net.createServer((s) => s.end("hello\n"));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as net.AddressInfo).port;
  try {
    // The second connect to the server is refused by the hook, as if nothing listened. Only
    // those count: a python3 that is a shim (pyenv) connects to nscd's socket on its way.
    const toServer = (c: SyscallCall): boolean =>
      c.name === "connect" && c.address?.family === "inet" && c.address.port === port;
    const { hook, calls } = recorder(["execve", "connect"], (c) =>
      toServer(c) && calls.filter(toServer).length === 2 ? deny("ECONNREFUSED") : allow,
    );
    const py = `import socket
for i in range(2):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", ${port})); print("connected", s.recv(10).decode().strip())
    except OSError as e:
        print("refused", e.errno)`;
    const r = await new Sandbox({ onSyscall: hook }).run(["python3", "-c", py]);
    // The connects the hook saw, to tell a failure's cause from the message alone.
    const seen = JSON.stringify(
      calls.filter((c) => c.name === "connect").map((c) => ({ pid: c.pid, address: c.address })),
    );
    assert.equal(r.exitCode, 0, `${r.stderr}\ncalls: ${seen}`);
    assert.equal(r.stdout, "connected hello\nrefused 111\n", `calls: ${seen}\n${r.stderr}`);
    const exec = calls.find((c) => c.name === "execve");
    assert.deepEqual(exec?.argv, ["python3", "-c", py]);
    assert.match(exec?.paths[0] ?? "", /python3/);
    const connects = calls.filter(toServer);
    assert.equal(connects.length, 2, seen);
    assert.deepEqual(connects[0]?.address, { family: "inet", address: "127.0.0.1", port });
  } finally {
    server.close();
  }
});

gtest("onSyscall: a hook cannot make the sandbox weaker", async (fx) => {
  // Allowing everything keeps a hidden path hidden and a denied network denied.
  const { hook, calls } = recorder(["openat", "socket"]);
  const sb = new Sandbox({ onSyscall: hook, hide: [fx.p("hello.txt")], network: false });
  const r = await sb.run([
    "sh",
    "-c",
    'cat "$0" 2>/dev/null || echo hidden; python3 -c "import socket; socket.socket()" 2>&1 | tail -1',
    fx.p("hello.txt"),
  ]);
  assert.equal(r.stdout.split("\n")[0], "hidden");
  assert.match(r.stdout, /PermissionError|Permission denied/);
  // The socket row is native for AF_UNIX and denied (EACCES) for AF_INET without a network.
  const inet = calls.find((c) => c.name === "socket" && c.args[0] === 2n);
  assert.equal(inet?.cvisor, "denied");
  assert.equal(inet?.deniedErrno, "EACCES");
});

gtest("onSyscall: a natively allowed syscall is hooked too; deny makes it fail", async () => {
  const { hook, calls } = recorder(["socket"], (c) => (c.args[0] === 1n ? deny("EMFILE") : allow));
  const py =
    "import socket\ntry:\n    socket.socket(socket.AF_UNIX)\nexcept OSError as e:\n    print(e.errno)";
  const r = await new Sandbox({ onSyscall: hook }).run(["python3", "-c", py]);
  assert.equal(r.stdout, "24\n", r.stderr);
  const unix = calls.find((c) => c.name === "socket" && c.args[0] === 1n);
  assert.equal(unix?.cvisor, "native");
});

gtest(
  "onSyscall: a throwing handler fails the call closed and is reported; async handlers wait",
  async (fx) => {
    let n = 0;
    const r = await new Sandbox().run(["cat", fx.p("hello.txt")], {
      onSyscall: {
        syscalls: ["openat"],
        handler: async (c) => {
          await new Promise((resolve) => setTimeout(resolve, 20)); // slow, but answered
          if (c.paths[0] === fx.p("hello.txt")) throw new Error(`no ${++n}`);
          return allow;
        },
      },
    });
    assert.equal(r.exitCode, 1);
    assert.match(r.stderr, /Operation not permitted/);
    assert.deepEqual(r.hookErrors, [{ syscall: "openat", message: "no 1" }]);

    const bad = await new Sandbox().run(["cat", fx.p("hello.txt")], {
      onSyscall: {
        syscalls: ["openat"],
        handler: (c) => (c.paths[0] === fx.p("hello.txt") ? deny("ENOTANERRNO") : allow),
      },
    });
    assert.equal(bad.exitCode, 1);
    assert.match(bad.hookErrors?.[0]?.message ?? "", /not an errno/);
  },
);

gtest("onSyscall: per run, or none; unknown names are refused", async (fx) => {
  const { hook, calls } = recorder(["openat"]);
  const sb = new Sandbox({ onSyscall: hook });
  const off = await sb.run(["cat", fx.p("hello.txt")], { onSyscall: null });
  assert.equal(off.stdout, HELLO_TEXT);
  assert.equal(calls.length, 0, "onSyscall: null turns the Sandbox's hook off for the run");
  const on = await sb.run(["cat", fx.p("hello.txt")]);
  assert.equal(on.stdout, HELLO_TEXT);
  assert.ok(calls.length > 0);
  await assert.rejects(
    new Sandbox().run(["true"], { onSyscall: { syscalls: ["nosuchcall"], handler: () => allow } }),
    UsageError,
  );
  await assert.rejects(
    new Sandbox().run(["true"], { onSyscall: { syscalls: [], handler: () => allow } }),
    UsageError,
  );
});

gtest(
  "onSyscall: only the hooked syscall is notified more, and only in the hooked run",
  async () => {
    const script = ["sh", "-c", "echo $$"]; // sh asks getpid (natively allowed) once
    const plain = await new Sandbox().run(script);
    const { hook, calls } = recorder(["getpid"]);
    const hooked = await new Sandbox({ onSyscall: hook }).run(script);
    assert.equal(plain.stats.notifications.getpid, undefined);
    assert.equal(hooked.stats.notifications.getpid, calls.length);
    assert.ok(calls.length >= 1 && calls.every((c) => c.cvisor === "native"));
    const { getpid: _, ...rest } = hooked.stats.notifications;
    assert.deepEqual(rest, plain.stats.notifications, "every other syscall as without the hook");
    assert.equal(hooked.stdout, `${calls[0]?.pid}\n`, "the guest's own pid, as the hook saw it");
  },
);

gtest(
  "onSyscall: a handler that never answers holds its call, but not past a kill or the deadline",
  async (fx) => {
    const never: SyscallHook = {
      syscalls: ["openat"],
      handler: (c) => (c.paths[0] === fx.p("hello.txt") ? new Promise(() => undefined) : allow),
    };
    const timed = await new Sandbox({ onSyscall: never }).run(["cat", fx.p("hello.txt")], {
      timeout: "800ms",
    });
    assert.equal(timed.timedOut, true);
    const controller = new AbortController();
    const running = new Sandbox({ onSyscall: never }).run(["cat", fx.p("hello.txt")], {
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 300);
    const killed = await running;
    assert.notEqual(killed.exitCode, 0);
    assert.equal(killed.stdout, "");
  },
);

gtest(
  "onSyscall: result(value) answers a call without making it; cvisor's refusals stand",
  async () => {
    const sb = new Sandbox({
      network: false,
      onSyscall: {
        syscalls: ["getuid", "socket"],
        handler: (c) => (c.name === "getuid" ? result(4242) : result(3)),
      },
    });
    const py = `import os, socket
print(os.getuid())
try:
    socket.socket(socket.AF_INET)
except OSError as e:
    print("socket", e.errno)`;
    // The interpreter itself: a shell wrapper would believe the uid too.
    const r = await sb.run(["/usr/bin/python3", "-c", py]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "4242\nsocket 13\n");
    const bad = await new Sandbox({
      onSyscall: { syscalls: ["getuid"], handler: () => result(2n ** 64n) },
    }).run(["/usr/bin/python3", "-c", "import os; print(os.getuid())"]);
    assert.match(bad.hookErrors?.[0]?.message ?? "", /not a 64-bit integer/);
  },
);

gtest(
  "onSyscall: a guest that rewrites the path after the hook's read cannot open what it denied",
  async (fx) => {
    // Two names of one length; the hook allows only the first. A second guest thread flips the
    // path buffer while the first opens it, so a supervisor that read the path again after
    // asking the hook would open the denied file now and then.
    const py = `import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
buf = ctypes.create_string_buffer(a, len(a) + 1)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, b, len(b)); ctypes.memmove(buf, a, len(a))
threading.Thread(target=flip, daemon=True).start()
seen = {"allowed": 0, "secret": 0, "denied": 0}
for _ in range(int(sys.argv[3])):
    fd = libc.open(buf, os.O_RDONLY)
    if fd < 0:
        seen["denied"] += 1
        continue
    seen[os.read(fd, 100).decode().strip()] += 1
    os.close(fd)
stop = True
print(seen["allowed"], seen["secret"], seen["denied"])`;
    const [allowed, secret] = [fx.p("allowed.txt"), fx.p("secret1.txt")];
    const r = await new Sandbox({
      onSyscall: {
        syscalls: ["openat"],
        handler: (c) => (c.paths[0] === secret ? deny("EACCES") : allow),
      },
    }).run(["python3", "-c", py, allowed, secret, "400"]);
    assert.equal(r.exitCode, 0, r.stderr);
    const [opened, leaked, denied] = r.stdout.trim().split(" ").map(Number);
    assert.equal(leaked, 0, `the guest read the denied file ${leaked} times (${r.stdout.trim()})`);
    assert.ok((opened ?? 0) > 0 && (denied ?? 0) > 0, `both names were tried: ${r.stdout}`);
  },
  {
    setup: (fx) => {
      fs.writeFileSync(fx.p("allowed.txt"), "allowed\n");
      fs.writeFileSync(fx.p("secret1.txt"), "secret\n");
    },
  },
);

gtest("onSyscall: paths as written and as resolved in the sandbox", async (fx) => {
  const py = `import os, sys
os.chdir(os.path.join(sys.argv[1], "sub"))
open("../hello.txt").close()
os.symlink("../hello.txt", "link")
open("link").close()
os.lstat("link")
os.unlink("link")
d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
os.stat("sub/nested.txt", dir_fd=d)
try:
    os.stat("nodir/x")
except OSError:
    pass`;
  const { hook, calls } = recorder([
    "openat",
    "symlink",
    "symlinkat",
    "newfstatat",
    "unlink",
    "unlinkat",
  ]);
  const r = await new Sandbox({ onSyscall: hook }).run(["python3", "-c", py, fx.root]);
  assert.equal(r.exitCode, 0, r.stderr);
  const seen = (name: string | RegExp, path: string) =>
    calls.filter(
      (c) =>
        (typeof name === "string" ? c.name === name : name.test(c.name)) && c.paths.at(-1) === path,
    );
  const one = (name: string | RegExp, path: string) => {
    const found = seen(name, path);
    assert.ok(found.length > 0, `a ${String(name)} of ${path}`);
    return found.map((c) => c.resolved);
  };
  assert.deepEqual(one("openat", "../hello.txt"), [[fx.p("hello.txt")]]);
  // The link's text is not a path the call resolves; its new name is.
  assert.deepEqual(one(/^symlink/, "link"), [[null, fx.p("sub", "link")]]);
  // open follows the link; lstat and unlink name the link itself.
  const linkCalls = seen(/^(openat|newfstatat|unlink|unlinkat)$/, "link");
  assert.deepEqual(
    linkCalls.map((c) => [c.name, c.resolved.at(-1)]),
    [
      ["openat", fx.p("hello.txt")],
      ["newfstatat", fx.p("sub", "link")],
      [linkCalls[2]?.name ?? "unlink", fx.p("sub", "link")],
    ],
  );
  assert.deepEqual(one("newfstatat", "sub/nested.txt"), [[fx.p("sub", "nested.txt")]]);
  assert.deepEqual(one("newfstatat", "nodir/x"), [[null]]);
  assert.ok(
    calls.every((c) => c.resolved.length === c.paths.length),
    "a resolved entry per path",
  );
});

gtest(
  "onSyscall: a handler still deciding one call does not hold the run's other calls",
  async (fx) => {
    // The handler answers the open of `slow` only once it has seen (and allowed) the open of
    // `fast`, which another process makes meanwhile; if one pending answer held every call,
    // the fast open would never come and the slow one would give up after 10 s.
    const [slow, fast] = [fx.p("hello.txt"), fx.p("sub", "nested.txt")];
    let fastSeen: () => void = () => {};
    const sawFast = new Promise<void>((resolve) => (fastSeen = resolve));
    let order = "";
    const r = await new Sandbox().run(
      ["sh", "-c", 'cat "$0" > /dev/null & sleep 0.3; cat "$1"; wait', slow, fast],
      {
        onSyscall: {
          syscalls: ["openat"],
          handler: async (c) => {
            if (c.paths[0] === fast) {
              order += "fast ";
              fastSeen();
            } else if (c.paths[0] === slow) {
              order += "slow-asked ";
              let timer: NodeJS.Timeout | undefined;
              const gaveUp = await Promise.race([
                sawFast.then(() => false),
                new Promise<boolean>(
                  (resolve) => (timer = setTimeout(() => resolve(true), 10_000)),
                ),
              ]);
              clearTimeout(timer);
              order += gaveUp ? "slow-gave-up " : "slow-answered ";
            }
            return allow;
          },
        },
      },
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, NESTED_TEXT);
    assert.ok(order.includes("fast") && !order.includes("gave-up"), order);
  },
);
