// The certificates of the credential broker: a CA made for one run (its key never leaves the
// host-side process that made it) and a server certificate per injected host, signed by it.
// Node can make keys and signatures but not certificates, so the DER is written here: X.509 v3
// (RFC 5280) with P-256 keys and ecdsa-with-SHA256, and the extensions strict verifiers ask for
// (basic constraints, key usage, subject and authority key ids; server auth and the host's
// name for a server).
import type { KeyObject } from "node:crypto";
import { builtin } from "../../core/builtin.js";

/** node:crypto, loaded on first use (a plain run does not need it). */
const crypto = (): typeof import("node:crypto") => builtin("node:crypto");

function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), len(body.length), body]);
}

const seq = (...c: Buffer[]): Buffer => tlv(0x30, ...c);
const set = (...c: Buffer[]): Buffer => tlv(0x31, ...c);
const explicit = (n: number, ...c: Buffer[]): Buffer => tlv(0xa0 + n, ...c);
const octets = (b: Buffer): Buffer => tlv(0x04, b);
const bits = (b: Buffer): Buffer => tlv(0x03, Buffer.from([0]), b);
const bool = (v: boolean): Buffer => tlv(0x01, Buffer.from([v ? 0xff : 0]));

function oid(text: string): Buffer {
  const parts = text.split(".").map(Number);
  const out = [40 * (parts[0] ?? 0) + (parts[1] ?? 0)];
  for (const p of parts.slice(2)) {
    const groups: number[] = [];
    for (let v = p; ; v = Math.floor(v / 128)) {
      groups.unshift(v % 128);
      if (v < 128) break;
    }
    out.push(...groups.map((g, i) => (i < groups.length - 1 ? g | 0x80 : g)));
  }
  return tlv(0x06, Buffer.from(out));
}

function integer(b: Buffer): Buffer {
  const positive = (b[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), b]) : b;
  return tlv(0x02, positive);
}

function time(d: Date): Buffer {
  // UTCTime (YYMMDDHHMMSSZ) up to 2049, as RFC 5280 asks.
  const text = d.toISOString().replace(/[-:T]/g, "").slice(2, 14) + "Z";
  return tlv(0x17, Buffer.from(text, "ascii"));
}

const name = (cn: string): Buffer =>
  seq(set(seq(oid("2.5.4.3"), tlv(0x0c, Buffer.from(cn, "utf8")))));

const ECDSA_SHA256 = seq(oid("1.2.840.10045.4.3.2"));

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));
}

/** The SHA-1 of a key's subjectPublicKey bits: its key id (RFC 5280 4.2.1.2, method 1). */
function keyId(spki: Buffer): Buffer {
  // SPKI = SEQUENCE { AlgorithmIdentifier, BIT STRING }: the last BIT STRING, without its
  // unused-bits byte. A P-256 key's point is 65 bytes, always at the end.
  return crypto()
    .createHash("sha1")
    .update(spki.subarray(spki.length - 65))
    .digest();
}

export interface Issued {
  key: KeyObject;
  /** The certificate, PEM. */
  cert: string;
  /** Its key id (the subject key identifier). */
  id: Buffer;
}

function pem(der: Buffer): string {
  const b64 = der.toString("base64").replace(/.{64}/g, "$&\n");
  return `-----BEGIN CERTIFICATE-----\n${b64.replace(/\n$/, "")}\n-----END CERTIFICATE-----\n`;
}

function issue(
  subject: string,
  key: KeyObject,
  publicKey: KeyObject,
  extensions: (id: Buffer) => Buffer[],
  issuer: { name: string; key: KeyObject } | undefined,
  days: number,
): Issued {
  const spki = publicKey.export({ type: "spki", format: "der" });
  const id = keyId(spki);
  const now = Date.now();
  const tbs = seq(
    explicit(0, integer(Buffer.from([2]))),
    integer(Buffer.concat([Buffer.from([0x40]), crypto().randomBytes(15)])),
    ECDSA_SHA256,
    name(issuer?.name ?? subject),
    seq(time(new Date(now - 3600_000)), time(new Date(now + days * 86400_000))),
    name(subject),
    spki,
    explicit(3, seq(...extensions(id))),
  );
  const signature = crypto().sign("sha256", tbs, issuer?.key ?? key);
  return { key, cert: pem(seq(tbs, ECDSA_SHA256, bits(signature))), id };
}

/** A CA for one run: valid 7 days, for server certificates only (path length 0). */
export function makeCa(label: string): Issued {
  const { privateKey, publicKey } = crypto().generateKeyPairSync("ec", { namedCurve: "P-256" });
  return issue(
    label,
    privateKey,
    publicKey,
    (id) => [
      extension("2.5.29.19", true, seq(bool(true), tlv(0x02, Buffer.from([0])))),
      // keyCertSign, cRLSign
      extension("2.5.29.15", true, tlv(0x03, Buffer.from([1, 0x06]))),
      extension("2.5.29.14", false, octets(id)),
    ],
    undefined,
    7,
  );
}

/** A server certificate for host (a DNS name), signed by ca. */
export function makeServerCert(ca: Issued, caName: string, host: string): Issued {
  const { privateKey, publicKey } = crypto().generateKeyPairSync("ec", { namedCurve: "P-256" });
  return issue(
    host,
    privateKey,
    publicKey,
    (id) => [
      extension("2.5.29.19", true, seq()),
      // digitalSignature
      extension("2.5.29.15", true, tlv(0x03, Buffer.from([7, 0x80]))),
      extension("2.5.29.37", false, seq(oid("1.3.6.1.5.5.7.3.1"))),
      extension("2.5.29.17", false, seq(tlv(0x82, Buffer.from(host, "ascii")))),
      extension("2.5.29.14", false, octets(id)),
      extension("2.5.29.35", false, seq(tlv(0x80, ca.id))),
    ],
    { name: caName, key: ca.key },
    7,
  );
}
