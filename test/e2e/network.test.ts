// Network policy from a real guest: a loopback TCP server started by the test is reachable by
// default and unreachable with --no-network (socket() fails with EACCES, the server sees no
// connection); inet ports are bound and listened on loopback addresses only, unless
// --allow-listen (any address) or --no-listen (none); AF_UNIX always works.
import assert from "node:assert/strict";
import net from "node:net";
import { Sandbox } from "../../src/index.js";
import { prober } from "../helpers/cc.js";
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
      denials?: { syscall: string; target: string; why: string }[];
    };
    const denial = report.denials?.find((d) => d.target === `${md} port 80`);
    assert.equal(denial?.syscall, "connect", show(probes.cli));
    assert.match(denial?.why ?? "", /cloud metadata/);
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
