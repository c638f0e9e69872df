// Which backend a cache command uses: --cache-backend SPEC, else $CVISOR_CACHE_BACKEND, else the
// disk cache under cacheDir() (src/paths.ts). SPEC is `disk`, `disk:/PATH` or
// `s3://BUCKET/PREFIX`. The S3 backend (./s3.js, and the AWS SDK behind it) is imported only for
// an s3:// spec: no other command path loads it.
import { resolve } from "node:path";
import { CvisorError, UsageError } from "../../src/core/errors.js";
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
  return new UsageError(
    `invalid cache backend ${JSON.stringify(s.spec)}${from}: ${why}; use disk, disk:/PATH or s3://BUCKET/PREFIX`,
  );
}

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
    // Imported here, and only here: no other spec loads the S3 module or the AWS SDK.
    const { openS3Backend } = await import("./s3.js");
    return openS3Backend(spec, options);
  }
  throw bad(s, "unknown kind");
}
