// Network policy from a real guest: a loopback TCP server started by the test is reachable by
// default and unreachable with --no-network (socket() fails with EACCES, the server sees no
// connection); inet ports are bound and listened on loopback addresses only, unless
// --allow-listen (any address) or --no-listen (none); AF_UNIX always works. With --allow-net
// rules only what they allow is reached, by address or by a name the guest finds in its
// /etc/hosts or looks up through the run's name service (exact and wildcard names, answered by a
// DNS server of the test's), and a thread flipping the address after the check never gets
// through.
import assert from "node:assert/strict";
import net from "node:net";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { Sandbox, type Denial } from "../../src/index.js";
import dgram from "node:dgram";
import os from "node:os";
import { answer, parseQuery } from "../../src/sandbox/broker/dns.js";
import { netracer, prober, RACE_ROUNDS, RACE_TIMEOUT } from "../helpers/cc.js";
import { gtest } from "../helpers/guard.js";
import { expectProbes, FAILED, type ProbeCase } from "../helpers/probe.js";
import { cvisor, show, sleep, uniqueToken } from "../helpers/repo.js";

interface Server {
  port: number;
  host: string;
  token: string;
  connections: () => number;
  close: () => Promise<void>;
}

/** A loopback server answering "ping" with "pong-TOKEN" and counting connections. */
function startServer(host: string): Promise<Server> {
  const token = uniqueToken("pong");
  let count = 0;
  const server = net.createServer((sock) => {
    count++;
    sock.on("error", () => undefined);
    sock.once("data", () => sock.end(`${token}\n`));
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => {
      const addr = server.address();
      if (addr === null || typeof addr === "string") {
        reject(new Error("no address"));
        return;
      }
      resolve({
        port: addr.port,
        host,
        token,
        connections: () => count,
        close: () => new Promise<void>((r) => server.close(() => r())),
      });
    });
  });
}

async function ipv6Loopback(): Promise<boolean> {
  try {
    const s = await startServer("::1");
    await s.close();
    return true;
  } catch {
    return false;
  }
}

/** A port nothing listens on right now. */
async function freePort(): Promise<number> {
  const s = await startServer("127.0.0.1");
  await s.close();
  return s.port;
}

/** A shell line: "ping" to HOST:PORT by bash's /dev/tcp (getaddrinfo), the first line back or "refused". */
function script(host: string, port: number): string {
  return `(exec 3<>/dev/tcp/${host}/${port} && echo ping >&3 && head -1 <&3) 2>/dev/null || echo refused`;
}

const UNIX_OK: ProbeCase[] = [
  { op: ["socket-unix"], expect: "OK" },
  { op: ["socketpair-unix"], expect: "OK" },
  { op: ["unix-abstract"], expect: "OK" },
  { op: ["listen-unix"], expect: "OK" },
];

gtest("without --no-network a guest connects to the test's loopback server", async () => {
  const v4 = await startServer("127.0.0.1");
  const v6 = (await ipv6Loopback()) ? await startServer("::1") : undefined;
  try {
    const cases: ProbeCase[] = [
      { op: ["connect-inet", "127.0.0.1", String(v4.port)], expect: `OK ${v4.token}` },
    ];
    if (v6) cases.push({ op: ["connect-inet", "::1", String(v6.port)], expect: `OK ${v6.token}` });
    await expectProbes(cases, "connect with network");
    assert.equal(v4.connections(), 1, "the server saw the guest's connection");
    if (v6) assert.equal(v6.connections(), 1);
  } finally {
    await v4.close();
    await v6?.close();
  }
});

gtest(
  "--no-network: AF_INET/AF_INET6 sockets fail with EACCES and the server sees nothing",
  async () => {
    const v4 = await startServer("127.0.0.1");
    try {
      await expectProbes(
        [
          { op: ["connect-inet", "127.0.0.1", String(v4.port)], expect: "EACCES" },
          { op: ["connect-inet", "::1", String(v4.port)], expect: "EACCES" },
          { op: ["socket-inet"], expect: "EACCES" },
          { op: ["socket-inet6"], expect: "EACCES" },
          { op: ["socket-inet-dgram"], expect: "EACCES" },
          { op: ["socket-inet6-dgram"], expect: "EACCES" },
          { op: ["socket-raw-inet"], expect: "EACCES" },
          // other ways onto the wire fail too (AF_PACKET needs CAP_NET_RAW: root in CI)
          { op: ["socket-packet"], expect: FAILED },
          ...UNIX_OK,
        ],
        "--no-network",
        ["--no-network"],
      );
      await sleep(200);
      assert.equal(v4.connections(), 0, "the guest reached the server despite --no-network");
    } finally {
      await v4.close();
    }
  },
);

