// `--format estargz`: eStargz (containerd/stargz-snapshotter docs/estargz.md), a tar.gz that
// stargz tooling can read lazily, written the way its Go writer (estargz.Writer) writes it:
//  - the blob is a series of gzip members, so it is also one plain tar.gz;
//  - a new member starts at the payload of every non-empty regular file, and again every 4 MiB
//    of it (chunks); tar headers and padding go into whatever member is open;
//  - `.no.prefetch.landmark` (one byte, 0x0f) is the first entry (./pack.ts writes it);
//  - the last data member is closed without the tar end-of-archive blocks; then one member holds
//    the tar entry `stargz.index.json` (the TOC: every entry and chunk with its offset and sha256
//    digests) and the end-of-archive blocks;
//  - then the 51-byte footer: an empty gzip member whose extra field holds the TOC member's
//    offset as 16 hex digits and "STARGZ".
// The encoder takes the tar stream that tar-stream's pack makes and splits it at tar-format
// boundaries (a small parser of our own output); what each entry is comes from the pack side
// (announce(), in the same order), so the TOC says exactly what the headers say.
// Restore reads the blob as a plain tar.gz (zlib reads concatenated members), skips the landmark
// and TOC entries, and checks each file against the TOC's digest (./unpack.ts, ../restore.ts).
import { createHash, type Hash } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { createGunzip, gzipSync } from "node:zlib";
import { pack as tarPack } from "tar-stream";
import type { Codec } from "./codec.js";

export const TOC_NAME = "stargz.index.json";
export const NO_PREFETCH_LANDMARK = ".no.prefetch.landmark";
const PREFETCH_LANDMARK = ".prefetch.landmark";
/** The landmark file's one byte. */
export const LANDMARK_CONTENT = Buffer.from([0x0f]);
/** The entries restore leaves out (they are the format's, not the tree's). */
export const ESTARGZ_META_NAMES: ReadonlySet<string> = new Set([
  TOC_NAME,
  NO_PREFETCH_LANDMARK,
  PREFETCH_LANDMARK,
]);
const CHUNK_SIZE = 4 << 20;
const FOOTER_SIZE = 51;
/** A member is closed early once it holds this much (headers of many empty entries). */
const MAX_MEMBER = 4 << 20;
const LEVEL = 6;

/** What the pack side says about each tar entry, in order. */
export interface AnnouncedEntry {
  name: string;
  type: "file" | "directory" | "symlink" | "link";
  mode: number;
  uid: number;
  gid: number;
  mtime: Date;
  size: number;
  linkname?: string;
}

/** A TOC entry, with the JSON field names of estargz's Go TOCEntry. */
export interface TocEntry {
  name: string;
  type: "dir" | "reg" | "symlink" | "hardlink" | "chunk";
  size?: number;
  modtime?: string;
  linkName?: string;
  mode?: number;
  uid?: number;
  gid?: number;
  offset?: number;
  chunkOffset?: number;
  chunkSize?: number;
  digest?: string;
  chunkDigest?: string;
}

export interface Toc {
  version: number;
  entries: TocEntry[];
}

/** The footer that points at the TOC member (estargz gzip.go, gzipFooterBytes). */
function footerBytes(tocOffset: number): Buffer {
  const buf = Buffer.alloc(FOOTER_SIZE);
  Buffer.from([0x1f, 0x8b, 0x08, 0x04, 0, 0, 0, 0, 0, 0xff]).copy(buf, 0);
  buf.writeUInt16LE(26, 10); // XLEN
  buf.write("SG", 12, "latin1");
  buf.writeUInt16LE(22, 14);
  buf.write(`${tocOffset.toString(16).padStart(16, "0")}STARGZ`, 16, "latin1");
  Buffer.from([0x01, 0x00, 0x00, 0xff, 0xff]).copy(buf, 38); // an empty stored block
  return buf; // CRC32 and ISIZE: 8 zero bytes
}

