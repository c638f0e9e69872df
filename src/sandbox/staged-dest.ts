// All or nothing for a copy into directories someone may be looking at: a sandbox's upper layer
// (runs of the sandbox see it) or the user's own directories (`cp` out). Wraps the TreeDest that
// does the writing:
//  - an object bound for a directory that exists (a "live" one) is made, with everything below
//    it, in a staging area under a numbered name; no live directory is touched while copying;
//  - once the whole copy is staged, the list of renames (the record) is written where the next
//    command looks for it, then the objects are renamed into place in the order they were made;
//  - killed before the record, only staging areas named by the owner record are left, and the
//    next command removes them; killed after it, the next command finishes the renames
//    (settleStaged). SIGINT and SIGTERM remove the areas at once (the copy yields to the event
//    loop as it goes: ./copy-tree.ts). The renames take milliseconds.
// Within one copy, a name staged twice (two sources with one name) is merged or replaced in its
// staging area, as it would be at the destination.
import {
  lstatSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import type { Stats } from "node:fs";
import { crashAt } from "../store/crash-at.js";
import type { TreeDest } from "./copy-tree.js";
import { deadOwnerRecord, ownerRecord } from "../store/owner.js";
import { at, closeQuietly, errCode, openDirAt, openDirPath } from "../store/fd-path.js";
import { removeTree } from "../store/remove-tree.js";

/** The steps CVISOR_TEST_CRASH_AT can name in a copy's publishing. */
export const CP_CRASH_STEPS = ["cp:staged", "cp:recorded", "cp:published-one"] as const;

function crash(step: (typeof CP_CRASH_STEPS)[number]): void {
  crashAt(step);
}

/** How objects are staged for, and published into, one kind of destination. */
export interface Stager<T> {
  /** The staging directory for objects bound for the live directory `live` (made on first use). */
  area(live: T): T;
  /** The fd of an open directory (live, or an area). */
  fd(dir: T): number;
  /** A live directory's path from the live root ("" for the root itself). */
  livePath(live: T): string;
  /** An object of an area as the record names it: its path from the record's directory. */
  objPath(area: T, obj: string): string;
  /** The areas made, as paths from the record's directory. */
  areas(): string[];
  /** Where the record goes (its directory holds the areas' paths' start). */
  readonly record: string;
  /** A directory was just staged for NAME in live (copy-in makes it opaque where needed). */
  prepareDir?(live: T, name: string, staged: T): void;
  /** NAME was renamed into the live directory open as liveFd. */
  placed?(liveFd: number, name: string): void;
  /** Removes every area (a failed or interrupted copy). */
  discard(): void;
}

/** A directory of a staged copy: a live one (it exists at the destination) or a staged one. */
export interface StagedDir<T> {
  dir: T;
  live: boolean;
  /** As messages name it: where it is, or will be. */
  shown: string;
}

interface Step<T> {
  live: T;
  name: string;
  area: T;
  obj: string;
}

/** What the record holds: the renames, paths relative to the live root and the record's dir. */
interface StagedRecord {
  version: 1;
  steps: { dir: string; name: string; obj: string }[];
  areas: string[];
}

export class StagedDest<T> implements TreeDest<StagedDir<T>> {
  private readonly steps: Step<T>[] = [];
  private readonly byName = new Map<string, Step<T>>();
  /** Live directories a step renames into: kept open until the copy is published. */
  private readonly held = new Set<T>();
  private count = 0;
  private published = false;

  constructor(
    private readonly inner: TreeDest<T>,
    private readonly stager: Stager<T>,
  ) {}

  /** A directory of the destination that exists, for the copy to start from. */
  live(dir: T): StagedDir<T> {
    return { dir, live: true, shown: this.inner.shown(dir) };
  }

  private key(n: StagedDir<T>, name: string): string {
    return `${n.shown}\0${name}`;
  }

  private pending(n: StagedDir<T>, name: string): Step<T> | undefined {
    return n.live ? this.byName.get(this.key(n, name)) : undefined;
  }

  /** Where the object for NAME in n is made: in n (staged), or as a step's object in an area. */
  private target(n: StagedDir<T>, name: string): { dir: T; name: string } {
    if (!n.live) return { dir: n.dir, name };
    const had = this.pending(n, name);
    if (had) return { dir: had.area, name: had.obj };
    const step = { live: n.dir, name, area: this.stager.area(n.dir), obj: `o${this.count++}` };
    this.steps.push(step);
    this.byName.set(this.key(n, name), step);
    this.held.add(n.dir);
    return { dir: step.area, name: step.obj };
  }

  lookup(n: StagedDir<T>, name: string): Stats | undefined {
    const s = this.pending(n, name);
    return s ? this.inner.lookup(s.area, s.obj) : this.inner.lookup(n.dir, name);
  }

  refuseName(name: string): string | undefined {
    return this.inner.refuseName?.(name);
  }

  async writeFile(
    n: StagedDir<T>,
    name: string,
    write: (fd: number) => Promise<void>,
    st: Stats,
  ): Promise<void> {
    const t = this.target(n, name);
    await this.inner.writeFile(t.dir, t.name, write, st);
  }

  writeSymlink(n: StagedDir<T>, name: string, target: string, st: Stats): void {
    const t = this.target(n, name);
    this.inner.writeSymlink(t.dir, t.name, target, st);
  }

  makeDir(n: StagedDir<T>, name: string): StagedDir<T> {
    const t = this.target(n, name);
    const dir = this.inner.makeDir(t.dir, t.name);
    if (n.live) this.stager.prepareDir?.(n.dir, name, dir);
    return { dir, live: false, shown: this.shown(n, name) };
  }

  openDir(n: StagedDir<T>, name: string): StagedDir<T> {
    const s = this.pending(n, name);
    const dir = s ? this.inner.openDir(s.area, s.obj) : this.inner.openDir(n.dir, name);
    return { dir, live: n.live && s === undefined, shown: this.shown(n, name) };
  }

  finishDir(n: StagedDir<T>, st: Stats): void {
    this.inner.finishDir(n.dir, st);
  }

  closeDir(n: StagedDir<T>): void {
    if (n.live && this.held.has(n.dir)) return;
    this.inner.closeDir(n.dir);
  }

  identity(n: StagedDir<T>): string {
    return this.inner.identity(n.dir);
  }

  shown(n: StagedDir<T>, name?: string): string {
    return name === undefined ? n.shown : `${n.shown.replace(/\/$/, "")}/${name}`;
  }

  /**
   * Renames everything staged into place, after writing the record that lets the next command
   * finish it. A step that fails (a run changed the destination meanwhile) does not stop the
   * others; the first failure is thrown after.
   */
  publish(): void {
    crash("cp:staged");
    let failed: unknown;
    if (this.steps.length > 0) {
      const record: StagedRecord = {
        version: 1,
        steps: this.steps.map((s) => ({
          dir: this.stager.livePath(s.live),
          name: s.name,
          obj: this.stager.objPath(s.area, s.obj),
        })),
        areas: this.stager.areas(),
      };
      const tmp = `${this.stager.record}.tmp`;
      writeFileSync(tmp, `${JSON.stringify(record)}\n`, { mode: 0o600, flag: "wx" });
      renameSync(tmp, this.stager.record);
      this.published = true; // from here on, the next command would finish it
      crash("cp:recorded");
      for (const s of this.steps) {
        try {
          const liveFd = this.stager.fd(s.live);
          renameSync(at(this.stager.fd(s.area), s.obj), at(liveFd, s.name));
          this.stager.placed?.(liveFd, s.name);
        } catch (err) {
          failed ??= err;
        }
        crash("cp:published-one");
      }
    }
    this.published = true;
    this.close();
    this.stager.discard();
    try {
      unlinkSync(this.stager.record);
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
    }
    if (failed !== undefined) throw failed;
  }

  /** Removes what was staged (the copy failed or was interrupted); nothing once published. */
  discard(): void {
    if (this.published) return;
    this.close();
    this.stager.discard();
  }

  private close(): void {
    for (const dir of this.held) this.inner.closeDir(dir);
    this.held.clear();
  }
}

/** Opens the directory at rel (components, never through a symlink) below the directory fd. */
function openBelow(rootFd: number, rel: string): number {
  let fd = rootFd;
  for (const name of rel.split("/").filter((c) => c !== "")) {
    const next = openDirAt(fd, name);
    if (fd !== rootFd) closeQuietly(fd);
    fd = next;
  }
  return fd;
}

function readRecord(path: string): StagedRecord | undefined {
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as Partial<StagedRecord>;
    if (r.version === 1 && Array.isArray(r.steps) && Array.isArray(r.areas)) {
      return r as StagedRecord;
    }
  } catch {
    // Damaged (the record is written whole, then renamed): nothing to finish.
  }
  return undefined;
}

