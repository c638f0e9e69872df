// `cache save KEY PATH`: a directory tree (host, or sb:/DIR of a sandbox's merged view) packed
// by ./format/pack.ts into tar-stream, encoded by the format's codec and streamed into the
// backend's put, all at once: nothing is buffered whole, in memory or on disk.
import { statSync, type Stats } from "node:fs";
import { Transform, type TransformCallback } from "node:stream";
import { pack as tarPack } from "tar-stream";
import { CvisorError, CacheError, NotFoundError } from "../src/core/errors.js";
import { identity } from "../src/store/fd-path.js";
import { MergedView, ViewError } from "../src/sandbox/view.js";
import type { Skipped } from "../src/sandbox/copy-tree.js";
import { abortable, destroyedOnAbort } from "../src/sandbox/interrupt.js";
import { VERSION } from "../src/version.js";
import {
  CacheExistsError,
  CacheReadOnlyError,
  validateKey,
  type CacheBackend,
  type CacheFormat,
  type EntryMeta,
  type NewEntry,
} from "./backend.js";
import { DiskBackend } from "./backends/disk.js";
import { codecOf } from "./format/codec.js";
import { EstargzWriter } from "./format/estargz.js";
import {
  HostSource,
  packTree,
  ViewSource,
  type HostEntry,
  type PackReport,
} from "./format/pack.js";

/** Gathers a stream's chunks into pieces of at least `size` bytes. */
class Batcher extends Transform {
  private parts: Buffer[] = [];
  private len = 0;

  constructor(private readonly size: number) {
    super({ highWaterMark: 1 << 20 });
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.parts.push(chunk);
    this.len += chunk.length;
    if (this.len >= this.size) this.flushParts();
    done();
  }

  override _flush(done: TransformCallback): void {
    this.flushParts();
    done();
  }

  private flushParts(): void {
    if (this.len === 0) return;
    this.push(this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts, this.len));
    this.parts = [];
    this.len = 0;
  }
}

export type CacheSource =
  | { kind: "host"; path: string }
  | {
      kind: "sb";
      upper: string;
      vpath: string;
      hidden: readonly string[];
      /** The sandbox's read-only snapshot layers, top first. */
      lowers?: readonly string[];
    };

export interface SaveOptions {
  format: CacheFormat;
  /** Honour .gitignore/.dockerignore (default true). */
  ignore?: boolean;
  force?: boolean;
  onSkip?: (s: Skipped) => void;
  /** Bytes of file contents read so far, and archive bytes written. */
  onProgress?: (read: number, written: number) => void;
  /**
   * Stops the save and undoes it (no entry, nothing staged left; rejects with AbortedError).
   * Given, no process signal listener is added: cancelling is the caller's.
   */
  signal?: AbortSignal;
}

export type SaveResult =
  { saved: true; meta: EntryMeta; report: PackReport } | { saved: false; existing: EntryMeta };

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export async function saveCache(
  backend: CacheBackend,
  key: string,
  source: CacheSource,
  opts: SaveOptions,
): Promise<SaveResult> {
  return abortable(opts.signal, "cache save", () => save(backend, key, source, opts));
}

