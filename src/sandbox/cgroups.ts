// The kernel's cgroups as a run's limits: where this process's cgroups are (/proc/self/cgroup
// and mountinfo), the run's own cgroups with the limits written in (one in the v2 hierarchy for
// the controllers it has, else one per v1 controller), their report at the end, and their
// removal (also of what a killed cvisor left). The guest's init joins them before any guest code
// runs (native/src/supervisor/limits.c).
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import type { LimitsReport, ParsedLimits } from "./limits.js";

/** A mount from /proc/self/mountinfo. */
export interface Mount {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** Parses /proc/self/mountinfo. */
export function parseMountinfo(text: string): Mount[] {
  const unescape = (s: string): string =>
    s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
  const mounts: Mount[] = [];
  for (const line of text.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!left || !right) continue;
    const fields = left.split(" ");
    const [fsType, , superOptions] = right.split(" ");
    if (fields[3] === undefined || fields[4] === undefined || fsType === undefined) continue;
    mounts.push({
      root: unescape(fields[3]),
      mountPoint: unescape(fields[4]),
      fsType,
      superOptions: (superOptions ?? "").split(","),
    });
  }
  return mounts;
}

/** Parses /proc/self/cgroup into controller list → path ("" is the v2 hierarchy). */
export function parseProcCgroup(text: string): Map<string, string> {
  const paths = new Map<string, string>();
  for (const line of text.split("\n")) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (match) paths.set(match[1] ?? "", match[2] ?? "/");
  }
  return paths;
}

/** The directory of this process's cgroup inside a mount, or null when outside it. */
export function cgroupDir(mount: Mount, path: string): string | null {
  const rel = relative(mount.root, path);
  if (rel.startsWith("..")) return null;
  return join(mount.mountPoint, rel);
}

/** The controllers a limit needs (the same names in v1 and v2). */
export const CONTROLLERS = ["memory", "pids", "cpu"] as const;
export type Controller = (typeof CONTROLLERS)[number];

/** This process's cgroup directory of a v1 controller, or null when it is not mounted. */
export function v1Dir(
  controller: Controller,
  mounts: readonly Mount[],
  paths: ReadonlyMap<string, string>,
): string | null {
  const mount = mounts.find((m) => m.fsType === "cgroup" && m.superOptions.includes(controller));
  if (!mount) return null;
  const path = [...paths].find(([list]) => list.split(",").includes(controller))?.[1] ?? "/";
  return cgroupDir(mount, path) ?? mount.mountPoint;
}

/** The controllers a set of limits needs. */
function controllersOf(limits: ParsedLimits): Controller[] {
  const out: Controller[] = [];
  if (limits.memoryBytes !== undefined) out.push("memory");
  if (limits.pids !== undefined) out.push("pids");
  if (limits.cpus !== undefined) out.push("cpu");
  return out;
}

const CFS_PERIOD_US = 100_000;
/** The prefix of a run's cgroup: cvisor-<pid of the cvisor that made it>-<n>. */
const PREFIX = "cvisor-";
let serial = 0;

/** What a cgroup's files answer: the real cgroup filesystem, or a test's stand-in. */
export interface CgroupFs {
  /** The file's text, or null when it cannot be read. */
  read(file: string): string | null;
  /** Writes the file; the errno code when that failed, else null. */
  write(file: string, text: string): string | null;
  mkdir(dir: string): string | null;
  rmdir(dir: string): string | null;
  writable(file: string): boolean;
}

const errno = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? String(err);
const tryFs = (act: () => void): string | null => {
  try {
    act();
    return null;
  } catch (err) {
    return errno(err);
  }
};

/** The cgroup filesystem as this process sees it. */
export const realCgroupFs: CgroupFs = {
  read: (file) => {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return null;
    }
  },
  write: (file, text) => tryFs(() => writeFileSync(file, text)),
  mkdir: (dir) => tryFs(() => mkdirSync(dir)),
  rmdir: (dir) => tryFs(() => rmdirSync(dir)),
  writable: (file) => tryFs(() => accessSync(file, constants.W_OK)) === null,
};

/** This process's cgroup in the v2 hierarchy and that hierarchy's root, or null without one. */
export interface V2Home {
  own: string;
  root: string;
}

export function v2Home(
  mounts: readonly Mount[],
  paths: ReadonlyMap<string, string>,
): V2Home | null {
  const path = paths.get("");
  if (path === undefined) return null;
  for (const m of mounts) {
    if (m.fsType !== "cgroup2") continue;
    const own = cgroupDir(m, path);
    if (own !== null) return { own, root: m.mountPoint };
  }
  return null;
}

