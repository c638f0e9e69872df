// The host side of the credential broker: --secret NAME=env:VAR|file:PATH reads a secret here,
// --inject 'HOST[:PORT] Header: value {NAME}' names where it goes. The guest gets a placeholder
// in NAME instead of the value; its TCP connects to HOST:PORT (443 unless given) are diverted by
// the supervisor to a broker process of this run (./main.ts), which terminates TLS with a
// certificate signed by a CA made for this run alone, and puts the headers on each request to
// that host only. The guest trusts that CA through its view of the system's certificate bundle
// (a layer of the run's own) and the usual variables. The CA's key exists only in this process,
// for as long as it takes to sign the hosts' certificates; the secrets only here and in the
// broker.
import { readFileSync, writeSync, closeSync, readSync, existsSync } from "node:fs";
import { join } from "node:path";
import { builtin } from "../../core/builtin.js";
import { SetupError, UsageError } from "../../core/errors.js";
import * as native from "../../core/native.js";
import type { SecretSource } from "../types.js";
import { HOST_NAME, type BrokerConfig, type BrokerHost, type NameRule } from "./config.js";
import { makeCa, makeServerCert } from "./x509.js";

/** One --inject rule, parsed. */
export interface InjectRule {
  host: string;
  port: number;
  /** HTTPS (the default), or plain HTTP for an `http://HOST` rule. */
  tls: boolean;
  header: string;
  /** The value, with {NAME} for each secret. */
  template: string;
}

const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** What the guest sees in NAME instead of the secret. */
export function placeholder(name: string): string {
  return `cvisor-secret-placeholder-${name}`;
}

/** Parses `NAME=env:VAR` or `NAME=file:PATH`. */
export function parseSecret(text: string): { name: string; source: SecretSource } {
  const m = /^([^=]+)=(env|file):(.+)$/.exec(typeof text === "string" ? text : "");
  const name = m?.[1] ?? "";
  if (!m || !SECRET_NAME.test(name)) {
    throw new UsageError(
      `invalid --secret '${String(text)}': use NAME=env:VAR or NAME=file:PATH`,
      "EINVALID_SECRET",
    );
  }
  const from = m[3] ?? "";
  return { name, source: m[2] === "env" ? { env: from } : { file: from } };
}

/** A secret's value: given, or read from this process's environment or a file (one trailing newline dropped). */
export function readSecret(
  name: string,
  source: SecretSource,
  env: NodeJS.ProcessEnv = process.env,
): { name: string; value: string } {
  if (!SECRET_NAME.test(name)) {
    throw new UsageError(`invalid secret name '${name}': letters, digits and _`, "EINVALID_SECRET");
  }
  let value: string | undefined;
  let where = "its value";
  if (typeof source === "string") value = source;
  else if (source !== null && typeof source === "object" && "env" in source) {
    value = env[source.env];
    where = `$${source.env}`;
  } else if (source !== null && typeof source === "object" && "file" in source) {
    where = source.file;
    try {
      value = readFileSync(source.file, "utf8").replace(/\r?\n$/, "");
    } catch (err) {
      const why = (err as NodeJS.ErrnoException).code ?? String(err);
      throw new UsageError(
        `--secret ${name}: cannot read ${source.file}: ${why}`,
        "EINVALID_SECRET",
      );
    }
  } else {
    throw new UsageError(`secret ${name}: a string, { env } or { file }`, "EINVALID_SECRET");
  }
  if (value === undefined || value === "") {
    throw new UsageError(`--secret ${name}: ${where} is empty or not set`, "EINVALID_SECRET");
  }
  if (/[\r\n\0]/.test(value)) {
    throw new UsageError(
      `--secret ${name}: a secret cannot hold a line break or NUL`,
      "EINVALID_SECRET",
    );
  }
  return { name, value };
}

