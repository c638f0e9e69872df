// The kernel's cgroups as a run's limits: where this process's cgroups are (/proc/self/cgroup
// and mountinfo), one child cgroup per run and controller with the limits written in, its
// report at the end, and its removal (also of what a killed cvisor left). The guest's init joins
// them before any guest code runs (native/src/supervisor/limits.c).
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from "node:fs";
import { join, relative } from "node:path";
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

/** The v1 controllers a limit needs. */
export type V1Controller = "memory" | "pids" | "cpu";

/** This process's cgroup directory of a v1 controller, or null when it is not mounted. */
export function v1Dir(
  controller: V1Controller,
  mounts: readonly Mount[],
  paths: ReadonlyMap<string, string>,
): string | null {
  const mount = mounts.find((m) => m.fsType === "cgroup" && m.superOptions.includes(controller));
  if (!mount) return null;
  const path = [...paths].find(([list]) => list.split(",").includes(controller))?.[1] ?? "/";
  return cgroupDir(mount, path) ?? mount.mountPoint;
}

/** The controllers a set of limits needs. */
function controllersOf(limits: ParsedLimits): V1Controller[] {
  const out: V1Controller[] = [];
  if (limits.memoryBytes !== undefined) out.push("memory");
  if (limits.pids !== undefined) out.push("pids");
  if (limits.cpus !== undefined) out.push("cpu");
  return out;
}

const CFS_PERIOD_US = 100_000;
/** The prefix of a run's cgroup: cvisor-<pid of the cvisor that made it>-<n>. */
const PREFIX = "cvisor-";
let serial = 0;

/** The cgroups of one run: what the core needs, then the report and the removal. */
export interface RunCgroups {
  /** cgroup.procs files the guest's init is written into (none: no cgroup could be made). */
  procs: string[];
  /** The v1 memory cgroup whose OOM ends the run. */
  oomV1: string | undefined;
  /** The limits no cgroup holds here (this user cannot make one): the supervisor's to hold. */
  unheld: ParsedLimits | undefined;
  /** Reads the peaks and what was hit; call once the guest tree is gone. */
  report(): LimitsReport;
  /** Kills what is left in them and removes them (idempotent). */
  remove(): void;
}

/**
 * Makes a cgroup v1 child per controller the limits need, under this process's own cgroup, with
 * the limit written in. A controller that is not mounted, or whose cgroup this user cannot make
 * or set, leaves its limit in `unheld` (the supervisor holds it): a limit is never dropped.
 */
export function openCgroups(
  limits: ParsedLimits,
  procSelf: { mountinfo: string; cgroup: string } = readProcSelf(),
): RunCgroups {
  const mounts = parseMountinfo(procSelf.mountinfo);
  const paths = parseProcCgroup(procSelf.cgroup);
  const name = `${PREFIX}${process.pid}-${++serial}`;
  const made = new Map<V1Controller, string>();
  const unheld: ParsedLimits = {};
  const remove = (): void => {
    for (const dir of made.values()) removeCgroup(dir);
    made.clear();
  };
  for (const controller of controllersOf(limits)) {
    const parent = v1Dir(controller, mounts, paths);
    const dir = parent === null ? null : join(parent, name);
    if (parent !== null && dir !== null) {
      sweep(parent);
      try {
        mkdirSync(dir);
        made.set(controller, dir);
        writeLimits(controller, dir, limits);
        continue;
      } catch {
        // Not this user's to make or set here: the supervisor holds this one.
        if (made.get(controller) === dir) {
          removeCgroup(dir);
          made.delete(controller);
        }
      }
    }
    if (controller === "memory") unheld.memoryBytes = limits.memoryBytes;
    if (controller === "pids") unheld.pids = limits.pids;
    if (controller === "cpu") unheld.cpus = limits.cpus;
  }
  const memory = made.get("memory");
  const pids = made.get("pids");
  return {
    procs: [...made.values()].map((d) => join(d, "cgroup.procs")),
    oomV1: memory,
    unheld: Object.keys(unheld).length > 0 ? unheld : undefined,
    report: () => {
      const report: LimitsReport = {};
      if (memory !== undefined && limits.memoryBytes !== undefined) {
        const peak = readNumber(join(memory, "memory.max_usage_in_bytes"));
        report.memory = {
          limit: limits.memoryBytes,
          mechanism: "cgroup-v1",
          ...(peak !== undefined ? { peak } : {}),
        };
        if (oomKills(memory) > 0) report.limitHit = "memory";
      }
      if (pids !== undefined && limits.pids !== undefined) {
        const peak = readNumber(join(pids, "pids.peak"));
        report.pids = { limit: limits.pids, mechanism: "cgroup-v1", ...(peak ? { peak } : {}) };
        if (eventCount(join(pids, "pids.events"), "max") > 0) report.limitHit ??= "pids";
      }
      if (made.has("cpu") && limits.cpus !== undefined) {
        report.cpus = { limit: limits.cpus, mechanism: "cgroup-v1" };
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

/** Writes a controller's limit; throws when this user may not. */
function writeLimits(controller: V1Controller, dir: string, limits: ParsedLimits): void {
  const set = (file: string, value: number | string): void =>
    writeFileSync(join(dir, file), `${value}\n`);
  if (controller === "memory" && limits.memoryBytes !== undefined) {
    set("memory.limit_in_bytes", limits.memoryBytes);
    // No swap beyond it: memory+swap gets the same limit, where swap accounting is on.
    if (existsSync(join(dir, "memory.memsw.limit_in_bytes"))) {
      set("memory.memsw.limit_in_bytes", limits.memoryBytes);
    }
  } else if (controller === "pids" && limits.pids !== undefined) {
    set("pids.max", limits.pids);
  } else if (controller === "cpu" && limits.cpus !== undefined) {
    set("cpu.cfs_period_us", CFS_PERIOD_US);
    set("cpu.cfs_quota_us", Math.max(1000, Math.round(limits.cpus * CFS_PERIOD_US)));
  }
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

function oomKills(memoryDir: string): number {
  const file = join(memoryDir, "memory.oom_control");
  return eventCount(file, "oom_kill") + eventCount(file, "under_oom");
}

/** SIGKILLs whatever is still in the cgroup, then removes it (retrying while tasks exit). */
function removeCgroup(dir: string): void {
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