const words = (text: string | null): string[] => (text ?? "").split(/\s+/).filter(Boolean);

/** The controllers the v2 hierarchy has at all (on a hybrid host, those not bound to v1). */
export function v2Controllers(home: V2Home, fs: CgroupFs): Controller[] {
  const have = words(fs.read(join(home.root, "cgroup.controllers")));
  return CONTROLLERS.filter((c) => have.includes(c));
}

/** Where a run's v2 cgroup can go, or why nowhere. */
export type V2Parent = { dir: string } | { why: string };

/**
 * The nearest cgroup at or above this process's own that can have a child with the controllers
 * and whose cgroup.procs this user may write (the kernel moves the init from our cgroup into
 * that child only for a writer of their common ancestor's). A cgroup that holds processes
 * cannot pass controllers down (the no-internal-process rule), so cvisor's own cgroup usually
 * does not do, and the nearest delegated ancestor does. `dry` (doctor) changes nothing: it
 * checks what the run would write, and makes and removes a child to be sure of the mkdir.
 */
export function v2Parent(
  wanted: readonly Controller[],
  home: V2Home,
  fs: CgroupFs,
  dry: boolean,
): V2Parent {
  // Why each cgroup this user may write could not do; those it may not write go unsaid.
  const reasons: string[] = [];
  for (let dir = home.own; ; dir = dirname(dir)) {
    const why = v2Refusal(dir, wanted, fs, dry);
    if (why === null) return { dir };
    if (why !== NOT_WRITABLE) reasons.push(`${dir}: ${why}`);
    if (dir === home.root || !dir.startsWith(`${home.root}/`)) break;
  }
  if (reasons.length === 0) {
    const uid = process.getuid?.() ?? -1;
    return {
      why: `no cgroup at or above ${home.own} is writable by uid ${uid} (no delegated subtree; systemd-run --user --scope -p Delegate=yes gives one)`,
    };
  }
  return { why: reasons.join("; ") };
}

const NOT_WRITABLE = "not writable";

/** Why dir cannot take the run's cgroup as a child, or null when it can (it does, unless dry). */
function v2Refusal(
  dir: string,
  wanted: readonly Controller[],
  fs: CgroupFs,
  dry: boolean,
): string | null {
  if (!fs.writable(join(dir, "cgroup.procs"))) return NOT_WRITABLE;
  // No internal processes: below a cgroup that holds some (cvisor's own, say), a child takes no
  // process once a controller is on, and domain controllers do not go on at all. The hierarchy's
  // true root is exempt; it alone has no cgroup.type (a namespace's root has one).
  const procs = words(fs.read(join(dir, "cgroup.procs")));
  if (procs.length > 0 && fs.read(join(dir, "cgroup.type")) !== null) {
    return "holds processes, so a child of it cannot take the sandbox";
  }
  const have = words(fs.read(join(dir, "cgroup.controllers")));
  const absent = wanted.filter((c) => !have.includes(c));
  if (absent.length > 0) return `its parent does not pass down ${absent.join(", ")}`;
  const enabled = words(fs.read(join(dir, "cgroup.subtree_control")));
  const toEnable = wanted.filter((c) => !enabled.includes(c));
  if (toEnable.length > 0) {
    const control = join(dir, "cgroup.subtree_control");
    if (dry) {
      if (!fs.writable(control)) return "cgroup.subtree_control not writable";
    } else {
      const err = fs.write(control, toEnable.map((c) => `+${c}`).join(" "));
      if (err !== null) return `cannot enable ${toEnable.join(", ")} (${err})`;
    }
  }
  if (dry) {
    const probe = join(dir, `${PREFIX}doctor-${process.pid}`);
    const err = fs.mkdir(probe);
    if (err !== null) return `cannot make a cgroup in it (${err})`;
    fs.rmdir(probe);
  }
  return null;
}

/** The cgroups of one run: what the core needs, then the report and the removal. */
export interface RunCgroups {
  /** cgroup.procs files the guest's init is written into (none: no cgroup could be made). */
  procs: string[];
  /** The v1 memory cgroup whose OOM ends the run (v2's memory.oom.group kills the tree itself). */
  oomV1: string | undefined;
  /** The limits no cgroup holds here (this user cannot make one): the supervisor's to hold. */
  unheld: ParsedLimits | undefined;
  /** Reads the peaks and what was hit; call once the guest tree is gone. */
  report(): LimitsReport;
  /** Kills what is left in them and removes them (idempotent). */
  remove(): void;
}

