// The steps of a run that do not depend on how its end is awaited, shared by Sandbox (the done
// fd watched from the event loop) and the CLI (a blocking cv_run_wait_forwarding).
import { resolve as resolvePath } from "node:path";
import { UsageError } from "../core/errors.js";
import * as native from "../core/native.js";
import { defaultHiddenPaths } from "../paths.js";
import { openCgroups, type RunCgroups } from "./cgroups.js";
import { parseDuration } from "./duration.js";
import { buildEnv, envStrings, SANDBOX_ENV } from "./env.js";
import { runFailure } from "./result.js";
import { parseLimits, type LimitsReport, type ParsedLimits } from "./limits.js";
import { parseHttpRule, placeholder, readSecret, startBroker } from "./broker/broker.js";
import { NAME_SERVER } from "./broker/dns.js";
import { planNetwork } from "./net-policy.js";
import { readHostsFile, writeHosts, writeResolvConf, writeTrust } from "./run-layer.js";
import { withShim } from "./shim.js";
import type { SandboxLayer } from "./open-layer.js";
import type { ListenPolicy, RunOptions, SandboxOptions } from "./types.js";

/** Throws the CvisorError of an argv that cannot be run (before anything is created for it). */
export function checkArgv(argv: readonly string[]): void {
  if (typeof argv === "string") {
    // run("echo hi"): a shell line where an argv belongs (a string is not split, as execa's
    // execa() would not either); say what to pass instead.
    const words = JSON.stringify((argv as string).trim().split(/\s+/).filter(Boolean));
    throw new UsageError(
      `run() takes the command as an argv array, such as ${words}; for a shell line, run(["/bin/sh", "-c", ${JSON.stringify(argv)}])`,
      "CV_ERR_INVALID",
    );
  }
  if (!Array.isArray(argv) || argv.length === 0) {
    throw new UsageError("empty command: run() needs at least a program name", "CV_ERR_INVALID");
  }
  if (!argv.every((arg) => typeof arg === "string")) {
    throw new UsageError("every argument of run() must be a string", "CV_ERR_INVALID");
  }
}

/** A run as planned: what createRun needs but the stdio, and the limits its cgroups enforce. */
export type PlannedRun = Omit<native.RunSpec, "stdio"> & { limits?: ParsedLimits | undefined };

/**
 * What createRun needs but the stdio: argv under a sandbox's options and a run's overrides, in
 * the sandbox layer (./open-layer.ts) whose name the guest sees and whose upper it writes. A
 * run whose guest must find names in its /etc/hosts gets a layer holding it above the others,
 * made in `layer.scratch()` (closeLayer removes it).
 */
