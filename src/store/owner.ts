// Owner records: the names of what a process makes and may leave behind if it is killed
// ("<pid>-<start>-<tag>", start being field 22 of /proc/<pid>/stat, so a reused pid is told
// apart). Being part of the name, the owner is known as soon as the entry exists: a sweeper
// never meets one it cannot judge. Ephemeral sandboxes, run records, staging directories, temp
// files and journals are all named this way.
import { readdirSync, readFileSync } from "node:fs";
import { errCode } from "./fd-path.js";
import { removeTree } from "./remove-tree.js";

const ENTRY = /^(\d+)-(\d+)-[0-9a-z]+$/;

let ownStart: string | undefined;
let counter = 0;

/** The pid and start time an owner record names; undefined when name is not one. */
export function parseOwnerRecord(name: string): { pid: number; start: string } | undefined {
  const m = ENTRY.exec(name);
  return m ? { pid: Number(m[1]), start: m[2] ?? "" } : undefined;
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks) and the state, or null if gone. */
function procStart(pid: number | "self"): { state: string; start: string } | null {
  let text: string;
  try {
    // utf8: Node reads it on a fast path (latin1 costs ten times as much on a cold start).
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch (err) {
    const c = errCode(err);
    if (c === "ENOENT" || c === "ESRCH") return null;
    throw err;
  }
  // comm (field 2) may hold spaces and parentheses: count from the last ')'.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0] ?? "", start: fields[19] ?? "" };
}

/** This process's start time (ticks since boot), read once. */
function ownStartTime(): string {
  ownStart ??= procStart("self")?.start ?? "0";
  return ownStart;
}

/** This process's owner record: "<pid>-<start>-<random tag>" (the name of its entries). */
export function ownerRecord(): string {
  return `${process.pid}-${ownStartTime()}-${(counter++).toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

/** Is the owner of a record ("<pid>-<start>-<tag>") still running? False for names that are not records. */
export function ownerRecordAlive(name: string): boolean {
  const m = ENTRY.exec(name);
  return m !== null && ownerAlive(Number(m[1]), m[2] ?? "");
}

/** A name that is an owner record whose owner is gone: a leftover to remove. */
export function deadOwnerRecord(name: string): boolean {
  return ENTRY.test(name) && !ownerRecordAlive(name);
}

/**
 * Removes what killed commands left in dir: the entries named PREFIX + an owner record whose
 * owner is gone. Never throws (what cannot be removed now is tried the next time).
 */
export function removeDeadLeftovers(dir: string, prefix: string): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix) || !deadOwnerRecord(name.slice(prefix.length))) continue;
    try {
      removeTree(`${dir}/${name}`);
    } catch {
      // Next time.
    }
  }
}

/** Is the owner recorded in an entry's name still running (same pid, same start time)? */
export function ownerAlive(pid: number, start: string): boolean {
  if (pid === process.pid) return start === ownStartTime();
  let info;
  try {
    info = procStart(pid);
  } catch {
    return true; // cannot tell (e.g. /proc with hidepid): leave it
  }
  return info !== null && info.state !== "Z" && info.state !== "X" && info.start === start;
}
