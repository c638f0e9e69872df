// Squashing a stack of read-only layers into one: `squashLayers(trees, out)` writes the layer the
// stack amounts to (src/sandbox/effective-layer.ts), so that any upper over the squashed layer
// over the host shows exactly what it shows over the stack. Whiteouts are kept where the host
// (always below) may have the name, opaque markers made where a directory stops showing the
// host's; directories get their mode and times (and owner, as root) once their entries are in.
//
// The layers are frozen (nothing writes them any more), so every other object is hard-linked
// from its layer instead of copied: fast, and it keeps mode, times, owner, xattrs and the hard
// links inside a layer. Where a link cannot be made (another filesystem, a link count at its
// maximum, protected_hardlinks) the object is copied. The layer is built in a temp directory
// beside `out` and renamed into place, so `out` appears whole or not at all.
import {
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readlinkSync,
  readSync,
  renameSync,
  symlinkSync,
  writeSync,
  type Stats,
} from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { CvisorError, ConflictError, StoreError } from "../src/core/errors.js";
import { fileTimes, fsErrorText } from "../src/sandbox/copy-tree.js";
import {
  rawAt,
  shownText,
  walkEffective,
  type EffectiveEntry,
} from "../src/sandbox/effective-layer.js";
import { closeQuietly, errCode, openFileChecked } from "../src/store/fd-path.js";
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from "../src/sandbox/layer-names.js";
import { removeTree } from "../src/store/remove-tree.js";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = constants;

/** Link failures that mean "copy it instead". */
const COPY_INSTEAD = new Set(["EXDEV", "EMLINK", "EPERM", "EACCES"]);

const asRoot = process.getuid?.() === 0;

function tag(): string {
  return `${process.pid.toString(36)}${Math.random().toString(36).slice(2, 10)}`;
}

/** An empty file NAME in the directory fd (a whiteout or an opaque marker), 0600 as the core makes them. */
function marker(dirFd: number, name: string, st: Stats): void {
  const fd = openSync(rawAt(dirFd, name), "wx", 0o600);
  try {
    futimesSync(fd, ...fileTimes(st));
  } finally {
    closeSync(fd);
  }
}

/** Copies a non-directory whose link failed: a file's data, a symlink's target text. */
function copyObject(e: EffectiveEntry, to: Buffer): void {
  const st = e.st;
  if (st.isSymbolicLink()) {
    symlinkSync(readlinkSync(e.path, { encoding: "buffer" }), to);
    lutimesSync(to, ...fileTimes(st));
    if (asRoot) lchownSync(to, st.uid, st.gid);
    return;
  }
  if (!st.isFile()) {
    throw new StoreError(
      `${shownText(e.rel)}: a special file that cannot be linked here`,
      "ESQUASH",
    );
  }
  const src = openFileChecked(e.path, st);
  try {
    const dst = openSync(to, "wx", 0o600);
    try {
      const buf = Buffer.allocUnsafe(1 << 20);
      for (;;) {
        const n = readSync(src, buf, 0, buf.length, null);
        if (n === 0) break;
        for (let done = 0; done < n;) done += writeSync(dst, buf, done, n - done);
      }
      if (asRoot) fchownSync(dst, st.uid, st.gid);
      fchmodSync(dst, st.mode & 0o7777);
      futimesSync(dst, ...fileTimes(st));
    } finally {
      closeSync(dst);
    }
  } finally {
    closeSync(src);
  }
}

/** Writes the effective layer of trees into the empty directory top. */
function build(trees: readonly string[], top: string): void {
  const open: number[] = []; // the output directories being filled, root first
  try {
    for (const e of walkEffective(trees, { widen: true })) {
      if (e.kind === "leave") {
        const fd = open.pop() as number;
        if (asRoot) fchownSync(fd, e.st.uid, e.st.gid);
        fchmodSync(fd, e.st.mode & 0o7777);
        futimesSync(fd, ...fileTimes(e.st));
        closeSync(fd);
        continue;
      }
      if (e.rel === "") {
        open.push(openSync(top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
        if (e.opaque) marker(open[0] as number, OPAQUE_MARKER, e.st);
        continue;
      }
      const parent = open[open.length - 1] as number;
      if (e.kind === "whiteout") {
        marker(parent, `${WHITEOUT_PREFIX}${e.name}`, e.st);
      } else if (e.st.isDirectory()) {
        const to = rawAt(parent, e.name);
        mkdirSync(to, { mode: 0o700 });
        const fd = openSync(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        open.push(fd);
        if (e.opaque) marker(fd, OPAQUE_MARKER, e.st);
      } else {
        const to = rawAt(parent, e.name);
        try {
          linkSync(e.path, to);
        } catch (err) {
          if (!COPY_INSTEAD.has(errCode(err) ?? "")) throw err;
          copyObject(e, to);
        }
      }
    }
  } finally {
    for (const fd of open) closeQuietly(fd);
  }
}

function exists(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
}

/**
 * Writes into `out` (which must not exist) one layer tree equivalent to the stack `trees`
 * (absolute layer tree directories, top first): for every path, an upper over `out` over the
 * host shows what it shows over `trees` over the host. Objects are hard-linked from the trees,
 * which must not change afterwards. Throws CvisorError, leaving no `out`, on failure.
 */
export function squashLayers(trees: readonly string[], out: string): void {
  const dest = resolve(out);
  if (exists(dest)) throw new ConflictError(`squash: ${out} already exists`);
  const tmp = `${dirname(dest)}/.${basename(dest)}.squash~${tag()}`;
  try {
    mkdirSync(tmp, { mode: 0o700 });
  } catch (err) {
    throw new StoreError(
      `squash: cannot make ${tmp}: ${fsErrorText(err)}`,
      errCode(err) ?? "ESQUASH",
      {
        cause: err,
      },
    );
  }
  try {
    build(trees, tmp);
    // rename(2) would replace an empty directory made meanwhile: look once more.
    if (exists(dest)) throw new ConflictError(`squash: ${out} already exists`);
    renameSync(tmp, dest);
  } catch (err) {
    removeTree(tmp);
    if (err instanceof CvisorError) throw err;
    throw new StoreError(`squash into ${out}: ${fsErrorText(err)}`, errCode(err) ?? "ESQUASH", {
      cause: err,
    });
  }
}
