// `--format gzip` (the default): the tar stream through Node's zlib, level 6 like gzip(1).
import { createGunzip, createGzip } from "node:zlib";
import type { Codec } from "./codec.js";

export const gzipCodec: Codec = {
  name: "gzip",
  magic: Buffer.from([0x1f, 0x8b]),
  encoder: () => Promise.resolve(createGzip({ level: 6, chunkSize: 1 << 16 })),
  decoder: () => Promise.resolve(createGunzip({ chunkSize: 1 << 16 })),
};
