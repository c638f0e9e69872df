// The library entry point: `import { Sandbox, CvisorError } from "cvisor"`.
import { fileURLToPath } from "node:url";
import { setPackageAnchor } from "./core/native.js";

export { Sandbox } from "./sandbox/sandbox.js";
export {
  CacheError,
  ConflictError,
  CopyError,
  CV_ERROR,
  CvisorError,
  NotFoundError,
  SetupError,
  StoreError,
  UsageError,
  type ErrorKind,
} from "./core/errors.js";
export type {
  OutputMode,
  RunOptions,
  RunResult,
  RunStats,
  SandboxOptions,
} from "./sandbox/types.js";

// The package (native/build/, koffi) is found from this file: native.ts is also compiled as
// CommonJS for the CLI, so only this ESM-only entry can name import.meta.
setPackageAnchor(fileURLToPath(import.meta.url));
