// The library's directory caches (`Cache`, and `cvisor cache` over it): keyed archives of a
// directory on a backend, as actions/cache keeps them. A path is a host directory or a
// directory of a named sandbox ({ sandbox, path }): save reads the sandbox's merged view, restore
// writes its upper layer, holding the sandbox like a run while it does. The work is in cache/
// (formats, lookup, backends, safe extraction), loaded on first use: the AWS SDK only for an
// s3:// backend, zstd-napi only for a zstd archive.
import type { CacheBackend, CacheFormat, EntryMeta } from "../../cache/backend.js";
import type { BackendSpec } from "../../cache/backends/select.js";
import type { PackReport } from "../../cache/format/pack.js";
import type { ExtractReport } from "../../cache/format/unpack.js";
import type { HitKind } from "../../cache/lookup.js";
import type { RestoreOptions, RestoreResult, RestoreTarget } from "../../cache/restore.js";
import type { CacheSource, SaveOptions } from "../../cache/save.js";
import { NotFoundError, UsageError } from "../core/errors.js";
import { defaultHiddenPaths } from "../paths.js";
import type { SandboxInUse } from "./open-layer.js";

export type { CacheFormat, EntryMeta, ExtractReport, HitKind, PackReport };

export interface CacheOptions {
  /**
   * Where entries live: "disk" (the default: $CVISOR_CACHE_DIR, else $CVISOR_HOME/cache),
   * "disk:/PATH" or "s3://BUCKET/PREFIX"; unset: $CVISOR_CACHE_BACKEND, else "disk".
   */
  backend?: string;
  /** Refuse save and remove (a cache that CI jobs only read). */
  readOnly?: boolean;
}

/** A host directory, or a directory of a named sandbox (absolute in its view). */
export type CachePath = string | { sandbox: string; path: string };

/** A save's options: cache/save.ts's, the format defaulting to "gzip". */
export type CacheSaveOptions = Omit<SaveOptions, "format"> & { format?: CacheFormat };

export type CacheSaveResult =
  { saved: true; entry: EntryMeta; report: PackReport } | { saved: false; existing: EntryMeta };

/** A restore's options and result, as cache/restore.ts has them. */
export type CacheRestoreOptions = RestoreOptions;
/** What a restore found: "exact", "prefix" (a restore key matched) or "miss" (nothing changed). */
export type CacheRestoreResult = RestoreResult;

/** Directory caches on one backend. */
export class Cache {
  private readonly spec: BackendSpec | undefined;
  private opened: Promise<CacheBackend> | undefined;

  /** @param from how messages name where the backend came from (the CLI: --cache-backend). */
  constructor(
    readonly options: Readonly<CacheOptions> = {},
    from = "the backend option",
  ) {
    this.spec = options.backend === undefined ? undefined : { spec: options.backend, source: from };
  }

  private backend(): Promise<CacheBackend> {
    this.opened ??= (async () => {
      const { backendSpec, openBackend } = await import("../../cache/backends/select.js");
      return openBackend(this.spec ?? backendSpec(undefined), {
        readOnly: this.options.readOnly === true,
      });
    })();
    return this.opened;
  }

  /** How messages name the backend: "disk:/home/u/.cache/cvisor", "s3://bucket/prefix". */
  async description(): Promise<string> {
    return (await this.backend()).description;
  }

  /** Saves the directory at `from` as entry KEY (not replacing one unless force). */
  async save(
    key: string,
    from: CachePath,
    options: CacheSaveOptions = {},
  ): Promise<CacheSaveResult> {
    const [{ saveCache }, { validateKey, isFormat }, { useNamed }] = await Promise.all([
      import("../../cache/save.js"),
      import("../../cache/backend.js"),
      import("./open-layer.js"),
    ]);
    const format = options.format ?? "gzip";
    validateKey(key);
    if (!isFormat(format)) throw formatError(format);
    const backend = await this.backend();
    let source: CacheSource;
    let inUse: SandboxInUse | undefined;
    if (typeof from === "string") {
      source = { kind: "host", path: nonEmpty(from) };
    } else {
      const sb = inSandbox(from, () => useNamed(from.sandbox, false));
      inUse = sb.inUse;
      source = { kind: "sb", upper: sb.inUse.named.upper, ...sb.view };
    }
    try {
      const r = await saveCache(backend, key, source, {
        format,
        ignore: options.ignore !== false,
        force: options.force === true,
        onSkip: options.onSkip,
        onProgress: options.onProgress,
        signal: options.signal,
      });
      return r.saved
        ? { saved: true, entry: r.meta, report: r.report }
        : { saved: false, existing: r.existing };
    } finally {
      inUse?.release();
    }
  }

