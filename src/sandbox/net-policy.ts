// The network policy of a run: the mode (host, none, or an allow-list), the `--allow-net` rules
// and the `--add-host` names, turned into what the core enforces (native.NetRule: an address
// prefix and a port range, decided on the supervisor's own copy of each destination), the names
// the guest's /etc/hosts must show, and the names the run's name service answers.
//
// In an allow-list, a host name (`api.example.com`, `*.example.com`) is allowed for what it
// resolves to when the guest looks it up: the guest's resolver asks the run's name service
// (./broker/dns.ts), which resolves allowed names with this host's resolver and grants their
// addresses to the run before it answers; DNS itself is refused. A name the guest finds in its
// view of /etc/hosts (this host's, or an --add-host entry) is allowed at start for the
// addresses listed there. In host mode, where rules only open the metadata range, a name is
// resolved here once.
import { UsageError } from "../core/errors.js";
import type { NetRule } from "../core/native.js";
import { parseInject, type InjectRule } from "./broker/broker.js";
import { HOST_NAME, type NameRule } from "./broker/config.js";
import { NAME_SERVER } from "./broker/dns.js";

/** The network of a run: "host" (the default), "none", or only what `allowNet` allows. */
export type NetworkMode = "host" | "none";

/** One `--allow-net` rule, parsed. */
export interface AllowRule {
  /** As given. */
  text: string;
  /** An address (IPv4 or IPv6 text) with its prefix, a host name, or `*.suffix`'s suffix. */
  host: { addr: string; prefix: number } | { name: string } | { suffix: string };
  portLo: number;
  portHi: number;
}

/** What the core gets, and the names the guest's /etc/hosts lists. */
export interface NetPlan {
  network: "host" | "none" | "allow-list";
  netRules: NetRule[];
  /** name → addresses, in the order given (--add-host first). */
  hosts: Map<string, string[]>;
  /** The --inject rules, and the addresses whose connects go to the broker (theirs, and the name service's). */
  injects: InjectRule[];
  diverts: NetRule[];
  /** Allow-list names the run's name service answers (none: no name service). */
  names: NameRule[];
  /** --dns: the servers names are looked up with (empty: this host's resolver). */
  dns: string[];
}

/**
 * 4 or 6 for an IPv4 or IPv6 address as inet_pton reads it (no zone), else 0. Not node:net's
 * isIP: a plain run must not load node:net (the CLI's start-up budget).
 */
export function ipFamily(text: string): 0 | 4 | 6 {
  if (
    /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/.test(text)
  )
    return 4;
  if (!text.includes(":") || !/^[0-9a-f:.]+$/i.test(text)) return 0;
  try {
    new URL(`http://[${text}]/`); // the WHATWG host parser: RFC 4291 text forms
    return 6;
  } catch {
    return 0;
  }
}

/** A host name, maybe with a trailing dot (as DNS writes a full name). */
function isName(text: string): boolean {
  return HOST_NAME.test(text.replace(/\.$/, ""));
}

function bad(text: string, why: string): UsageError {
  return new UsageError(`invalid --allow-net rule '${text}': ${why}`, "EINVALID_NET_RULE");
}

/** A port or a range of them ("443", "8000-8100"). */
function parsePorts(text: string, ports: string): [number, number] {
  const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(ports);
  const lo = m ? Number(m[1]) : NaN;
  const hi = m ? Number(m[2] ?? m[1]) : NaN;
  if (!(lo >= 1 && hi <= 65535 && lo <= hi)) {
    throw bad(text, `'${ports}' is not a port (1-65535) or a range of them (8000-8100)`);
  }
  return [lo, hi];
}

/**
 * Parses `host[:port]`, `*.domain[:port]`, `IP[/prefix][:port]`, `[IPv6][/prefix][:port]` or a
 * bare IPv6 address (with a prefix, no port); a port may be a range, `lo-hi`.
 */
