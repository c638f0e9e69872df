// The loopback S3 server of the S3 tests, run as its own process by s3-server.ts: s3rver (a Koa
// S3 server storing on disk) makes its ListObjectsV2 continuation tokens with DES, which Node's
// OpenSSL 3 only has with --openssl-legacy-provider. In front of its router sit a request log
// (what the tests assert the server saw) and three things s3rver lacks that real S3 and MinIO
// have: AbortMultipartUpload, ListMultipartUploads and PutObject's If-None-Match: "*".
// Usage: node --openssl-legacy-provider s3-server-main.js DIR BUCKET LOGFILE; prints {"port":N}.
import { appendFileSync, existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import S3rver from "s3rver";

interface KoaContext {
  method: string;
  path: string;
  query: Record<string, string | string[] | undefined>;
  headers: Record<string, string | string[] | undefined>;
  status: number;
  body: unknown;
  type: string;
}
type Middleware = (ctx: KoaContext, next: () => Promise<void>) => Promise<void>;

const [dir, bucketName, logFile] = process.argv.slice(2);
if (!dir || !bucketName || !logFile) {
  console.error("usage: s3-server-main DIR BUCKET LOGFILE");
  process.exit(2);
}

const uploadsDir = (bucket: string): string => path.join(dir, bucket, "._S3rver_uploads");
/** Where s3rver's filesystem store keeps an object's bytes. */
const objectFile = (bucket: string, key: string): string => {
  const parts = key.split("/");
  return path.join(dir, bucket, ...parts.slice(0, -1), `${parts.at(-1)}._S3rver_object`);
};
const xml = (text: string): string => text.replace(/[<>&"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
const s3Error = (ctx: KoaContext, status: number, code: string, message: string): void => {
  ctx.status = status;
  ctx.type = "application/xml";
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${xml(message)}</Message></Error>`;
};

/** Keys being written with If-None-Match: "*" right now, so two such PUTs cannot both win. */
const writing = new Set<string>();

const shim: Middleware = async (ctx, next) => {
  const [bucket = "", ...keyParts] = ctx.path.slice(1).split("/").map(decodeURIComponent);
  const key = keyParts.join("/");
  appendFileSync(
    logFile,
    JSON.stringify({ method: ctx.method, bucket, key, query: Object.keys(ctx.query) }) + "\n",
  );
  const uploadId = ctx.query.uploadId;
  if (ctx.method === "DELETE" && key && typeof uploadId === "string") {
    const upload = path.join(uploadsDir(bucket), path.basename(uploadId));
    if (!existsSync(upload)) return s3Error(ctx, 404, "NoSuchUpload", "no such upload");
    rmSync(upload, { recursive: true, force: true });
    ctx.status = 204;
    return;
  }
  if (ctx.method === "GET" && !key && "uploads" in ctx.query) {
    const ids = existsSync(uploadsDir(bucket)) ? readdirSync(uploadsDir(bucket)) : [];
    const uploads = ids.map((id) => {
      const upload = path.join(uploadsDir(bucket), id);
      const uploadKey = readFileSync(path.join(upload, "key"), "utf8");
      const initiated = statSync(upload).mtime.toISOString();
      return `<Upload><Key>${xml(uploadKey)}</Key><UploadId>${xml(id)}</UploadId><Initiated>${initiated}</Initiated></Upload>`;
    });
    ctx.type = "application/xml";
    ctx.body =
      `<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
      `<Bucket>${xml(bucket)}</Bucket><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>` +
      `${uploads.join("")}</ListMultipartUploadsResult>`;
    return;
  }
  if (ctx.method === "PUT" && key && ctx.headers["if-none-match"] === "*" && !uploadId) {
    const name = `${bucket}/${key}`;
    if (writing.has(name) || existsSync(objectFile(bucket, key))) {
      return s3Error(
        ctx,
        412,
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold",
      );
    }
    writing.add(name);
    try {
      await next();
    } finally {
      writing.delete(name);
    }
    return;
  }
  await next();
};

const server = new S3rver({
  address: "127.0.0.1",
  port: 0,
  directory: dir,
  silent: true,
  configureBuckets: [{ name: bucketName, configs: [] }],
});
// Koa composes its middleware list when the server starts, so the shim goes first.
(server as unknown as { middleware: Middleware[] }).middleware.unshift(shim);
const address = await server.run();
process.stdout.write(JSON.stringify({ port: address.port }) + "\n");
// The test process holds our stdin: when it goes (even killed), so do we.
process.stdin.resume();
process.stdin.on("close", () => process.exit(0));
process.on("SIGTERM", () => process.exit(0));
