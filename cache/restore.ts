// `cache restore KEY PATH [--restore-key P]...`: finds the entry (./lookup.ts), streams its
// archive from the backend through a verifier (size, sha256, the format's magic bytes) and the
// format's decoder into ./format/unpack.ts, which extracts into a temporary directory on the
// destination's filesystem (./place.ts); only an archive that was whole, matched its metadata,
// and held nothing hostile is then swapped in for the destination. Anything else fails with one
// line and leaves the destination exactly as it was.
import { createHash } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { CvisorError, CacheError, UsageError } from "../src/core/errors.js";
import type { Skipped } from "../src/sandbox/copy-tree.js";
import { abortable, cleanedUpOnSignal, destroyedOnAbort } from "../src/sandbox/interrupt.js";
import { validateKey, type CacheBackend, type EntryMeta } from "./backend.js";
import { codecOf, type Codec } from "./format/codec.js";
import { ESTARGZ_META_NAMES, TOC_NAME, type Toc } from "./format/estargz.js";
import { extractTar, HostileArchiveError, type ExtractReport } from "./format/unpack.js";
import { lookup, type HitKind } from "./lookup.js";
import { hostDestination, stageHost, stageSandbox, type Staging } from "./place.js";

export type RestoreTarget =
  | { kind: "host"; path: string }
  | {
      kind: "sb";
      layer: { upper: string; work: string };
      vpath: string;
      hidden: readonly string[];
      /** The sandbox's read-only snapshot layers, top first. */
      lowers?: readonly string[];
    };

export interface RestoreOptions {
  restoreKeys?: readonly string[];
  onSkip?: (s: Skipped) => void;
  /** Accept symlinks leading outside the restored directory (a virtualenv's). */
  allowExternalLinks?: boolean;
  /** Archive bytes read so far, of total. */
  onProgress?: (read: number, total: number) => void;
  /**
   * Stops the restore and undoes it (the destination as it was, nothing staged left; rejects
   * with AbortedError). Given, no process signal listener is added: cancelling is the caller's.
   */
  signal?: AbortSignal;
}

export interface RestoreResult {
  hit: HitKind;
  entry?: EntryMeta;
  matchedPrefix?: string;
  report?: ExtractReport;
}

/** Counts and hashes the archive as it flows, and checks its first bytes. */
class Verifier extends Transform {
  readonly hash = createHash("sha256");
  size = 0;
  private head = Buffer.alloc(0);

  constructor(
    private readonly codec: Codec,
    private readonly progress: ((n: number) => void) | undefined,
  ) {
    super({ highWaterMark: 1 << 20 });
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.hash.update(chunk);
    this.size += chunk.length;
    const magic = this.codec.magic;
    if (magic && this.head.length < magic.length) {
      this.head = Buffer.concat([this.head, chunk.subarray(0, magic.length)]);
      if (this.head.length >= magic.length && !this.head.subarray(0, magic.length).equals(magic)) {
        done(new WrongFormat(`it is not a ${this.codec.name} archive`));
        return;
      }
    }
    this.progress?.(this.size);
    done(null, chunk);
  }
}

class WrongFormat extends Error {}

function validatePrefix(prefix: string): string {
  if (prefix === "" || /[\p{Cc}]/u.test(prefix)) {
    throw new UsageError(`invalid restore key ${JSON.stringify(prefix)}`, "CV_ERR_INVALID");
  }
  return prefix;
}

/** Checks the extracted files against an eStargz TOC (every file's sha256 digest). */
function checkToc(toc: Buffer | undefined, digests: Map<string, string>, meta: EntryMeta): void {
  if (toc === undefined) throw new WrongFormat(`it has no ${TOC_NAME}`);
  const tocDigest = `sha256:${createHash("sha256").update(toc).digest("hex")}`;
  const recorded = meta.extra?.tocDigest;
  if (recorded !== undefined && recorded !== tocDigest) {
    throw new WrongFormat("its TOC digest does not match its metadata");
  }
  let parsed: Toc;
  try {
    parsed = JSON.parse(toc.toString("utf8")) as Toc;
  } catch {
    throw new WrongFormat(`its ${TOC_NAME} is not JSON`);
  }
  const seen = new Set<string>();
  for (const e of parsed.entries ?? []) {
    if (e.type !== "reg") continue;
    const name = e.name.replace(/^\.?\/+/, "");
    if (ESTARGZ_META_NAMES.has(name)) continue;
    seen.add(name);
    const got = digests.get(name);
    if ((e.size ?? 0) > 0 && got !== e.digest) {
      throw new WrongFormat(`${name} does not match the digest in its TOC`);
    }
  }
  for (const name of digests.keys()) {
    if (!seen.has(name)) throw new WrongFormat(`${name} is not in its TOC`);
  }
}

