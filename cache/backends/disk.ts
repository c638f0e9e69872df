// The disk cache backend (`--cache-backend disk` or `disk:/PATH`): one directory per entry,
//
//   ROOT/entries/<sha256 of the key>/archive     the archive bytes as stored
//   ROOT/entries/<sha256 of the key>/meta.json   its EntryMeta (the key itself is inside)
//   ROOT/tmp/<owner record>/                     an entry being written
//   ROOT/trash/<owner record>/                   an entry being removed or replaced
//
// An entry is written whole in tmp/ (archive and meta.json) and renamed into entries/ in one
// step: readers see all of it or nothing, and the rename itself refuses an existing entry
// (ENOTEMPTY), so two writers of one key cannot both win. Nothing is fsynced (it cost a third
// of a save): an entry torn by a crash of the machine is refused by restore, which checks the
// size and sha256 recorded in meta.json, and `cache rm KEY` clears it. Removing renames the
// entry into trash/ first. Keys are hashed for their directory names (a key may be 512
// characters and hold '/'), so a key never names a path. A save interrupted by a signal removes
// its tmp/ entry; one killed leaves it under its owner record, and the next save removes it.
import { createHash } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { open } from "node:fs/promises";
import type { Readable } from "node:stream";
import { CvisorError, CacheError, NotFoundError } from "../../src/core/errors.js";
import { errCode } from "../../src/store/fd-path.js";
import {
  CacheDamagedError,
  CacheExistsError,
  CacheReadOnlyError,
  type CacheBackend,
  type EntryMeta,
  type NewEntry,
} from "../backend.js";
import { deadOwnerRecord, ownerRecord } from "../../src/store/owner.js";
import { cleanedUpOnSignal } from "../../src/sandbox/interrupt.js";
import { makeDirs } from "../../src/store/make-dirs.js";
import { parseEntryMeta } from "../../src/store/cache-entry.js";

/** tmp/ and trash/ leftovers older than this (a killed save or rm) are removed by the next put. */
const STALE_MS = 24 * 3600 * 1000;

