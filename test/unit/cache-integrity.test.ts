// Restores that must fail with one line and leave the destination exactly as it was: corrupt,
// truncated and mislabelled archives, and hostile ones built here with tar-stream (`../x`,
// `/abs`, a symlink to a directory outside then a file through it, hard links to outside).
// Nothing may appear outside the destination, and no temporary directory may be left.
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { test, type TestContext } from "node:test";
import { gzipSync } from "node:zlib";
import { pack as tarPack, type Header } from "tar-stream";
import type { CacheFormat, EntryMeta } from "../../cache/backend.js";
import { DiskBackend } from "../../cache/backends/disk.js";
import { cleanName } from "../../cache/format/unpack.js";
import { restoreCache } from "../../cache/restore.js";
import { saveCache } from "../../cache/save.js";
import { CvisorError } from "../../src/core/errors.js";
import { describeTree } from "../helpers/cache-tree.js";
import { tempRoot } from "../helpers/repo.js";
// The library entry: it tells the core binding where the package is (a restore swaps directories
// through the core's renameat2).
import "../../src/index.js";

interface Setup {
  work: string;
  backend: DiskBackend;
  dst: string;
  outside: string;
  before: string[];
}

function setup(t: TestContext): Setup {
  const work = mkdtempSync(join(tempRoot(), "cvisor-unit-cache-bad-"));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const dst = join(work, "parent", "dst");
  mkdirSync(join(dst, "keep"), { recursive: true });
  writeFileSync(join(dst, "keep", "file"), "precious\n");
  const outside = join(work, "outside");
  mkdirSync(outside);
  writeFileSync(join(outside, "secret"), "secret\n");
  return {
    work,
    backend: new DiskBackend(join(work, "cache"), false),
    dst,
    outside,
    before: describeTree(join(work, "parent")),
  };
}

type Item = { header: Partial<Header> & { name: string }; body?: string };

/** A tar of these entries, made by tar-stream. */
function tar(items: Item[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const p = tarPack();
    const parts: Buffer[] = [];
    p.on("data", (b: unknown) => parts.push(b as Buffer));
    p.on("end", () => resolve(Buffer.concat(parts)));
    p.on("error", reject);
    for (const it of items) {
      if (it.body !== undefined) p.entry(it.header, it.body);
      else p.entry(it.header);
    }
    p.finalize();
  });
}

async function put(
  s: Setup,
  key: string,
  bytes: Buffer,
  format: CacheFormat = "gzip",
): Promise<EntryMeta> {
  return s.backend.put(
    { key, format, created: new Date().toISOString(), cvisorVersion: "test" },
    Readable.from([bytes]),
    { force: false },
  );
}

/** The restore fails with a one-line CvisorError matching pattern; nothing changed. */
async function refused(
  s: Setup,
  key: string,
  pattern: RegExp,
  opts: { allowExternalLinks?: boolean } = {},
): Promise<void> {
  await assert.rejects(
    restoreCache(s.backend, key, { kind: "host", path: s.dst }, opts),
    (err: unknown) => {
      assert.ok(err instanceof CvisorError, String(err));
      assert.equal(err.message.split("\n").length, 1, err.message);
      assert.match(err.message, pattern);
      assert.match(err.message, /nothing was restored/);
      return true;
    },
  );
  assert.deepEqual(describeTree(join(s.work, "parent")), s.before, "the destination is untouched");
  assert.deepEqual(readdirSync(join(s.work, "parent")), ["dst"], "no temporary directory left");
  assert.deepEqual(readdirSync(s.outside), ["secret"], "nothing written outside");
  assert.equal(readFileSync(join(s.outside, "secret"), "utf8"), "secret\n");
  assert.ok(!existsSync(join(s.work, "x")));
  assert.ok(!existsSync("/abs-cvisor-cache-test"));
}