gtest("--no-network stops a shell-level connect (bash /dev/tcp) as well", async () => {
  const v4 = await startServer("127.0.0.1");
  try {
    const script = `exec 3<>/dev/tcp/127.0.0.1/${v4.port} && echo connected || echo refused`;
    const blocked = await cvisor(["--no-network"], ["bash", "-c", script], {
      extraEnv: { LC_ALL: "C" },
    });
    assert.equal(blocked.out, "refused\n", show(blocked));
    assert.equal(v4.connections(), 0);
    const open = await cvisor([], ["bash", "-c", script]);
    assert.equal(open.out, "connected\n", show(open));
    await sleep(100);
    assert.equal(v4.connections(), 1);
  } finally {
    await v4.close();
  }
});

gtest(
  "by default inet ports are bound and listened on loopback addresses only; AF_UNIX works",
  async () => {
    const port = String(await freePort());
    const v6 = ["OK", "EADDRNOTAVAIL", "SETUP-bind-EADDRNOTAVAIL"];
    await expectProbes(
      [
        { op: ["bind-inet", "127.0.0.1", port], expect: "OK" },
        { op: ["bind-inet", "127.0.0.2", port], expect: "OK" },
        { op: ["bind-inet", "0.0.0.0", port], expect: "EACCES" },
        { op: ["bind-inet", "::1", port], expect: v6 },
        { op: ["bind-inet", "::ffff:127.0.0.1", port], expect: v6 },
        { op: ["bind-inet", "::", port], expect: "EACCES" },
        { op: ["bind-inet", "0.0.0.0", "0"], expect: "OK" },
        { op: ["listen-inet", "127.0.0.1"], expect: "OK" },
        { op: ["listen-inet", "::1"], expect: v6 },
        // Bound to the any-address (port 0 is always allowed), then listen: refused.
        { op: ["listen-inet", "0.0.0.0"], expect: "EACCES" },
        { op: ["listen-inet", "::"], expect: "EACCES" },
        // listen() on a never-bound socket binds it to the any-address
        { op: ["listen-unbound", "inet"], expect: "EACCES" },
        { op: ["listen-unbound", "inet6"], expect: "EACCES" },
        { op: ["bind-udp", "127.0.0.1", port], expect: "OK" },
        { op: ["bind-udp", "0.0.0.0", port], expect: "EACCES" },
        { op: ["bind-udp", "127.0.0.1", "0"], expect: "OK" },
        ...UNIX_OK,
      ],
      "listen policy (default)",
    );
  },
);

gtest(
  "a cloud's metadata range is refused, TCP and UDP, every address form; loopback still reached",
  async () => {
    const port = String(await freePort());
    const md = "169.254.169.254";
    const probes = await expectProbes(
      [
        { op: ["connect-inet", md, "80"], expect: "EACCES" },
        { op: ["connect-inet", "169.254.1.1", "80"], expect: "EACCES" },
        { op: ["connect-inet", "::ffff:169.254.169.254", "80"], expect: "EACCES" },
        { op: ["connect-inet", "fd00:ec2::254", "80"], expect: "EACCES" },
        { op: ["send-udp", md, "53", "sendto"], expect: "EACCES" },
        // An AF_INET socket sends to an AF_UNSPEC address as AF_INET.
        { op: ["send-udp", md, "53", "unspec"], expect: "EACCES" },
        { op: ["send-udp", md, "53", "connect"], expect: "EACCES" },
        { op: ["send-udp", md, "53", "v6sock"], expect: "EACCES" },
        // The first message (to loopback) goes, the second is refused.
        { op: ["send-udp", md, port, "sendmmsg"], expect: "SENT-1" },
        { op: ["send-udp", "127.0.0.1", port, "sendto"], expect: "OK" },
        { op: ["send-udp", "127.0.0.1", port, "unspec"], expect: "OK" },
        { op: ["send-udp", "127.0.0.1", port, "connect"], expect: "OK" },
      ],
      "metadata range",
      ["--json"],
    );
    const report = JSON.parse(probes.cli.err.trim().split("\n").at(-1) ?? "{}") as {
      denials?: Denial[];
    };
    const denial = report.denials?.find((d) => d.target === `${md} port 80`);
    assert.equal(denial?.syscall, "connect", show(probes.cli));
    assert.match(denial?.why ?? "", /cloud metadata/);
    // The process it refused: the probe's, by its name as the kernel keeps it (15 bytes).
    assert.equal(denial?.process, basename(prober()).slice(0, 15), show(probes.cli));
    assert.ok(Number.isInteger(denial?.pid) && (denial?.pid ?? 0) > 0, show(probes.cli));
  },
);