export function parseAllowRule(text: string): AllowRule {
  if (typeof text !== "string" || text.trim() !== text || text === "") {
    throw bad(String(text), "empty, or spaces around it");
  }
  let host = text;
  let ports: string | undefined;
  const bracket = /^\[([^\]]+)\](\/\d+)?(?::(.+))?$/.exec(text);
  if (bracket) {
    host = `${bracket[1]}${bracket[2] ?? ""}`;
    ports = bracket[3];
    if (ipFamily((bracket[1] ?? "").split("/")[0] ?? "") !== 6)
      throw bad(text, "[...] holds an IPv6 address");
  } else if ((text.match(/:/g) ?? []).length === 1) {
    [host, ports] = text.split(":") as [string, string];
  }
  const [portLo, portHi] = ports === undefined ? [0, 65535] : parsePorts(text, ports);
  const slash = host.indexOf("/");
  const addr = slash < 0 ? host : host.slice(0, slash);
  const family = ipFamily(addr);
  if (family !== 0) {
    const max = family === 4 ? 32 : 128;
    const prefixText = slash < 0 ? String(max) : host.slice(slash + 1);
    const prefix = /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
    if (!(prefix >= 0 && prefix <= max)) throw bad(text, `the prefix must be 0 to ${max}`);
    return { text, host: { addr, prefix }, portLo, portHi };
  }
  const wildcard = host.startsWith("*.");
  const name = wildcard ? host.slice(2) : host;
  if (slash >= 0 || !isName(name) || (wildcard && !name.includes(".")))
    throw bad(
      text,
      wildcard
        ? `'${host}' is not a wildcard name: '*.' and a domain of two labels or more (*.example.com)`
        : `'${host}' is neither an address nor a host name`,
    );
  const lower = name.toLowerCase().replace(/\.$/, "");
  if (wildcard) return { text, host: { suffix: lower }, portLo, portHi };
  return { text, host: { name: lower }, portLo, portHi };
}

/** Parses `IP`, `IP:PORT`, `IPv6` or `[IPv6][:PORT]` (--dns; port 53 unless given) as `addr:port`. */
export function parseDnsServer(text: string): string {
  const given = typeof text === "string" ? text : "";
  const m =
    /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(given) ??
    /^([^:]+)(?::(\d{1,5}))?$/.exec(given) ??
    /^([^[\]]*:[^[\]]*)()$/.exec(given);
  const addr = m?.[1] ?? "";
  const port = m?.[2] ? Number(m[2]) : 53;
  const family = ipFamily(addr);
  if (family === 0 || (given.startsWith("[") && family !== 6) || !(port >= 1 && port <= 65535)) {
    throw new UsageError(
      `invalid --dns '${given}': use IP, IP:PORT or [IPv6]:PORT`,
      "EINVALID_DNS",
    );
  }
  return family === 6 ? `[${addr}]:${port}` : `${addr}:${port}`;
}

/** Parses `name:ip` or `name=ip` (docker's --add-host; an IPv6 address may be in brackets). */
export function parseAddHost(text: string): { name: string; addr: string } {
  const at = typeof text === "string" ? text.search(/[:=]/) : -1;
  const name = at < 0 ? "" : text.slice(0, at);
  const addr = at < 0 ? "" : text.slice(at + 1).replace(/^\[(.*)\]$/, "$1");
  if (!isName(name) || ipFamily(addr) === 0) {
    throw new UsageError(
      `invalid --add-host '${String(text)}': use NAME:IP (api.test:127.0.0.1, db=::1)`,
      "EINVALID_ADD_HOST",
    );
  }
  return { name: name.toLowerCase().replace(/\.$/, ""), addr };
}

export interface NetOptions {
  network?: boolean | NetworkMode | undefined;
  allowNet?: readonly string[] | undefined;
  dns?: readonly string[] | undefined;
  addHosts?: readonly string[] | undefined;
  inject?: readonly string[] | undefined;
}

/**
 * The plan of a run under a sandbox's options and the run's own (which replace the network and
 * add to the lists). With rules and no explicit "host", the network is an allow-list; with
 * "host", rules only let the metadata range through. `resolve` is the host's resolver,
 * `hostsFile` reads the /etc/hosts the guest sees.
 */