/** RFC 3339 in UTC to the second, "" for the zero time (estargz formatModtime). */
function modtime(d: Date): string | undefined {
  const s = Math.floor(d.getTime() / 1000);
  if (s <= 0) return undefined;
  return new Date(s * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function octal(block: Buffer, off: number, len: number): number {
  if ((block[off] as number) & 0x80) {
    // base-256 (sizes past 8 GiB)
    let v = 0;
    for (let i = off + 1; i < off + len; i++) v = v * 256 + (block[i] as number);
    return v;
  }
  const text = block
    .toString("latin1", off, off + len)
    .replace(/\0.*$/, "")
    .trim();
  return text === "" ? 0 : parseInt(text, 8);
}

type State = "header" | "meta" | "payload" | "pad" | "eof";

/** Writes eStargz from a tar stream (see the top of this file). */
export class EstargzWriter extends Transform {
  private readonly announced: AnnouncedEntry[] = [];
  private readonly entries: TocEntry[] = [];
  private member: Buffer[] = [];
  private memberLen = 0;
  /** Bytes of the blob written so far (compressed). */
  private offset = 0;
  /** Bytes of tar written (uncompressed), the TOC member's included at the end. */
  uncompressedSize = 0;
  tocDigest = "";

  private state: State = "header";
  private readonly block = Buffer.alloc(512);
  private blockFill = 0;
  private skip = 0; // bytes left in "meta" or "pad"
  private payloadLeft = 0;
  private chunkLeft = 0;
  private current: TocEntry | undefined;
  private fileEntry: TocEntry | undefined;
  private fileHash: Hash | undefined;
  private chunkHash: Hash | undefined;
  private fileSize = 0;

  constructor() {
    super({ highWaterMark: 1 << 20 });
  }

  /** The next tar entry pack will write (called before pack.entry()). */
  announce(entry: AnnouncedEntry): void {
    this.announced.push(entry);
  }

  private add(buf: Buffer): void {
    if (buf.length === 0) return;
    this.member.push(buf);
    this.memberLen += buf.length;
    this.uncompressedSize += buf.length;
  }

  private closeMember(): void {
    if (this.memberLen === 0) return;
    const out = gzipSync(
      this.member.length === 1 ? (this.member[0] as Buffer) : Buffer.concat(this.member),
      { level: LEVEL },
    );
    this.member = [];
    this.memberLen = 0;
    this.offset += out.length;
    this.push(out);
  }

  /** A tar header block of a real entry (not a pax or GNU long-name one) is complete. */
  private startEntry(): void {
    const a = this.announced.shift();
    if (a === undefined) throw new Error("estargz: a tar entry nobody announced");
    const size = octal(this.block, 124, 12);
    const type = { file: "reg", directory: "dir", symlink: "symlink", link: "hardlink" }[
      a.type
    ] as TocEntry["type"];
    const e: TocEntry = { name: a.name, type }; // the header's name, as the reference writer does
    if (type === "reg" && size > 0) e.size = size;
    const mt = modtime(a.mtime);
    if (mt !== undefined) e.modtime = mt;
    if (a.linkname !== undefined) e.linkName = a.linkname;
    e.mode = a.mode & 0o7777;
    if (a.uid !== 0) e.uid = a.uid;
    if (a.gid !== 0) e.gid = a.gid;
    this.entries.push(e);
    if (type === "reg" && size > 0) {
      this.state = "payload";
      this.payloadLeft = size;
      this.fileSize = size;
      this.fileEntry = e;
      this.current = e;
      this.fileHash = createHash("sha256");
      this.startChunk(0);
    } else {
      this.state = "header";
    }
  }

  private startChunk(chunkOffset: number): void {
    this.closeMember();
    const e = this.current as TocEntry;
    e.offset = this.offset;
    if (chunkOffset > 0) e.chunkOffset = chunkOffset;
    const size = Math.min(CHUNK_SIZE, this.fileSize - chunkOffset);
    if (chunkOffset + size < this.fileSize) e.chunkSize = size;
    this.chunkLeft = size;
    this.chunkHash = createHash("sha256");
  }

  private endChunk(): void {
    const e = this.current as TocEntry;
    e.chunkDigest = `sha256:${(this.chunkHash as Hash).digest("hex")}`;
    const done = this.fileSize - this.payloadLeft;
    if (this.payloadLeft > 0) {
      this.current = { name: e.name, type: "chunk" };
      this.entries.push(this.current);
      this.startChunk(done);
    } else {
      (this.fileEntry as TocEntry).digest = `sha256:${(this.fileHash as Hash).digest("hex")}`;
      const pad = (512 - (this.fileSize % 512)) % 512;
      this.skip = pad;
      this.state = pad > 0 ? "pad" : "header";
    }
  }

  private consume(data: Buffer): void {
    let pos = 0;
    while (pos < data.length) {
      switch (this.state) {
        case "eof":
          return;
        case "header": {
          const n = Math.min(512 - this.blockFill, data.length - pos);
          data.copy(this.block, this.blockFill, pos, pos + n);
          this.blockFill += n;
          pos += n;
          if (this.blockFill < 512) break;
          this.blockFill = 0;
          if (this.block.every((b) => b === 0)) {
            this.state = "eof"; // pack's end-of-archive blocks: the TOC member writes its own
            return;
          }
          if (this.memberLen >= MAX_MEMBER) this.closeMember();
          this.add(Buffer.from(this.block));
          const flag = String.fromCharCode(this.block[156] as number);
          if ("xgLK".includes(flag)) {
            const size = octal(this.block, 124, 12);
            this.skip = size + ((512 - (size % 512)) % 512);
            if (this.skip > 0) this.state = "meta";
          } else {
            this.startEntry();
          }
          break;
        }
        case "meta":
        case "pad": {
          const n = Math.min(this.skip, data.length - pos);
          this.add(data.subarray(pos, pos + n));
          pos += n;
          this.skip -= n;
          if (this.skip === 0) this.state = "header";
          break;
        }
        case "payload": {
          const n = Math.min(this.chunkLeft, data.length - pos);
          const piece = data.subarray(pos, pos + n);
          this.add(piece);
          (this.chunkHash as Hash).update(piece);
          (this.fileHash as Hash).update(piece);
          pos += n;
          this.chunkLeft -= n;
          this.payloadLeft -= n;
          if (this.chunkLeft === 0) this.endChunk();
          break;
        }
      }
    }
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    try {
      this.consume(chunk);
      done();
    } catch (err) {
      done(err as Error);
    }
  }

  override _flush(done: TransformCallback): void {
    if (this.state !== "eof" && this.state !== "header") {
      done(new Error("estargz: the tar stream ended inside an entry"));
      return;
    }
    this.closeMember();
    const toc: Toc = { version: 1, entries: this.entries };
    const json = Buffer.from(JSON.stringify(toc, null, "\t"));
    this.tocDigest = `sha256:${createHash("sha256").update(json).digest("hex")}`;
    const tocOffset = this.offset;
    tocMember(json).then(
      (tar) => {
        this.uncompressedSize += tar.length;
        this.push(gzipSync(tar, { level: LEVEL }));
        this.push(footerBytes(tocOffset));
        done();
      },
      (err: Error) => done(err),
    );
  }
}

/** The TOC's tar entry and the tar end-of-archive blocks (tar-stream's own encoding). */
function tocMember(json: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const p = tarPack();
    const parts: Buffer[] = [];
    p.on("data", (b: unknown) => parts.push(b as Buffer));
    p.on("end", () => resolve(Buffer.concat(parts)));
    p.on("error", reject);
    p.entry({ name: TOC_NAME, size: json.length, mode: 0o644, mtime: new Date(0) }, json, (err) => {
      if (err) reject(err);
    });
    p.finalize();
  });
}

export const estargzCodec: Codec = {
  name: "estargz",
  magic: Buffer.from([0x1f, 0x8b]),
  encoder: () => Promise.resolve(new EstargzWriter()),
  decoder: () => Promise.resolve(createGunzip({ chunkSize: 1 << 16 })),
};
