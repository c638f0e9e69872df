// Trees for the cache tests: one with everything a cache must carry (nested directories, a big
// file, symlinks, hard links, modes, an empty directory, times), and a description of a tree
// that two trees are compared by.
import { createHash } from "node:crypto";
import {
  chmodSync,
  closeSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";

export const T1 = 1_100_000_000;
export const T2 = 1_200_000_000;

/** Deterministic pseudo-random bytes (xorshift), compressible only a little. */
export function noise(size: number, seed = 1): Buffer {
  const buf = Buffer.allocUnsafe(size);
  let x = seed >>> 0 || 1;
  for (let i = 0; i + 4 <= size; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    buf.writeUInt32LE(x >>> 0, i);
  }
  buf.fill(7, size - (size % 4));
  return buf;
}

/** Writes a file of size bytes (streamed in 1 MiB pieces). */
export function bigFile(path: string, size: number): void {
  const fd = openSync(path, "w", 0o644);
  try {
    const piece = noise(1 << 20, 42);
    // Half of every 32 KiB repeats (within gzip's window): it shrinks some, like real binaries.
    for (let off = 0; off < piece.length; off += 32768)
      piece.copy(piece, off + 16384, off, off + 16384);
    for (let left = size; left > 0;) {
      const n = Math.min(left, piece.length);
      writeSync(fd, piece, 0, n);
      left -= n;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * The tree in dir (made): a/b/c/deep.txt, run.sh 0755, secret 0600, ro.txt 0444, big.bin
 * (bigBytes), rel-link -> run.sh, abs-link -> /etc/hostname, dangling -> nowhere, dir-link -> a,
 * hard1 + hard2 (one inode) + a/hard3, empty/ (0700), locked/ (0500) holding one file, .gitignore
 * excluding *.log (and a debug.log), times T1/T2.
 */
export function cacheTree(dir: string, bigBytes: number): void {
  mkdirSync(join(dir, "a", "b", "c"), { recursive: true });
  mkdirSync(join(dir, "empty"));
  mkdirSync(join(dir, "locked"));
  writeFileSync(join(dir, "a", "b", "c", "deep.txt"), "deep\n");
  writeFileSync(join(dir, "run.sh"), "#!/bin/sh\necho ran\n");
  chmodSync(join(dir, "run.sh"), 0o755);
  writeFileSync(join(dir, "secret"), "s\n");
  chmodSync(join(dir, "secret"), 0o600);
  writeFileSync(join(dir, "ro.txt"), "read only\n");
  chmodSync(join(dir, "ro.txt"), 0o444);
  writeFileSync(join(dir, "empty.txt"), "");
  bigFile(join(dir, "big.bin"), bigBytes);
  symlinkSync("run.sh", join(dir, "rel-link"));
  symlinkSync("/etc/hostname", join(dir, "abs-link"));
  symlinkSync("nowhere", join(dir, "dangling"));
  symlinkSync("a", join(dir, "dir-link"));
  writeFileSync(join(dir, "hard1"), "linked\n");
  linkSync(join(dir, "hard1"), join(dir, "hard2"));
  linkSync(join(dir, "hard1"), join(dir, "a", "hard3"));
  writeFileSync(join(dir, ".gitignore"), "*.log\n");
  writeFileSync(join(dir, "debug.log"), "noise\n");
  writeFileSync(join(dir, "locked", "inside.txt"), "inside\n");
  chmodSync(join(dir, "empty"), 0o700);
  for (const p of ["a/b/c/deep.txt", "run.sh", "big.bin", "hard1"])
    utimesSync(join(dir, p), T1, T1);
  lutimesSync(join(dir, "rel-link"), T2, T2);
  utimesSync(join(dir, "a", "b"), T2, T2);
  utimesSync(join(dir, "empty"), T1, T1);
  chmodSync(join(dir, "locked"), 0o500);
  utimesSync(join(dir, "locked"), T2, T2);
}

/**
 * One line per entry below dir (sorted): type, mode, mtime (seconds), size and sha256 of files,
 * symlink targets, and which files share an inode (by the first name of the group).
 */
export function describeTree(dir: string): string[] {
  const out: string[] = [];
  const inodes = new Map<string, string>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(rel ? join(dir, rel) : dir).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const p = join(dir, r);
      const st = lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      const mt = Math.floor(st.mtimeMs / 1000);
      if (st.isDirectory()) {
        walk(r);
        out.push(`${r}/ dir ${mode} ${mt}`);
      } else if (st.isSymbolicLink()) {
        out.push(`${r} -> ${readlinkSync(p)} ${mt}`);
      } else {
        const id = `${st.dev}:${st.ino}`;
        const first = inodes.get(id);
        if (first === undefined) inodes.set(id, r);
        const sha = createHash("sha256").update(readFileSync(p)).digest("hex").slice(0, 16);
        out.push(`${r} file ${mode} ${mt} ${st.size} ${sha}${first ? ` =${first}` : ""}`);
      }
    }
  };
  walk("");
  return out.sort();
}
