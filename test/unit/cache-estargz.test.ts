// `--format estargz` read back by a reader written here from the spec (containerd/stargz-
// snapshotter docs/estargz.md), independent of cache/format/estargz.ts: the 51-byte footer, the
// TOC member it points at (a tar entry stargz.index.json, then the tar end blocks), every TOC
// entry's offset starting a gzip member whose bytes hash to its chunkDigest (and the chunks of a
// file to its digest, and to the file itself), the landmark first, and the blob as one plain
// tar.gz that `tar -tz` lists. When Go and Debian's estargz package are installed
// (golang-github-containerd-stargz-snapshotter-dev), the reference reader checks it too.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { gunzipSync } from "node:zlib";
import { DiskBackend } from "../../cache/backends/disk.js";
import { saveCache } from "../../cache/save.js";
import { bigFile } from "../helpers/cache-tree.js";
import { tempRoot } from "../helpers/repo.js";

interface Entry {
  name: string;
  type: string;
  size?: number;
  offset?: number;
  chunkOffset?: number;
  chunkSize?: number;
  digest?: string;
  chunkDigest?: string;
  linkName?: string;
  mode?: number;
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tempRoot(), "cvisor-unit-estargz-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function sha(b: Buffer): string {
  return `sha256:${createHash("sha256").update(b).digest("hex")}`;
}

/** The footer: an empty gzip member whose extra field "SG" holds the TOC offset. */
function parseFooter(blob: Buffer): number {
  const f = blob.subarray(blob.length - 51);
  assert.deepEqual([...f.subarray(0, 4)], [0x1f, 0x8b, 0x08, 0x04], "gzip header with FEXTRA");
  assert.equal(f.readUInt16LE(10), 26, "XLEN");
  assert.equal(f.toString("latin1", 12, 14), "SG");
  assert.equal(f.readUInt16LE(14), 22);
  const payload = f.toString("latin1", 16, 38);
  assert.match(payload, /^[0-9a-f]{16}STARGZ$/);
  assert.equal(gunzipSync(f).length, 0, "the footer is an empty gzip member");
  return parseInt(payload.slice(0, 16), 16);
}

/** A tar header's name, size and type flag (ustar; no pax in the TOC member). */
function tarHeader(block: Buffer): { name: string; size: number; flag: string } {
  const name = block.toString("utf8", 0, 100).replace(/\0.*$/s, "");
  const size = parseInt(block.toString("latin1", 124, 136).replace(/\0.*$/s, "").trim() || "0", 8);
  return { name, size, flag: String.fromCharCode(block[156] as number) };
}

