// The S3 cache backend (`s3://bucket/prefix`), for AWS and S3-compatible stores (MinIO, R2, …).
// Under the prefix, each entry is two objects:
//   entries/<name>.json         the metadata: EntryMeta plus the archive's object name
//   archives/<name>.<uuid>      the archive bytes
// where <name> is the key with '%', '/' and '\' percent-escaped: object names stay flat (MinIO
// refuses an object under a name that is another object's "directory"), the mapping is
// one-to-one, and a key prefix maps to a name prefix so listing filters on the server. An entry
// exists when its metadata object does; that is written only after the archive upload
// completed, so a half-uploaded entry is invisible. Archive names are unique per upload, so a
// failed or concurrent upload never touches another entry's bytes, and --force swaps the
// metadata (one PUT) before deleting the old archive.
// Loaded only by `cvisor cache` with an s3:// backend: the SDK costs start-up time.
import { createHash, randomUUID } from "node:crypto";
import { pipeline, Readable, Transform, type TransformCallback } from "node:stream";
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { CacheError, NotFoundError, UsageError } from "../../src/core/errors.js";
import {
  CacheDamagedError,
  CacheExistsError,
  CacheReadOnlyError,
  isEntryMeta,
  validateKey,
  type CacheBackend,
  type EntryMeta,
  type NewEntry,
} from "../backend.js";
import { httpStatus, s3ErrorName, s3Failure, type S3Context } from "./s3-errors.js";

/** Multipart part size: at most 3 parts are in memory (queueSize 2 plus the one filling); the
 * S3 limit of 10 000 parts makes the largest archive 160 GiB. */
export const PART_SIZE = 16 * 1024 * 1024;
/** S3's smallest part (but the last). */
const MIN_PART_SIZE = 5 * 1024 * 1024;
const QUEUE_SIZE = 2;
/** Parallel metadata GETs while listing. */
const LIST_CONCURRENCY = 16;
/** S3's limit on an object name, in UTF-8 bytes. */
const MAX_OBJECT_NAME = 1024;
/** A metadata object larger than this is not ours. */
const MAX_META_BYTES = 1024 * 1024;
/** When neither AWS_REGION nor the profile names one: what S3-compatible servers expect. */
const DEFAULT_REGION = "us-east-1";
const FORCE_PATH_STYLE_ENV = "CVISOR_S3_FORCE_PATH_STYLE";

/** What the metadata object holds: the entry's metadata and where its archive is. */
interface StoredMeta {
  meta: EntryMeta;
  /** The archive's object name, relative to the prefix ("archives/…"). */
  archive: string;
}

export interface S3Location {
  bucket: string;
  /** "" or a prefix ending in "/". */
  prefix: string;
  /** "s3://bucket" or "s3://bucket/prefix". */
  description: string;
}

