// What every cache backend (disk, S3) offers the cache commands: entries are immutable archives
// under a key, each with a metadata record that listing and lookup read without downloading the
// archive. A backend stores bytes; formats (cache/format/) and key lookup (cache/lookup.ts) live
// above it.
import type { Readable } from "node:stream";
import { CvisorError, UsageError } from "../src/core/errors.js";

export { FORMATS, isEntryMeta, isFormat } from "../src/store/cache-entry.js";
export type { CacheFormat, EntryMeta } from "../src/store/cache-entry.js";
import type { EntryMeta } from "../src/store/cache-entry.js";

/** What `put` is told before the archive streams; size and sha256 are measured by the backend. */
export type NewEntry = Omit<EntryMeta, "size" | "sha256">;

export interface CacheBackend {
  /** How messages name it: "disk:/home/u/.cache/cvisor" or "s3://bucket/prefix". */
  readonly description: string;
  /** --read-only: put and remove refuse with CacheReadOnlyError. */
  readonly readOnly: boolean;
  /**
   * Metadata of every complete entry whose key starts with prefix ("" for all). `damaged`, when
   * given, receives what names each entry whose metadata cannot be read, in the same pass: its
   * key where the store knows it (S3), else its directory (disk: whatever the prefix).
   */
  list(prefix: string, damaged?: string[]): Promise<EntryMeta[]>;
  /** One entry's metadata, or undefined. */
  stat(key: string): Promise<EntryMeta | undefined>;
  /** The stored archive bytes. The caller verifies size and sha256 against the metadata. */
  open(key: string): Promise<Readable>;
  /**
   * Stores body as a new entry, atomically: readers see the whole entry (archive and metadata)
   * or nothing. An existing key is refused with CacheExistsError unless force. On any failure
   * (body error included) nothing is left behind. Resolves to the stored metadata. With a
   * signal, the caller owns cancelling (it destroys body): no process signal listener is added.
   */
  put(
    entry: NewEntry,
    body: Readable,
    options: { force: boolean; signal?: AbortSignal },
  ): Promise<EntryMeta>;
  /** Removes an entry, a damaged one too; false when there was none. */
  remove(key: string): Promise<boolean>;
  /** Removes damaged entries by the names list() gave them; how many went. */
  removeDamaged(names: readonly string[]): Promise<number>;
}

/** Keys: what actions/cache allows, minus what could name a path outside the store. */
const MAX_KEY_LENGTH = 512;

/** Returns key if valid, else throws CvisorError("CV_ERR_INVALID") saying why. */
export function validateKey(key: string): string {
  const why =
    key.length === 0
      ? "it is empty"
      : key.length > MAX_KEY_LENGTH
        ? `it is longer than ${MAX_KEY_LENGTH} characters`
        : /[\p{Cc}]/u.test(key)
          ? "it holds a control character"
          : key.startsWith("/")
            ? "it starts with '/'"
            : key.split("/").some((part) => part === "" || part === "." || part === "..")
              ? "it has an empty, '.' or '..' path segment"
              : undefined;
  if (why === undefined) return key;
  throw new UsageError(
    `invalid cache key ${JSON.stringify(key.slice(0, 80))}: ${why}`,
    "CV_ERR_INVALID",
  );
}

export class CacheExistsError extends CvisorError {
  constructor(backend: string, key: string) {
    super(
      `cache entry ${key} already exists in ${backend} (entries are never replaced; use --force)`,
      "EEXIST",
    );
  }
}

/** An entry whose metadata cannot be read: restore and save say so, `cache rm KEY` removes it. */
export class CacheDamagedError extends CvisorError {
  constructor(backend: string, key: string, why: string) {
    super(
      `cache entry ${key} in ${backend} is damaged (${why}): cvisor cache rm ${key} removes it, ` +
        `save --force replaces it`,
      "ECACHE_DAMAGED",
    );
  }
}

export class CacheReadOnlyError extends CvisorError {
  constructor(backend: string) {
    super(`cache backend ${backend} is read-only (--read-only)`, "EROFS");
  }
}
