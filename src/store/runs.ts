// Run records: a run (or a command using a named sandbox as a run does, like cp) makes the
// empty file <sandbox>/runs/<owner record> while it uses the sandbox; snapshot, rollback and rm
// refuse while a live one exists, and records of dead processes are removed when seen.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { errCode } from "./fd-path.js";
import { ownerRecord, ownerRecordAlive } from "./owner.js";

/** Runs using the sandbox now (their owner records); records of dead processes are removed. */
export function liveRuns(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(`${dir}/runs`);
  } catch {
    return [];
  }
  return names.filter((name) => {
    if (ownerRecordAlive(name)) return true;
    rmSync(`${dir}/runs/${name}`, { force: true });
    return false;
  });
}

/**
 * Records that a run uses the sandbox: an empty file runs/<pid>-<start>-<tag> (the owner record,
 * as for ephemeral sandboxes), removed when the run ends; `rm` refuses a sandbox with a live
 * one. Returns its path, or undefined when it cannot be made (the run goes on unprotected).
 */
export function markRunning(dir: string): string | undefined {
  const path = `${dir}/runs/${ownerRecord()}`;
  try {
    try {
      writeFileSync(path, "", { mode: 0o600, flag: "wx" });
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
      mkdirSync(`${dir}/runs`, { mode: 0o700 });
      writeFileSync(path, "", { mode: 0o600, flag: "wx" });
    }
    return path;
  } catch {
    return undefined;
  }
}