/** Where each controller of a run is held: its cgroup and the hierarchy's version. */
interface Held {
  dir: string;
  version: 1 | 2;
}

/**
 * Makes the run's cgroups with the limits written in: one v2 cgroup for the controllers the v2
 * hierarchy has and this user can delegate to (v2Parent), then a v1 child of this process's own
 * cgroup for each other controller. A controller neither can hold leaves its limit in `unheld`
 * (the supervisor holds it): a limit is never dropped.
 */
export function openCgroups(
  limits: ParsedLimits,
  procSelf: { mountinfo: string; cgroup: string } = readProcSelf(),
  fs: CgroupFs = realCgroupFs,
): RunCgroups {
  const mounts = parseMountinfo(procSelf.mountinfo);
  const paths = parseProcCgroup(procSelf.cgroup);
  const name = `${PREFIX}${process.pid}-${++serial}`;
  const held = new Map<Controller, Held>();
  const dirs = new Set<string>();
  const remove = (): void => {
    for (const dir of dirs) removeCgroup(dir);
    dirs.clear();
    held.clear();
  };
  let wanted = controllersOf(limits);
  const home = v2Home(mounts, paths);
  const inV2 = home ? v2Controllers(home, fs).filter((c) => wanted.includes(c)) : [];
  const parent = home && inV2.length > 0 ? v2Parent(inV2, home, fs, false) : null;
  if (parent && "dir" in parent) {
    sweep(parent.dir);
    const dir = join(parent.dir, name);
    if (fs.mkdir(dir) === null) {
      dirs.add(dir);
      if (writeLimitsV2(dir, inV2, limits, fs)) {
        for (const c of inV2) held.set(c, { dir, version: 2 });
        wanted = wanted.filter((c) => !inV2.includes(c));
      } else {
        removeCgroup(dir);
        dirs.delete(dir);
      }
    }
  }
  const unheld: ParsedLimits = {};
  for (const controller of wanted) {
    const v1Parent = v1Dir(controller, mounts, paths);
    const dir = v1Parent === null ? null : join(v1Parent, name);
    if (v1Parent !== null && dir !== null) {
      sweep(v1Parent);
      if (fs.mkdir(dir) === null) {
        dirs.add(dir);
        if (writeLimitsV1(controller, dir, limits, fs)) {
          held.set(controller, { dir, version: 1 });
          continue;
        }
        // Not this user's to set here: the supervisor holds this one.
        removeCgroup(dir);
        dirs.delete(dir);
      }
    }
    if (controller === "memory") unheld.memoryBytes = limits.memoryBytes;
    if (controller === "pids") unheld.pids = limits.pids;
    if (controller === "cpu") unheld.cpus = limits.cpus;
  }
  const memory = held.get("memory");
  const pids = held.get("pids");
  const cpu = held.get("cpu");
  const mechanism = (h: Held): string => `cgroup-v${h.version}`;
  return {
    procs: [...dirs].map((d) => join(d, "cgroup.procs")),
    oomV1: memory?.version === 1 ? memory.dir : undefined,
    unheld: Object.keys(unheld).length > 0 ? unheld : undefined,
    report: () => {
      const report: LimitsReport = {};
      if (memory !== undefined && limits.memoryBytes !== undefined) {
        const v2 = memory.version === 2;
        const peak = readNumber(join(memory.dir, v2 ? "memory.peak" : "memory.max_usage_in_bytes"));
        report.memory = {
          limit: limits.memoryBytes,
          mechanism: mechanism(memory),
          ...(peak !== undefined ? { peak } : {}),
        };
        if (oomKills(memory) > 0) report.limitHit = "memory";
      }
      if (pids !== undefined && limits.pids !== undefined) {
        const peak = readNumber(join(pids.dir, "pids.peak"));
        report.pids = {
          limit: limits.pids,
          mechanism: mechanism(pids),
          ...(peak ? { peak } : {}),
        };
        if (eventCount(join(pids.dir, "pids.events"), "max") > 0) report.limitHit ??= "pids";
      }
      if (cpu !== undefined && limits.cpus !== undefined) {
        report.cpus = { limit: limits.cpus, mechanism: mechanism(cpu) };
      }
      return report;
    },
    remove,
  };
}

function readProcSelf(): { mountinfo: string; cgroup: string } {
  return {
    mountinfo: readFileSync("/proc/self/mountinfo", "utf8"),
    cgroup: readFileSync("/proc/self/cgroup", "utf8"),
  };
}

/** CPU time per period for a share of cores. */
const quota = (cpus: number): number => Math.max(1000, Math.round(cpus * CFS_PERIOD_US));

