// The CLI's failures are the library's (src/core/errors.ts: one class per kind, each with its
// exit code); main.ts's report() is the one place that renders them, as one line.

// Shared with the layers below the CLI (snapshots report leftovers they cleaned up).
export { writeStderr } from "../core/stderr.js";
