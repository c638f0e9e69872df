// The credential broker of one run (node main.js, started by ./broker.ts): the guest's TCP
// connects to an --inject host are diverted here by the supervisor, which announces each one
// (the guest socket's own address and port, and the destination it asked for) on fd 5 before
// the guest learns of it; a connection nobody announced is closed, so no other process of the
// host, and no other sandbox, is served. TLS is terminated with a certificate for the host
// signed by the run's CA, each HTTP/1.1 request is sent on to the real host (verified against
// this host's trust store) with the injected headers, and every secret is replaced by its
// placeholder in what comes back.
//
// It also serves the run's name service (./dns.ts), when the allow-list names hosts: the guest's
// TCP connects to NAME_SERVER port 53 are diverted and announced here too.
//
//   fd 3: the configuration, JSON (BrokerConfig), to EOF; fd 4: "PORT\n" once listening;
//   fd 5: the announcements, "LOCALADDR LOCALPORT ADDR PORT TID\n" (where the guest's socket is,
//   where it asked to go, which thread asked); its EOF (the run is over) ends the broker;
//   fd 6 (with a name service): the grants, a stream socket to the supervisor
//   (cv_run_set_grant_fd): a line each way per grant.
import dns from "node:dns";
import { closeSync, createReadStream, readFileSync, writeSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { Transform, type TransformCallback } from "node:stream";
import tls from "node:tls";
import { requestAllowed, type BrokerConfig, type BrokerHost } from "./config.js";
import { NAME_SERVER, NameService, rcodeOf, type Found } from "./dns.js";

interface Announced {
  addr: string;
  port: number;
  /** The guest thread that connected. */
  tid: number;
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  // Bodies are scrubbed of secrets: they must come back uncompressed.
  "accept-encoding",
]);

function log(message: string): void {
  process.stderr.write(`cvisor: broker: ${message}\n`);
}

function scrubText(text: string, scrub: BrokerConfig["scrub"]): string {
  let out = text;
  for (const { secret, placeholder } of scrub) out = out.split(secret).join(placeholder);
  return out;
}

/** Replaces each secret by its placeholder in a stream, across chunk boundaries. */
class Scrubber extends Transform {
  private tail: Buffer = Buffer.alloc(0);
  private readonly keep: number;
  constructor(private readonly scrub: BrokerConfig["scrub"]) {
    super();
    this.keep = Math.max(0, ...scrub.map((s) => Buffer.byteLength(s.secret) - 1));
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    const all = this.replace(Buffer.concat([this.tail, chunk]));
    const cut = Math.max(0, all.length - this.keep);
    this.tail = all.subarray(cut);
    done(null, all.subarray(0, cut));
  }
  override _flush(done: TransformCallback): void {
    done(null, this.tail);
  }
  private replace(buf: Buffer): Buffer {
    let out = buf;
    for (const { secret, placeholder } of this.scrub) {
      const s = Buffer.from(secret);
      const p = Buffer.from(placeholder);
      const parts: Buffer[] = [];
      let from = 0;
      for (let at = out.indexOf(s); at >= 0; at = out.indexOf(s, from)) {
        parts.push(out.subarray(from, at), p);
        from = at + s.length;
      }
      if (parts.length > 0) out = Buffer.concat([...parts, out.subarray(from)]);
    }
    return out;
  }
}

/** The supervisor's end of the grants: each line answered in order, "1" when in force. */
function grantChannel(fd: number): (line: string) => Promise<boolean> {
  const sock = new net.Socket({ fd, readable: true, writable: true });
  const acks: ((ok: boolean) => void)[] = [];
  let got = "";
  const fail = (): void => {
    for (const ack of acks.splice(0)) ack(false);
  };
  sock.on("data", (chunk) => {
    got += chunk.toString();
    for (let nl = got.indexOf("\n"); nl >= 0; nl = got.indexOf("\n")) {
      acks.shift()?.(got[0] === "1");
      got = got.slice(nl + 1);
    }
  });
  sock.on("error", fail);
  sock.on("close", fail);
  return (line) =>
    new Promise((ack) => {
      if (sock.destroyed) return ack(false);
      acks.push(ack);
      sock.write(`${line}\n`);
    });
}