test("names: absolute, '..', NUL are refused; './' prefixes and slashes are cleaned", () => {
  assert.equal(cleanName("./a/b/"), "a/b");
  assert.equal(cleanName("./"), "");
  assert.equal(cleanName("a//./b"), "a/b");
  assert.deepEqual(cleanName("/etc/passwd"), { refused: 'absolute path "/etc/passwd"' });
  assert.ok(typeof cleanName("a/../../x") !== "string");
  assert.ok(typeof cleanName("..") !== "string");
  assert.ok(typeof cleanName("a\0b") !== "string");
});

test("hostile: ../x", async (t) => {
  const s = setup(t);
  await put(
    s,
    "k",
    gzipSync(
      await tar([
        { header: { name: "ok.txt" }, body: "fine" },
        { header: { name: "../../x" }, body: "escaped" },
      ]),
    ),
  );
  await refused(s, "k", /refused: path with '\.\.'/);
});

test("hostile: /abs", async (t) => {
  const s = setup(t);
  await put(
    s,
    "k",
    gzipSync(await tar([{ header: { name: "/abs-cvisor-cache-test" }, body: "abs" }])),
  );
  await refused(s, "k", /refused: absolute path/);
});

test("hostile: a symlink to a directory outside, then a file through it", async (t) => {
  const s = setup(t);
  const ext = { allowExternalLinks: true };
  await put(
    s,
    "k",
    gzipSync(
      await tar([
        { header: { name: "etc", type: "symlink", linkname: s.outside } },
        { header: { name: "etc/pwned" }, body: "owned" },
      ]),
    ),
  );
  // By default the link itself is refused; with external links allowed, the file through it is.
  await refused(s, "k", /the symlink "etc" -> .* leads outside the restored directory/);
  await refused(s, "k", /refused: "etc\/pwned" goes through the symlink etc/, ext);
  // The same with /etc itself, and through a relative link.
  await put(
    s,
    "k2",
    gzipSync(
      await tar([
        { header: { name: "etc", type: "symlink", linkname: "/etc" } },
        { header: { name: "etc/passwd" }, body: "root::0:0::/:/bin/sh\n" },
      ]),
    ),
  );
  await refused(s, "k2", /the symlink "etc" -> "\/etc" leads outside/);
  await refused(s, "k2", /goes through the symlink etc/, ext);
  await put(
    s,
    "k3",
    gzipSync(
      await tar([
        { header: { name: "d", type: "directory" } },
        { header: { name: "d/up", type: "symlink", linkname: "../../../outside" } },
        { header: { name: "d/up/secret" }, body: "replaced" },
      ]),
    ),
  );
  await refused(s, "k3", /the symlink "d\/up" -> "..\/..\/..\/outside" leads outside/);
  await refused(s, "k3", /goes through the symlink d\/up/, ext);
});

test("symlinks inside the tree restore by default; ../ up to the root is inside", async (t) => {
  const s = setup(t);
  await put(
    s,
    "k",
    gzipSync(
      await tar([
        { header: { name: "a/b", type: "directory" } },
        { header: { name: "a/b/up", type: "symlink", linkname: "../../top" } },
        { header: { name: "a/side", type: "symlink", linkname: "./b/../b" } },
        { header: { name: "top" }, body: "top" },
      ]),
    ),
  );
  await restoreCache(s.backend, "k", { kind: "host", path: s.dst });
  assert.equal(readFileSync(join(s.dst, "a", "b", "up"), "utf8"), "top");
});

test("hostile: hard links to outside the archive", async (t) => {
  const s = setup(t);
  await put(
    s,
    "k1",
    gzipSync(
      await tar([{ header: { name: "h", type: "link", linkname: "../../outside/secret" } }]),
    ),
  );
  await refused(s, "k1", /hard link "h" points outside/);
  await put(
    s,
    "k2",
    gzipSync(await tar([{ header: { name: "h", type: "link", linkname: "/etc/passwd" } }])),
  );
  await refused(s, "k2", /hard link "h" points outside/);
  // To a symlink of the archive that leads outside: not a file of the archive either.
  await put(
    s,
    "k3",
    gzipSync(
      await tar([
        { header: { name: "s", type: "symlink", linkname: join(s.outside, "secret") } },
        { header: { name: "h", type: "link", linkname: "s" } },
      ]),
    ),
  );
  await refused(s, "k3", /the symlink "s" -> .* leads outside/);
  await refused(s, "k3", /hard link "h" points outside/, { allowExternalLinks: true });
});

