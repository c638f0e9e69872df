// Which entry `cache restore KEY [--restore-key P]...` takes, as actions/cache does: the entry
// named KEY exactly; else the newest entry whose key starts with KEY; else, for each restore key
// in order, the newest entry whose key starts with it. "Newest" is the creation time recorded in
// the entry's metadata (never a file's mtime); equal times go to the greater key, so the answer
// does not depend on the order a backend lists in.
import type { CacheBackend, EntryMeta } from "./backend.js";

export type HitKind = "exact" | "prefix" | "miss";

export interface Lookup {
  hit: HitKind;
  /** The entry taken (not on a miss). */
  entry?: EntryMeta;
  /** The prefix that matched: KEY itself, or one of the restore keys (not on exact or miss). */
  matchedPrefix?: string;
}

/** Orders newer entries first: by recorded creation time, then the greater key. */
export function newerFirst(a: EntryMeta, b: EntryMeta): number {
  const byTime = Date.parse(b.created) - Date.parse(a.created);
  return byTime !== 0 ? byTime : a.key > b.key ? -1 : a.key < b.key ? 1 : 0;
}

/** The newest of the entries (by recorded creation time, then key). */
export function newest(entries: readonly EntryMeta[]): EntryMeta | undefined {
  let best: EntryMeta | undefined;
  for (const e of entries) if (best === undefined || newerFirst(e, best) < 0) best = e;
  return best;
}

export async function lookup(
  backend: CacheBackend,
  key: string,
  restoreKeys: readonly string[],
): Promise<Lookup> {
  const exact = await backend.stat(key);
  if (exact) return { hit: "exact", entry: exact };
  for (const prefix of [key, ...restoreKeys]) {
    const entry = newest(await backend.list(prefix));
    if (entry) return { hit: "prefix", entry, matchedPrefix: prefix };
  }
  return { hit: "miss" };
}