gtest("--no-listen: no inet port is bound or listened on, loopback neither", async () => {
  const port = String(await freePort());
  await expectProbes(
    [
      { op: ["bind-inet", "127.0.0.1", port], expect: "EACCES" },
      { op: ["bind-inet", "::1", port], expect: "EACCES" },
      { op: ["bind-inet", "127.0.0.1", "0"], expect: "OK" },
      { op: ["listen-inet", "127.0.0.1"], expect: "EACCES" },
      { op: ["listen-unbound", "inet"], expect: "EACCES" },
      { op: ["bind-udp", "127.0.0.1", port], expect: "EACCES" },
      ...UNIX_OK,
    ],
    "--no-listen",
    ["--no-listen"],
  );
});

gtest("--allow-listen: bind and listen work", async () => {
  const port = String(await freePort());
  await expectProbes(
    [
      { op: ["bind-inet", "127.0.0.1", port], expect: "OK" },
      { op: ["listen-inet", "127.0.0.1"], expect: "OK" },
      { op: ["listen-inet", "::1"], expect: ["OK", "EADDRNOTAVAIL", "SETUP-bind-EADDRNOTAVAIL"] },
      { op: ["listen-unbound", "inet"], expect: "OK" },
      { op: ["bind-inet", "0.0.0.0", port], expect: "OK" },
      { op: ["listen-inet", "0.0.0.0"], expect: "OK" },
      { op: ["bind-udp", "127.0.0.1", port], expect: "OK" },
      ...UNIX_OK,
    ],
    "--allow-listen",
    ["--allow-listen"],
  );
});

gtest("library: network, listen and allowListen map to the same policies", async () => {
  const v4 = await startServer("127.0.0.1");
  try {
    const probe = prober();
    const connect = ["connect-inet", "127.0.0.1", String(v4.port)];
    const off = await new Sandbox({ network: false }).run([probe, ...connect]);
    assert.equal(off.stdout, "EACCES\n", off.stderr);
    const on = await new Sandbox().run([probe, ...connect]);
    assert.equal(on.stdout, `OK ${v4.token}\n`, on.stderr);
    const perRun = await new Sandbox().run([probe, ...connect], { network: false });
    assert.equal(perRun.stdout, "EACCES\n", perRun.stderr);
    assert.equal(v4.connections(), 1);
    const anyAddress = [probe, "listen-inet", "0.0.0.0"];
    const loopback = [probe, "listen-inet", "127.0.0.1"];
    const listened = async (o: ConstructorParameters<typeof Sandbox>[0], argv: string[]) =>
      (await new Sandbox(o).run(argv)).stdout.trim();
    assert.equal(await listened({}, loopback), "OK");
    assert.equal(await listened({}, anyAddress), "EACCES");
    assert.equal(await listened({ allowListen: true }, anyAddress), "OK");
    assert.equal(await listened({ listen: "any" }, anyAddress), "OK");
    assert.equal(await listened({ listen: "none" }, loopback), "EACCES");
    assert.equal(await listened({ allowListen: false }, loopback), "EACCES");
    const perRunNone = await new Sandbox().run(loopback, { listen: "none" });
    assert.equal(perRunNone.stdout, "EACCES\n", perRunNone.stderr);
    const bad = { listen: "everywhere" } as unknown as ConstructorParameters<typeof Sandbox>[0];
    await assert.rejects(new Sandbox(bad).run(loopback), /invalid listen policy everywhere/);
  } finally {
    await v4.close();
  }
});

