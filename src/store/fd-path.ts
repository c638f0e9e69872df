// Directory-relative file operations for Node, which has no openat: a directory held open as fd
// N is named /proc/self/fd/N, and /proc/self/fd/N/NAME is NAME looked up in that directory by
// the kernel, whatever path the directory has now and whatever symlinks lead to it. Used where
// the tree is not ours to trust (a sandbox's upper layer, the host below a cp destination): each
// directory is opened with O_NOFOLLOW from its parent's fd, so a symlink planted on the way, even
// while we work, is never followed; and paths stay short however deep the tree goes.
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  type PathLike,
  type Stats,
} from "node:fs";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;

/** NAME in the directory open as fd. */
export function at(fd: number, name: string): string {
  return `/proc/self/fd/${fd}/${name}`;
}

/** The directory open as fd itself (for readdir). */
export function fdPath(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

export function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/** lstat of NAME in the directory fd; undefined when there is nothing (ENOENT, ENOTDIR). */
export function lstatAt(fd: number, name: string): Stats | undefined {
  try {
    return lstatSync(at(fd, name));
  } catch (err) {
    const c = errCode(err);
    if (c === "ENOENT" || c === "ENOTDIR") return undefined;
    throw err;
  }
}

/** Opens a directory by path (following symlinks: for paths the user gave). */
export function openDirPath(path: string): number {
  return openSync(path, O_RDONLY | O_DIRECTORY);
}

/** Opens the directory NAME of the directory fd; a symlink there fails (ENOTDIR or ELOOP). */
export function openDirAt(fd: number, name: string): number {
  return openSync(at(fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

/**
 * Opens a regular file for reading without following a symlink and without blocking on a FIFO,
 * and checks it is the object `expected` describes (same device and inode, a regular file):
 * what was looked up is what gets read, even if the name was replaced meanwhile.
 */
export function openFileChecked(path: PathLike, expected: Stats): number {
  const fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.dev !== expected.dev || st.ino !== expected.ino) {
      throw Object.assign(new Error(`${path.toString()} changed while it was being copied`), {
        code: "ECHANGED",
      });
    }
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/** The names in a directory as raw bytes (names need not be UTF-8). */
export function listRaw(path: string): Buffer[] {
  return readdirSync(path, { encoding: "buffer" });
}

/** A raw name as a string, or undefined when it is not valid UTF-8 (it would not round-trip). */
export function decodeName(raw: Buffer): string | undefined {
  const s = raw.toString("utf8");
  return Buffer.byteLength(s) === raw.length && Buffer.from(s).equals(raw) ? s : undefined;
}

/** A host directory's entries by path, sorted; names that are not UTF-8 apart (shown lossily). */
export function listDirNames(dir: string): { names: string[]; undecodable: string[] } {
  const names: string[] = [];
  const undecodable: string[] = [];
  for (const raw of readdirSync(dir || "/", { encoding: "buffer" })) {
    const name = decodeName(raw);
    if (name === undefined) undecodable.push(raw.toString("utf8"));
    else names.push(name);
  }
  return { names: names.sort(), undecodable };
}

export function closeQuietly(fd: number | undefined): void {
  if (fd === undefined) return;
  try {
    closeSync(fd);
  } catch {
    // Already closed.
  }
}

/** "dev:ino", to recognise one directory reached by two paths. */
export function identity(st: Stats): string {
  return `${st.dev}:${st.ino}`;
}
