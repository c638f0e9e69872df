// The S3 cache backend against a real S3-compatible server on loopback (s3rver in its own
// process, test/helpers/s3-server.ts; one server and temp dir per test): the round trip with real
// bytes, refusal to overwrite and --force, concurrent writers, read-only, a > 64 MiB multipart
// upload, listing past one page of 1 000 keys, a failing body that leaves nothing behind (no
// entry, no pending multipart upload), and the error messages for a dead endpoint, a missing
// bucket and unknown credentials. What the server saw comes from its own request log and disk.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { PassThrough, Readable } from "node:stream";
import { test } from "node:test";
import {
  ListMultipartUploadsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import {
  CacheExistsError,
  CacheReadOnlyError,
  type CacheBackend,
  type NewEntry,
} from "../../cache/backend.js";
import { openS3Backend, PART_SIZE } from "../../cache/backends/s3.js";
import { CvisorError } from "../../src/core/errors.js";
import { s3ClientEnv, startS3Server, type S3TestServer } from "../helpers/s3-server.js";

// The SDK reads its settings from process.env: only what the test sets, nothing from the host
// (no profile, no ~/.aws, and never the instance metadata service).
for (const name of Object.keys(process.env)) {
  if (name.startsWith("AWS_") || name.startsWith("CVISOR_S3_")) delete process.env[name];
}
Object.assign(process.env, s3ClientEnv());

const MiB = 1024 * 1024;
/** Per test: a hung upload fails its test instead of the run (node:test has no default). */
const LIMIT = 60_000;

/** Runs fn with a fresh server that AWS_ENDPOINT_URL_S3 points at, and env overrides. */
async function withServer(
  fn: (server: S3TestServer) => Promise<void>,
  env: Record<string, string> = {},
): Promise<void> {
  const server = await startS3Server();
  const saved = { ...process.env };
  Object.assign(process.env, { AWS_ENDPOINT_URL_S3: server.endpoint }, env);
  try {
    await fn(server);
  } finally {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
    await server.stop();
  }
}

function entry(key: string, extra?: Record<string, string | number>): NewEntry {
  return {
    key,
    format: "gzip",
    created: new Date().toISOString(),
    cvisorVersion: "0.1.0",
    ...(extra ? { extra } : {}),
  };
}

const sha256 = (data: Buffer): string => createHash("sha256").update(data).digest("hex");

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** A stream of `total` pseudo-random bytes in 1 MiB chunks, made as it is read; onRead is
 * told how many bytes were handed out before each read. */
function generated(total: number, seed: number, onRead?: (sent: number) => void): Readable {
  const block = createHash("sha512").update(String(seed)).digest();
  const base = Buffer.alloc(MiB);
  for (let at = 0; at < MiB; at += block.length) block.copy(base, at);
  let sent = 0;
  return new Readable({
    read() {
      onRead?.(sent);
      if (sent >= total) return void this.push(null);
      const chunk = Buffer.from(base.subarray(0, Math.min(MiB, total - sent)));
      chunk.writeUInt32BE(sent / MiB, 0); // every MiB differs, so a part out of place shows
      sent += chunk.length;
      this.push(chunk);
    },
  });
}

/** Object names in the bucket under a prefix, all pages. */
async function objectNames(server: S3TestServer, prefix = ""): Promise<string[]> {
  const client = testClient(server);
  const names: string[] = [];
  let token: string | undefined;
  do {
    const page = await client.send(
      new ListObjectsV2Command({ Bucket: server.bucket, Prefix: prefix, ContinuationToken: token }),
    );
    names.push(...(page.Contents ?? []).map((object) => object.Key ?? ""));
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  client.destroy();
  return names;
}

function testClient(server: S3TestServer): S3Client {
  return new S3Client({
    region: "us-east-1",
    endpoint: server.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
  });
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Error, `rejected with a non-Error: ${String(err)}`);
    return err;
  }
  assert.fail("expected a rejection");
}