export function runSpec(
  argv: readonly string[],
  o: Readonly<SandboxOptions>,
  options: RunOptions,
  layer: Pick<SandboxLayer, "name" | "upper" | "work" | "storage"> &
    Partial<Pick<SandboxLayer, "lowers" | "scratch" | "cleanups">>,
): PlannedRun {
  checkArgv(argv);
  const limits = parseLimits(o.limits, options.limits);
  let hostsFile: string | undefined; // read once, if at all
  const readHosts = (): string => (hostsFile ??= readHostsFile());
  const net = planNetwork(o, options, native.resolveHost, readHosts);
  const secrets = Object.entries({ ...o.secrets, ...options.secrets }).map(([name, source]) =>
    readSecret(name, source),
  );
  const requests = [...(o.allowHttp ?? []), ...(options.allowHttp ?? [])].map(parseHttpRule);
  if (requests.length > 0 && net.injects.length === 0) {
    throw new UsageError(
      "--allow-http rules are checked by the credential broker: they need an --inject for their host",
      "EINVALID_HTTP_RULE",
    );
  }
  if (secrets.length > 0 && net.injects.length === 0) {
    throw new UsageError(
      `secret ${secrets.map((x) => x.name).join(", ")} goes nowhere: --inject 'HOST Header: {NAME}' says where`,
      "EINVALID_SECRET",
    );
  }
  const timeout = options.timeout ?? o.timeout;
  const cwd = options.cwd ?? o.cwd;
  const spec: PlannedRun = {
    helperPath: native.helperPath(),
    argv,
    env: [],
    cwd: cwd === undefined ? undefined : resolvePath(cwd),
    network: net.network,
    netRules: net.netRules,
    listen: listenPolicy(options) ?? listenPolicy(o) ?? "loopback",
    timeoutMs: timeout === undefined ? 0 : parseDuration(timeout),
    hide: hiddenPaths(o, options, layer.storage),
    allowUnix: [...(o.allowUnix ?? []), ...(options.allowUnix ?? [])].map((p) => resolvePath(p)),
    hostname: layer.name,
    upper: { upper: layer.upper, work: layer.work },
    ...(limits ? { limits } : {}),
  };
  // Last, once nothing else can fail: what lives beside the run (closeLayer ends it).
  let lowers = layer.lowers ?? [];
  let brokerEnv: Record<string, string> = {};
  const names = net.names.length > 0;
  if (net.hosts.size > 0 || net.injects.length > 0 || names || net.dns.length > 0) {
    if (!layer.scratch || !layer.cleanups) throw new UsageError("network names need a run's layer");
    const dir = layer.scratch();
    if (net.hosts.size > 0) writeHosts(dir, readHosts(), net.hosts);
    if (net.dns.length > 0 || names) writeResolvConf(dir, net.dns, names ? NAME_SERVER : undefined);
    if (net.injects.length > 0 || names) {
      const broker = startBroker({
        secrets,
        injects: net.injects,
        requests,
        addrs: net.hosts,
        names: names ? { rules: net.names, servers: net.dns } : undefined,
      });
      layer.cleanups.push(() => {
        broker.stop();
        native.close(broker.announceFd);
        if (broker.grantFd !== undefined) native.close(broker.grantFd);
      });
      spec.divert = { rules: net.diverts, port: broker.port, fd: broker.announceFd };
      if (broker.grantFd !== undefined) spec.grantFd = broker.grantFd;
      if (broker.caPem !== undefined) brokerEnv = writeTrust(dir, broker.caPem);
      for (const { name } of secrets) brokerEnv[name] = placeholder(name);
    }
    lowers = [dir, ...lowers];
  }
  if (lowers.length > 0) spec.lowers = lowers;
  spec.env = envStrings(
    withShim(
      buildEnv(process.env, { [SANDBOX_ENV]: layer.name }, brokerEnv, o.env, options.env),
      spec.hide,
    ),
  );
  return spec;
}

/** How a run's limits are held: by its cgroups, and the rest by the supervisor itself. */
interface HeldBy {
  cgroups: RunCgroups;
  watch: ParsedLimits | undefined;
}

/** The runs that have limits, until their report is read. */
const runLimits = new WeakMap<native.NativeRun, HeldBy>();

/**
 * createRun, with each of the run's limits held by the best means this user has here: a cgroup
 * (made first, removed again on failure), else the supervisor itself (src/sandbox/cgroups.ts
 * says which; native/src/supervisor/limits.c how).
 */
export function createPlannedRun(
  spec: PlannedRun & Pick<native.RunSpec, "stdio">,
): native.NativeRun {
  const { limits, ...rest } = spec;
  if (!limits) return native.createRun(rest);
  const cgroups = openCgroups(limits);
  // No cgroup controller holds a disk limit: the supervisor walks the layer for it.
  const disk = limits.diskBytes;
  const watch = disk === undefined ? cgroups.unheld : { ...cgroups.unheld, diskBytes: disk };
  let run: native.NativeRun;
  try {
    run = native.createRun({
      ...rest,
      cgroups: { procs: cgroups.procs, oomV1: cgroups.oomV1 },
      ...(watch ? { watch } : {}),
    });
  } catch (err) {
    cgroups.remove();
    throw err;
  }
  runLimits.set(run, { cgroups, watch });
  return run;
}

/**
 * The report of a run's limits, and its cgroups removed (what is left in them killed): once the
 * run is over (before the free: the supervisor's own count is read from the run), or when it is
 * given up. Undefined for a run without limits; a second call too.
 */