/**
 * Finishes the copies that killed processes recorded in recordDir (records PREFIX<owner>.json,
 * objects and areas named from recordDir, live directories from liveRoot), then removes the
 * staging areas dead processes left there. Returns how many copies it finished.
 */
export function settleStaged(
  recordDir: string,
  prefix: string,
  liveRoot: string,
  placed?: (liveFd: number, name: string) => void,
): number {
  let names: string[];
  try {
    names = readdirSync(recordDir);
  } catch {
    return 0;
  }
  let finished = 0;
  let claimed = false;
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    if (name.endsWith(".json.tmp")) {
      // A record that was being written: the copy had not begun to publish.
      if (deadOwnerRecord(name.slice(prefix.length, -".json.tmp".length))) {
        removeTree(`${recordDir}/${name}`);
      }
      continue;
    }
    if (!name.endsWith(".json")) continue;
    if (!deadOwnerRecord(name.slice(prefix.length, -".json".length))) continue;
    // Claimed by renaming it to our own owner record: one process finishes it.
    const mine = `${recordDir}/${prefix}${ownerRecord()}.json`;
    claimed = true;
    try {
      renameSync(`${recordDir}/${name}`, mine);
    } catch {
      continue;
    }
    const record = readRecord(mine);
    if (record) {
      rollForward(record, recordDir, liveRoot, placed);
      for (const area of record.areas) removeTree(`${recordDir}/${area}`);
      finished++;
    }
    unlinkSync(mine);
  }
  sweepUnrecorded(recordDir, prefix, claimed ? undefined : names);
  return finished;
}