test(
  "round trip: put, stat, open, list and remove with real bytes, path-style",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}/ci/linux/`, { readOnly: false });
      assert.equal(backend.description, `s3://${server.bucket}/ci/linux`);
      assert.equal(backend.readOnly, false);
      const bodies = new Map<string, Buffer>([
        ["deps/linux/1", randomBytes(300 * 1024)],
        ["deps/linux/2", Buffer.from("x")],
        ["deps-other", Buffer.alloc(0)],
        ["odd%2F key\\with/slash", randomBytes(1000)],
      ]);
      for (const [key, body] of bodies) {
        const meta = await backend.put(
          entry(key, { tocDigest: "sha256:00", n: 1 }),
          Readable.from([body]),
          {
            force: false,
          },
        );
        assert.equal(meta.key, key);
        assert.equal(meta.size, body.length);
        assert.equal(meta.sha256, sha256(body));
        assert.deepEqual(meta.extra, { tocDigest: "sha256:00", n: 1 });
        assert.deepEqual(await backend.stat(key), meta);
      }
      for (const [key, body] of bodies) {
        assert.deepEqual(await readAll(await backend.open(key)), body, key);
      }
      const keys = async (prefix: string) => (await backend.list(prefix)).map((m) => m.key).sort();
      assert.deepEqual(await keys(""), [...bodies.keys()].sort());
      assert.deepEqual(await keys("deps/"), ["deps/linux/1", "deps/linux/2"]);
      assert.deepEqual(await keys("deps"), ["deps-other", "deps/linux/1", "deps/linux/2"]);
      assert.deepEqual(await keys("odd%"), ["odd%2F key\\with/slash"]);
      assert.deepEqual(await keys("nothing"), []);
      // The layout: flat, escaped names; one metadata and one archive object per entry.
      const names = await objectNames(server);
      assert.ok(names.includes("ci/linux/entries/deps%2Flinux%2F1.json"), names.join(" "));
      assert.ok(
        names.includes("ci/linux/entries/odd%252F key%5Cwith%2Fslash.json"),
        names.join(" "),
      );
      assert.equal(
        names.filter((name) => name.startsWith("ci/linux/archives/")).length,
        bodies.size,
      );
      assert.equal(names.length, 2 * bodies.size);

      assert.equal(await backend.remove("deps/linux/1"), true);
      assert.equal(await backend.remove("deps/linux/1"), false);
      assert.equal(await backend.stat("deps/linux/1"), undefined);
      const gone = await rejection(backend.open("deps/linux/1"));
      assert.match(gone.message, /^s3:\/\/cvisor-test\/ci\/linux: no cache entry deps\/linux\/1$/);
      assert.deepEqual(await keys("deps/"), ["deps/linux/2"]);
      assert.equal((await objectNames(server)).length, 2 * (bodies.size - 1));
      // Path-style (the default with a custom endpoint): every request names the bucket in its path.
      const requests = server.requests();
      assert.ok(requests.length > 10);
      for (const request of requests) assert.equal(request.bucket, server.bucket);
    });
  },
);

test(
  "an existing key is refused unless force; force replaces the entry and its archive",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
      const first = randomBytes(5000);
      const second = randomBytes(7000);
      const original = await backend.put(entry("k"), Readable.from([first]), { force: false });
      const refused = Readable.from([second]);
      const err = await rejection(backend.put(entry("k"), refused, { force: false }));
      assert.ok(err instanceof CacheExistsError, err.message);
      assert.equal(
        err.message,
        "cache entry k already exists in s3://cvisor-test (entries are never replaced; use --force)",
      );
      assert.ok(refused.destroyed, "the refused body is released");
      assert.deepEqual(await backend.stat("k"), original);
      assert.deepEqual(await readAll(await backend.open("k")), first);

      const replaced = await backend.put(entry("k"), Readable.from([second]), { force: true });
      assert.equal(replaced.sha256, sha256(second));
      assert.deepEqual(await backend.stat("k"), replaced);
      assert.deepEqual(await readAll(await backend.open("k")), second);
      // The old archive went with the old metadata.
      assert.equal((await objectNames(server, "archives/")).length, 1);
    });
  },
);

