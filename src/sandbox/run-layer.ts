// The files a run shows its guest above the sandbox's own layers, in a directory of its own
// (SandboxLayer.scratch, removed with the run): /etc/hosts with the names the network policy
// maps, /etc/resolv.conf naming the run's name service (or the --dns servers), and the
// system's certificate bundle with the credential broker's CA. Each directory
// and file keeps the mode, times and (as root) owner of the host's, as a copy-up keeps them.
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname } from "node:path";
import { hostsText } from "./net-policy.js";

/** Where distributions keep the system's bundle of trusted CAs (Debian's first: the default). */
const BUNDLES = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/ca-bundle.pem",
  "/etc/ssl/cert.pem",
];

/** The CA alone, for NODE_EXTRA_CA_CERTS (Node adds it to its own list). */
const CA_FILE = "/etc/ssl/certs/cvisor-run-ca.pem";
/**
 * The system's bundle and the CA, under a name of cvisor's own: for the variables, so a sandbox
 * whose guest once rewrote the system bundle (its layer's copy hides the one here) still works.
 */
const BUNDLE_FILE = "/etc/ssl/certs/cvisor-run-bundle.pem";

function like(ours: string, host: string): void {
  try {
    const st = lstatSync(host);
    if (!st.isSymbolicLink()) chmodSync(ours, st.mode & 0o7777);
    if (process.getuid?.() === 0) chownSync(ours, st.uid, st.gid);
    utimesSync(ours, st.atime, st.mtime);
  } catch {
    // Only cosmetic: the layer shows the file all the same.
  }
}

/** Writes `path` (absolute, as the guest sees it) into the layer dir, its directories too. */
function put(dir: string, path: string, text: string): void {
  const parents: string[] = [];
  for (let p = dirname(path); p !== "/"; p = dirname(p)) parents.unshift(p);
  for (const p of parents) {
    if (!existsSync(`${dir}${p}`)) {
      mkdirSync(`${dir}${p}`, { mode: 0o755 });
      like(`${dir}${p}`, p);
    }
  }
  writeFileSync(`${dir}${path}`, text, { mode: 0o644 });
  like(`${dir}${path}`, path);
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** This host's /etc/hosts ("" when it has none). */
export function readHostsFile(): string {
  return read("/etc/hosts") ?? "";
}

/** /etc/hosts: the host's (its text, readHostsFile's), with a line per address of each name. */
export function writeHosts(
  dir: string,
  base: string,
  hosts: ReadonlyMap<string, readonly string[]>,
): void {
  put(dir, "/etc/hosts", hostsText(base, hosts));
}

/**
 * /etc/resolv.conf naming the given servers ("ADDR:53" or "[ADDR]:53"), the host's other lines
 * kept; or, for the run's name service (./broker/dns.ts), only it, over TCP (`use-vc`: it is
 * reached by a diverted connect, which a datagram cannot be).
 */
export function writeResolvConf(
  dir: string,
  servers: readonly string[],
  nameService?: string,
): void {
  const head = "# cvisor: the run's name servers\n";
  if (nameService !== undefined) {
    put(
      dir,
      "/etc/resolv.conf",
      `${head}nameserver ${nameService}\noptions use-vc timeout:5 attempts:2\n`,
    );
    return;
  }
  const kept = (read("/etc/resolv.conf") ?? "")
    .split("\n")
    .filter((l) => l.trim() !== "" && !/^\s*nameserver\b/.test(l));
  const named = servers.map((s) => `nameserver ${s.replace(/^\[?(.*?)\]?:53$/, "$1")}`);
  put(dir, "/etc/resolv.conf", `${head}${[...named, ...kept].join("\n")}\n`);
}

/**
 * The system's bundle (wherever this host keeps one; Debian's path when it has none) with the
 * CA added, and the CA alone: the variables that make common tools trust them.
 */
export function writeTrust(dir: string, caPem: string): Record<string, string> {
  const found = BUNDLES.filter((p) => existsSync(p));
  const bundles = found.length > 0 ? found : [BUNDLES[0] ?? ""];
  const withCa = (base: string): string =>
    `${base}${base === "" || base.endsWith("\n") ? "" : "\n"}${caPem}`;
  for (const path of bundles) put(dir, path, withCa(read(path) ?? ""));
  put(dir, BUNDLE_FILE, withCa(read(bundles[0] ?? "") ?? ""));
  put(dir, CA_FILE, caPem);
  return {
    SSL_CERT_FILE: BUNDLE_FILE,
    REQUESTS_CA_BUNDLE: BUNDLE_FILE,
    CURL_CA_BUNDLE: BUNDLE_FILE,
    GIT_SSL_CAINFO: BUNDLE_FILE,
    NODE_EXTRA_CA_CERTS: CA_FILE,
  };
}