/**
 * Removes the staging areas of dead owners in recordDir, except those a record still names: a
 * live process may be finishing a dead one's copy from them (it claimed the record, which names
 * the dead owner's areas).
 */
function sweepUnrecorded(recordDir: string, prefix: string, listed?: readonly string[]): void {
  let names: readonly string[];
  try {
    names = listed ?? readdirSync(recordDir); // listed again after a claim: records changed
  } catch {
    return;
  }
  const named = new Set<string>();
  for (const name of names) {
    if (!name.startsWith(prefix) || !name.endsWith(".json")) continue;
    for (const area of readRecord(`${recordDir}/${name}`)?.areas ?? []) named.add(area);
  }
  for (const name of names) {
    if (!name.startsWith(prefix) || named.has(name)) continue;
    if (!deadOwnerRecord(name.slice(prefix.length))) continue;
    try {
      removeTree(`${recordDir}/${name}`);
    } catch {
      // Next time.
    }
  }
}

function rollForward(
  record: StagedRecord,
  recordDir: string,
  liveRoot: string,
  placed?: (liveFd: number, name: string) => void,
): void {
  const rootFd = openDirPath(liveRoot);
  try {
    for (const s of record.steps) {
      const obj = `${recordDir}/${s.obj}`;
      if (lstatSync(obj, { throwIfNoEntry: false }) === undefined) continue; // done before
      let fd: number;
      try {
        fd = openBelow(rootFd, s.dir);
      } catch {
        continue; // its directory went meanwhile: the object goes with the area
      }
      try {
        renameSync(obj, at(fd, s.name));
        placed?.(fd, s.name);
      } catch {
        // Changed meanwhile: the object goes with the area.
      } finally {
        if (fd !== rootFd) closeQuietly(fd);
      }
    }
  } finally {
    closeQuietly(rootFd);
  }
}
