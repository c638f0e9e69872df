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

/** A tar header's name (with the ustar prefix), size and type flag (pax is the caller's). */
function tarHeader(block: Buffer): { name: string; size: number; flag: string } {
  const base = block.toString("utf8", 0, 100).replace(/\0.*$/s, "");
  const prefix = block.toString("utf8", 345, 500).replace(/\0.*$/s, "");
  const name = prefix ? `${prefix}/${base}` : base;
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

  // Each TOC entry's name is its tar header's name, as written (the reference writer's
  // Name: h.Name; directories end in "/"), in the same order.
  const stream = gunzipSync(blob.subarray(0, tocOffset));
  const headerNames: string[] = [];
  let longName: string | undefined;
  for (let at = 0; at + 512 <= stream.length;) {
    const hd = tarHeader(stream.subarray(at, at + 512));
    if (hd.name === "") break;
    const body = stream.subarray(at + 512, at + 512 + hd.size);
    at += 512 + Math.ceil(hd.size / 512) * 512;
    if (hd.flag === "x") {
      longName = /\d+ path=([^\n]*)\n/.exec(body.toString("utf8"))?.[1];
      continue;
    }
    headerNames.push(longName ?? hd.name);
    longName = undefined;
  }
  assert.deepEqual(
    toc.entries.filter((e) => e.type !== "chunk").map((e) => e.name),
    headerNames,
  );
  assert.equal(headerNames[1], "./", "the root, as tar writes it");
  assert.ok(headerNames.includes("sub/empty/"), "a directory ends in /");

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

  // The reference reader (Go, containerd's estargz package). CI provides it (.ci/run).
  const oracle = goOracle(work);
  if (oracle === undefined) {
    assert.ok(!process.env.CI, `CI runs the reference reader: Go or ${GO_PKG} is missing`);
    t.diagnostic("Go or the estargz Go package is not installed: reference reader not run");
    return;
  }
  const r = spawnSync(oracle, [archive, String(saved.meta.extra?.tocDigest)], { encoding: "utf8" });
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  assert.match(r.stdout, /^OK \d+ \d+\n$/);
});

/** Where Go finds the estargz package: .ci/run fetches Debian's into $CVISOR_GOPATH. */
const GOPATH = process.env.CVISOR_GOPATH ?? "/usr/share/gocode";
const GO_PKG = join(GOPATH, "src/github.com/containerd/stargz-snapshotter/estargz");
// The reference reader: open and verify the TOC, then walk the whole tar stream: every header
// is in the TOC under its own name and in order (the reference writer names each entry by its
// header), and every regular file reads back through the TOC as the stream has it.
const GO_MAIN = `package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
)

func fail(format string, a ...interface{}) { fmt.Printf(format+"\\n", a...); os.Exit(1) }

func main() {
	f, err := os.Open(os.Args[1])
	if err != nil { fail("%v", err) }
	st, _ := f.Stat()
	sr := io.NewSectionReader(f, 0, st.Size())
	r, err := estargz.Open(sr)
	if err != nil { fail("open: %v", err) }
	d, err := digest.Parse(os.Args[2])
	if err != nil { fail("%v", err) }
	if _, err := r.VerifyTOC(d); err != nil { fail("verify: %v", err) }
	// The TOC as stored (Open cleans the names): the tar entry of the member the footer names.
	var toc struct{ Entries []struct{ Name, Type string } }
	tocOffset, _, err := estargz.OpenFooter(sr)
	if err != nil { fail("footer: %v", err) }
	zr, err := gzip.NewReader(io.NewSectionReader(sr, tocOffset, st.Size()-tocOffset))
	if err != nil { fail("toc member: %v", err) }
	ttr := tar.NewReader(zr)
	if h, err := ttr.Next(); err != nil || h.Name != estargz.TOCTarName { fail("toc entry: %v", err) }
	if err := json.NewDecoder(ttr).Decode(&toc); err != nil { fail("toc: %v", err) }
	// The stream before it.
	rc, err := estargz.Unpack(sr, new(estargz.GzipDecompressor))
	if err != nil { fail("unpack: %v", err) }
	tr := tar.NewReader(rc)
	var names []string
	bytesRead := 0
	for {
		h, err := tr.Next()
		if err == io.EOF { break }
		if err != nil { fail("tar: %v", err) }
		names = append(names, h.Name)
		e, ok := r.Lookup(h.Name)
		if !ok { fail("lookup: %q", h.Name) }
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			want, _ := io.ReadAll(tr)
			fr, err := r.OpenFile(h.Name)
			if err != nil { fail("openfile %q: %v", h.Name, err) }
			got := make([]byte, e.Size)
			if _, err := fr.ReadAt(got, 0); err != nil && err != io.EOF { fail("read %q: %v", h.Name, err) }
			if !bytes.Equal(got, want) { fail("%q reads back other bytes than the stream has", h.Name) }
			bytesRead += len(got)
		}
	}
	var tocNames []string
	for _, e := range toc.Entries {
		if e.Type != "chunk" { tocNames = append(tocNames, e.Name) }
	}
	if len(tocNames) != len(names) { fail("the TOC has %d entries, the stream %d", len(tocNames), len(names)) }
	for i := range names {
		if names[i] != tocNames[i] { fail("TOC entry %d is %q, its tar header %q", i, tocNames[i], names[i]) }
	}
	fmt.Println("OK", len(names), bytesRead)
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
      GOPATH,
      GO111MODULE: "off",
      GOCACHE: join(work, "gocache"),
      GOFLAGS: "",
    },
  });
  if (r.error) return undefined;
  assert.equal(r.status, 0, `go build: ${r.stderr}`);
  return join(dir, "oracle");
}