export function releaseLimits(run: native.NativeRun): LimitsReport | undefined {
  const held = runLimits.get(run);
  if (!held) return undefined;
  runLimits.delete(run);
  try {
    const report = held.cgroups.report();
    if (!held.watch || !run.alive) return report;
    const watched = watchReport(held.watch, native.watchedLimits(run));
    // A limit that ended the run comes before a refused fork.
    const hits = [report.limitHit, watched.limitHit];
    const limitHit = hits.find((h) => h === "memory" || h === "disk") ?? hits.find(Boolean);
    return { ...report, ...watched, ...(limitHit ? { limitHit } : {}) };
  } finally {
    held.cgroups.remove();
  }
}

function watchReport(limits: ParsedLimits, seen: native.WatchedLimits): LimitsReport {
  const report: LimitsReport = {};
  const mechanism = "supervisor";
  if (limits.memoryBytes !== undefined) {
    report.memory = { limit: limits.memoryBytes, mechanism, peak: seen.memoryPeak };
  }
  if (limits.pids !== undefined)
    report.pids = { limit: limits.pids, mechanism, peak: seen.pidsPeak };
  if (limits.cpus !== undefined) report.cpus = { limit: limits.cpus, mechanism };
  if (limits.diskBytes !== undefined) {
    report.disk = { limit: limits.diskBytes, mechanism, peak: seen.diskPeak };
  }
  if (seen.memoryHit) report.limitHit = "memory";
  else if (seen.diskHit) report.limitHit = "disk";
  else if (seen.pidsHit) report.limitHit = "pids";
  return report;
}

/**
 * The default hidden paths minus the exposed ones, plus the extra hidden ones (absolute), plus
 * `always` (the sandbox storage), which no --expose takes out: each is added unless a path
 * already in the list holds it.
 */
export function hiddenPaths(
  o: Readonly<SandboxOptions>,
  options: RunOptions,
  always: readonly string[] = [],
): string[] {
  const abs = (list: readonly string[] | undefined): string[] =>
    list ? list.map((p) => resolvePath(p)) : [];
  const defaults = defaultHiddenPaths(); // already absolute
  const none = (l: readonly string[] | undefined): boolean => !l || l.length === 0;
  let hidden: string[];
  if (none(o.expose) && none(options.expose) && none(o.hide) && none(options.hide)) {
    hidden = defaults;
  } else {
    const expose = new Set([...abs(o.expose), ...abs(options.expose)]);
    const hide = [...defaults.filter((p) => !expose.has(p)), ...abs(o.hide)];
    hidden = [...new Set([...hide, ...abs(options.hide)])];
  }
  for (const path of always) {
    if (!hidden.some((h) => path === h || path.startsWith(h.endsWith("/") ? h : `${h}/`))) {
      hidden.push(path);
    }
  }
  return hidden;
}

/** How a finished run ended: failure is the CvisorError of a run whose guest never ran. */
export interface Finished {
  raw: native.NativeRunResult;
  failure: Error | null;
  /** Notifications per syscall name ({} after a failure). */
  notifications: Record<string, number>;
  /** What the supervisor refused ([] after a failure). */
  denials: native.Denial[];
  /** What enforced the run's limits and what it hit (undefined without limits). */
  limits: LimitsReport | undefined;
}

/** Reads the result of a run that is over (the per-syscall counts only if wanted) and frees it. */
export function finishRun(run: native.NativeRun, withNotifications = true): Finished {
  const raw = native.getResult(run);
  const failure = runFailure(raw, native.strerror);
  const notifications = failure || !withNotifications ? {} : native.statsJson(run);
  const denials = failure || raw.denials === 0 ? [] : native.denials(run);
  const limits = failure ? undefined : releaseLimits(run); // the tree is over: its cgroups go
  native.free(run);
  releaseLimits(run); // a failed run's cgroups
  return { raw, failure, notifications, denials, limits };
}

/** The listen policy an options object sets, if any (`listen`, else the older `allowListen`). */
function listenPolicy(o: {
  listen?: ListenPolicy | undefined;
  allowListen?: boolean | undefined;
}): ListenPolicy | undefined {
  if (o.listen !== undefined) {
    if (!["loopback", "any", "none"].includes(o.listen)) {
      throw new UsageError(
        `invalid listen policy ${String(o.listen)}: use "loopback", "any" or "none"`,
        "EINVALID_LISTEN",
      );
    }
    return o.listen;
  }
  return o.allowListen === undefined ? undefined : o.allowListen ? "any" : "none";
}