test(
  "two puts of one key at once: one wins, the other is refused and leaves nothing",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
      const bodies = [randomBytes(64 * 1024), randomBytes(64 * 1024)];
      const results = await Promise.allSettled(
        bodies.map((body) => backend.put(entry("race"), Readable.from([body]), { force: false })),
      );
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.filter((r) => r.status === "rejected");
      assert.equal(won.length, 1, JSON.stringify(results));
      assert.equal(lost.length, 1);
      assert.ok((lost[0] as PromiseRejectedResult).reason instanceof CacheExistsError);
      const meta = await backend.stat("race");
      assert.ok(meta);
      assert.deepEqual(meta, (won[0] as PromiseFulfilledResult<unknown>).value);
      assert.equal(sha256(await readAll(await backend.open("race"))), meta.sha256);
      assert.equal(
        (await objectNames(server, "archives/")).length,
        1,
        "the loser's archive is deleted",
      );
      // The refusal came from the server (If-None-Match: "*"), both having found no entry first.
      const metaPuts = server
        .requests()
        .filter((r) => r.method === "PUT" && r.key === "entries/race.json");
      assert.equal(metaPuts.length, 2);
    });
  },
);

test(
  "damaged metadata is listed apart, refused by name, and can be removed or replaced with force",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}/p`, { readOnly: false });
      await backend.put(entry("good"), Readable.from([Buffer.from("ok")]), { force: false });
      const client = testClient(server);
      const put = (name: string, body: string) =>
        client.send(new PutObjectCommand({ Bucket: server.bucket, Key: name, Body: body }));
      await put("p/entries/bad.json", "{not json");
      await put("p/entries/README", "not an entry: ignored");
      const stored = JSON.parse(
        await (
          await client.send(
            new GetObjectCommand({ Bucket: server.bucket, Key: "p/entries/good.json" }),
          )
        ).Body!.transformToString(),
      ) as Record<string, unknown>;
      await put("p/entries/liar.json", JSON.stringify({ ...stored, key: "good" }));
      // Reported as the disk backend reports it: listed apart, refused by name.
      const corrupt =
        /^cache entry (bad|liar) in s3:\/\/cvisor-test\/p is damaged \(metadata object p\/entries\/(bad|liar)\.json: .*\): cvisor cache rm \1 removes it, save --force replaces it$/;
      const damaged: string[] = [];
      assert.deepEqual(
        (await backend.list("", damaged)).map((m) => m.key),
        ["good"],
      );
      assert.deepEqual(damaged.sort(), ["bad", "liar"]);
      assert.match((await rejection(backend.stat("bad"))).message, /it is not JSON/);
      assert.match((await rejection(backend.stat("liar"))).message, /it names key "good"/);
      const refused = await rejection(
        backend.put(entry("bad"), Readable.from([Buffer.from("x")]), { force: false }),
      );
      assert.match(refused.message, corrupt);
      await backend.put(entry("bad"), Readable.from([Buffer.from("new")]), { force: true });
      assert.equal((await readAll(await backend.open("bad"))).toString(), "new");
      assert.equal(await backend.remove("liar"), true);
      assert.deepEqual((await backend.list("")).map((m) => m.key).sort(), ["bad", "good"]);
      await put("p/entries/bad2.json", "{not json");
      const bad2: string[] = [];
      await backend.list("", bad2);
      assert.deepEqual(bad2, ["bad2"]);
      assert.equal(await backend.removeDamaged(bad2), 1);
      const none: string[] = [];
      await backend.list("", none);
      assert.deepEqual(none, []);
      client.destroy();
    });
  },
);

test(
  "read-only: put and remove refuse before any write, reads work",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const writer = await openS3Backend(`s3://${server.bucket}/p`, { readOnly: false });
      await writer.put(entry("k"), Readable.from([Buffer.from("data")]), { force: false });
      const before = server.requests().length;
      const reader = await openS3Backend(`s3://${server.bucket}/p`, { readOnly: true });
      assert.equal(reader.readOnly, true);
      const body = Readable.from([Buffer.from("other")]);
      const put = await rejection(reader.put(entry("k2"), body, { force: true }));
      assert.ok(put instanceof CacheReadOnlyError);
      assert.equal(put.message, "cache backend s3://cvisor-test/p is read-only (--read-only)");
      assert.ok(body.destroyed);
      assert.ok((await rejection(reader.remove("k"))) instanceof CacheReadOnlyError);
      assert.equal(server.requests().length, before, "refused without a request");
      assert.equal((await reader.list("")).length, 1);
      assert.equal((await readAll(await reader.open("k"))).toString(), "data");
    });
  },
);