export function planNetwork(
  o: NetOptions,
  run: NetOptions,
  resolve: (name: string) => { addrs: string[] } | { error: string },
  hostsFile: () => string = () => "",
): NetPlan {
  const given = run.network ?? o.network;
  if (given !== undefined && ![true, false, "host", "none"].includes(given)) {
    throw new UsageError(
      `invalid network mode ${String(given)}: use "host" or "none"`,
      "EINVALID_NETWORK",
    );
  }
  const parsed = [...(o.allowNet ?? []), ...(run.allowNet ?? [])].map(parseAllowRule);
  const added = [...(o.addHosts ?? []), ...(run.addHosts ?? [])].map(parseAddHost);
  const none = given === false || given === "none";
  // A run's "none" wins over its sandbox's rules; rules given with "none" at one level conflict.
  const runRules = (run.allowNet ?? []).length > 0;
  const ownRules = run.network === undefined && (o.allowNet ?? []).length > 0;
  if (none && (runRules || ownRules)) {
    throw new UsageError(
      "--allow-net needs the network: it cannot go with --network none",
      "EINVALID_NETWORK",
    );
  }
  const rules = none ? [] : parsed;
  const injects = [...(o.inject ?? []), ...(run.inject ?? [])].map(parseInject);
  if (none && injects.length > 0) {
    throw new UsageError(
      "--inject needs the network: it cannot go with --network none",
      "EINVALID_NETWORK",
    );
  }
  const dns = [...(o.dns ?? []), ...(run.dns ?? [])].map(parseDnsServer);
  const list = !none && given !== "host" && rules.length > 0;
  const hosts = new Map<string, string[]>();
  for (const { name, addr } of added) hosts.set(name, [...(hosts.get(name) ?? []), addr]);
  const addrsOf = (name: string, what: string): string[] => {
    let addrs = hosts.get(name);
    if (addrs === undefined) {
      const found = resolve(name);
      if ("error" in found) {
        throw new UsageError(`${what}: cannot resolve ${name}: ${found.error}`, "ENET_RESOLVE");
      }
      addrs = found.addrs;
      hosts.set(name, addrs);
    }
    return addrs;
  };
  const one = (addr: string, portLo: number, portHi: number): NetRule => ({
    addr,
    prefix: ipFamily(addr) === 4 ? 32 : 128,
    portLo,
    portHi,
  });
  const netRules: NetRule[] = [];
  const names: NameRule[] = [];
  let fileText: string | undefined;
  for (const r of rules) {
    const { portLo, portHi } = r;
    if ("addr" in r.host) netRules.push({ ...r.host, portLo, portHi });
    else if ("suffix" in r.host) {
      if (!list) {
        throw new UsageError(
          `--allow-net ${r.text}: a wildcard needs an allow-list (with --network host, rules only open the metadata range)`,
          "EINVALID_NET_RULE",
        );
      }
      names.push({ name: r.host.suffix, wildcard: true, portLo, portHi });
    } else if (list) {
      // Looked up by the guest: through the name service, or its /etc/hosts (allowed now).
      const name = r.host.name;
      for (const a of hosts.get(name) ?? listedIn((fileText ??= hostsFile()), name))
        netRules.push(one(a, portLo, portHi));
      names.push({ name, wildcard: false, portLo, portHi });
    } else
      for (const a of addrsOf(r.host.name, `--allow-net ${r.text}`))
        netRules.push(one(a, portLo, portHi));
  }
  const diverts: NetRule[] = [];
  for (const i of injects) {
    for (const a of addrsOf(i.host, `--inject ${i.host}`)) diverts.push(one(a, i.port, i.port));
  }
  // The guest's resolver reaches the run's name service by a diverted connect.
  if (names.length > 0) diverts.push(one(NAME_SERVER, 53, 53));
  if (dns.length > 0 && (none || (list && names.length === 0))) {
    throw new UsageError(
      none
        ? "--dns needs the network: it cannot go with --network none"
        : "--dns: no --allow-net rule names a host, so the guest looks up no name",
      "EINVALID_DNS",
    );
  }
  if (!list && dns.some((d) => !d.endsWith(":53"))) {
    throw new UsageError(
      "--dns with a port needs an allow-list name rule (/etc/resolv.conf holds no ports)",
      "EINVALID_DNS",
    );
  }
  const network = none ? "none" : list ? "allow-list" : "host";
  return { network, netRules, hosts, injects, diverts, names, dns };
}

/** The addresses a hosts(5) file lists for a name. */
export function listedIn(text: string, name: string): string[] {
  const found: string[] = [];
  for (const line of text.split("\n")) {
    const [addr, ...aliases] = (line.split("#")[0] ?? "").trim().split(/\s+/);
    if (addr && ipFamily(addr) !== 0 && aliases.some((a) => a.toLowerCase() === name))
      found.push(addr);
  }
  return found;
}

/** /etc/hosts as the guest sees it: the host's, then a line for each name of the plan. */
export function hostsText(base: string, hosts: ReadonlyMap<string, readonly string[]>): string {
  const lines = [...hosts].flatMap(([name, addrs]) => addrs.map((a) => `${a}\t${name}`));
  const head = base === "" || base.endsWith("\n") ? base : `${base}\n`;
  return `${head}# cvisor: --add-host and --allow-net names\n${lines.join("\n")}\n`;
}
