// The CLI's exit statuses (as `docker run`), and the one-line messages and JSON report
// that go with a finished run. Pure, so the mapping is unit-tested.
import { memoryText } from "../sandbox/limits.js";
import type { Denial, RunResult } from "../sandbox/types.js";

/** Success (and help, version). */
export const EXIT_OK = 0;
/** `doctor` found a problem that stops sandboxes from running. */
export const EXIT_DOCTOR_FAILED = 1;
/** `cache restore --fail-on-miss` found no entry: told apart from cvisor's own failures (125). */
export const EXIT_CACHE_MISS = 1;
/** The reader of stdout went away (`cvisor ls | head -1`): what a C tool's SIGPIPE death shows. */
export const EXIT_SIGPIPE = 128 + 13;
/** 124 timeout, 125 cvisor failed, 126 cannot execute, 127 not found: shared with the library. */
export { EXIT_CANNOT_EXEC, EXIT_CVISOR, EXIT_NOT_FOUND, EXIT_TIMEOUT } from "../sandbox/result.js";

/**
 * The line cvisor prints on stderr after a run (without the "cvisor: " prefix), or null.
 * errnoText turns an errno name ("EACCES") into words ("permission denied").
 */
export function runMessage(
  result: RunResult,
  command: string,
  timeoutText: string | undefined,
  errnoText: (name: string) => string,
): string | null {
  if (result.timedOut) return `timed out after ${timeoutText ?? "the deadline"}`;
  const hit = result.limitHit;
  const limit = hit === "memory" || hit === "disk" ? result.limits?.[hit] : undefined;
  if (hit && limit) return `${hit} limit ${memoryText(limit.limit)} reached`;
  if (result.execError === "ENOENT") return `${command}: command not found`;
  if (result.execError !== undefined) return `${command}: ${errnoText(result.execError)}`;
  return null;
}

/**
 * The refusals a user is likely to want to lift, as lines for stderr (without "cvisor: "):
 * a host unix socket (an ssh-agent, Docker, D-Bus) the guest tried to reach, an inet host, a
 * name the run's name service would not look up.
 */
export function denialHints(denials: readonly Denial[]): string[] {
  const unix = denials
    .filter((d) => d.why.startsWith("host unix socket"))
    .map(
      (d) =>
        `refused ${d.syscall} to host unix socket ${d.target} (--allow-unix ${d.target} lets it through)`,
    );
  // Inet destinations: one line per host, its ports together.
  const hosts = new Map<string, { why: string; calls: Set<string>; ports: Set<string> }>();
  for (const d of denials) {
    const m = /^(\S+) port (\d+)$/.exec(d.target);
    if (!m || !/--allow-net/.test(d.why)) continue;
    const [, host = "", port = ""] = m;
    const seen = hosts.get(host) ?? { why: d.why, calls: new Set(), ports: new Set() };
    seen.calls.add(d.syscall);
    seen.ports.add(port);
    hosts.set(host, seen);
  }
  const inet = [...hosts].map(([host, { why, calls, ports }]) => {
    const list = [...ports];
    const rule = host.includes(":") ? `[${host}]:${list[0]}` : `${host}:${list[0]}`;
    return `refused ${[...calls].join("/")} to ${host} port${list.length > 1 ? "s" : ""} ${list.join(", ")}: ${why} (--allow-net ${rule} lets it through)`;
  });
  const names = denials
    .filter((d) => d.syscall === "dns")
    .map(
      (d) =>
        `refused DNS lookup of ${d.target}: ${d.why} (--allow-net ${d.target} lets it through)`,
    );
  return [...unix, ...inet, ...names];
}

/** The --json run report: one line for stderr. */
export function jsonReport(result: RunResult): string {
  return JSON.stringify({
    exitCode: result.exitCode,
    signal: result.signal,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
    notifications: result.stats.notifications,
    totalNotifications: result.stats.totalNotifications,
    denials: result.denials,
    ...(result.limits ? { limits: result.limits } : {}),
    ...(result.limitHit ? { limitHit: result.limitHit } : {}),
  });
}