test("eStargz: footer, TOC, every chunk's digest and offset, landmark, plain tar.gz", async (t) => {
  const work = tempDir(t);
  const src = join(work, "src");
  const long = `${"d".repeat(60)}/${"e".repeat(60)}/${"f".repeat(70)}.txt`; // needs pax
  mkdirSync(join(src, "sub", "empty"), { recursive: true });
  mkdirSync(join(src, long.split("/").slice(0, 2).join("/")), { recursive: true });
  writeFileSync(join(src, "small.txt"), "small\n");
  writeFileSync(join(src, "zero"), "");
  writeFileSync(join(src, long), "long name\n");
  writeFileSync(join(src, "sub", "naïve ünïcode"), "utf-8 name\n");
  bigFile(join(src, "sub", "big.bin"), 9 * (1 << 20) + 123); // three 4 MiB chunks
  symlinkSync("small.txt", join(src, "link"));
  spawnSync("ln", [join(src, "small.txt"), join(src, "hard")]);

  const backend = new DiskBackend(join(work, "cache"), false);
  const saved = await saveCache(backend, "e", { kind: "host", path: src }, { format: "estargz" });
  assert.ok(saved.saved);
  const entries = join(work, "cache", "entries");
  const blob = readFileSync(join(entries, readdirSync(entries)[0] ?? "", "archive"));

  // The footer and the TOC member.
  const tocOffset = parseFooter(blob);
  assert.ok(tocOffset > 0 && tocOffset < blob.length - 51);
  const tocTar = gunzipSync(blob.subarray(tocOffset, blob.length - 51));
  const h = tarHeader(tocTar.subarray(0, 512));
  assert.equal(h.name, "stargz.index.json");
  assert.equal(h.flag, "0");
  const json = tocTar.subarray(512, 512 + h.size);
  const after = 512 + Math.ceil(h.size / 512) * 512;
  assert.equal(tocTar.length, after + 1024, "the TOC member ends with the tar end blocks");
  assert.ok(tocTar.subarray(after).every((b) => b === 0));
  assert.equal(saved.meta.extra?.tocDigest, sha(json), "the TOC digest is in the metadata");
  const toc = JSON.parse(json.toString("utf8")) as { version: number; entries: Entry[] };
  assert.equal(toc.version, 1);

  // The landmark first, every tree entry present, nothing of the TOC itself.
  assert.equal(toc.entries[0]?.name, ".no.prefetch.landmark");
  assert.equal(toc.entries[0]?.size, 1);
  const names = toc.entries.filter((e) => e.type !== "chunk").map((e) => e.name);
  for (const n of [
    "./",
    "small.txt",
    "zero",
    long,
    "sub/",
    "sub/empty/",
    "sub/naïve ünïcode",
    "sub/big.bin",
    "link",
    "hard",
  ]) {
    assert.ok(names.includes(n), `${n} in the TOC: ${names.join(", ")}`);
  }
  assert.ok(!names.includes("stargz.index.json"));
  const byName = new Map(toc.entries.filter((e) => e.type !== "chunk").map((e) => [e.name, e]));
  assert.equal(byName.get("link")?.type, "symlink");
  assert.equal(byName.get("link")?.linkName, "small.txt");
  // Names go in sorted order: "hard" is the file, "small.txt" its second name.
  assert.equal(byName.get("small.txt")?.type, "hardlink");
  assert.equal(byName.get("small.txt")?.linkName, "hard");
  assert.equal(byName.get("zero")?.offset, undefined, "an empty file has no payload member");

  // Every payload piece: a gzip member starts at its offset, holding its bytes first.
  const offsets = [...new Set(toc.entries.flatMap((e) => (e.offset ? [e.offset] : [])))].sort(
    (a, b) => a - b,
  );
  const nextOffset = (o: number) => offsets.find((x) => x > o) ?? tocOffset;
  const files = new Map<string, Buffer[]>();
  let current = "";
  for (const e of toc.entries) {
    if (e.type === "reg") current = e.name;
    if (e.type !== "reg" && e.type !== "chunk") continue;
    if (e.type === "chunk") assert.equal(e.name, current, "chunks follow their file");
    const reg = byName.get(e.name) as Entry;
    if (!reg.size) continue;
    assert.ok(e.offset !== undefined, `${e.name} has an offset`);
    const offset = e.offset;
    assert.deepEqual(
      [...blob.subarray(offset, offset + 2)],
      [0x1f, 0x8b],
      `a gzip member at ${offset}`,
    );
    const start = e.chunkOffset ?? 0;
    const len = e.chunkSize || reg.size - start; // 0: to the end of the file
    const data = gunzipSync(blob.subarray(offset, nextOffset(offset))).subarray(0, len);
    assert.equal(data.length, len);
    assert.equal(e.chunkDigest, sha(data), `chunkDigest of ${e.name} at ${start}`);
    files.set(e.name, [...(files.get(e.name) ?? []), data]);
  }
  const big = byName.get("sub/big.bin") as Entry;
  assert.equal(toc.entries.filter((e) => e.name === "sub/big.bin").length, 3, "three chunks");
  assert.equal(big.chunkSize, 4 << 20);
  for (const [name, parts] of files) {
    const whole = Buffer.concat(parts);
    assert.equal(byName.get(name)?.digest, sha(whole), `digest of ${name}`);
    if (name !== ".no.prefetch.landmark")
      assert.ok(whole.equals(readFileSync(join(src, name))), name);
  }
  assert.deepEqual(files.get(".no.prefetch.landmark"), [Buffer.from([0x0f])]);

  // Still one plain tar.gz.
  const archive = join(work, "blob.tar.gz");
  writeFileSync(archive, blob);
  const listed = spawnSync("tar", ["-tzf", archive], { encoding: "utf8" });
  assert.equal(listed.status, 0, listed.stderr);
  const tarNames = listed.stdout.split("\n").filter((l) => l !== "");
  assert.equal(tarNames[0], ".no.prefetch.landmark");
  assert.equal(tarNames[tarNames.length - 1], "stargz.index.json");
  for (const n of ["small.txt", long, "sub/big.bin", "sub/naïve ünïcode"])
    assert.ok(tarNames.includes(n), n);

  // The reference reader (Go, estargz.Open + VerifyTOC + OpenFile), when installed.
  const oracle = goOracle(work);
  if (oracle === undefined) {
    t.diagnostic("Go or the estargz Go package is not installed: reference reader not run");
    return;
  }
  const r = spawnSync(
    oracle,
    [
      join(archive),
      String(saved.meta.extra?.tocDigest),
      "small.txt",
      long,
      "sub/big.bin",
      "link",
      "hard",
      "sub/empty",
    ],
    {
      encoding: "utf8",
    },
  );
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  assert.match(r.stdout, /^OK /);
});

const GO_PKG = "/usr/share/gocode/src/github.com/containerd/stargz-snapshotter/estargz";
const GO_MAIN = `package main

import (
	"fmt"
	"io"
	"os"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
)

func main() {
	f, err := os.Open(os.Args[1])
	if err != nil { fmt.Println(err); os.Exit(1) }
	st, _ := f.Stat()
	r, err := estargz.Open(io.NewSectionReader(f, 0, st.Size()))
	if err != nil { fmt.Println("open:", err); os.Exit(1) }
	d, err := digest.Parse(os.Args[2])
	if err != nil { fmt.Println(err); os.Exit(1) }
	if _, err := r.VerifyTOC(d); err != nil { fmt.Println("verify:", err); os.Exit(1) }
	n := 0
	for _, name := range os.Args[3:] {
		e, ok := r.Lookup(name)
		if !ok { fmt.Println("lookup:", name); os.Exit(1) }
		if e.Type == "reg" {
			fr, err := r.OpenFile(name)
			if err != nil { fmt.Println("openfile:", err); os.Exit(1) }
			b := make([]byte, e.Size)
			if _, err := fr.ReadAt(b, 0); err != nil && err != io.EOF { fmt.Println("read:", err); os.Exit(1) }
			n += len(b)
		}
	}
	fmt.Println("OK", n)
}
`;

/** Builds the Go reference reader; undefined when Go or the package is missing. */
function goOracle(work: string): string | undefined {
  if (!existsSync(GO_PKG)) return undefined;
  const dir = join(work, "oracle");
  mkdirSync(dir);
  writeFileSync(join(dir, "main.go"), GO_MAIN);
  const r = spawnSync("go", ["build", "-o", "oracle", "main.go"], {
    cwd: dir,
    encoding: "utf8",
    env: {
      ...process.env,
      GOPATH: "/usr/share/gocode",
      GO111MODULE: "off",
      GOCACHE: join(work, "gocache"),
      GOFLAGS: "",
    },
  });
  if (r.error) return undefined;
  assert.equal(r.status, 0, `go build: ${r.stderr}`);
  return join(dir, "oracle");
}
