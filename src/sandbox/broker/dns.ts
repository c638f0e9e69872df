// The run's name service (served by the broker process, ./main.ts): the guest's resolver asks it
// over TCP (its view of /etc/resolv.conf names NAME_SERVER with `options use-vc`; the supervisor
// diverts those connects here). It answers A and AAAA questions for the names the allow-list
// names, resolved by this host's resolver (or the --dns servers) when asked, and grants each
// address to the run (with the rule's ports) before the guest sees the answer; any other name
// gets NXDOMAIN, noted as a denial. The wire format is RFC 1035's, over TCP (RFC 7766).
import { HOST_NAME, type NameRule } from "./config.js";

/** The address the guest's resolv.conf names (systemd-resolved's stub address). */
export const NAME_SERVER = "127.0.0.53";

const A = 1;
const AAAA = 28;
const FORMERR = 1;
const SERVFAIL = 2;
const NXDOMAIN = 3;
const NOTIMP = 4;
/** Seconds a guest may keep an answer: its addresses stay granted for the whole run anyway. */
const TTL = 60;

/** One question, as the guest asked it. */
export interface Question {
  id: number;
  /** The query's flags (its RD bit is echoed). */
  flags: number;
  /** Lower case, no trailing dot; the bytes as they came (HOST_NAME says which can be matched or noted). */
  name: string;
  type: number;
  /** The question section as sent, echoed in the answer. */
  raw: Buffer;
}

/** A query read: its question, or the error to answer with; null for what is not a query. */
export function parseQuery(msg: Buffer): Question | { id: number; rcode: number } | null {
  if (msg.length < 12) return null;
  const id = msg.readUInt16BE(0);
  const flags = msg.readUInt16BE(2);
  if (flags & 0x8000) return null; // an answer
  if (((flags >> 11) & 0xf) !== 0) return { id, rcode: NOTIMP };
  if (msg.readUInt16BE(4) !== 1) return { id, rcode: FORMERR };
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const len = msg[at];
    if (len === undefined || len & 0xc0 || at + 1 + len > msg.length) return { id, rcode: FORMERR };
    at += 1;
    if (len === 0) break;
    labels.push(msg.toString("latin1", at, at + len));
    at += len;
  }
  if (at + 4 > msg.length || at - 12 > 255) return { id, rcode: FORMERR };
  const name = labels.join(".").toLowerCase();
  return { id, flags, name, type: msg.readUInt16BE(at), raw: msg.subarray(12, at + 4) };
}

/** An address's bytes: 4 for IPv4, 16 for IPv6 (text as node:dns gives it). */
export function addressBytes(addr: string): Buffer {
  if (!addr.includes(":")) return Buffer.from(addr.split(".").map(Number));
  let text = addr;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (v4) {
    const b = v4.split(".").map(Number);
    text = `${text.slice(0, -v4.length)}${(((b[0] ?? 0) << 8) | (b[1] ?? 0)).toString(16)}:${(((b[2] ?? 0) << 8) | (b[3] ?? 0)).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const hs = head === "" ? [] : head.split(":");
  const ts = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined ? hs : [...hs, ...Array<string>(8 - hs.length - ts.length).fill("0"), ...ts];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(Number.parseInt(g, 16), i * 2));
  return out;
}

function header(id: number, flags: number, rcode: number, qd: number, an: number): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(0x8000 | (flags & 0x0100) | 0x0080 | rcode, 2); // QR, RD as asked, RA
  h.writeUInt16BE(qd, 4);
  h.writeUInt16BE(an, 6);
  return h;
}

/** The answer to a question: an rcode, and the addresses of the question's type. */
export function answer(q: Question, rcode: number, addrs: readonly string[]): Buffer {
  const records = addrs.map((a) => {
    const data = addressBytes(a);
    const r = Buffer.alloc(12 + data.length);
    r.writeUInt16BE(0xc00c, 0); // the question's name
    r.writeUInt16BE(data.length === 4 ? A : AAAA, 2);
    r.writeUInt16BE(1, 4); // IN
    r.writeUInt32BE(TTL, 6);
    r.writeUInt16BE(data.length, 10);
    data.copy(r, 12);
    return r;
  });
  return Buffer.concat([header(q.id, q.flags, rcode, 1, records.length), q.raw, ...records]);
}

/** What a lookup found: addresses (maybe none), or the rcode to answer. */
export type Found = { addrs: string[] } | { rcode: number };

export interface NameServiceOptions {
  rules: readonly NameRule[];
  /** Looks a name up on this host (or the --dns servers). */
  lookup: (name: string) => Promise<Found>;
  /** A line for the supervisor ("A ADDR LO HI" or "D NAME TID"): true once it is in force. */
  grant: (line: string) => Promise<boolean>;
}

/** Answers queries; one per call, the grants in force before the answer is returned. */
export class NameService {
  private readonly cache = new Map<string, { at: number; found: Promise<Found> }>();
  /** Grants in force: the supervisor need not be asked again. */
  private readonly granted = new Set<string>();
  constructor(private readonly o: NameServiceOptions) {}

  /** The rules that name this name: exactly, or (a wildcard) as a name below it. */
  rulesFor(name: string): NameRule[] {
    return this.o.rules.filter((r) => (r.wildcard ? name.endsWith(`.${r.name}`) : name === r.name));
  }

  /** The answer to one message, or null when it is not a query (the connection ends). tid: who asked. */
  async handle(msg: Buffer, tid = 0): Promise<Buffer | null> {
    const q = parseQuery(msg);
    if (q === null) return null;
    if (!("name" in q)) return header(q.id, 0, q.rcode, 0, 0);
    const rules = HOST_NAME.test(q.name) ? this.rulesFor(q.name) : [];
    if (rules.length === 0) {
      // Reverse lookups are asked by many tools as a matter of course: not worth a line.
      if (HOST_NAME.test(q.name) && !q.name.endsWith(".arpa"))
        await this.o.grant(`D ${q.name} ${tid}`);
      return answer(q, NXDOMAIN, []);
    }
    if (q.type !== A && q.type !== AAAA) return answer(q, 0, []);
    const found = await this.found(q.name);
    if ("rcode" in found) return answer(q, found.rcode, []);
    const addrs = found.addrs.filter((a) => a.includes(":") === (q.type === AAAA));
    const lines = new Set(addrs.flatMap((a) => rules.map((r) => `A ${a} ${r.portLo} ${r.portHi}`)));
    // A refused grant (loopback, link-local) still answers: the connect is then refused, with
    // the rule that would let it through.
    await Promise.all([...lines].filter((l) => !this.granted.has(l)).map((l) => this.grant(l)));
    return answer(q, 0, addrs);
  }

  private async grant(line: string): Promise<void> {
    if (await this.o.grant(line)) this.granted.add(line);
  }

  /** One lookup for the A and AAAA questions a resolver sends together. */
  private found(name: string): Promise<Found> {
    const hit = this.cache.get(name);
    if (hit && Date.now() - hit.at < 5000) return hit.found;
    const found = this.o.lookup(name).catch((): Found => ({ rcode: SERVFAIL }));
    // Distinct names under a wildcard are the guest's to make up: keep only the recent ones.
    if (this.cache.size >= 1024) {
      for (const [k, v] of this.cache) if (Date.now() - v.at >= 5000) this.cache.delete(k);
    }
    this.cache.set(name, { at: Date.now(), found });
    return found;
  }
}

/** An error code of node:dns as the rcode a resolver expects. */
export function rcodeOf(code: string | undefined): number {
  return code === "ENOTFOUND" ? NXDOMAIN : SERVFAIL;
}
