// What ./broker.ts hands the broker process (./main.ts), and how the broker applies an injected
// host's --allow-http rules to each request.

/** Methods ("*": any) and a path: exact, or a prefix when it ends with "*". */
export interface RequestRule {
  methods: string[];
  path: string;
}

/**
 * Does a request match one of the rules? The path (its query left out) must be plain: a "." or
 * ".." segment, or an encoded dot, slash or backslash, could make the server see another path
 * than the one matched here, so such a path matches nothing.
 */
export function requestAllowed(
  rules: readonly RequestRule[],
  method: string,
  url: string,
): boolean {
  if (rules.length === 0) return true;
  const path = url.split("?")[0] ?? "";
  if (!path.startsWith("/") || /%2e|%2f|%5c|\\/i.test(path)) return false;
  if (path.split("/").some((seg) => seg === "." || seg === "..")) return false;
  return rules.some(
    (r) =>
      (r.methods.includes("*") || r.methods.includes(method.toUpperCase())) &&
      (r.path.endsWith("*") ? path.startsWith(r.path.slice(0, -1)) : path === r.path),
  );
}

/** A name the run's name service answers: exactly, or (wildcard) any name below it. */
export interface NameRule {
  name: string;
  wildcard: boolean;
  portLo: number;
  portHi: number;
}

export interface BrokerConfig {
  hosts: BrokerHost[];
  /** The run's name service (./dns.ts): its rules, and the --dns servers (none: this host's resolver). */
  names?: { rules: NameRule[]; servers: string[] } | undefined;
  /** Each secret's value and what the guest sees instead. */
  scrub: { secret: string; placeholder: string }[];
}

export interface BrokerHost {
  name: string;
  port: number;
  /** The addresses the guest reaches the host at (the divert rules'). */
  addrs: string[];
  /** Header name → value, the secrets already in. */
  headers: [string, string][];
  /** Its server certificate and key, PEM. */
  cert: string;
  key: string;
  /** HTTPS, or plain HTTP (an `http://` rule): the guest must speak it, the host is sent it. */
  tls: boolean;
  /** --allow-http: the only requests sent on (none given: every request). */
  requests: RequestRule[];
}
