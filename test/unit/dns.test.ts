// The run's name service on the wire: queries as a resolver writes them, answers as it reads
// them, and what it grants the run (and in which order) for each name it is asked.
import assert from "node:assert/strict";
import { test } from "node:test";
import { addressBytes, answer, NameService, parseQuery } from "../../src/sandbox/broker/dns.js";

/** A query as glibc sends it: id, RD, one question. */
function query(name: string, type: number, o: { flags?: number; qd?: number } = {}): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt16BE(0x1234, 0);
  head.writeUInt16BE(o.flags ?? 0x0100, 2);
  head.writeUInt16BE(o.qd ?? 1, 4);
  const labels = name
    .split(".")
    .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, "latin1")]));
  const tail = Buffer.alloc(4);
  tail.writeUInt16BE(type, 0);
  tail.writeUInt16BE(1, 2);
  return Buffer.concat([head, ...labels, Buffer.from([0]), tail]);
}

/** rcode and the answers' (type, rdata) of an answer to `query(name, ...)`. */
function read(
  msg: Buffer,
  name: string,
): { id: number; rcode: number; answers: [number, string][] } {
  const id = msg.readUInt16BE(0);
  const flags = msg.readUInt16BE(2);
  assert.ok(flags & 0x8000, "QR set");
  assert.equal(msg.readUInt16BE(4), 1, "the question is echoed");
  const an = msg.readUInt16BE(6);
  let at = 12 + name.length + 2 + 4;
  const answers: [number, string][] = [];
  for (let i = 0; i < an; i++) {
    assert.equal(msg.readUInt16BE(at), 0xc00c, "the name points at the question");
    const type = msg.readUInt16BE(at + 2);
    assert.equal(msg.readUInt32BE(at + 6), 60);
    const len = msg.readUInt16BE(at + 10);
    answers.push([type, msg.subarray(at + 12, at + 12 + len).toString("hex")]);
    at += 12 + len;
  }
  assert.equal(at, msg.length);
  return { id, rcode: flags & 0xf, answers };
}

test("queries: the question read once, lower case; malformed ones get FORMERR or NOTIMP", () => {
  const q = parseQuery(query("API.Example.COM", 1));
  assert.ok(q && "name" in q);
  assert.equal(q.name, "api.example.com");
  assert.equal(q.type, 1);
  assert.equal(q.id, 0x1234);
  const pointer = Buffer.concat([
    query("a", 1).subarray(0, 12),
    Buffer.from([0xc0, 0x0c, 0, 1, 0, 1]),
  ]);
  assert.deepEqual(parseQuery(pointer), { id: 0x1234, rcode: 1 });
  assert.deepEqual(parseQuery(query("a.b", 1, { qd: 2 })), { id: 0x1234, rcode: 1 });
  assert.deepEqual(parseQuery(query("a.b", 1, { flags: 0x0900 })), { id: 0x1234, rcode: 4 });
  assert.deepEqual(parseQuery(query("a.b", 1).subarray(0, 15)), { id: 0x1234, rcode: 1 });
  assert.equal(parseQuery(query("a.b", 1, { flags: 0x8100 })), null, "an answer");
  assert.equal(parseQuery(Buffer.alloc(5)), null);
});

test("addresses as rdata: IPv4, IPv6 with '::' anywhere, v4 in the last 32 bits", () => {
  assert.equal(addressBytes("192.0.2.1").toString("hex"), "c0000201");
  assert.equal(addressBytes("::").toString("hex"), "0".repeat(32));
  assert.equal(addressBytes("2001:db8::1").toString("hex"), "20010db8000000000000000000000001");
  assert.equal(addressBytes("fd00::2:0").toString("hex"), "fd000000000000000000000000020000");
  assert.equal(addressBytes("1:2:3:4:5:6:7:8").toString("hex"), "00010002000300040005000600070008");
  assert.equal(
    addressBytes("::ffff:192.0.2.1").toString("hex"),
    "00000000000000000000ffffc0000201",
  );
  const q = parseQuery(query("a.test", 28));
  assert.ok(q && "name" in q);
  assert.deepEqual(read(answer(q, 0, ["2001:db8::1"]), "a.test").answers, [
    [28, "20010db8000000000000000000000001"],
  ]);
});

test("the name service: allowed names answered after their grants, others NXDOMAIN and noted", async () => {
  const lines: string[] = [];
  const asked: string[] = [];
  let release: () => void = () => undefined;
  let held = false;
  const names = new NameService({
    rules: [
      { name: "api.example.com", wildcard: false, portLo: 443, portHi: 443 },
      { name: "cdn.example", wildcard: true, portLo: 80, portHi: 81 },
    ],
    lookup: async (name) => {
      asked.push(name);
      if (name === "gone.cdn.example") return { rcode: 3 };
      if (name === "z.cdn.example") return { addrs: ["192.0.2.8"] };
      return { addrs: ["192.0.2.7", "2001:db8::7"] };
    },
    grant: (line) => {
      lines.push(line);
      if (!held) return Promise.resolve(true);
      return new Promise((ok) => (release = () => ok(true)));
    },
  });
  const ask = async (name: string, type: number) =>
    read((await names.handle(query(name, type))) ?? Buffer.alloc(0), name);

  assert.deepEqual(await ask("api.example.com", 1), {
    id: 0x1234,
    rcode: 0,
    answers: [[1, "c0000207"]],
  });
  assert.deepEqual(lines.splice(0), ["A 192.0.2.7 443 443"]);
  const v6 = await ask("Api.Example.com", 28);
  assert.deepEqual(v6.answers, [[28, "20010db8000000000000000000000007"]]);
  assert.deepEqual(lines.splice(0), ["A 2001:db8::7 443 443"]);
  assert.deepEqual(asked, ["api.example.com"], "the A and AAAA questions share one lookup");
  // A grant in force is not asked for again.
  assert.equal((await ask("api.example.com", 1)).rcode, 0);
  assert.deepEqual(lines.splice(0), []);

  // A wildcard names what is below it, not the domain itself.
  assert.equal((await ask("x.y.cdn.example", 1)).rcode, 0);
  assert.deepEqual(lines.splice(0), ["A 192.0.2.7 80 81"]);
  assert.equal((await ask("cdn.example", 1)).rcode, 3);
  assert.equal((await ask("gone.cdn.example", 1)).rcode, 3);
  assert.deepEqual(lines.splice(0), ["D cdn.example 0"]);

  // Any other name: NXDOMAIN, one denial line; none for reverse lookups or odd bytes.
  assert.deepEqual(await ask("evil.test", 1), { id: 0x1234, rcode: 3, answers: [] });
  assert.equal((await ask("7.2.0.192.in-addr.arpa", 12)).rcode, 3);
  assert.equal((await ask("a b\nA 10.0.0.1 1 65535", 1)).rcode, 3);
  assert.deepEqual(lines.splice(0), ["D evil.test 0"]);
  // Other types of an allowed name: no records, no grant.
  assert.deepEqual(await ask("api.example.com", 15), { id: 0x1234, rcode: 0, answers: [] });
  assert.deepEqual(lines.splice(0), []);

  // The answer waits for the supervisor to put the grant in force.
  held = true;
  let answered = false;
  const pending = names.handle(query("z.cdn.example", 1)).then(() => (answered = true));
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(answered, false, "no answer before the grant is in force");
  release();
  await pending;
  assert.equal(answered, true);
});
