// The library entry point: `import { Sandbox, CvisorError } from "cvisor"`.
import { fileURLToPath } from "node:url";
import { setPackageAnchor } from "./core/native.js";

export { Sandbox } from "./sandbox/sandbox.js";
export { Cache } from "./sandbox/caches.js";
export { RunFailedError } from "./sandbox/run-error.js";
export { allow, deny, result } from "./sandbox/syscall-hook.js";
export type {
  HookError,
  SocketAddress,
  SyscallCall,
  SyscallDecision,
  SyscallHook,
} from "./sandbox/syscall-hook.js";
export {
  AbortedError,
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
  Denial,
  ListenPolicy,
  OutputMode,
  RunOptions,
  RunResult,
  RunStats,
  SandboxOptions,
  SandboxProcess,
  SpawnOptions,
} from "./sandbox/types.js";
export type { LimitReport, Limits, LimitsReport } from "./sandbox/limits.js";
export type { NetworkMode } from "./sandbox/net-policy.js";
export type { Change } from "./sandbox/changes.js";
export type { CopyFilesOptions, CopyReport, Skipped } from "./sandbox/copy.js";
export type { ExportOptions, ExportSummary } from "./sandbox/export-file.js";
export type { SandboxInfo } from "./sandbox/manage.js";
export type {
  CacheFormat,
  CacheOptions,
  CachePath,
  CacheRestoreOptions,
  CacheRestoreResult,
  CacheSaveOptions,
  CacheSaveResult,
  EntryMeta,
  ExtractReport,
  HitKind,
  PackReport,
} from "./sandbox/caches.js";
export type { RemoveResult, ResetResult, SnapshotInfo, SnapshotResult } from "../snapshots/ops.js";

// The package (native/build/, koffi) is found from this file: native.ts is also compiled as
// CommonJS for the CLI, so only this ESM-only entry can name import.meta.
setPackageAnchor(fileURLToPath(import.meta.url));