/** Writes one limit file of a cgroup: true when it took the value. */
const limitSetter =
  (dir: string, fs: CgroupFs) =>
  (file: string, value: number | string): boolean =>
    fs.write(join(dir, file), `${value}\n`) === null;

/** Writes a v1 controller's limit; false when this user may not. */
function writeLimitsV1(
  controller: Controller,
  dir: string,
  limits: ParsedLimits,
  fs: CgroupFs,
): boolean {
  const set = limitSetter(dir, fs);
  if (controller === "memory" && limits.memoryBytes !== undefined) {
    if (!set("memory.limit_in_bytes", limits.memoryBytes)) return false;
    // No swap beyond it: memory+swap gets the same limit, where swap accounting is on.
    if (existsSync(join(dir, "memory.memsw.limit_in_bytes"))) {
      return set("memory.memsw.limit_in_bytes", limits.memoryBytes);
    }
    return true;
  }
  if (controller === "pids" && limits.pids !== undefined) return set("pids.max", limits.pids);
  if (controller === "cpu" && limits.cpus !== undefined) {
    return set("cpu.cfs_period_us", CFS_PERIOD_US) && set("cpu.cfs_quota_us", quota(limits.cpus));
  }
  return true;
}

/** Writes the limits of the controllers the v2 cgroup holds; false when one cannot be. */
function writeLimitsV2(
  dir: string,
  controllers: readonly Controller[],
  limits: ParsedLimits,
  fs: CgroupFs,
): boolean {
  const set = limitSetter(dir, fs);
  const has = (c: Controller): boolean => controllers.includes(c);
  if (has("memory") && limits.memoryBytes !== undefined) {
    if (!set("memory.max", limits.memoryBytes)) return false;
    // No swap beyond it (v2 counts swap apart), and an OOM takes the whole tree at once, as the
    // v1 path's OOM watch does (the run then ends with it).
    if (existsSync(join(dir, "memory.swap.max")) && !set("memory.swap.max", 0)) return false;
    if (existsSync(join(dir, "memory.oom.group")) && !set("memory.oom.group", 1)) return false;
  }
  if (has("pids") && limits.pids !== undefined && !set("pids.max", limits.pids)) return false;
  if (
    has("cpu") &&
    limits.cpus !== undefined &&
    !set("cpu.max", `${quota(limits.cpus)} ${CFS_PERIOD_US}`)
  ) {
    return false;
  }
  return true;
}

function readNumber(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, "utf8").trim());
    return Number.isFinite(n) ? n : undefined;
  } catch {
    return undefined;
  }
}

/** The count after `key ` in a flat keyed file (pids.events, memory.oom_control); 0 without. */
function eventCount(file: string, key: string): number {
  try {
    const line = readFileSync(file, "utf8")
      .split("\n")
      .find((l) => l.startsWith(`${key} `));
    return line ? Number(line.slice(key.length + 1)) || 0 : 0;
  } catch {
    return 0;
  }
}

function oomKills(memory: Held): number {
  if (memory.version === 2) return eventCount(join(memory.dir, "memory.events"), "oom_kill");
  const file = join(memory.dir, "memory.oom_control");
  return eventCount(file, "oom_kill") + eventCount(file, "under_oom");
}

/** SIGKILLs whatever is still in the cgroup, then removes it (retrying while tasks exit). */
function removeCgroup(dir: string): void {
  // v2 kills the whole tree at once, forks in flight too.
  if (existsSync(join(dir, "cgroup.kill"))) realCgroupFs.write(join(dir, "cgroup.kill"), "1");
  for (let attempt = 0; attempt < 200; attempt++) {
    let pids: number[];
    try {
      pids = readFileSync(join(dir, "cgroup.procs"), "utf8")
        .split("\n")
        .filter(Boolean)
        .map(Number);
    } catch {
      return; // gone already
    }
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Exited meanwhile.
      }
    }
    try {
      rmdirSync(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return;
      if (code !== "EBUSY") return; // not ours to fix; the next sweep tries again
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10); // tasks still exiting
  }
}

/** Removes the run cgroups under parent whose cvisor is gone (a kill -9 left them). */
function sweep(parent: string): void {
  let names: string[];
  try {
    names = readdirSync(parent).filter((n) => n.startsWith(PREFIX));
  } catch {
    return;
  }
  for (const n of names) {
    const owner = Number(n.slice(PREFIX.length).split("-")[0]);
    if (!Number.isSafeInteger(owner) || owner === process.pid || alive(owner)) continue;
    removeCgroup(join(parent, n));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