/** A loopback UDP socket counting the datagrams it gets. */
function startUdp(): Promise<{ port: number; received: () => number; close: () => void }> {
  const sock = dgram.createSocket("udp4");
  let count = 0;
  sock.on("message", () => count++);
  return new Promise((resolve, reject) => {
    sock.once("error", reject);
    sock.bind(0, "127.0.0.1", () => {
      resolve({ port: sock.address().port, received: () => count, close: () => sock.close() });
    });
  });
}

gtest(
  "--allow-net: only the destinations a rule allows, TCP and UDP; loopback only when a rule names it",
  async () => {
    const a = await startServer("127.0.0.1");
    const b = await startServer("127.0.0.1");
    try {
      const [A, B] = [String(a.port), String(b.port)];
      const probes = await expectProbes(
        [
          { op: ["connect-inet", "127.0.0.1", A], expect: `OK ${a.token}` },
          { op: ["connect-inet", "127.0.0.1", B], expect: "EACCES" },
          { op: ["connect-inet", "::1", A], expect: "EACCES" },
          { op: ["connect-inet", "::ffff:127.0.0.1", A], expect: ["OK " + a.token, "ENETUNREACH"] },
          { op: ["connect-inet", "10.11.12.13", "443"], expect: "EACCES" },
          { op: ["send-udp", "127.0.0.1", A, "sendto"], expect: "OK" },
          { op: ["send-udp", "127.0.0.1", B, "sendto"], expect: "EACCES" },
          { op: ["send-udp", "127.0.0.1", B, "unspec"], expect: "EACCES" },
          { op: ["send-udp", "127.0.0.1", B, "connect"], expect: "EACCES" },
          // sendmmsg: the first message (to 127.0.0.1:A) goes, the second (to B's host) not.
          { op: ["send-udp", "127.0.0.2", A, "sendmmsg"], expect: "SENT-1" },
          // DNS is one more destination: no rule, no lookup.
          { op: ["send-udp", "127.0.0.53", "53", "sendto"], expect: "EACCES" },
          // A raw socket's packets carry their own destination: no guest keeps CAP_NET_RAW.
          { op: ["socket-raw-inet"], expect: "EPERM" },
          ...UNIX_OK,
        ],
        "--allow-net one address and port",
        ["--allow-net", `127.0.0.1:${A}`],
      );
      assert.equal(b.connections(), 0, "the guest reached the refused server");
      assert.equal(a.connections(), 2, show(probes.cli));
      // One line per refused host on stderr, its ports together, and the rule that allows it.
      const lines = probes.cli.err.split("\n").filter((l) => l.startsWith("cvisor: refused"));
      assert.ok(
        lines.includes(
          `cvisor: refused connect/sendto/sendmsg to 127.0.0.1 port ${B}: no --allow-net rule allows it (--allow-net 127.0.0.1:${B} lets it through)`,
        ) ||
          lines.some((l) =>
            new RegExp(
              `^cvisor: refused \\S+ to 127\\.0\\.0\\.1 port ${B}: no --allow-net rule allows it`,
            ).test(l),
          ),
        show(probes.cli),
      );
      assert.equal(lines.filter((l) => l.includes(" to 127.0.0.1 ")).length, 1, show(probes.cli));
      assert.ok(
        lines.some((l) => l.includes(" to ::1 port ")),
        show(probes.cli),
      );
      // A prefix and a port range; a rule for everything does not name loopback.
      const [lo, hi] = [Math.min(a.port, b.port), Math.max(a.port, b.port)];
      await expectProbes(
        [
          { op: ["connect-inet", "127.0.0.1", A], expect: `OK ${a.token}` },
          { op: ["connect-inet", "127.0.0.1", B], expect: `OK ${b.token}` },
          // allowed, and nothing listens there
          { op: ["connect-inet", "127.0.0.2", A], expect: "ECONNREFUSED" },
          { op: ["connect-inet", "127.0.0.1", String(hi + 1)], expect: "EACCES" },
        ],
        "--allow-net a prefix and a range",
        ["--allow-net", `127.0.0.0/8:${lo}-${hi}`],
      );
      await expectProbes(
        [
          { op: ["connect-inet", "127.0.0.1", A], expect: "EACCES" },
          { op: ["connect-inet", "0.0.0.0", A], expect: "EACCES" },
          { op: ["connect-inet", "169.254.169.254", "80"], expect: "EACCES" },
        ],
        "--allow-net 0.0.0.0/0 names no loopback or link-local address",
        ["--allow-net", "0.0.0.0/0", "--allow-net", "[::]/0"],
      );
    } finally {
      await a.close();
      await b.close();
    }
  },
);

