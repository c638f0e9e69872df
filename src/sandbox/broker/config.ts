// What ./broker.ts hands the broker process (./main.ts), and how the broker applies an injected
// host's --allow-http rules to each request.

/**
 * A host name: dot-separated labels of letters, digits, '-' and '_' (63 bytes at most, no '-'
 * at either end), 253 bytes in all, no trailing dot. The one pattern for --allow-net, --add-host,
 * --inject and --allow-http names and the names the name service answers.
 */
export const HOST_NAME =
  /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/i;

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