/** Parses `s3://bucket[/prefix]`; the prefix follows the rules of keys. */
export function parseS3Url(url: string): S3Location {
  const match = /^s3:\/\/([^/?#]*)(?:\/(.*))?$/.exec(url);
  const bucket = match?.[1] ?? "";
  if (!match || !/^[a-z0-9][a-z0-9._-]{1,254}$/i.test(bucket)) {
    throw new UsageError(
      `invalid S3 cache location ${JSON.stringify(url)}: expected s3://BUCKET or s3://BUCKET/PREFIX`,
      "CV_ERR_INVALID",
    );
  }
  const prefix = (match[2] ?? "").replace(/\/+$/, "");
  if (prefix !== "") {
    try {
      validateKey(prefix);
    } catch (err) {
      const why = err instanceof Error ? err.message.replace(/^.*?: /, "") : "";
      throw new UsageError(`invalid S3 cache prefix in ${url}: ${why}`, "CV_ERR_INVALID");
    }
  }
  return {
    bucket,
    prefix: prefix === "" ? "" : `${prefix}/`,
    description: prefix === "" ? `s3://${bucket}` : `s3://${bucket}/${prefix}`,
  };
}

/** A key as part of an object name: flat, one-to-one, and prefix-preserving. */
export function encodeKey(key: string): string {
  return key.replace(/[%/\\]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`);
}

export function decodeKey(name: string): string {
  return name.replace(/%(25|2F|5C)/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** Reads a yes/no env value; undefined when unset or empty. */
function envFlag(env: NodeJS.ProcessEnv, name: string): boolean | undefined {
  const value = env[name]?.trim().toLowerCase();
  if (value === undefined || value === "") return undefined;
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["0", "false", "no", "off"].includes(value)) return false;
  throw new UsageError(
    `${name} must be 1 or 0 (got ${JSON.stringify(env[name])})`,
    "CV_ERR_INVALID",
  );
}

/**
 * Opens the backend. Credentials, region and endpoint come from the SDK's usual chain (env,
 * profile, SSO, instance roles), the endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL or the
 * profile's endpoint_url. Path-style addressing is on when an endpoint is configured (MinIO and
 * most S3-compatible servers want it), and CVISOR_S3_FORCE_PATH_STYLE=1/0 overrides.
 */
export async function openS3Backend(
  url: string,
  options: {
    readOnly: boolean;
    /** Multipart part size, at least 5 MiB (for tests); default PART_SIZE. */
    partSize?: number;
  },
): Promise<CacheBackend> {
  const location = parseS3Url(url);
  const env = process.env;
  // cvisor supports Node 20 and pins an SDK that does; the SDK's notice about its future
  // releases would otherwise print on every cache command.
  env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
  // A throwaway client reads the configured region and endpoint through the SDK's own loaders.
  const probe = new S3Client({});
  const region = await probe.config.region().catch(() => DEFAULT_REGION);
  const configured = await probe.config.serviceConfiguredEndpoint?.();
  probe.destroy();
  const config: S3ClientConfig = {
    region,
    forcePathStyle: envFlag(env, FORCE_PATH_STYLE_ENV) ?? configured !== undefined,
    // Without it a dead endpoint hangs until the OS gives up.
    requestHandler: { connectionTimeout: 10_000 },
  };
  // S3-compatible stores vary in support for the SDK's new default CRC checksums; cvisor checks
  // the archive's sha256 end to end anyway. AWS_REQUEST_CHECKSUM_CALCULATION still wins.
  if (configured !== undefined && !env.AWS_REQUEST_CHECKSUM_CALCULATION) {
    config.requestChecksumCalculation = "WHEN_REQUIRED";
  }
  const context: S3Context = {
    description: location.description,
    bucket: location.bucket,
    region,
    endpoint: configured ?? `https://s3.${region}.amazonaws.com`,
    customEndpoint: configured !== undefined,
  };
  const partSize = Math.max(MIN_PART_SIZE, options.partSize ?? PART_SIZE);
  return new S3Backend(new S3Client(config), location, context, options.readOnly, partSize);
}

/** Counts and hashes the bytes that pass. (Not `size` or `length`: lib-storage would take such a
 * property for the body's total length.) */
class Measure extends Transform {
  bytes = 0;
  readonly hash = createHash("sha256");
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    this.hash.update(chunk);
    callback(null, chunk);
  }
}

class S3Backend implements CacheBackend {
  readonly description: string;

  constructor(
    private readonly client: S3Client,
    private readonly location: S3Location,
    private readonly context: S3Context,
    readonly readOnly: boolean,
    private readonly partSize: number,
  ) {
    this.description = location.description;
  }

  async list(prefix: string, damaged?: string[]): Promise<EntryMeta[]> {
    const base = `${this.location.prefix}entries/`;
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.send("listing entries", () =>
        this.client.send(
          new ListObjectsV2Command({
            Bucket: this.location.bucket,
            Prefix: base + encodeKey(prefix),
            ContinuationToken: token,
          }),
        ),
      );
      for (const object of page.Contents ?? []) {
        const name = object.Key;
        if (name === undefined || !name.startsWith(base) || !name.endsWith(".json")) continue;
        keys.push(decodeKey(name.slice(base.length, -".json".length)));
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    const found = await mapLimit(keys, LIST_CONCURRENCY, (key) =>
      this.readMeta(key).catch((err: unknown) => {
        if (!(err instanceof CacheDamagedError)) throw err;
        damaged?.push(key);
        return undefined;
      }),
    );
    // An entry removed between the listing and its GET is simply gone.
    return found.flatMap((stored) => (stored ? [stored.meta] : []));
  }

  async removeDamaged(names: readonly string[]): Promise<number> {
    let n = 0;
    for (const key of names) if (await this.remove(key)) n++;
    return n;
  }

  async stat(key: string): Promise<EntryMeta | undefined> {
    return (await this.readMeta(validateKey(key)))?.meta;
  }

  async open(key: string): Promise<Readable> {
    const stored = await this.readMeta(validateKey(key));
    if (!stored) throw new NotFoundError(`${this.description}: no cache entry ${key}`);
    try {
      const out = await this.client.send(
        new GetObjectCommand({
          Bucket: this.location.bucket,
          Key: this.location.prefix + stored.archive,
        }),
      );
      if (!(out.Body instanceof Readable)) throw new Error("GetObject returned no stream");
      return out.Body;
    } catch (err) {
      if (s3ErrorName(err) === "NoSuchKey") {
        throw new NotFoundError(
          `${this.description}: the archive of cache entry ${key} is missing (${stored.archive}); remove the entry`,
        );
      }
      throw s3Failure(this.context, `downloading the archive of ${key}`, err);
    }
  }

  async put(
    entry: NewEntry,
    body: Readable,
    options: { force: boolean; signal?: AbortSignal },
  ): Promise<EntryMeta> {
    // Listening at once: a body that fails while the lookups below run must not crash the process.
    const failure: { error?: unknown } = {};
    body.on("error", (err) => (failure.error ??= err));
    try {
      if (this.readOnly) throw new CacheReadOnlyError(this.description);
      const key = validateKey(entry.key);
      const metaName = this.metaName(key);
      // --force also replaces an entry whose metadata is corrupt (its archive is then left over).
      const previous = await this.readMeta(key).catch((err: unknown) => {
        if (options.force && err instanceof CacheDamagedError) return undefined;
        throw err;
      });
      if (previous && !options.force) throw new CacheExistsError(this.description, key);
      const archive = `archives/${encodeKey(key)}.${randomUUID()}`;
      this.checkName(this.location.prefix + archive, key);
      const measured = await this.upload(key, this.location.prefix + archive, body, failure);
      const meta: EntryMeta = {
        key,
        format: entry.format,
        size: measured.size,
        sha256: measured.sha256,
        created: entry.created,
        cvisorVersion: entry.cvisorVersion,
        ...(entry.extra ? { extra: entry.extra } : {}),
      };
      try {
        await this.writeMeta(metaName, { meta, archive }, !options.force);
      } catch (err) {
        await this.deleteQuietly(this.location.prefix + archive);
        // 412: the key exists; 409: another conditional write of it is in flight (AWS).
        if (
          [412, 409].includes(httpStatus(err) ?? 0) ||
          s3ErrorName(err) === "PreconditionFailed"
        ) {
          throw new CacheExistsError(this.description, key);
        }
        throw s3Failure(this.context, `writing the metadata of ${key}`, err);
      }
      if (previous && previous.archive !== archive) {
        await this.deleteQuietly(this.location.prefix + previous.archive);
      }
      return meta;
    } finally {
      // Whatever happened, the producer must not wait on a reader that has gone.
      if (!body.readableEnded) body.destroy();
    }
  }

  async remove(key: string): Promise<boolean> {
    if (this.readOnly) throw new CacheReadOnlyError(this.description);
    let stored: StoredMeta | undefined;
    try {
      stored = await this.readMeta(validateKey(key));
      if (!stored) return false;
    } catch (err) {
      // A corrupt entry can be removed (its archive, named only in it, is left over).
      if (!(err instanceof CacheDamagedError)) throw err;
    }
    // Metadata first: from then on the entry is gone, whatever happens to the archive.
    await this.delete(this.metaName(key), `removing the metadata of ${key}`);
    if (stored) {
      await this.delete(this.location.prefix + stored.archive, `removing the archive of ${key}`);
    }
    return true;
  }

  /**
   * Streams body into the archive object; multipart above one part, aborted on any failure.
   * failure.error is the body's own error, if it had one.
   */
  private async upload(
    key: string,
    name: string,
    body: Readable,
    failure: { error?: unknown },
  ): Promise<{ size: number; sha256: string }> {
    const measure = new Measure();
    // pipeline, not pipe: a body that errors or closes early fails measure, and so the upload.
    pipeline(body, measure, () => {});
    const upload = new Upload({
      client: this.client,
      params: {
        Bucket: this.location.bucket,
        Key: name,
        Body: measure,
        ContentType: "application/octet-stream",
      },
      partSize: this.partSize,
      queueSize: QUEUE_SIZE,
      leavePartsOnError: false,
    });
    const bodyFailed = (): unknown =>
      failure.error ??
      (body.destroyed && !body.readableEnded
        ? new CacheError(`${this.description}: the archive of ${key} ended early`, "EIO")
        : undefined);
    try {
      await upload.done();
    } catch (err) {
      // The body's own error (the archiver failed) says more than the upload it broke.
      const bodyError = bodyFailed();
      measure.destroy();
      if (bodyError !== undefined) throw bodyError;
      throw s3Failure(this.context, `uploading the archive of ${key}`, err);
    }
    const bodyError = bodyFailed();
    if (bodyError !== undefined) throw bodyError;
    return { size: measure.bytes, sha256: measure.hash.digest("hex") };
  }

  /** PUTs the metadata; exclusive asks the server to refuse an existing one (If-None-Match). */
  private async writeMeta(name: string, stored: StoredMeta, exclusive: boolean): Promise<void> {
    const put = (ifNoneMatch: string | undefined) =>
      this.client.send(
        new PutObjectCommand({
          Bucket: this.location.bucket,
          Key: name,
          Body: JSON.stringify({ ...stored.meta, archive: stored.archive }, null, 2) + "\n",
          ContentType: "application/json",
          IfNoneMatch: ifNoneMatch,
        }),
      );
    try {
      await put(exclusive ? "*" : undefined);
    } catch (err) {
      // A store without conditional writes: the GET before the upload was the check.
      if (exclusive && (s3ErrorName(err) === "NotImplemented" || httpStatus(err) === 501)) {
        await put(undefined);
        return;
      }
      throw err;
    }
  }

  /** The entry's metadata object, or undefined when there is none. A GET, not a HEAD: a HEAD's
   * 404 has no body, so a missing bucket would look like a missing entry. */
  private async readMeta(key: string): Promise<StoredMeta | undefined> {
    const name = this.metaName(key);
    let text: string;
    try {
      const out = await this.client.send(
        new GetObjectCommand({ Bucket: this.location.bucket, Key: name }),
      );
      if ((out.ContentLength ?? 0) > MAX_META_BYTES)
        throw this.corrupt(key, name, "it is too large");
      text = (await out.Body?.transformToString("utf8")) ?? "";
    } catch (err) {
      if (s3ErrorName(err) === "NoSuchKey") return undefined;
      throw s3Failure(this.context, `reading the metadata of ${key}`, err);
    }
    return this.parseMeta(name, key, text);
  }

  private parseMeta(name: string, key: string, text: string): StoredMeta {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw this.corrupt(key, name, "it is not JSON");
    }
    const record = (typeof value === "object" && value !== null ? value : {}) as Record<
      string,
      unknown
    >;
    const archive = record.archive;
    if (record.key !== key)
      throw this.corrupt(key, name, `it names key ${JSON.stringify(record.key)}`);
    if (
      typeof archive !== "string" ||
      !archive.startsWith("archives/") ||
      archive.includes("/..")
    ) {
      throw this.corrupt(key, name, "it has no archive name");
    }
    if (!isEntryMeta(record))
      throw this.corrupt(key, name, "a field is missing or has the wrong type");
    const { format, size, sha256, created, cvisorVersion, extra } = record;
    const meta: EntryMeta = {
      key,
      format,
      size,
      sha256,
      created,
      cvisorVersion,
      ...(extra ? { extra } : {}),
    };
    return { meta, archive };
  }

  private corrupt(key: string, name: string, why: string): CacheDamagedError {
    return new CacheDamagedError(this.description, key, `metadata object ${name}: ${why}`);
  }

  private metaName(key: string): string {
    const name = `${this.location.prefix}entries/${encodeKey(key)}.json`;
    this.checkName(name, key);
    return name;
  }

  private checkName(name: string, key: string): void {
    const bytes = Buffer.byteLength(name);
    if (bytes > MAX_OBJECT_NAME) {
      throw new UsageError(
        `${this.description}: cache key ${JSON.stringify(key.slice(0, 80))} is too long for S3 (its object name is ${bytes} bytes, at most ${MAX_OBJECT_NAME})`,
        "CV_ERR_INVALID",
      );
    }
  }

  private async delete(name: string, doing: string): Promise<void> {
    await this.send(doing, () =>
      this.client.send(new DeleteObjectCommand({ Bucket: this.location.bucket, Key: name })),
    );
  }

  /** Cleanup after a failure, which is what gets reported: a leftover archive is invisible. */
  private async deleteQuietly(name: string): Promise<void> {
    await this.client
      .send(new DeleteObjectCommand({ Bucket: this.location.bucket, Key: name }))
      .catch(() => {});
  }

  private async send<T>(doing: string, request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (err) {
      throw s3Failure(this.context, doing, err);
    }
  }
}

/** Maps items with at most `limit` calls in flight; results in input order. */
async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