gtest(
  "--allow-net NAME: the guest reaches it by name through its /etc/hosts, and only its addresses",
  async () => {
    const a = await startServer("127.0.0.1");
    const b = await startServer("127.0.0.1");
    try {
      const r = await cvisor(
        ["--add-host", "api.test:127.0.0.1", "--allow-net", `api.test:${a.port}`],
        [
          "bash",
          "-c",
          [
            "grep -c 'api.test' /etc/hosts",
            script("api.test", a.port),
            script("127.0.0.1", a.port),
            script("api.test", b.port),
            // The guest's own names count for nothing: its /etc/hosts is its own view.
            "echo '127.0.0.1 other.test' >> /etc/hosts",
            script("other.test", b.port),
          ].join("; "),
        ],
      );
      assert.equal(r.code, 0, show(r));
      assert.equal(r.out, `1\n${a.token}\n${a.token}\nrefused\nrefused\n`, show(r));
      assert.equal(b.connections(), 0);
      // The host's resolver answers for names it knows (localhost: its /etc/hosts).
      const local = await cvisor(
        ["--allow-net", `localhost:${a.port}`],
        ["bash", "-c", script("localhost", a.port)],
      );
      assert.equal(local.out, `${a.token}\n`, show(local));
      // The host's /etc/hosts is unchanged, and the run left no layer behind.
      assert.ok(!readFileSync("/etc/hosts", "utf8").includes("api.test"));
    } finally {
      await a.close();
      await b.close();
    }
  },
);

/** A DNS server on 127.0.0.1 (UDP) answering the names of `map`, NXDOMAIN for any other. */
function startDns(
  map: Record<string, string[]>,
): Promise<{ port: number; asked: string[]; close: () => void }> {
  const asked: string[] = [];
  const sock = dgram.createSocket("udp4");
  sock.on("message", (msg, from) => {
    const q = parseQuery(msg);
    if (q === null || !("name" in q)) return;
    asked.push(q.name);
    const addrs = map[q.name];
    const of = (addrs ?? []).filter((a) => a.includes(":") === (q.type === 28));
    sock.send(answer(q, addrs === undefined ? 3 : 0, of), from.port, from.address);
  });
  return new Promise((resolve) => {
    sock.bind(0, "127.0.0.1", () =>
      resolve({ port: sock.address().port, asked, close: () => sock.close() }),
    );
  });
}

/** An IPv4 address of this host other than loopback, if it has one. */
function hostAddress(): string | undefined {
  return Object.values(os.networkInterfaces())
    .flat()
    .find((i) => i !== undefined && i.family === "IPv4" && !i.internal)?.address;
}