test("hostile: a directory over a file, a file over a directory", async (t) => {
  const s = setup(t);
  await put(
    s,
    "k",
    gzipSync(
      await tar([
        { header: { name: "a", type: "directory" } },
        { header: { name: "a" }, body: "x" },
      ]),
    ),
  );
  await refused(s, "k", /replaces a dir with a file/);
});

/** A real entry of a small tree, and its archive's path on disk. */
async function realEntry(s: Setup, key: string, format: CacheFormat): Promise<string> {
  const src = join(s.work, `src-${key}`);
  mkdirSync(join(src, "d"), { recursive: true });
  writeFileSync(join(src, "d", "f"), Buffer.alloc(300_000, "abcdefghij"));
  writeFileSync(join(src, "g"), "g\n");
  const saved = await saveCache(s.backend, key, { kind: "host", path: src }, { format });
  assert.ok(saved.saved);
  const entries = join(s.work, "cache", "entries");
  for (const d of readdirSync(entries)) {
    const meta = JSON.parse(readFileSync(join(entries, d, "meta.json"), "utf8")) as EntryMeta;
    if (meta.key === key) return join(entries, d);
  }
  throw new Error("no entry");
}

function rewriteMeta(dir: string, change: (m: EntryMeta) => void): void {
  const meta = JSON.parse(readFileSync(join(dir, "meta.json"), "utf8")) as EntryMeta;
  change(meta);
  writeFileSync(join(dir, "meta.json"), JSON.stringify(meta));
}

for (const format of ["gzip", "zstd", "estargz", "none"] as const) {
  test(`corrupt and truncated archives are refused (${format})`, async (t) => {
    const s = setup(t);
    // One byte flipped in the middle: the sha256 (or the decoder) catches it.
    const flipped = await realEntry(s, "flip", format);
    const bytes = readFileSync(join(flipped, "archive"));
    const mid = Math.floor(bytes.length / 2);
    bytes[mid] = (bytes[mid] ?? 0) ^ 0x55;
    writeFileSync(join(flipped, "archive"), bytes);
    await refused(s, "flip", /is corrupt or truncated/);
    // Truncated, metadata as it was.
    const cut = await realEntry(s, "cut", format);
    truncateSync(join(cut, "archive"), Math.floor(readFileSync(join(cut, "archive")).length / 2));
    await refused(s, "cut", /is corrupt or truncated/);
    // Truncated with metadata that matches the truncated bytes: the decoder or tar catches it.
    const cut2 = await realEntry(s, "cut2", format);
    const whole = readFileSync(join(cut2, "archive"));
    const half = whole.subarray(0, Math.floor(whole.length / 2));
    writeFileSync(join(cut2, "archive"), half);
    const { createHash } = await import("node:crypto");
    rewriteMeta(cut2, (m) => {
      m.size = half.length;
      m.sha256 = createHash("sha256").update(half).digest("hex");
    });
    await refused(s, "cut2", /is (corrupt or truncated|not valid eStargz)/);
  });
}

test("an archive of another format than its metadata says is refused", async (t) => {
  const s = setup(t);
  const dir = await realEntry(s, "k", "gzip");
  rewriteMeta(dir, (m) => (m.format = "zstd"));
  await refused(s, "k", /corrupt or truncated \(it is not a zstd archive\)/);
  await put(s, "noise", gzipSync(Buffer.alloc(5000, 0x41)));
  await refused(s, "noise", /corrupt or truncated/);
  // gzip without the eStargz TOC, labelled estargz.
  const plain = await realEntry(s, "plain", "gzip");
  rewriteMeta(plain, (m) => (m.format = "estargz"));
  await refused(s, "plain", /not valid eStargz \(it has no stargz.index.json\)/);
});