/** Parses `[http://|https://]HOST[:PORT] Header-Name: value` (HTTPS and port 443 by default). */
export function parseInject(text: string): InjectRule {
  const m = /^(\S+)\s+([^:\s]+):\s*(.*)$/.exec(typeof text === "string" ? text : "");
  const bad = (why: string): UsageError =>
    new UsageError(`invalid --inject '${String(text)}': ${why}`, "EINVALID_INJECT");
  if (!m)
    throw bad(
      "use 'HOST[:PORT] Header-Name: value', e.g. 'api.example.com Authorization: Bearer {API_KEY}'",
    );
  const [given = "", header = "", template = ""] = [m[1], m[2], m[3]];
  const scheme = /^(https?):\/\//i.exec(given);
  const tls = scheme?.[1]?.toLowerCase() !== "http";
  const hostText = scheme ? given.slice(scheme[0].length) : given;
  const hp = /^([^:/]+)(?::(\d{1,5}))?$/.exec(hostText);
  const host = (hp?.[1] ?? "").toLowerCase();
  const port = hp?.[2] === undefined ? (tls ? 443 : 80) : Number(hp[2]);
  if (!hp || !HOST_NAME.test(host) || /^[\d.]+$/.test(host))
    throw bad(`'${hostText}' is not a host name`);
  if (!(port >= 1 && port <= 65535)) throw bad(`${port} is not a port`);
  if (!HEADER_NAME.test(header)) throw bad(`'${header}' is not a header name`);
  if (/[\r\n\0]/.test(template)) throw bad("a header value cannot hold a line break");
  return { host, port, tls, header, template };
}

/** One --allow-http rule, parsed. */
export interface HttpRule {
  host: string;
  port: number;
  methods: string[];
  path: string;
}

const METHOD = /^[A-Z]+$/;

/** Parses `HOST[:PORT] METHOD[,METHOD...] PATH` ("*" for any method; PATH ending in "*": a prefix). */
export function parseHttpRule(text: string): HttpRule {
  const bad = (why: string): UsageError =>
    new UsageError(`invalid --allow-http '${String(text)}': ${why}`, "EINVALID_HTTP_RULE");
  const m = /^(\S+)\s+(\S+)\s+(\S+)$/.exec(typeof text === "string" ? text.trim() : "");
  if (!m) throw bad("use 'HOST[:PORT] METHOD[,METHOD] PATH', e.g. 'api.github.com GET /repos/*'");
  const hp = /^([^:]+)(?::(\d{1,5}))?$/.exec(m[1] ?? "");
  const host = (hp?.[1] ?? "").toLowerCase();
  const port = hp?.[2] === undefined ? 443 : Number(hp[2]);
  if (!hp || !HOST_NAME.test(host)) throw bad(`'${m[1] ?? ""}' is not a host name`);
  if (!(port >= 1 && port <= 65535)) throw bad(`${port} is not a port`);
  const methods = (m[2] ?? "").toUpperCase().split(",");
  if (!methods.every((x) => x === "*" || METHOD.test(x)))
    throw bad(`'${m[2] ?? ""}' is not a list of methods`);
  const path = m[3] ?? "";
  if (!path.startsWith("/") || path.slice(0, -1).includes("*")) {
    throw bad(`'${path}' is not a path (it starts with /; a * may end it)`);
  }
  return { host, port, methods, path };
}

export interface BrokerSpec {
  secrets: readonly { name: string; value: string }[];
  injects: readonly InjectRule[];
  /** --allow-http rules (each for an injected host and port). */
  requests: readonly HttpRule[];
  /** Each injected host's addresses (resolved like --allow-net names). */
  addrs: ReadonlyMap<string, readonly string[]>;
  /** The run's name service (./dns.ts), when the allow-list names hosts. */
  names?: { rules: readonly NameRule[]; servers: readonly string[] } | undefined;
}

export interface Broker {
  /** Where the supervisor diverts each injected host's connects. */
  port: number;
  /** The write end of the announcements: the run's (cv_run_set_divert_fd); close it after. */
  announceFd: number;
  /** With a name service: the supervisor's end of the grants (cv_run_set_grant_fd); close it after. */
  grantFd: number | undefined;
  /** The run's CA, PEM: the guest trusts it (none without an --inject rule). */
  caPem: string | undefined;
  /** The broker ends with the run (the announcements' EOF); this ends it sooner. */
  stop(): void;
}

/** The header values, each {NAME} replaced by its secret (an unknown NAME is refused). */
function headerValues(spec: BrokerSpec, host: string, port: number): [string, string][] {
  const secrets = new Map(spec.secrets.map((s) => [s.name, s.value]));
  return spec.injects
    .filter((r) => r.host === host && r.port === port)
    .map((r) => [
      r.header,
      r.template.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (all, name: string) => {
        const value = secrets.get(name);
        if (value === undefined) {
          throw new UsageError(
            `--inject ${r.host}: no --secret ${name} for {${name}}`,
            "EINVALID_INJECT",
          );
        }
        return value;
      }),
    ]);
}