// 5 MiB parts (S3's smallest) rather than the default 16, so that the bound on what the body may
// run ahead of the server (a part filling, two in flight, stream buffers) is well under the body.
test(
  "a body over 64 MiB goes up as a multipart upload, in bounded memory, and comes back intact",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const partSize = 5 * MiB;
      const backend = await openS3Backend(`s3://${server.bucket}/big`, {
        readOnly: false,
        partSize,
      });
      const total = 70 * MiB;
      const expected = createHash("sha256");
      for await (const chunk of generated(total, 1)) expected.update(chunk as Buffer);
      const digest = expected.digest("hex");

      let ahead = 0;
      const body = generated(total, 1, (sent) => {
        ahead = Math.max(ahead, sent - server.partBytesOnDisk());
      });
      const meta = await backend.put(entry("big"), body, { force: false });
      assert.ok(ahead > partSize, `the body never ran ahead (${ahead} bytes): not measured`);
      assert.ok(ahead <= 5 * partSize, `the body ran ${ahead / MiB} MiB ahead of the server`);
      assert.equal(meta.size, total);
      assert.equal(meta.sha256, digest);
      const back = createHash("sha256");
      let size = 0;
      for await (const chunk of await backend.open("big")) {
        back.update(chunk as Buffer);
        size += (chunk as Buffer).length;
      }
      assert.equal(size, total);
      assert.equal(back.digest("hex"), digest);

      const archive = server.requests().filter((r) => r.key.startsWith("big/archives/"));
      const kinds = archive.map((r) =>
        r.method === "POST" && r.query.includes("uploads")
          ? "create"
          : r.method === "PUT" && r.query.includes("partNumber")
            ? "part"
            : r.method === "POST" && r.query.includes("uploadId")
              ? "complete"
              : `${r.method} ${r.query.join(",")}`,
      );
      const parts = Math.ceil(total / partSize);
      assert.deepEqual(
        kinds.filter((kind) => kind !== "GET x-id"),
        ["create", ...Array<string>(parts).fill("part"), "complete"],
      );
      assert.deepEqual(server.pendingUploadsOnDisk(), []);
    });
  },
);