function keyDir(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

export class DiskBackend implements CacheBackend {
  readonly description: string;

  constructor(
    readonly root: string,
    readonly readOnly: boolean,
  ) {
    this.description = `disk:${root}`;
  }

  private fail(err: unknown, what: string): never {
    if (err instanceof CvisorError) throw err;
    const message = err instanceof Error ? err.message : String(err);
    throw new CacheError(`cache backend ${this.description}: ${what}: ${message}`, "ECACHE", {
      cause: err,
    });
  }

  private entryPath(key: string): string {
    return `${this.root}/entries/${keyDir(key)}`;
  }

  /**
   * An entry directory's metadata: undefined when there is no entry, "damaged" when there is one
   * whose meta.json is missing, unreadable or not a record of its own key.
   */
  private readMeta(dir: string, name: string): EntryMeta | undefined | "damaged" {
    let text: string;
    try {
      text = readFileSync(`${dir}/meta.json`, "utf8");
    } catch (err) {
      const c = errCode(err);
      if (c === "ENOTDIR") return undefined;
      if (c === "ENOENT") return existsSync(dir) ? "damaged" : undefined;
      throw err;
    }
    const meta = parseEntryMeta(text);
    return meta && keyDir(meta.key) === name ? meta : "damaged";
  }

  private names(): string[] {
    try {
      return readdirSync(`${this.root}/entries`);
    } catch (err) {
      if (errCode(err) === "ENOENT") return [];
      this.fail(err, "cannot list entries");
    }
  }

  async list(prefix: string, damaged?: string[]): Promise<EntryMeta[]> {
    const out: EntryMeta[] = [];
    for (const name of this.names()) {
      let meta;
      try {
        meta = this.readMeta(`${this.root}/entries/${name}`, name);
      } catch (err) {
        this.fail(err, `cannot read entry ${name}`);
      }
      if (meta === "damaged") damaged?.push(name);
      else if (meta?.key.startsWith(prefix)) out.push(meta);
    }
    return out;
  }

  async removeDamaged(names: readonly string[]): Promise<number> {
    if (this.readOnly) throw new CacheReadOnlyError(this.description);
    let n = 0;
    for (const name of names) if (this.discard(name)) n++;
    return n;
  }

  async stat(key: string): Promise<EntryMeta | undefined> {
    let meta;
    try {
      meta = this.readMeta(this.entryPath(key), keyDir(key));
    } catch (err) {
      this.fail(err, `cannot read entry ${key}`);
    }
    if (meta === "damaged") {
      throw new CacheDamagedError(this.description, key, "its meta.json is not a record of it");
    }
    return meta;
  }

  async open(key: string): Promise<Readable> {
    const path = `${this.entryPath(key)}/archive`;
    try {
      // Opened now, so a missing archive fails here and not in the middle of a restore.
      const handle = await open(path, "r");
      return handle.createReadStream({ highWaterMark: 1 << 20 });
    } catch (err) {
      if (errCode(err) === "ENOENT") {
        throw new NotFoundError(`cache backend ${this.description}: entry ${key} has no archive`);
      }
      this.fail(err, `cannot open entry ${key}`);
    }
  }

  async put(
    entry: NewEntry,
    body: Readable,
    options: { force: boolean; signal?: AbortSignal },
  ): Promise<EntryMeta> {
    if (this.readOnly) {
      body.destroy();
      throw new CacheReadOnlyError(this.description);
    }
    const final = this.entryPath(entry.key);
    if (!options.force && (await this.stat(entry.key)) !== undefined) {
      body.destroy();
      throw new CacheExistsError(this.description, entry.key);
    }
    let tmp: string;
    try {
      for (const sub of ["entries", "tmp", "trash"]) {
        makeDirs(`${this.root}/${sub}`, 0o700);
      }
      this.sweep();
      tmp = `${this.root}/tmp/${ownerRecord()}`;
      mkdirSync(tmp, { mode: 0o700 });
    } catch (err) {
      body.destroy();
      this.fail(err, "cannot write");
    }
    const staged = tmp;
    return cleanedUpOnSignal(
      () => rmSync(staged, { recursive: true, force: true }),
      () => this.write(entry, body, staged, final, options.force),
      options.signal,
    );
  }

  /** Writes the entry into tmp (archive, then meta.json) and renames it into place. */
  private async write(
    entry: NewEntry,
    body: Readable,
    tmp: string,
    final: string,
    force: boolean,
  ): Promise<EntryMeta> {
    try {
      const hash = createHash("sha256");
      let size = 0;
      const fd = openSync(`${tmp}/archive`, "wx", 0o600);
      try {
        for await (const chunk of body) {
          const buf = chunk as Buffer;
          hash.update(buf);
          size += buf.length;
          for (let done = 0; done < buf.length;) done += writeSync(fd, buf, done);
        }
      } finally {
        closeSync(fd);
      }
      const meta: EntryMeta = { ...entry, size, sha256: hash.digest("hex") };
      const mfd = openSync(`${tmp}/meta.json`, "wx", 0o600);
      try {
        writeSync(mfd, `${JSON.stringify(meta, null, 2)}\n`);
      } finally {
        closeSync(mfd);
      }
      this.place(tmp, final, entry.key, force);
      return meta;
    } catch (err) {
      rmSync(tmp, { recursive: true, force: true });
      if (err instanceof CvisorError) throw err;
      // An error of the body (the archive being made) is the caller's, not the backend's.
      if (body.errored) throw err;
      this.fail(err, `cannot write entry ${entry.key}`);
    }
  }

  /** Renames the finished entry tmp to final (replacing an existing one only with force). */
  private place(tmp: string, final: string, key: string, force: boolean): void {
    try {
      renameSync(tmp, final);
      return;
    } catch (err) {
      const c = errCode(err);
      if (c !== "ENOTEMPTY" && c !== "EEXIST") throw err;
      if (!force) throw new CacheExistsError(this.description, key);
    }
    const trash = `${this.root}/trash/${ownerRecord()}`;
    renameSync(final, trash);
    renameSync(tmp, final);
    rmSync(trash, { recursive: true, force: true });
  }

  /** Removes what killed saves and removals left in tmp/ and trash/ long ago. */
  private sweep(): void {
    const now = Date.now();
    for (const sub of ["tmp", "trash"]) {
      for (const name of readdirSync(`${this.root}/${sub}`)) {
        const path = `${this.root}/${sub}/${name}`;
        // Named by their owner's record: a dead owner's go now; other names after a day.
        const st = deadOwnerRecord(name) ? undefined : statSync(path, { throwIfNoEntry: false });
        if (!st || now - st.mtimeMs > STALE_MS) rmSync(path, { recursive: true, force: true });
      }
    }
  }

  async remove(key: string): Promise<boolean> {
    if (this.readOnly) throw new CacheReadOnlyError(this.description);
    // The directory is named by the key's hash: whatever is there, damaged or not, is this key's.
    return this.discard(keyDir(key), key);
  }

  /** Moves entries/NAME to trash/ and removes it; false when it was not there. */
  private discard(name: string, what = name): boolean {
    try {
      makeDirs(`${this.root}/trash`, 0o700);
      const trash = `${this.root}/trash/${ownerRecord()}`;
      try {
        renameSync(`${this.root}/entries/${name}`, trash);
      } catch (err) {
        if (errCode(err) === "ENOENT") return false; // none, or removed meanwhile
        throw err;
      }
      rmSync(trash, { recursive: true, force: true });
      return true;
    } catch (err) {
      this.fail(err, `cannot remove entry ${what}`);
    }
  }
}

/** Opens the disk backend at root (made on the first save). */
export function openDiskBackend(root: string, options: { readOnly: boolean }): CacheBackend {
  return new DiskBackend(root, options.readOnly);
}