/** Starts the broker process of a run (blocks until it listens). */
export function startBroker(spec: BrokerSpec): Broker {
  for (const r of spec.requests) {
    if (!spec.injects.some((i) => i.host === r.host && i.port === r.port)) {
      throw new UsageError(
        `--allow-http ${r.host}:${r.port}: no --inject for that host and port (requests are checked by the credential broker)`,
        "EINVALID_HTTP_RULE",
      );
    }
  }
  const caName = `cvisor run CA ${process.pid}-${Date.now().toString(36)}`;
  const ca = spec.injects.length > 0 ? makeCa(caName) : undefined;
  for (const r of spec.injects) {
    if (spec.injects.some((o) => o.host === r.host && o.port === r.port && o.tls !== r.tls)) {
      throw new UsageError(
        `--inject ${r.host}:${r.port}: both http:// and https:// rules for one port`,
        "EINVALID_INJECT",
      );
    }
  }
  const keys = new Set(spec.injects.map((r) => `${r.host}:${r.port}`));
  const hosts: BrokerHost[] = [...keys].map((key) => {
    const [name = "", port = "0"] = key.split(":");
    const tls = spec.injects.some((r) => r.host === name && r.port === Number(port) && r.tls);
    if (!ca) throw new Error("unreachable: an --inject rule without the run's CA");
    const server = makeServerCert(ca, caName, name);
    return {
      name,
      port: Number(port),
      tls,
      addrs: [...(spec.addrs.get(name) ?? [])],
      headers: headerValues(spec, name, Number(port)),
      requests: spec.requests
        .filter((r) => r.host === name && r.port === Number(port))
        .map(({ methods, path }) => ({ methods, path })),
      cert: server.cert,
      key: server.key.export({ type: "pkcs8", format: "pem" }).toString(),
    };
  });
  const config: BrokerConfig = {
    hosts,
    scrub: spec.secrets.map((s) => ({ secret: s.value, placeholder: placeholder(s.name) })),
    names: spec.names && { rules: [...spec.names.rules], servers: [...spec.names.servers] },
  };
  const [cfgR, cfgW] = native.pipe();
  const [readyR, readyW] = native.pipe();
  const [annR, annW] = native.pipe();
  const [grantOurs, grantTheirs] = spec.names ? native.socketpair() : [-1, -1];
  // Each fd closed once: a number closed twice may by then be another file's.
  const open = new Set([cfgR, cfgW, readyR, readyW, annR, annW, grantOurs, grantTheirs]);
  open.delete(-1);
  const close = (fd: number): void => {
    if (open.delete(fd)) closeSync(fd);
  };
  // child_process only here: a plain run does not load it.
  const { spawn } = builtin<typeof import("node:child_process")>("node:child_process");
  const main = join(native.packageRoot(), "dist", "src", "sandbox", "broker", "main.js");
  try {
    if (!existsSync(main))
      throw new SetupError(`the credential broker is missing: ${main}`, "EBROKER");
    const child = spawn(process.execPath, [main], {
      stdio: [
        "ignore",
        "ignore",
        "inherit",
        cfgR,
        readyW,
        annR,
        ...(spec.names ? [grantTheirs] : []),
      ],
    });
    child.unref();
    for (const fd of [cfgR, readyW, annR, grantTheirs]) close(fd);
    const payload = Buffer.from(JSON.stringify(config));
    for (let at = 0; at < payload.length;) at += writeSync(cfgW, payload, at);
    close(cfgW);
    const buf = Buffer.alloc(32);
    let got = "";
    for (let n; !got.includes("\n") && (n = readSync(readyR, buf)) > 0;)
      got += buf.toString("utf8", 0, n);
    close(readyR);
    const port = Number.parseInt(got, 10);
    if (!(port > 0)) {
      child.kill("SIGKILL");
      throw new SetupError(
        "the credential broker did not start (see its message above)",
        "EBROKER",
      );
    }
    return {
      port,
      announceFd: annW,
      grantFd: spec.names ? grantOurs : undefined,
      caPem: ca?.cert,
      stop: () => {
        if (child.exitCode === null) child.kill("SIGTERM");
      },
    };
  } catch (err) {
    for (const fd of [...open]) close(fd);
    throw err;
  }
}
