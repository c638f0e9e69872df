// A cache entry's metadata record (meta.json on disk, entries/<key>.json on S3): what listing
// and lookup read without downloading the archive, and the one check of a record read back.
// Both backends (cache/backends/) store it; its shape is the store's, like a sandbox's meta.json.

/** The archive formats of `cache save --format`. */
export const FORMATS = ["gzip", "zstd", "estargz", "none"] as const;
export type CacheFormat = (typeof FORMATS)[number];

export function isFormat(v: unknown): v is CacheFormat {
  return (FORMATS as readonly unknown[]).includes(v);
}

/** An entry's metadata record, written after its archive is complete. */
export interface EntryMeta {
  key: string;
  format: CacheFormat;
  /** Archive bytes as stored. */
  size: number;
  /** sha256 (hex) of the archive bytes as stored; checked on restore. */
  sha256: string;
  /** ISO 8601 creation time: "newest" in prefix lookups means this, never a file mtime. */
  created: string;
  /** The cvisor version that wrote it. */
  cvisorVersion: string;
  /** Format-specific extras (estargz: tocDigest, uncompressedSize). */
  extra?: Record<string, string | number>;
}

/** Whether a metadata record read back has every field of EntryMeta, each of its type (the one
 * check both backends make; other fields are not looked at). */
export function isEntryMeta(v: unknown): v is EntryMeta {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  return (
    typeof m.key === "string" &&
    isFormat(m.format) &&
    typeof m.size === "number" &&
    typeof m.sha256 === "string" &&
    /^[0-9a-f]{64}$/.test(m.sha256) &&
    typeof m.created === "string" &&
    !Number.isNaN(Date.parse(m.created)) &&
    typeof m.cvisorVersion === "string" &&
    (m.extra === undefined || (typeof m.extra === "object" && m.extra !== null))
  );
}

/** A disk entry's meta.json, if it is a record (its key is checked by the caller). */
export function parseEntryMeta(text: string): EntryMeta | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  return isEntryMeta(v) ? v : undefined;
}