gtest(
  "--allow-net *.domain and names no hosts file lists: looked up when the guest asks, and only what they resolve to",
  async () => {
    const ip = hostAddress() ?? "";
    const a = await startServer(ip);
    const local = await startServer("127.0.0.1");
    const dns = await startDns({
      "a.wild.test": [ip],
      "api.svc.test": [ip],
      "loop.wild.test": ["127.0.0.1"],
      "evil.test": [ip],
    });
    try {
      const r = await cvisor(
        [
          ...["--allow-net", "*.wild.test", "--allow-net", `api.svc.test:${a.port}`],
          ...["--dns", `127.0.0.1:${dns.port}`],
        ],
        [
          "bash",
          "-c",
          [
            "grep -c 'options use-vc' /etc/resolv.conf",
            // A refused name as long as names go does not stop the grants that follow.
            `getent hosts ${["x", "y", "z", "w"].map((c) => c.repeat(60)).join(".")}.evil || true`,
            script("a.wild.test", a.port),
            script("api.svc.test", a.port),
            "getent hosts api.svc.test >/dev/null && echo found",
            // A name that resolves to this host's loopback opens nothing.
            script("loop.wild.test", local.port),
            // Names no rule names are not looked up: the test's server never hears of them.
            script("evil.test", a.port),
            "getent hosts evil.test || echo nxdomain",
            script("wild.test", a.port),
          ].join("; "),
        ],
      );
      assert.equal(r.code, 0, show(r));
      assert.equal(
        r.out,
        `1
${a.token}
${a.token}
found
refused
refused
nxdomain
refused
`,
        show(r),
      );
      assert.equal(a.connections(), 2, show(r));
      assert.equal(local.connections(), 0, "a looked-up name opened loopback");
      assert.ok(!dns.asked.includes("evil.test") && !dns.asked.includes("wild.test"), show(r));
      assert.ok(dns.asked.includes("a.wild.test") && dns.asked.includes("api.svc.test"));
      assert.match(
        r.err,
        /refused DNS lookup of evil\.test: no --allow-net rule names it \(--allow-net evil\.test lets it through\)/,
      );
      assert.match(r.err, new RegExp(`refused connect to 127\\.0\\.0\\.1 port ${local.port}`));
      // The --json report names the name, and the process that asked.
      const json = await cvisor(
        ["--json", "--allow-net", "*.wild.test", "--dns", `127.0.0.1:${dns.port}`],
        ["getent", "hosts", "evil.test"],
      );
      const report = JSON.parse(json.err.trim().split("\n").at(-1) ?? "{}") as {
        denials?: Denial[];
      };
      assert.deepEqual(
        report.denials?.map(({ syscall, target, process }) => ({ syscall, target, process })),
        [{ syscall: "dns", target: "evil.test", process: "getent" }],
        show(json),
      );
      // The library's options are the same.
      const lib = await new Sandbox({ allowNet: ["*.wild.test"] }).run(
        ["getent", "hosts", "a.wild.test"],
        { dns: [`127.0.0.1:${dns.port}`] },
      );
      assert.equal(lib.stdout.split(/\s+/)[0], ip, lib.stderr);
    } finally {
      await a.close();
      await local.close();
      dns.close();
    }
  },
  {
    skip:
      hostAddress() === undefined &&
      "this host has no IPv4 address but loopback: no server a looked-up name may lead to",
  },
);

gtest(
  "--network host keeps the metadata range refused unless --allow-net names it; --network none",
  async () => {
    const md = "169.254.169.254";
    // UDP: a send leaves at once whatever answers there (nothing here).
    await expectProbes(
      [
        { op: ["send-udp", md, "9", "sendto"], expect: "OK" },
        { op: ["send-udp", md, "10", "sendto"], expect: "EACCES" },
        { op: ["send-udp", "169.254.1.1", "9", "sendto"], expect: "EACCES" },
      ],
      "--network host --allow-net the metadata address",
      ["--network", "host", "--allow-net", `${md}:9`],
    );
    const v4 = await startServer("127.0.0.1");
    try {
      await expectProbes(
        [
          { op: ["connect-inet", "127.0.0.1", String(v4.port)], expect: `OK ${v4.token}` },
          { op: ["send-udp", md, "9", "sendto"], expect: "EACCES" },
        ],
        "--network host",
        ["--network", "host"],
      );
      await expectProbes(
        [{ op: ["connect-inet", "127.0.0.1", String(v4.port)], expect: "EACCES" }, ...UNIX_OK],
        "--network none",
        ["--network", "none"],
      );
    } finally {
      await v4.close();
    }
    // --dns outside an allow-list: the guest's own name servers (docker's flag), the host's
    // other resolv.conf lines kept, the host's file untouched.
    const hostConf = readFileSync("/etc/resolv.conf", "utf8");
    const conf = await cvisor(
      ["--dns", "192.0.2.53", "--dns", "2001:db8::53"],
      ["cat", "/etc/resolv.conf"],
    );
    assert.equal(conf.code, 0, show(conf));
    const servers = conf.out.split("\n").filter((l) => l.startsWith("nameserver"));
    assert.deepEqual(servers, ["nameserver 192.0.2.53", "nameserver 2001:db8::53"], show(conf));
    assert.equal(readFileSync("/etc/resolv.conf", "utf8"), hostConf);
    for (const [args, message] of [
      [["--network", "none", "--allow-net", "10.0.0.1"], /--allow-net needs the network/],
      [["--no-network", "--allow-net", "10.0.0.1"], /--allow-net needs the network/],
      [["--network", "bridge"], /invalid --network mode 'bridge': use host or none/],
      [["--allow-net", "*.com"], /'\*\.com' is not a wildcard name/],
      [["--dns", "dns.example"], /invalid --dns 'dns\.example'/],
      [["--dns", "10.0.0.1:5353"], /--dns with a port needs an allow-list name rule/],
      [["--allow-net", "10.0.0.0/33"], /the prefix must be 0 to 32/],
      [["--allow-net", "10.0.0.1:0"], /is not a port/],
      [["--allow-net", "10.0.0.1:90-80"], /is not a port/],
      [["--add-host", "api.test"], /invalid --add-host 'api.test'/],
      [
        ["--network", "host", "--allow-net", "no-such-host.invalid"],
        /cannot resolve no-such-host\.invalid/,
      ],
    ] as const) {
      const r = await cvisor([...args], ["true"]);
      assert.equal(r.code, 125, show(r));
      assert.match(r.err, message);
      assert.equal(r.err.trim().split("\n").length, 1, show(r));
    }
  },
);

