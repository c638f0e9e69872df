// Test hook for the steps of a write that must be all or nothing: CVISOR_TEST_CRASH_AT=<step>
// makes the process SIGKILL itself when it reaches that step, so the tests can check what the
// next command finds (./journal.ts and ../sandbox/staged-dest.ts list their steps).

/** SIGKILLs this process when CVISOR_TEST_CRASH_AT names this step (tests only). */
export function crashAt(step: string): void {
  if (process.env.CVISOR_TEST_CRASH_AT === step) process.kill(process.pid, "SIGKILL");
}
