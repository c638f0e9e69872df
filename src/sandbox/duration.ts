// Parses durations as users write them ("500ms", "5s", "2m", "1h", "1.5s", "250").
import { CvisorError, UsageError } from "../core/errors.js";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** The largest deadline the C ABI takes (a uint32_t of milliseconds). */
export const MAX_TIMEOUT_MS = 0xffff_ffff;

/** Milliseconds of a duration: a number is milliseconds, a string has a unit or is bare digits. */
export function parseDuration(value: number | string): number {
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else {
    const match = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h)?\s*$/.exec(value);
    if (!match || !match[1]) throw invalid(value);
    const unit = match[2];
    if (unit === undefined && !/^\s*\d+\s*$/.test(value)) throw invalid(value);
    ms = Number(match[1]) * (UNIT_MS[unit ?? "ms"] ?? 1);
  }
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_TIMEOUT_MS) throw invalid(value);
  return Math.round(ms);
}

function invalid(value: number | string): CvisorError {
  return new UsageError(
    `invalid duration: ${String(value)} (use e.g. 500ms, 5s, 2m)`,
    "EINVALID_DURATION",
  );
}