gtest(
  "--allow-net: a thread flipping the address after the check never gets through (TCP, UDP)",
  async () => {
    const good = await startServer("127.0.0.1");
    const bad = await startServer("127.0.0.1");
    const goodUdp = await startUdp();
    const badUdp = await startUdp();
    try {
      for (const [mode, g, b] of [
        ["tcp", good.port, bad.port],
        ["udp", goodUdp.port, badUdp.port],
      ] as const) {
        const r = await cvisor(
          ["--allow-net", `127.0.0.1:${g}`],
          [netracer(), mode, String(g), String(b), RACE_ROUNDS],
          { timeoutMs: RACE_TIMEOUT },
        );
        assert.equal(r.code, 0, show(r));
        const m = /^netracer \w+ tries=(\d+) ok=(\d+) refused=(\d+) other=(\d+)$/m.exec(r.out);
        assert.ok(m, show(r));
        // The race was real: both addresses were tried many times.
        assert.ok(Number(m[2]) > 0 && Number(m[3]) > 0, show(r));
      }
      await sleep(300);
      assert.equal(bad.connections(), 0, "a connect reached the refused port");
      assert.equal(badUdp.received(), 0, "a datagram reached the refused port");
      assert.ok(good.connections() > 0 && goodUdp.received() > 0);
    } finally {
      await good.close();
      await bad.close();
      goodUdp.close();
      badUdp.close();
    }
  },
  { timeout: RACE_TIMEOUT },
);

gtest("library: allowNet, addHosts and network modes, per sandbox and per run", async () => {
  const a = await startServer("127.0.0.1");
  const b = await startServer("127.0.0.1");
  try {
    const probe = prober();
    const to = (s: Server) => [probe, "connect-inet", "127.0.0.1", String(s.port)];
    const sb = new Sandbox({ allowNet: [`127.0.0.1:${a.port}`] });
    assert.equal((await sb.run(to(a))).stdout, `OK ${a.token}\n`);
    assert.equal((await sb.run(to(b))).stdout, "EACCES\n");
    // A run's rules add to the sandbox's.
    assert.equal(
      (await sb.run(to(b), { allowNet: [`127.0.0.1:${b.port}`] })).stdout,
      `OK ${b.token}\n`,
    );
    assert.equal((await sb.run(to(a), { network: "none" })).stdout, "EACCES\n");
    const named = await new Sandbox({
      addHosts: ["api.test=127.0.0.1"],
      allowNet: [`api.test:${a.port}`],
    }).run(["sh", "-c", "grep api.test /etc/hosts"]);
    assert.equal(named.stdout, "127.0.0.1\tapi.test\n", named.stderr);
    assert.equal((await new Sandbox({ network: "host" }).run(to(b))).stdout, `OK ${b.token}\n`);
    await assert.rejects(
      new Sandbox({ network: "none", allowNet: ["10.0.0.1"] }).run(["true"]),
      /--allow-net needs the network/,
    );
    await assert.rejects(new Sandbox({ allowNet: ["10.0.0.1:x"] }).run(["true"]), /is not a port/);
    const bad = { network: "bridge" } as unknown as ConstructorParameters<typeof Sandbox>[0];
    await assert.rejects(new Sandbox(bad).run(["true"]), /invalid network mode bridge/);
  } finally {
    await a.close();
    await b.close();
  }
});
