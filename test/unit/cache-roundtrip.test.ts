// `cache save` then `cache restore` through the library (cache/save.ts, cache/restore.ts) on the
// disk backend and on S3 (a loopback server), for every format, on a tree with nested directories, a 50 MB file, symlinks
// (relative, absolute, dangling, to a directory), hard links, modes, an empty directory and
// times; ignore rules; restore replacing an existing directory; lookup by prefix and restore
// keys on entries of different ages.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { test, type TestContext } from "node:test";
import type { CacheFormat, EntryMeta } from "../../cache/backend.js";
import { DiskBackend } from "../../cache/backends/disk.js";
import { openS3Backend } from "../../cache/backends/s3.js";
import { backendSpec, openBackend } from "../../cache/backends/select.js";
import { HostSource, packTree, type HostEntry } from "../../cache/format/pack.js";
import { lookup, newest } from "../../cache/lookup.js";
import { restoreCache } from "../../cache/restore.js";
import { saveCache } from "../../cache/save.js";
import { extract as tarExtract, pack as tarPack } from "tar-stream";
import { CvisorError } from "../../src/core/errors.js";
import { cacheDir } from "../../src/paths.js";
import { cacheTree, describeTree } from "../helpers/cache-tree.js";
import { repoRoot, tempRoot } from "../helpers/repo.js";
import { s3ClientEnv, startS3Server } from "../helpers/s3-server.js";
// The library entry: it tells the core binding where the package is (a restore swaps directories
// through the core's renameat2).
import "../../src/index.js";

