// `--format zstd`: the tar stream through zstd-napi (libzstd, level 3 like zstd(1)). The native
// module is imported only when a zstd archive is made or read: it is an optional dependency.
import type { Transform } from "node:stream";
import { CacheError } from "../../src/core/errors.js";
import type { Codec } from "./codec.js";

type ZstdModule = typeof import("zstd-napi");

let loaded: ZstdModule | undefined;

async function zstd(): Promise<ZstdModule> {
  if (loaded) return loaded;
  try {
    loaded = await import("zstd-napi");
  } catch (err) {
    // An optional dependency: its install builds a native module (a prebuilt fetched from the
    // internet, else a compiler), and an install that could do neither goes on without it.
    const message = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw new CacheError(
      `--format zstd needs zstd-napi, which is not installed or not built here (${message}); ` +
        "reinstall cvisor with a C compiler or internet access, or use gzip, estargz or none",
      "ENOTSUP",
      { cause: err },
    );
  }
  return loaded;
}

export const zstdCodec: Codec = {
  name: "zstd",
  magic: Buffer.from([0x28, 0xb5, 0x2f, 0xfd]),
  encoder: async (): Promise<Transform> =>
    new (await zstd()).CompressStream({ compressionLevel: 3, checksumFlag: true, nbWorkers: 1 }),
  decoder: async (): Promise<Transform> => new (await zstd()).DecompressStream(),
};
