// mkdir -p that fails instead of spinning: Node's recursive mkdir, told ENOENT for a directory
// whose parent exists, makes the parent again and retries, forever where the file system
// answers that way (procfs, sysfs: CVISOR_HOME=/proc/x).
import { mkdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { errCode } from "./fd-path.js";

/** Makes dir and its missing parents (with mode), each once; throws the first failure. */
export function makeDirs(dir: string, mode = 0o777): void {
  const missing: string[] = [];
  for (let p = resolve(dir); ; p = dirname(p)) {
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
      missing.push(p);
      if (dirname(p) === p) break;
      continue;
    }
    if (!isDir) {
      throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${p}'`), {
        code: "ENOTDIR",
        path: p,
      });
    }
    break;
  }
  for (const p of missing.reverse()) {
    try {
      mkdirSync(p, { mode });
    } catch (err) {
      if (errCode(err) !== "EEXIST") throw err;
    }
  }
}
