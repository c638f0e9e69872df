// Removes a sandbox's files, whatever a guest left there: directories without read, write or
// search permission (0000, 0500), read-only files, names that are not UTF-8, symlinks (removed,
// never followed), and trees deeper than PATH_MAX (moved up before their paths get too long).
import { chmodSync, lstatSync, readdirSync, renameSync, rmdirSync, unlinkSync } from "node:fs";
import { errCode } from "./fd-path.js";

/** Paths longer than this (bytes) are moved up to the top before going deeper (PATH_MAX 4096). */
const MAX_PATH_BYTES = 3072;

const SLASH = 0x2f; // "/", as a byte: no Buffer made at load (a first Buffer.from costs start-up time)

interface Frame {
  path: Buffer;
  names: Buffer[];
  next: number;
}

/**
 * Removes `path` and everything below it without following a symlink; a missing path is no
 * error. Directories are made u+rwx (after lstat said they are directories) before they are
 * listed and emptied. Safe against another remover working on the same tree at the same time.
 */
export function removeTree(path: string): void {
  const top = Buffer.from(path);
  let mode: number;
  try {
    const st = lstatSync(top);
    if (!st.isDirectory()) {
      unlinkQuietly(top);
      return;
    }
    mode = st.mode;
  } catch (err) {
    if (errCode(err) === "ENOENT") return;
    throw err;
  }
  let moved = 0;
  const stack: Frame[] = [];
  const enter = (dir: Buffer, dirMode: number): void => {
    if ((dirMode & 0o700) !== 0o700) chmodSync(dir, (dirMode & 0o7777) | 0o700);
    stack.push({ path: dir, names: list(dir), next: 0 });
  };
  if (!tryEnter(() => enter(top, mode))) return;
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as Frame;
    const name = frame.names[frame.next++];
    if (name === undefined) {
      // Emptied; a subtree moved up to the top while we went down makes it non-empty again.
      try {
        rmdirSync(frame.path);
        stack.pop();
      } catch (err) {
        const c = errCode(err);
        if (c === "ENOENT") stack.pop();
        else if (c === "ENOTEMPTY" || c === "EEXIST") frame.names = list(frame.path);
        else throw err;
        frame.next = 0;
      }
      continue;
    }
    const child = Buffer.concat([frame.path, Uint8Array.of(SLASH), name]);
    try {
      unlinkSync(child); // files, symlinks, sockets, fifos, devices: one call
      continue;
    } catch (err) {
      const c = errCode(err);
      if (c === "ENOENT") continue;
      if (c !== "EISDIR" && c !== "EPERM") throw err;
    }
    let st;
    try {
      st = lstatSync(child);
    } catch (err) {
      if (errCode(err) === "ENOENT") continue;
      throw err;
    }
    if (!st.isDirectory()) {
      unlinkQuietly(child);
      continue;
    }
    try {
      rmdirSync(child); // an empty directory, whatever its mode
      continue;
    } catch (err) {
      const c = errCode(err);
      if (c === "ENOENT") continue;
      if (c !== "ENOTEMPTY" && c !== "EEXIST") throw err;
    }
    if (child.length > MAX_PATH_BYTES) {
      // Too deep to go on by path: move the subtree up to the top, where it is listed again.
      const tag = `${process.pid}-${moved++}-${Math.random().toString(36).slice(2)}`;
      const up = Buffer.concat([top, Buffer.from(`/.cvisor-rm-${tag}`)]);
      renameSync(child, up);
      continue;
    }
    tryEnter(() => enter(child, st.mode));
  }
}

/** Runs enter(); false when the directory went away meanwhile (another remover). */
function tryEnter(enter: () => void): boolean {
  try {
    enter();
    return true;
  } catch (err) {
    if (errCode(err) === "ENOENT") return false;
    throw err;
  }
}

function list(dir: Buffer): Buffer[] {
  return readdirSync(dir, { encoding: "buffer" });
}

function unlinkQuietly(path: Buffer): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if (errCode(err) !== "ENOENT") throw err;
  }
}
