// `--format none`: the tar stream as it is (already-compressed trees, or fast local disks).
import { PassThrough } from "node:stream";
import type { Codec } from "./codec.js";

export const noneCodec: Codec = {
  name: "none",
  magic: undefined,
  encoder: () => Promise.resolve(new PassThrough({ highWaterMark: 1 << 20 })),
  decoder: () => Promise.resolve(new PassThrough({ highWaterMark: 1 << 20 })),
};
