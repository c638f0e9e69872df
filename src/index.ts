// The library entry point: `import { Sandbox, CvisorError } from "cvisor"`.
export { Sandbox } from "./sandbox/sandbox.js";
export { CvisorError, CV_ERROR } from "./core/errors.js";
export type {
  OutputMode,
  RunOptions,
  RunResult,
  RunStats,
  SandboxOptions,
} from "./sandbox/types.js";
