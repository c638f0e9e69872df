// Resource limits as users write them (Docker's names and units): --memory 256m, --pids-limit
// 100, --cpus 0.5. Parsing only; ./cgroups.ts enforces them.
import { availableParallelism } from "node:os";
import { UsageError } from "../core/errors.js";

/** Limits of a sandbox or of one run, as the library takes them. */
export interface Limits {
  /** Memory of the whole guest tree: bytes, or "256m", "1g" (b, k, m, g; binary). */
  memory?: number | string;
  /** Live processes and threads of the guest tree at once. */
  pids?: number | string;
  /** CPU time of the guest tree, in cores: 0.5 is half of one core. */
  cpus?: number | string;
  /** What the sandbox's layer may hold (its files' blocks), as memory: "2g". */
  disk?: number | string;
}

/** Limits checked and in the units the kernel takes. */
export interface ParsedLimits {
  memoryBytes?: number;
  pids?: number;
  cpus?: number;
  diskBytes?: number;
}

/** One limit in a run's report: what it was, what enforced it, how close the guest came. */
export interface LimitReport {
  /** The limit: bytes, processes, or cores. */
  limit: number;
  /** "cgroup-v2" or "cgroup-v1" (the kernel's controller) or "supervisor" (cvisor's own watch). */
  mechanism: string;
  /** The most the guest tree used: bytes or processes (absent for CPU). */
  peak?: number;
}

/** What enforced each limit a run had, and the one it hit (if any). */
export interface LimitsReport {
  memory?: LimitReport;
  pids?: LimitReport;
  cpus?: LimitReport;
  disk?: LimitReport;
  /** memory, disk: the limit ended the run (137); pids: a fork was refused (EAGAIN). */
  limitHit?: LimitHit;
}

/** The limit a run reached. */
export type LimitHit = "memory" | "pids" | "disk";

/** Docker's smallest --memory: below it a process cannot even start. */
const MIN_MEMORY = 6 * 1024 * 1024;
const UNITS: Record<string, number> = { b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/** Bytes of a size: bytes as a number, or digits with b, k, m, g, t (KiB, MiB...); NaN if not. */
function parseSize(value: number | string): number {
  const text = String(value).trim().toLowerCase();
  const match = /^(\d+(?:\.\d+)?)([bkmgt])?(?:i?b)?$/.exec(text);
  const bytes = match?.[1] ? Number(match[1]) * (UNITS[match[2] ?? "b"] ?? 1) : NaN;
  return bytes > Number.MAX_SAFE_INTEGER ? NaN : Math.floor(bytes);
}

/** What the sandbox's layer may hold: a size, at least 1m. */
export function parseDisk(value: number | string): number {
  const bytes = parseSize(value);
  if (!Number.isFinite(bytes) || bytes < 1024 * 1024) {
    throw new UsageError(
      `invalid disk limit ${String(value)}: use a size such as 500m or 2g (b, k, m, g, t; at least 1m)`,
      "EINVALID_LIMIT",
    );
  }
  return bytes;
}

/** Bytes of a --memory value: bytes as a number, or digits with b, k, m, g (KiB, MiB...). */
export function parseMemory(value: number | string): number {
  const bytes = parseSize(value);
  if (!Number.isFinite(bytes) || bytes < MIN_MEMORY) {
    throw new UsageError(
      `invalid memory limit ${String(value)}: use a size such as 256m or 1g (b, k, m, g; at least 6m)`,
      "EINVALID_LIMIT",
    );
  }
  return bytes;
}

/** A --pids-limit value: a whole number of processes, at least 1. */
export function parsePids(value: number | string): number {
  const n = typeof value === "number" ? value : /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new UsageError(
      `invalid pids limit ${String(value)}: use a whole number of processes, at least 1`,
      "EINVALID_LIMIT",
    );
  }
  return n;
}

/** A --cpus value: cores, from 0.01 to the cores this machine has. */
export function parseCpus(value: number | string, cores = availableParallelism()): number {
  const n =
    typeof value === "number"
      ? value
      : /^\s*(\d+(\.\d*)?|\.\d+)\s*$/.test(value)
        ? Number(value)
        : NaN;
  if (!Number.isFinite(n) || n < 0.01 || n > cores) {
    throw new UsageError(
      `invalid cpus limit ${String(value)}: use a number of cores from 0.01 to ${cores} (e.g. 0.5)`,
      "EINVALID_LIMIT",
    );
  }
  return n;
}

/** The limits of a run: the run's own over its sandbox's; undefined when there are none. */
export function parseLimits(
  sandbox: Limits | undefined,
  run: Limits | undefined,
): ParsedLimits | undefined {
  const memory = run?.memory ?? sandbox?.memory;
  const pids = run?.pids ?? sandbox?.pids;
  const cpus = run?.cpus ?? sandbox?.cpus;
  const disk = run?.disk ?? sandbox?.disk;
  if (memory === undefined && pids === undefined && cpus === undefined && disk === undefined) {
    return undefined;
  }
  return {
    ...(memory !== undefined ? { memoryBytes: parseMemory(memory) } : {}),
    ...(pids !== undefined ? { pids: parsePids(pids) } : {}),
    ...(cpus !== undefined ? { cpus: parseCpus(cpus) } : {}),
    ...(disk !== undefined ? { diskBytes: parseDisk(disk) } : {}),
  };
}

/** 268435456 -> "256 MiB", as the one-line messages say a limit. */
export function memoryText(bytes: number): string {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1 && value % 1024 === 0) {
    value /= 1024;
    unit++;
  }
  return `${value} ${units[unit]}`;
}
