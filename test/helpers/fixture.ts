// A fresh host fixture tree per test, under the temp dir: a few directories, files with known
// content and modes, symlinks, a file with a `user.` xattr when the filesystem supports it.
// Everything is world-readable and has a fixed, old mtime, so any change stands out.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { xattrTool } from "./cc.js";
import { tempRoot } from "./repo.js";

export const HELLO_TEXT = "hello from the host\n";
export const NESTED_TEXT = "nested content, line 1\nline 2\n";
export const SCRIPT_TEXT = '#!/bin/sh\necho script-ran "$@"\n';
export const NOEXEC_TEXT = "#!/bin/sh\necho should-not-run\n";
export const XATTR_NAME = "user.cvisor";
export const XATTR_VALUE = "host-value";
/** 2001-09-09T01:46:40Z: every fixture entry carries this mtime. */
export const FIXED_TIME = 1_000_000_000;

export interface FixtureOptions {
  /** Also create an ASCII file of this many bytes, `big.txt` (for the large-output tests). */
  bigFileBytes?: number;
}

export interface Fixture {
  /** The guarded tree: nothing under it may change while a guest runs. */
  root: string;
  /** A second temp dir for the test's own host-side files (not guarded, not for guests to write). */
  scratch: string;
  /** Whether `xattr.txt` carries XATTR_NAME=XATTR_VALUE (the filesystem supports user xattrs). */
  hasXattr: boolean;
  /** Absolute path of a fixture entry. */
  p(...rel: string[]): string;
}

/**
 * The tree (under root):
 *   hello.txt (0644, HELLO_TEXT)      data.bin (0644, 4096 random bytes)
 *   readonly.txt (0444)               exec.sh (0755, SCRIPT_TEXT)  noexec.sh (0644)
 *   sub/ (0755)  sub/nested.txt (0644, NESTED_TEXT)  sub/deeper/leaf.txt
 *   empty-dir/ (0755)                 link-to-hello -> hello.txt   dangling -> missing
 *   dir-link -> sub                   xattr.txt (user.cvisor=host-value when supported)
 *   big.txt (optional)
 */
export function createFixture(opts: FixtureOptions = {}): Fixture {
  const root = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-fx-"));
  const scratch = mkdtempSync(path.join(tempRoot(), "cvisor-e2e-scratch-"));
  chmodSync(root, 0o755);
  chmodSync(scratch, 0o755);
  const p = (...rel: string[]): string => path.join(root, ...rel);
  const file = (rel: string, content: string | Uint8Array, mode: number): void => {
    writeFileSync(p(rel), content);
    chmodSync(p(rel), mode);
  };
  mkdirSync(p("sub", "deeper"), { recursive: true });
  mkdirSync(p("empty-dir"));
  file("hello.txt", HELLO_TEXT, 0o644);
  file("data.bin", randomBytes(4096), 0o644);
  file("readonly.txt", "read only\n", 0o444);
  file("exec.sh", SCRIPT_TEXT, 0o755);
  file("noexec.sh", NOEXEC_TEXT, 0o644);
  file("sub/nested.txt", NESTED_TEXT, 0o644);
  file("sub/deeper/leaf.txt", "leaf\n", 0o644);
  file("xattr.txt", "has an xattr\n", 0o644);
  symlinkSync("hello.txt", p("link-to-hello"));
  symlinkSync("missing", p("dangling"));
  symlinkSync("sub", p("dir-link"));
  if (opts.bigFileBytes !== undefined) file("big.txt", asciiNoise(opts.bigFileBytes), 0o644);
  let hasXattr = false;
  try {
    execFileSync(xattrTool(), ["set", p("xattr.txt"), XATTR_NAME, XATTR_VALUE], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    hasXattr = true;
  } catch {
    // No user xattrs on this filesystem (tmpfs without user_xattr, ...): tests skip that part.
  }
  for (const dir of ["sub", "sub/deeper", "empty-dir"]) chmodSync(p(dir), 0o755);
  // Old, fixed times on everything, deepest first so directory times stick.
  const entries = [
    "hello.txt",
    "data.bin",
    "readonly.txt",
    "exec.sh",
    "noexec.sh",
    "sub/nested.txt",
    "sub/deeper/leaf.txt",
    "xattr.txt",
    ...(opts.bigFileBytes !== undefined ? ["big.txt"] : []),
    "sub/deeper",
    "sub",
    "empty-dir",
  ];
  for (const rel of entries) utimesSync(p(rel), FIXED_TIME, FIXED_TIME);
  for (const rel of ["link-to-hello", "dangling", "dir-link"]) {
    lutimesSync(p(rel), FIXED_TIME, FIXED_TIME);
  }
  utimesSync(root, FIXED_TIME, FIXED_TIME);
  return { root, scratch, hasXattr, p };
}

/** Removes both temp dirs, whatever a broken sandbox may have done to their modes. */
export function removeFixture(fx: Fixture): void {
  for (const dir of [fx.root, fx.scratch]) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
    } catch {
      try {
        execFileSync("chmod", ["-R", "u+rwX", dir], { stdio: "ignore" });
        rmSync(dir, { recursive: true, force: true });
      } catch {
        // Leave it; the temp dir is cleaned eventually.
      }
    }
  }
}

/** `bytes` bytes of printable ASCII (base64 lines of random data, 76 chars + "\n"). */
export function asciiNoise(bytes: number): Buffer {
  const b64 = randomBytes(Math.ceil((bytes * 3) / 4) + 3).toString("base64");
  const out = Buffer.alloc(bytes);
  let o = 0;
  let i = 0;
  while (o < bytes) {
    if (o % 77 === 76) out[o++] = 0x0a;
    else out[o++] = b64.charCodeAt(i++);
  }
  return out;
}
