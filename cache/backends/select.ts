// Which backend a cache command uses: --cache-backend SPEC, else $CVISOR_CACHE_BACKEND, else the
// disk cache under cacheDir() (src/paths.ts). SPEC is `disk`, `disk:/PATH` or
// `s3://BUCKET/PREFIX`. The S3 backend (./s3.js, and the AWS SDK behind it) is imported only for
// an s3:// spec: no other command path loads it.
import { resolve } from "node:path";
import { CvisorError } from "../../src/core/errors.js";
import { cacheDir } from "../../src/paths.js";
import type { CacheBackend } from "../backend.js";
import { openDiskBackend } from "./disk.js";

/** Where the spec came from, for messages: "--cache-backend" or "CVISOR_CACHE_BACKEND". */
export interface BackendSpec {
  spec: string;
  source: string;
}

/** The spec to use: the option's value, else the environment's, else "disk". */
export function backendSpec(
  option: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): BackendSpec {
  if (option !== undefined) return { spec: option, source: "--cache-backend" };
  const fromEnv = env.CVISOR_CACHE_BACKEND;
  if (fromEnv !== undefined && fromEnv !== "") {
    return { spec: fromEnv, source: "CVISOR_CACHE_BACKEND" };
  }
  return { spec: "disk", source: "default" };
}

function bad(s: BackendSpec, why: string): CvisorError {
  const from = s.source === "default" ? "" : ` (from ${s.source})`;
  return new CvisorError(
    `invalid cache backend ${JSON.stringify(s.spec)}${from}: ${why}; use disk, disk:/PATH or s3://BUCKET/PREFIX`,
    "EUSAGE",
  );
}

/** The S3 module's entry point, as the S3 backend exports it. */
type OpenS3 = (url: string, options: { readOnly: boolean }) => Promise<CacheBackend>;

/** Opens the backend a spec names. */
export async function openBackend(
  s: BackendSpec,
  options: { readOnly: boolean },
  env: NodeJS.ProcessEnv = process.env,
): Promise<CacheBackend> {
  const spec = s.spec;
  if (spec === "disk") return openDiskBackend(cacheDir(env), options);
  if (spec.startsWith("disk:")) {
    const path = spec.slice("disk:".length);
    if (path === "") throw bad(s, "disk: needs a directory");
    return openDiskBackend(resolve(path), options);
  }
  if (spec.startsWith("s3://")) {
    if (!/^s3:\/\/[^/?#]+/.test(spec)) throw bad(s, "s3:// needs a bucket name");
    // A computed specifier: the module is loaded only here, and only when it is there.
    const specifier = "./s3.js";
    let mod: { openS3Backend?: OpenS3 };
    try {
      mod = (await import(specifier)) as { openS3Backend?: OpenS3 };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "ERR_MODULE_NOT_FOUND") throw err;
      throw new CvisorError(
        `cache backend ${spec}: the S3 backend is not part of this build`,
        "ENOTSUP",
      );
    }
    if (typeof mod.openS3Backend !== "function") {
      throw new CvisorError(`cache backend ${spec}: the S3 backend is not usable`, "ENOTSUP");
    }
    return mod.openS3Backend(spec, options);
  }
  throw bad(s, "unknown kind");
}