  /**
   * Restores entry KEY (or, when it has none, the newest entry of the first restore key that
   * has one) into `to`, replacing that directory whole; a miss leaves it as it was.
   */
  async restore(
    key: string,
    to: CachePath,
    options: CacheRestoreOptions = {},
  ): Promise<CacheRestoreResult> {
    const [{ restoreCache }, { validateKey }, { useNamed }] = await Promise.all([
      import("../../cache/restore.js"),
      import("../../cache/backend.js"),
      import("./open-layer.js"),
    ]);
    const backend = await this.backend();
    let dest: RestoreTarget;
    let inUse: SandboxInUse | undefined;
    if (typeof to === "string") {
      dest = { kind: "host", path: nonEmpty(to) };
    } else {
      validateKey(key); // before the sandbox is made
      const sb = inSandbox(to, () => useNamed(to.sandbox, true));
      inUse = sb.inUse;
      dest = {
        kind: "sb",
        layer: { upper: inUse.named.upper, work: inUse.named.work },
        ...sb.view,
      };
    }
    try {
      return await restoreCache(backend, key, dest, {
        restoreKeys: options.restoreKeys ?? [],
        allowExternalLinks: options.allowExternalLinks === true,
        onSkip: options.onSkip,
        onProgress: options.onProgress,
        signal: options.signal,
      });
    } finally {
      inUse?.release();
    }
  }

  /**
   * The entries whose key starts with prefix, newest first, and what names each entry whose
   * metadata cannot be read (`damaged`: remove them with removeAll()).
   */
  async list(prefix = ""): Promise<{ entries: EntryMeta[]; damaged: string[] }> {
    const { newerFirst } = await import("../../cache/lookup.js");
    const damaged: string[] = [];
    const entries = await (await this.backend()).list(prefix, damaged);
    return { entries: entries.sort(newerFirst), damaged };
  }

  /** Removes entry KEY (a damaged one too); NotFoundError when there is none. */
  async remove(key: string): Promise<void> {
    const { validateKey } = await import("../../cache/backend.js");
    const backend = await this.backend();
    if (!(await backend.remove(validateKey(key)))) {
      throw new NotFoundError(`no cache entry ${key} in ${backend.description}`);
    }
  }

  /** Removes every entry, the damaged ones too: the keys removed and how many damaged went. */
  async removeAll(): Promise<{ removed: string[]; damaged: number }> {
    const backend = await this.backend();
    const bad: string[] = [];
    const removed: string[] = [];
    for (const e of await backend.list("", bad))
      if (await backend.remove(e.key)) removed.push(e.key);
    const damaged = bad.length > 0 ? await backend.removeDamaged(bad) : 0;
    return { removed, damaged };
  }
}

function formatError(format: string): UsageError {
  return new UsageError(`unknown cache format ${format} (use gzip, zstd, estargz or none)`);
}

function nonEmpty(path: string): string {
  if (path === "") throw new UsageError("cache: an empty path");
  return path;
}

/** A sandbox directory of a save or restore: the path checked, then the sandbox held. */
function inSandbox(
  target: { path: string },
  use: () => SandboxInUse,
): { inUse: SandboxInUse; view: { vpath: string; hidden: string[]; lowers: string[] } } {
  if (!target.path.startsWith("/")) {
    throw new UsageError(`cache: sandbox paths are absolute (not ${target.path})`);
  }
  const inUse = use();
  const view = {
    vpath: target.path,
    hidden: defaultHiddenPaths(process.env),
    lowers: inUse.lowers,
  };
  return { inUse, view };
}
