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
import { SetupError } from "../core/errors.js";
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

const FLAG: Record<V1Controller, string> = {
  memory: "--memory",
  pids: "--pids-limit",
  cpu: "--cpus",
};
const CFS_PERIOD_US = 100_000;
/** The prefix of a run's cgroup: cvisor-<pid of the cvisor that made it>-<n>. */
const PREFIX = "cvisor-";
let serial = 0;

/** The cgroups of one run: what the core needs, then the report and the removal. */
export interface RunCgroups {
  /** cgroup.procs files the guest's init is written into. */
  procs: string[];
  /** The v1 memory cgroup whose OOM ends the run. */
  oomV1: string | undefined;
  /** Reads the peaks and what was hit; call once the guest tree is gone. */
  report(): LimitsReport;
  /** Kills what is left in them and removes them (idempotent). */
  remove(): void;
}

/**
 * Makes a cgroup v1 child per controller the limits need, under this process's own cgroup, with
 * the limits written in. A SetupError (exit 125) that says what to do when this host gives no
 * writable cgroup for one of them: a limit is never silently dropped.
 */
export function openCgroups(
  limits: ParsedLimits,
  procSelf: { mountinfo: string; cgroup: string } = readProcSelf(),
): RunCgroups {
  const mounts = parseMountinfo(procSelf.mountinfo);
  const paths = parseProcCgroup(procSelf.cgroup);
  const name = `${PREFIX}${process.pid}-${++serial}`;
  const made = new Map<V1Controller, string>();
  const remove = (): void => {
    for (const dir of made.values()) removeCgroup(dir);
    made.clear();
  };
  try {
    for (const controller of controllersOf(limits)) {
      const parent = v1Dir(controller, mounts, paths);
      if (parent === null) {
        throw new SetupError(
          `${FLAG[controller]}: this host has no cgroup ${controller} controller mounted (cvisor enforces limits with cgroups; see cvisor doctor)`,
          "ENOCGROUP",
        );
      }
      sweep(parent);
      const dir = join(parent, name);
      try {
        mkdirSync(dir);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? String(err);
        throw new SetupError(
          `${FLAG[controller]}: cannot create a cgroup under ${parent} (${code}); limits need root or a writable cgroup here (see cvisor doctor)`,
          "ENOCGROUP",
        );
      }
      made.set(controller, dir);
      writeLimits(controller, dir, limits);
    }
  } catch (err) {
    remove();
    throw err;
  }
  const memory = made.get("memory");
  const pids = made.get("pids");
  return {
    procs: [...made.values()].map((dir) => join(dir, "cgroup.procs")),
    oomV1: memory,
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
        if (report.limitHit === undefined && eventCount(join(pids, "pids.events"), "max") > 0) {
          report.limitHit = "pids";
        }
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

function writeLimits(controller: V1Controller, dir: string, limits: ParsedLimits): void {
  const set = (file: string, value: number | string): void =>
    writeFileSync(join(dir, file), `${value}\n`);
  try {
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
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new SetupError(
      `${FLAG[controller]}: cannot set the limit in ${dir} (${code})`,
      "ENOCGROUP",
    );
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