/** Looks a name up as this host does (getaddrinfo: /etc/hosts, then DNS), or on the servers. */
function lookupWith(servers: readonly string[]): (name: string) => Promise<Found> {
  if (servers.length === 0) {
    return async (name) => {
      try {
        const all = await dns.promises.lookup(name, { all: true, verbatim: true });
        return { addrs: [...new Set(all.map((a) => a.address))] };
      } catch (err) {
        return { rcode: rcodeOf((err as NodeJS.ErrnoException).code) };
      }
    };
  }
  const resolver = new dns.promises.Resolver({ tries: 2 });
  resolver.setServers([...servers]);
  return async (name) => {
    const both = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
    const addrs = both.flatMap((r) => (r.status === "fulfilled" ? r.value : []));
    const codes = both.map((r) =>
      r.status === "rejected" ? (r.reason as NodeJS.ErrnoException).code : undefined,
    );
    if (addrs.length > 0 || codes.every((c) => c === undefined || c === "ENODATA"))
      return { addrs };
    return { rcode: rcodeOf(codes.includes("ENOTFOUND") ? "ENOTFOUND" : codes.find(Boolean)) };
  };
}

/** Queries over one TCP connection (each a 2-byte length, then the message), answered in order. */
function serveNames(sock: net.Socket, names: NameService, tid: number): void {
  let got = Buffer.alloc(0);
  let busy = Promise.resolve();
  sock.setTimeout(30_000, () => sock.destroy());
  sock.on("error", () => sock.destroy());
  sock.on("data", (chunk: Buffer) => {
    got = Buffer.concat([got, chunk]);
    if (got.length > 1 << 17) {
      sock.destroy();
      return;
    }
    while (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0)) {
      const msg = got.subarray(2, 2 + got.readUInt16BE(0));
      got = got.subarray(2 + msg.length);
      busy = busy.then(async () => {
        const reply = await names.handle(msg, tid);
        if (reply === null) {
          sock.destroy();
          return;
        }
        const len = Buffer.alloc(2);
        len.writeUInt16BE(reply.length);
        if (!sock.destroyed) sock.write(Buffer.concat([len, reply]));
      });
    }
  });
  sock.resume();
}

