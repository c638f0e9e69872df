// The differential suite again, with the fixture served by a sandbox's snapshot layers instead
// of the host (CVISOR_TEST_OVERLAY=layers, test/helpers/differential.ts): every case's reads,
// writes, deletions and renames then go through the read-only layers of the core.
if (process.env.CVISOR_TEST_OVERLAY === undefined) process.env.CVISOR_TEST_OVERLAY = "layers";
await import("./files.test.js");
await import("./paths.test.js");
await import("./persistence.test.js");
await import("./probes.test.js");
await import("./tools.test.js");
