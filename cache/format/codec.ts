// An archive format as a pair of streams: the encoder turns the tar stream that
// ./pack.ts makes into the stored bytes, the decoder turns stored bytes back into a tar stream
// for ./unpack.ts. Codecs that need a native module or more code load it in encoder/decoder.
import type { Duplex } from "node:stream";
import type { CacheFormat } from "../backend.js";

export interface Codec {
  name: CacheFormat;
  /** The first bytes every archive of this format starts with (checked on restore). */
  magic: Buffer | undefined;
  encoder(): Promise<Duplex>;
  decoder(): Promise<Duplex>;
}

/** The codec of a format (its module loaded now). */
export async function codecOf(format: CacheFormat): Promise<Codec> {
  switch (format) {
    case "gzip":
      return (await import("./gzip.js")).gzipCodec;
    case "zstd":
      return (await import("./zstd.js")).zstdCodec;
    case "none":
      return (await import("./none.js")).noneCodec;
    case "estargz":
      return (await import("./estargz.js")).estargzCodec;
  }
}