export async function restoreCache(
  backend: CacheBackend,
  key: string,
  target: RestoreTarget,
  opts: RestoreOptions = {},
): Promise<RestoreResult> {
  return abortable(opts.signal, "cache restore", () => restore(backend, key, target, opts));
}

async function restore(
  backend: CacheBackend,
  key: string,
  target: RestoreTarget,
  opts: RestoreOptions,
): Promise<RestoreResult> {
  validateKey(key);
  const restoreKeys = (opts.restoreKeys ?? []).map(validatePrefix);
  let stage: () => Staging;
  if (target.kind === "host") {
    const dst = hostDestination(target.path); // refused even on a miss
    stage = () => stageHost(dst, target.path);
  } else {
    stage = () => stageSandbox(target.layer, target.vpath, target.hidden, target.lowers ?? []);
  }
  const found = await lookup(backend, key, restoreKeys);
  if (found.hit === "miss" || found.entry === undefined) return { hit: "miss" };
  const meta = found.entry;
  const codec = await codecOf(meta.format);
  const staging = stage();
  const what = `cache entry ${meta.key} in ${backend.description}`;
  const report = await cleanedUpOnSignal(
    () => staging.abort(),
    () => extractAndPlace(backend, meta, codec, staging, target, opts, what),
    opts.signal,
  );
  return {
    hit: found.hit,
    entry: meta,
    ...(found.matchedPrefix !== undefined ? { matchedPrefix: found.matchedPrefix } : {}),
    report,
  };
}

/** Extracts the entry into staging and swaps it in, or removes it and throws. */
async function extractAndPlace(
  backend: CacheBackend,
  meta: EntryMeta,
  codec: Codec,
  staging: Staging,
  target: RestoreTarget,
  opts: RestoreOptions,
  what: string,
): Promise<ExtractReport> {
  let report: ExtractReport;
  let stopWatching = (): void => {};
  try {
    const body = await backend.open(meta.key);
    stopWatching = destroyedOnAbort(opts.signal, body);
    const verifier = new Verifier(
      codec,
      opts.onProgress && ((n: number) => opts.onProgress?.(n, meta.size)),
    );
    const decoder = await codec.decoder();
    const estargz = meta.format === "estargz";
    let toc: Buffer | undefined;
    const digests = estargz ? new Map<string, string>() : undefined;
    const tarStream = body.pipe(verifier).pipe(decoder);
    body.on("error", (err: Error) => verifier.destroy(err));
    verifier.on("error", (err: Error) => decoder.destroy(err));
    try {
      report = await extractTar(tarStream, staging.tmp, {
        ...(estargz
          ? {
              metaNames: ESTARGZ_META_NAMES,
              onMeta: (name: string, content: Buffer) => {
                if (name === TOC_NAME) toc = content;
              },
            }
          : {}),
        ...(digests ? { digests } : {}),
        ...(opts.onSkip ? { onSkip: opts.onSkip } : {}),
        allowExternalLinks: opts.allowExternalLinks === true,
        // In a sandbox's layer a `.wh.` name would be a whiteout or an opaque marker.
        skipReserved: target.kind === "sb",
      });
    } catch (err) {
      if (err instanceof HostileArchiveError) {
        throw new CacheError(
          `${what} is refused: ${err.message}; nothing was restored`,
          "EHOSTILE",
        );
      }
      if (err instanceof CvisorError) throw err;
      const detail = err instanceof Error ? err.message.split("\n")[0] : String(err);
      throw new CacheError(
        `${what} is corrupt or truncated (${detail}); nothing was restored`,
        "ECORRUPT",
        { cause: err },
      );
    }
    const sha = verifier.hash.digest("hex");
    if (verifier.size !== meta.size || sha !== meta.sha256) {
      throw new CacheError(
        `${what} is corrupt or truncated (${verifier.size} bytes with sha256 ${sha.slice(0, 12)}…, its metadata says ${meta.size} bytes with ${meta.sha256.slice(0, 12)}…); nothing was restored`,
        "ECORRUPT",
      );
    }
    if (digests) {
      try {
        checkToc(toc, digests, meta);
      } catch (err) {
        const detail = err instanceof Error ? err.message : String(err);
        throw new CacheError(
          `${what} is not valid eStargz (${detail}); nothing was restored`,
          "ECORRUPT",
        );
      }
    }
    opts.signal?.throwIfAborted(); // an abort that came as the last bytes did: nothing is placed
    staging.commit();
  } catch (err) {
    staging.abort();
    throw err;
  } finally {
    stopWatching();
  }
  return report;
}