function main(): void {
  const config = JSON.parse(readFileSync(3, "utf8")) as BrokerConfig;
  closeSync(3);
  // Keyed by the guest socket's own address and port: what this end sees as the remote one.
  const announced = new Map<string, Announced>();
  const waiting = new Map<string, (a: Announced) => void>();
  let pending = "";
  const announcements = createReadStream("", { fd: 5 });
  announcements.on("data", (chunk) => {
    pending += chunk.toString();
    for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n")) {
      const [from, fromPort, addr, port, tid] = pending.slice(0, nl).split(" ");
      pending = pending.slice(nl + 1);
      const key = `${from} ${fromPort}`;
      const a = { addr: addr ?? "", port: Number(port), tid: Number(tid) || 0 };
      const waiter = waiting.get(key);
      if (waiter) waiter(a);
      else announced.set(key, a);
    }
  });
  announcements.on("end", () => process.exit(0));
  announcements.on("error", () => process.exit(0));
  // The run ends the broker (fd 5's EOF); a ^C meant for the guest must not end it first.
  process.on("SIGINT", () => undefined);

  const contexts = new Map(
    config.hosts.map((h) => [h, tls.createSecureContext({ cert: h.cert, key: h.key })]),
  );
  // What each connection (the TLS socket, or the plain one) is for.
  const routes = new WeakMap<net.Socket, { hosts: BrokerHost[]; orig: Announced; tls: boolean }>();

  const httpsAgent = new https.Agent({ keepAlive: true });
  const httpAgent = new http.Agent({ keepAlive: true });
  const proxy = http.createServer((req, res) => {
    const route = routes.get(req.socket);
    const asked = (req.headers.host ?? "").replace(/:\d+$/, "").toLowerCase();
    const named = route?.tls ? (req.socket as tls.TLSSocket).servername || asked : asked;
    const host = route?.hosts.find((h) => h.name === named);
    if (!route || !host || (asked !== "" && asked !== host.name)) {
      res.writeHead(421, { "content-type": "text/plain" });
      res.end(`cvisor broker: no --inject rule for host ${asked || named || "(none)"}\n`);
      return;
    }
    if (!requestAllowed(host.requests, req.method ?? "", req.url ?? "")) {
      res.writeHead(403, { "content-type": "text/plain" });
      res.end(
        `cvisor broker: ${req.method} ${req.url} to ${host.name} is not allowed (--allow-http)\n`,
      );
      return;
    }
    const headers: http.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(k)) headers[k] = v;
    headers.host = host.port === (route.tls ? 443 : 80) ? host.name : `${host.name}:${host.port}`;
    for (const [k, v] of host.headers) headers[k.toLowerCase()] = v;
    const options = {
      host: route.orig.addr,
      port: route.orig.port,
      method: req.method,
      path: req.url,
      headers,
    };
    const upstream = route.tls
      ? https.request({ ...options, servername: host.name, agent: httpsAgent })
      : http.request({ ...options, agent: httpAgent });
    upstream.on("response", (up) => {
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(up.headers)) {
        if (k === "content-length" || k === "transfer-encoding" || k === "connection") continue;
        out[k] = Array.isArray(v)
          ? v.map((x) => scrubText(x, config.scrub))
          : v === undefined
            ? v
            : scrubText(v, config.scrub);
      }
      res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
      up.pipe(new Scrubber(config.scrub)).pipe(res);
    });
    upstream.on("error", (err) => {
      log(`${host.name}:${host.port}: ${err.message}`);
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
      res.end(`cvisor broker: ${host.name}:${host.port}: ${err.message}\n`);
    });
    req.pipe(upstream);
  });
  proxy.on("clientError", (_err, sock) => sock.destroy());

  const names = config.names
    ? new NameService({
        rules: config.names.rules,
        lookup: lookupWith(config.names.servers),
        grant: grantChannel(6),
      })
    : undefined;

  const serve = (sock: net.Socket, orig: Announced): void => {
    if (names && orig.addr === NAME_SERVER && orig.port === 53) {
      serveNames(sock, names, orig.tid);
      return;
    }
    let hosts = config.hosts.filter((h) => h.port === orig.port && h.addrs.includes(orig.addr));
    if (hosts.length === 0) {
      sock.destroy();
      return;
    }
    sock.once("data", (first: Buffer) => {
      sock.pause();
      sock.unshift(first);
      // The guest speaks what the rule says, so that no secret goes out in clear text to a
      // port the rule gave TLS (a guest writing plain HTTP to port 443).
      const isTls = first[0] === 0x16;
      hosts = hosts.filter((h) => h.tls === isTls);
      if (hosts.length === 0) {
        sock.destroy();
        return;
      }
      if (!isTls) {
        routes.set(sock, { hosts, orig, tls: false });
        proxy.emit("connection", sock);
        sock.resume();
        return;
      }
      const only = hosts.length === 1 ? hosts[0] : undefined;
      const secure = new tls.TLSSocket(sock, {
        isServer: true,
        ALPNProtocols: ["http/1.1"],
        ...(only ? { secureContext: contexts.get(only) } : {}),
        SNICallback: (servername, done) => {
          const h = hosts.find((x) => x.name === servername.toLowerCase());
          if (h) done(null, contexts.get(h));
          else done(new Error(`no --inject rule for ${servername}`));
        },
      });
      secure.on("error", () => secure.destroy());
      routes.set(secure, { hosts, orig, tls: true });
      proxy.emit("connection", secure);
    });
    sock.on("error", () => sock.destroy());
    sock.resume();
  };

  // Nagle's algorithm would hold each answer's second write for the guest's delayed ACK (40 ms a
  // request); upstream connections are kept for the next request, as the guest keeps its own.
  const server = net.createServer({ pauseOnConnect: true, noDelay: true }, (sock) => {
    const local = `${(sock.remoteAddress ?? "").replace(/^::ffff:/, "")} ${sock.remotePort ?? -1}`;
    const orig = announced.get(local);
    if (orig) {
      announced.delete(local);
      serve(sock, orig);
      return;
    }
    // The supervisor announces before the guest's connect returns, but the two reach us apart.
    const timer = setTimeout(() => {
      waiting.delete(local);
      sock.destroy();
    }, 2000);
    waiting.set(local, (a) => {
      clearTimeout(timer);
      waiting.delete(local);
      serve(sock, a);
    });
  });
  server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    const port = typeof address === "object" && address ? address.port : 0;
    writeSync(4, `${port}\n`);
    closeSync(4);
  });
}

main();