test("an entry is invisible while its archive uploads", { timeout: LIMIT }, async () => {
  await withServer(async (server) => {
    const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
    const body = new PassThrough();
    const put = backend.put(entry("slow"), body, { force: false });
    const data = randomBytes(PART_SIZE + MiB);
    body.write(data);
    const deadline = Date.now() + 30_000;
    while (!server.requests().some((r) => r.query.includes("partNumber"))) {
      assert.ok(Date.now() < deadline, "no part was uploaded");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(await backend.stat("slow"), undefined);
    assert.deepEqual(await backend.list(""), []);
    body.end();
    const meta = await put;
    assert.equal(meta.sha256, sha256(data));
    assert.deepEqual(await backend.stat("slow"), meta);
  });
});

test("listing pages past 1 000 keys", { timeout: 4 * LIMIT }, async () => {
  await withServer(async (server) => {
    const backend = await openS3Backend(`s3://${server.bucket}/many`, { readOnly: false });
    const keys = Array.from({ length: 1050 }, (_, i) => `k/${String(i).padStart(4, "0")}`);
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < keys.length) {
          const key = keys[next++] as string;
          await backend.put(entry(key), Readable.from([Buffer.from(key)]), { force: false });
        }
      }),
    );
    const listed = await backend.list("");
    assert.deepEqual(listed.map((m) => m.key).sort(), keys);
    for (const meta of listed) assert.equal(meta.sha256, sha256(Buffer.from(meta.key)));
    const lists = server.requests().filter((r) => r.query.includes("list-type"));
    assert.equal(lists.length, 2, "one continuation");
    assert.ok(lists[1]?.query.includes("continuation-token"));
    // A prefix is filtered by the server: one page, 100 keys.
    const before = server.requests().length;
    assert.equal((await backend.list("k/00")).length, 100);
    assert.equal(server.requests().length - before, 1 + 100);
  });
});

test(
  "a body that fails mid-upload leaves no entry and no pending multipart upload",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
      const failure = new Error("archiver exploded");
      let sent = 0;
      const body = new Readable({
        read() {
          // Past two parts, so a multipart upload exists and has parts when the body fails.
          if (sent >= 2 * PART_SIZE + 3 * MiB) return void this.destroy(failure);
          sent += MiB;
          this.push(randomBytes(MiB));
        },
      });
      const err = await rejection(backend.put(entry("broken"), body, { force: false }));
      assert.equal(err, failure, "the body's own error is what put reports");
      assert.equal(await backend.stat("broken"), undefined);
      assert.deepEqual(await backend.list(""), []);
      const requests = server.requests();
      assert.ok(
        requests.some((r) => r.method === "POST" && r.query.includes("uploads")),
        "a multipart upload began",
      );
      assert.ok(
        requests.some((r) => r.method === "PUT" && r.query.includes("partNumber")),
        "parts were sent",
      );
      assert.ok(
        requests.some((r) => r.method === "DELETE" && r.query.includes("uploadId")),
        "and it was aborted",
      );
      const client = testClient(server);
      const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: server.bucket }));
      client.destroy();
      assert.deepEqual(uploads.Uploads ?? [], []);
      assert.deepEqual(server.pendingUploadsOnDisk(), []);
      assert.deepEqual(await objectNames(server), []);
    });
  },
);

test(
  "a body that fails or closes early, even before the upload starts: its error, no entry",
  { timeout: LIMIT },
  async () => {
    await withServer(async (server) => {
      const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
      // Fails while put is still looking the key up: reported, and no uncaught 'error' event.
      const early = new Error("tar failed at once");
      const first = new Readable({ read() {} });
      const firstPut = backend.put(entry("e1"), first, { force: false });
      first.destroy(early);
      assert.equal(await rejection(firstPut), early);
      // Closes without an error after 3 MiB: not taken for a complete archive.
      let chunks = 0;
      const second = new Readable({
        read() {
          if (++chunks > 3) return void this.destroy();
          this.push(randomBytes(MiB));
        },
      });
      const err = await rejection(backend.put(entry("e2"), second, { force: false }));
      assert.equal(err.message, "s3://cvisor-test: the archive of e2 ended early");
      assert.deepEqual(await backend.list(""), []);
      assert.deepEqual(await objectNames(server), []);
    });
  },
);

test("errors: the server going away mid-upload", { timeout: LIMIT }, async () => {
  await withServer(async (server) => {
    const backend = await openS3Backend(`s3://${server.bucket}`, { readOnly: false });
    const body = new PassThrough();
    const put = backend.put(entry("cut"), body, { force: false });
    body.write(randomBytes(PART_SIZE + MiB));
    const deadline = Date.now() + 30_000;
    while (!server.requests().some((r) => r.query.includes("partNumber"))) {
      assert.ok(Date.now() < deadline, "no part was uploaded");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await server.stop();
    body.end(randomBytes(PART_SIZE));
    const err = await rejection(put);
    assert.ok(err instanceof CvisorError, err.message);
    assert.match(
      err.message,
      /^s3:\/\/cvisor-test: cannot connect to http:\/\/127\.0\.0\.1:\d+ \((ECONNREFUSED|ECONNRESET|EPIPE); check AWS_ENDPOINT_URL_S3\)$/,
    );
  });
});

/** A loopback port with nothing listening. */
async function deadPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const address = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  assert.ok(address && typeof address === "object");
  return address.port;
}