async function save(
  backend: CacheBackend,
  key: string,
  source: CacheSource,
  opts: SaveOptions,
): Promise<SaveResult> {
  validateKey(key);
  if (backend.readOnly) throw new CacheReadOnlyError(backend.description);
  if (!opts.force) {
    const existing = await backend.stat(key);
    if (existing) return { saved: false, existing };
  }
  const codec = await codecOf(opts.format);
  // The cache's own storage is never packed into an entry (a save of $HOME, say).
  const exclude = new Set<string>();
  if (backend instanceof DiskBackend) {
    const st = statSync(backend.root, { throwIfNoEntry: false });
    if (st) exclude.add(identity(st));
  }

  let view: MergedView | undefined;
  let run: (
    tar: ReturnType<typeof tarPack>,
    announce: EstargzWriter | undefined,
  ) => Promise<PackReport>;
  const packOpts = (enc: EstargzWriter | undefined) => ({
    ignore: opts.ignore !== false,
    landmark: enc !== undefined,
    ...(enc ? { announce: enc.announce.bind(enc) } : {}),
    exclude,
    ...(opts.onSkip ? { onSkip: opts.onSkip } : {}),
    onProgress: (r: PackReport) => opts.onProgress?.(r.bytes, written),
  });
  if (source.kind === "host") {
    let st: Stats;
    try {
      st = statSync(source.path);
    } catch {
      throw new NotFoundError(`${source.path}: no such directory`);
    }
    if (!st.isDirectory()) throw new NotFoundError(`${source.path}: not a directory`, "ENOTDIR");
    const root = source.path.replace(/(.)\/+$/, "$1");
    run = (tar, enc) => packTree<string, HostEntry>(new HostSource(), root, st, tar, packOpts(enc));
  } else {
    view = new MergedView(source.upper, { hidden: source.hidden, lowers: source.lowers ?? [] });
    const v = view;
    let r;
    try {
      r = v.resolve(source.vpath, true);
    } catch (err) {
      v.dispose();
      if (err instanceof ViewError) throw new NotFoundError(`sb:${err.message}`, err.code);
      throw err;
    }
    if (r.entry === undefined || !r.entry.st.isDirectory()) {
      v.dispose();
      const why = r.entry === undefined ? "no such directory" : "not a directory";
      throw new NotFoundError(`sb:${source.vpath}: ${why}`);
    }
    const dir = v.openDir(r.parent, r.entry);
    const st = r.entry.st;
    run = (tar, enc) => packTree(new ViewSource(v), dir, st, tar, packOpts(enc));
  }

  let written = 0;
  try {
    const encoder = await codec.encoder();
    const estargz = encoder instanceof EstargzWriter ? encoder : undefined;
    const tar = tarPack();
    // Counts what passes without putting the stream in flowing mode: the backend starts reading
    // when it is ready (an S3 backend after its first requests), and nothing may flow before.
    const counter = new Transform({
      highWaterMark: 1 << 20,
      transform(chunk: Buffer, _enc, done) {
        written += chunk.length;
        done(null, chunk);
      },
    });
    encoder.on("error", (err: Error) => counter.destroy(err));
    // tar-stream hands out many small pieces (headers, padding, small files): gathered into
    // 1 MiB ones, the encoder makes far fewer calls (each zlib or zstd write has a fixed cost).
    const batch = new Batcher(1 << 20);
    tar.on("error", (err: Error) => batch.destroy(err));
    batch.on("error", (err: Error) => encoder.destroy(err));
    tar.pipe(batch).pipe(encoder).pipe(counter);
    const extra: Record<string, string | number> = {};
    const entry: NewEntry = {
      key,
      format: opts.format,
      created: new Date().toISOString(),
      cvisorVersion: VERSION,
    };
    if (estargz) {
      entry.extra = extra;
      // The TOC is known once the encoder has flushed: before the body ends, so before the
      // backend writes the metadata record.
      estargz.on("end", () => {
        extra.tocDigest = estargz.tocDigest;
        extra.uncompressedSize = estargz.uncompressedSize;
      });
    }
    const packing = run(tar, estargz);
    const putting = backend.put(entry, counter, {
      force: opts.force === true,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const stopWatching = destroyedOnAbort(opts.signal, tar, counter);
    putting.finally(stopWatching).catch(() => undefined);
    // A backend that gave up stops the packer too, or it would wait for a reader forever.
    putting.catch((err: unknown) =>
      tar.destroy(err instanceof Error ? err : new Error(String(err))),
    );
    const [p, u] = await Promise.allSettled([packing, putting]);
    if (u.status === "rejected" && u.reason instanceof CacheExistsError) {
      // Another save of this key won the race (the backend's check at the end): as if it had
      // been there from the start.
      const existing = await backend.stat(key);
      if (existing) return { saved: false, existing };
    }
    // The backend's own refusals say more than the pack stream it destroyed.
    if (u.status === "rejected" && u.reason instanceof CvisorError) throw u.reason;
    if (p.status === "rejected") {
      const err: unknown = p.reason;
      if (err instanceof CvisorError) throw err;
      throw new CacheError(`cache save: ${errMessage(err)}`, "ECACHE", { cause: err });
    }
    if (u.status === "rejected") throw u.reason;
    return { saved: true, meta: u.value, report: p.value };
  } finally {
    view?.dispose();
  }
}