const MB = 1 << 20;

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-cache-"));
  t.after(() => {
    spawnSync("chmod", ["-R", "u+rwx", dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

const FORMATS: CacheFormat[] = ["gzip", "zstd", "estargz", "none"];

// One 50 MB tree for all formats (made once: writing it is most of the cost).
let shared: { dir: string; expected: string[] } | undefined;
function sharedTree(t: TestContext): { dir: string; expected: string[] } {
  if (shared) return shared;
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-cache-tree-"));
  process.on("exit", () => {
    spawnSync("chmod", ["-R", "u+rwx", dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  cacheTree(join(dir, "src"), 50 * MB);
  const expected = describeTree(join(dir, "src")).filter((l) => !l.startsWith("debug.log "));
  assert.ok(
    expected.some((l) => l.startsWith("big.bin file 644")),
    expected.join("\n"),
  );
  void t;
  shared = { dir, expected };
  return shared;
}

for (const format of FORMATS) {
  test(`round trip, ${format}: files, 50 MB, symlinks, hard links, modes, empty dir, times`, async (t) => {
    const { dir, expected } = sharedTree(t);
    const work = tempDir(t);
    const backend = new DiskBackend(join(work, "cache"), false);
    const saved = await saveCache(
      backend,
      `deps-${format}`,
      { kind: "host", path: join(dir, "src") },
      { format },
    );
    assert.equal(saved.saved, true);
    if (!saved.saved) return;
    assert.equal(saved.meta.format, format);
    assert.equal(saved.report.hardlinks, 2);
    assert.equal(saved.report.ignored, 1); // debug.log
    const archive = join(
      work,
      "cache",
      "entries",
      readdirSync(join(work, "cache", "entries"))[0] ?? "",
      "archive",
    );
    assert.equal(lstatSync(archive).size, saved.meta.size);
    if (format !== "none")
      assert.ok(saved.meta.size < 50 * MB, `${format} compressed: ${saved.meta.size}`);
    const out = join(work, "out");
    // The tree holds an absolute symlink (abs-link -> /etc/hostname): allowed explicitly.
    const r = await restoreCache(
      backend,
      `deps-${format}`,
      { kind: "host", path: out },
      { allowExternalLinks: true },
    );
    assert.equal(r.hit, "exact");
    assert.deepEqual(describeTree(out), expected);
    assert.equal(lstatSync(out).mode & 0o777, lstatSync(join(dir, "src")).mode & 0o777);
    // Nothing of the format in the tree, no temp directory beside it.
    assert.deepEqual(readdirSync(work).sort(), ["cache", "out"]);
    assert.ok(!existsSync(join(out, ".no.prefetch.landmark")));
    assert.ok(!existsSync(join(out, "stargz.index.json")));
  });
}

test("--no-ignore keeps what .gitignore excludes", async (t) => {
  const work = tempDir(t);
  const src = join(work, "src");
  mkdirSync(join(src, "sub"), { recursive: true });
  writeFileSync(join(src, ".gitignore"), "*.log\n");
  writeFileSync(join(src, "sub", ".dockerignore"), "secret\n");
  for (const f of ["a.log", "b.txt", "sub/secret", "sub/c.txt"]) writeFileSync(join(src, f), f);
  const backend = new DiskBackend(join(work, "cache"), false);
  await saveCache(backend, "ign", { kind: "host", path: src }, { format: "gzip" });
  await saveCache(backend, "all", { kind: "host", path: src }, { format: "gzip", ignore: false });
  await restoreCache(backend, "ign", { kind: "host", path: join(work, "o1") });
  await restoreCache(backend, "all", { kind: "host", path: join(work, "o2") });
  const names = (d: string) => describeTree(d).map((l) => l.split(" ")[0]);
  assert.deepEqual(names(join(work, "o1")), [
    ".gitignore",
    "b.txt",
    "sub/",
    "sub/.dockerignore",
    "sub/c.txt",
  ]);
  assert.deepEqual(names(join(work, "o2")), [
    ".gitignore",
    "a.log",
    "b.txt",
    "sub/",
    "sub/.dockerignore",
    "sub/c.txt",
    "sub/secret",
  ]);
});

test("restore replaces an existing directory: stale files go, its symlink target is used", async (t) => {
  const work = tempDir(t);
  const src = join(work, "src");
  mkdirSync(src);
  writeFileSync(join(src, "new.txt"), "new\n");
  const backend = new DiskBackend(join(work, "cache"), false);
  await saveCache(backend, "k", { kind: "host", path: src }, { format: "zstd" });
  const dst = join(work, "dst");
  mkdirSync(join(dst, "stale"), { recursive: true });
  writeFileSync(join(dst, "stale", "old.txt"), "old\n");
  await restoreCache(backend, "k", { kind: "host", path: dst });
  assert.deepEqual(readdirSync(dst), ["new.txt"]);
  // A destination that is a symlink to a directory: the directory it names is replaced.
  const real = join(work, "real");
  mkdirSync(real);
  writeFileSync(join(real, "old"), "");
  spawnSync("ln", ["-s", real, join(work, "via-link")]);
  await restoreCache(backend, "k", { kind: "host", path: join(work, "via-link") });
  assert.ok(lstatSync(join(work, "via-link")).isSymbolicLink());
  assert.deepEqual(readdirSync(real), ["new.txt"]);
  // A missing parent is made.
  await restoreCache(backend, "k", { kind: "host", path: join(work, "x", "y", "z") });
  assert.equal(readFileSync(join(work, "x", "y", "z", "new.txt"), "utf8"), "new\n");
  // A file is not replaced by a directory.
  writeFileSync(join(work, "file"), "keep");
  await assert.rejects(
    restoreCache(backend, "k", { kind: "host", path: join(work, "file") }),
    /exists and is not a directory/,
  );
  assert.equal(readFileSync(join(work, "file"), "utf8"), "keep");
});

/** Puts an entry with a given creation time (and a tiny gzip archive of one file). */
async function putAt(
  backend: DiskBackend,
  work: string,
  key: string,
  created: string,
): Promise<void> {
  const src = join(work, `src-${key.replace(/\W/g, "_")}`);
  mkdirSync(src);
  writeFileSync(join(src, "which"), key);
  const saved = await saveCache(backend, key, { kind: "host", path: src }, { format: "gzip" });
  assert.ok(saved.saved);
  // Rewrite the recorded creation time, and give the files the opposite order of mtimes.
  const entries = join(backend.root, "entries");
  for (const d of readdirSync(entries)) {
    const metaPath = join(entries, d, "meta.json");
    const meta = JSON.parse(readFileSync(metaPath, "utf8")) as EntryMeta;
    if (meta.key !== key) continue;
    meta.created = created;
    writeFileSync(metaPath, JSON.stringify(meta));
    const t = (2_000_000_000_000 - Date.parse(created)) / 1000;
    utimesSync(metaPath, t, t);
    utimesSync(join(entries, d, "archive"), t, t);
  }
}

test("lookup: exact, newest by recorded creation time for a prefix, restore keys in order, miss", async (t) => {
  const work = tempDir(t);
  const backend = new DiskBackend(join(work, "cache"), false);
  await putAt(backend, work, "npm-linux-aaa", "2024-01-01T00:00:00.000Z");
  await putAt(backend, work, "npm-linux-bbb", "2024-03-01T00:00:00.000Z");
  await putAt(backend, work, "npm-linux-ccc", "2024-02-01T00:00:00.000Z");
  await putAt(backend, work, "npm-mac-zzz", "2024-06-01T00:00:00.000Z");
  await putAt(backend, work, "other", "2025-01-01T00:00:00.000Z");

  const got = async (key: string, rk: string[] = []) => {
    const l = await lookup(backend, key, rk);
    return [l.hit, l.entry?.key, l.matchedPrefix];
  };
  assert.deepEqual(await got("npm-linux-aaa"), ["exact", "npm-linux-aaa", undefined]);
  assert.deepEqual(await got("npm-linux-"), ["prefix", "npm-linux-bbb", "npm-linux-"]);
  assert.deepEqual(await got("npm-"), ["prefix", "npm-mac-zzz", "npm-"]);
  assert.deepEqual(await got("npm-linux-ddd", ["npm-mac-", "npm-"]), [
    "prefix",
    "npm-mac-zzz",
    "npm-mac-",
  ]);
  assert.deepEqual(await got("npm-linux-ddd", ["npm-win-", "npm-linux-"]), [
    "prefix",
    "npm-linux-bbb",
    "npm-linux-",
  ]);
  assert.deepEqual(await got("pip-", ["cargo-"]), ["miss", undefined, undefined]);

  // Restore goes through the same lookup, and says which entry it took.
  const r = await restoreCache(
    backend,
    "npm-linux-ddd",
    { kind: "host", path: join(work, "out") },
    {
      restoreKeys: ["npm-linux-"],
    },
  );
  assert.equal(r.hit, "prefix");
  assert.equal(readFileSync(join(work, "out", "which"), "utf8"), "npm-linux-bbb");
  const miss = await restoreCache(backend, "nothing", { kind: "host", path: join(work, "out") });
  assert.equal(miss.hit, "miss");
  assert.equal(readFileSync(join(work, "out", "which"), "utf8"), "npm-linux-bbb");

  // Equal times: the greater key, whatever order the list comes in.
  const a = { key: "k-a", created: "2024-01-01T00:00:00.000Z" } as EntryMeta;
  const b = { key: "k-b", created: "2024-01-01T00:00:00.000Z" } as EntryMeta;
  assert.equal(newest([a, b])?.key, "k-b");
  assert.equal(newest([b, a])?.key, "k-b");
});

test("an existing key is never replaced without force; read-only backends refuse writes", async (t) => {
  const work = tempDir(t);
  const src = join(work, "src");
  mkdirSync(src);
  writeFileSync(join(src, "v"), "one");
  const backend = new DiskBackend(join(work, "cache"), false);
  const first = await saveCache(backend, "k", { kind: "host", path: src }, { format: "gzip" });
  assert.ok(first.saved);
  writeFileSync(join(src, "v"), "two");
  const second = await saveCache(backend, "k", { kind: "host", path: src }, { format: "gzip" });
  assert.equal(second.saved, false);
  // A direct put is refused too (the check at the rename, not only the one before packing).
  await assert.rejects(
    backend.put(
      { key: "k", format: "none", created: new Date().toISOString(), cvisorVersion: "x" },
      Readable.from([Buffer.from("x")]),
      {
        force: false,
      },
    ),
    /already exists/,
  );
  await restoreCache(backend, "k", { kind: "host", path: join(work, "o") });
  assert.equal(readFileSync(join(work, "o", "v"), "utf8"), "one");
  const forced = await saveCache(
    backend,
    "k",
    { kind: "host", path: src },
    { format: "gzip", force: true },
  );
  assert.ok(forced.saved);
  await restoreCache(backend, "k", { kind: "host", path: join(work, "o") });
  assert.equal(readFileSync(join(work, "o", "v"), "utf8"), "two");
  assert.equal((await backend.list("")).length, 1);
  assert.deepEqual(readdirSync(join(work, "cache", "tmp")), []);
  assert.deepEqual(readdirSync(join(work, "cache", "trash")), []);

  const ro = new DiskBackend(join(work, "cache"), true);
  await assert.rejects(
    saveCache(ro, "k2", { kind: "host", path: src }, { format: "gzip" }),
    /read-only/,
  );
  await assert.rejects(ro.remove("k"), /read-only/);
  assert.equal((await ro.list("")).length, 1);
  await restoreCache(ro, "k", { kind: "host", path: join(work, "o3") });
  assert.equal(readFileSync(join(work, "o3", "v"), "utf8"), "two");
});

test("backend specs: disk, disk:/PATH, $CVISOR_CACHE_BACKEND, CVISOR_CACHE_DIR, bad ones named with their source", async () => {
  assert.deepEqual(backendSpec(undefined, {}), { spec: "disk", source: "default" });
  assert.deepEqual(backendSpec(undefined, { CVISOR_CACHE_BACKEND: "disk:/x" }), {
    spec: "disk:/x",
    source: "CVISOR_CACHE_BACKEND",
  });
  assert.deepEqual(backendSpec("disk", { CVISOR_CACHE_BACKEND: "disk:/x" }).spec, "disk");
  assert.equal(cacheDir({ CVISOR_HOME: "/h" }), "/h/cache");
  assert.equal(cacheDir({ CVISOR_HOME: "/h", CVISOR_CACHE_DIR: "/c" }), "/c");
  const d = await openBackend(
    { spec: "disk", source: "default" },
    { readOnly: false },
    { CVISOR_HOME: "/h" },
  );
  assert.equal(d.description, "disk:/h/cache");
  const p = await openBackend(
    { spec: "disk:/some/where", source: "--cache-backend" },
    { readOnly: true },
  );
  assert.equal(p.description, "disk:/some/where");
  assert.equal(p.readOnly, true);
  await assert.rejects(
    openBackend({ spec: "ftp://x", source: "CVISOR_CACHE_BACKEND" }, { readOnly: false }),
    (err: unknown) =>
      err instanceof CvisorError &&
      /invalid cache backend "ftp:\/\/x" \(from CVISOR_CACHE_BACKEND\)/.test(err.message),
  );
  await assert.rejects(
    openBackend({ spec: "s3://", source: "--cache-backend" }, { readOnly: false }),
    /\(from --cache-backend\): s3:\/\/ needs a bucket/,
  );
});

test("the CLI bundle (cvisor -- CMD) holds none of the cache code, zstd-napi or the AWS SDK", () => {
  const bundle = readFileSync(join(repoRoot, "dist", "cli.cjs"), "utf8");
  for (const word of ["zstd-napi", "@aws-sdk", "estargz", "tar-stream"]) {
    assert.ok(!bundle.includes(word), `${word} is in dist/cli.cjs`);
  }
});

// The same round trips through the S3 backend, against a real S3-compatible server on loopback.
for (const format of FORMATS) {
  test(`round trip on S3 (loopback server), ${format}: the same tree`, async (t) => {
    const { dir, expected } = sharedTree(t);
    const server = await startS3Server();
    t.after(() => server.stop());
    // The SDK reads process.env: set for this test only.
    const env = s3ClientEnv(server);
    const before = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, env);
    t.after(() => {
      for (const [k, v] of Object.entries(before)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    });
    const backend = await openS3Backend(`s3://${server.bucket}/rt`, { readOnly: false });
    const src = { kind: "host" as const, path: join(dir, "src") };
    const saved = await saveCache(backend, `deps-${format}`, src, { format });
    assert.equal(saved.saved, true);
    const out = join(tempDir(t), "out");
    const r = await restoreCache(
      backend,
      `deps-${format}`,
      { kind: "host", path: out },
      { allowExternalLinks: true },
    );
    assert.equal(r.hit, "exact");
    assert.deepEqual(describeTree(out), expected);
  });
}

test("a FIFO is left out of the archive with a warning, as cp leaves it out", async (t) => {
  const dir = join(tempDir(t), "src");
  mkdirSync(dir);
  writeFileSync(join(dir, "a.txt"), "a\n");
  const fifo = join(dir, "pipe");
  assert.equal(spawnSync("mkfifo", [fifo]).status, 0);
  const tar = tarPack();
  const names: string[] = [];
  const done = new Promise<void>((resolve, reject) => {
    const x = tarExtract();
    x.on("entry", (h, body, next) => {
      names.push(h.name);
      body.resume();
      body.on("end", next);
    });
    x.on("finish", resolve);
    x.on("error", reject);
    tar.pipe(x);
  });
  const report = await packTree<string, HostEntry>(new HostSource(), dir, statSync(dir), tar, {});
  await done;
  assert.deepEqual(names.sort(), ["./", "a.txt"]);
  assert.deepEqual(report.skipped, [{ path: fifo, reason: "a FIFO (named pipe): not cached" }]);
});

test("a file that shrinks while being packed is told once and padded with zeros", async (t) => {
  const dir = join(tempDir(t), "src");
  mkdirSync(dir);
  const file = join(dir, "big.bin");
  const data = Buffer.alloc(4 * MB, 7);
  writeFileSync(file, data);
  const tar = tarPack();
  const got = new Promise<Buffer>((resolve, reject) => {
    const x = tarExtract();
    x.on("entry", (h, body, next) => {
      const parts: Buffer[] = [];
      body.on("data", (b: unknown) => parts.push(b as Buffer));
      body.on("end", () => {
        if (h.name === "big.bin") resolve(Buffer.concat(parts));
        next();
      });
    });
    x.on("error", reject);
    tar.pipe(x);
  });
  let cut = false;
  const report = await packTree<string, HostEntry>(new HostSource(), dir, statSync(dir), tar, {
    // Called after each 1 MiB chunk of a large file: the file loses all but its first MiB.
    onProgress: () => {
      if (!cut && existsSync(file)) {
        truncateSync(file, MB);
        cut = true;
      }
    },
  });
  assert.ok(cut);
  assert.deepEqual(report.skipped, [
    { path: file, reason: "it shrank while being read: cached with zeros at its end" },
  ]);
  const body = await got;
  assert.equal(body.length, 4 * MB);
  assert.ok(body.subarray(0, MB).equals(data.subarray(0, MB)));
  assert.ok(body.subarray(MB).equals(Buffer.alloc(3 * MB)));
});