/** Every operation fails with this one-line CvisorError. */
async function assertAllFail(backend: CacheBackend, message: RegExp): Promise<void> {
  const body = Readable.from([Buffer.from("x")]);
  for (const op of [
    () => backend.list(""),
    () => backend.stat("k"),
    () => backend.open("k"),
    () => backend.remove("k"),
    () => backend.put(entry("k"), body, { force: false }),
  ]) {
    const err = await rejection(op());
    assert.ok(err instanceof CvisorError, `${err.name}: ${err.message}`);
    assert.equal(err.exitCode, 125);
    assert.match(err.message, message);
    assert.ok(!err.message.includes("\n"), err.message);
  }
  assert.ok(body.destroyed);
}

test("errors: nothing listening at the endpoint", { timeout: LIMIT }, async () => {
  const port = await deadPort();
  const saved = process.env.AWS_ENDPOINT_URL_S3;
  process.env.AWS_ENDPOINT_URL_S3 = `http://127.0.0.1:${port}`;
  try {
    const backend = await openS3Backend("s3://cvisor-test/ci", { readOnly: false });
    await assertAllFail(
      backend,
      new RegExp(
        `^s3://cvisor-test/ci: cannot connect to http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED; check AWS_ENDPOINT_URL_S3\\)$`,
      ),
    );
  } finally {
    if (saved === undefined) delete process.env.AWS_ENDPOINT_URL_S3;
    else process.env.AWS_ENDPOINT_URL_S3 = saved;
  }
});

test("errors: no such bucket", { timeout: LIMIT }, async () => {
  await withServer(async (server) => {
    const backend = await openS3Backend("s3://no-such-bucket/x", { readOnly: false });
    await assertAllFail(
      backend,
      new RegExp(`^s3://no-such-bucket/x: no such bucket no-such-bucket at ${server.endpoint}$`),
    );
  });
});

// s3rver checks the access key id but not SigV4 signatures: a wrong secret goes unnoticed.
test("errors: unknown credentials", { timeout: LIMIT }, async () => {
  await withServer(
    async () => {
      const backend = await openS3Backend("s3://cvisor-test", { readOnly: false });
      await assertAllFail(
        backend,
        /^s3:\/\/cvisor-test: 403 Forbidden, InvalidAccessKeyId while [a-z ]+(of k)? \(check credentials: AWS_ACCESS_KEY_ID from the environment\)$/,
      );
    },
    { AWS_ACCESS_KEY_ID: "NOT-A-KEY" },
  );
});

test(
  "errors: bad locations and settings are refused before any request",
  { timeout: LIMIT },
  async () => {
    for (const url of [
      "s3://",
      "s3:/b",
      "s3://b/../x",
      "s3://b/a//c",
      "https://b/x",
      "s3://b?region=x",
    ]) {
      const err = await rejection(openS3Backend(url, { readOnly: false }));
      assert.ok(err instanceof CvisorError, url);
      assert.equal(err.code, "CV_ERR_INVALID", url);
    }
    process.env.CVISOR_S3_FORCE_PATH_STYLE = "maybe";
    try {
      const err = await rejection(openS3Backend("s3://bucket", { readOnly: false }));
      assert.equal(err.message, 'CVISOR_S3_FORCE_PATH_STYLE must be 1 or 0 (got "maybe")');
    } finally {
      delete process.env.CVISOR_S3_FORCE_PATH_STYLE;
    }
  },
);
