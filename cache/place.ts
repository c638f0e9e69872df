// Where a restored tree goes. A restore never extracts over the destination: it extracts into a
// temporary directory on the destination's filesystem, and only when the archive was whole,
// verified and safe does it swap that directory in for the destination (one RENAME_EXCHANGE, so
// there is no moment without either; then the old one is removed). So the destination is
// replaced, not merged into: after `cache restore K dir`, dir holds exactly what the entry held
// (actions/cache extracts over and leaves stale files; a build cache with stale files is a
// poisoned one). A failed restore leaves the destination as it was.
//  - host directory: the temporary directory is a sibling (DIR/../.cvisor-restore~*); the parent
//    is made if missing; a destination that is not a directory is refused.
//  - sb:/DIR: the temporary directory is in the sandbox's work/ (the upper's filesystem); the new
//    directory becomes DIR in the upper layer, opaque (`.wh..wh..opq`) when a snapshot layer or
//    the host has a directory there, so none of their entries show through; upper directories missing on the way are
//    made as copy-in makes them (the host directory's mode and times); a whiteout of DIR goes.
import { lstatSync, mkdirSync, realpathSync, renameSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { NotFoundError, UsageError } from "../src/core/errors.js";
import { cvisorHome } from "../src/paths.js";
import { WHITEOUT_PREFIX } from "../src/sandbox/layer-names.js";

import { at, closeQuietly, errCode, openDirPath } from "../src/store/fd-path.js";
import { ownerRecord, removeDeadLeftovers } from "../src/store/owner.js";
import { removeTree } from "../src/store/remove-tree.js";
import { crashAt } from "../src/store/crash-at.js";
import {
  makeOpaqueIfNeeded,
  removeWhiteoutAt,
  upperDirOf,
  UPPER_RESTORE_STAGING,
} from "../src/sandbox/upper-writer.js";
import { renameExchange } from "../src/core/native.js";
import { MergedView, ViewError, type ViewDir } from "../src/sandbox/view.js";
import { makeDirs } from "../src/store/make-dirs.js";

/** A destination, checked, and the temporary directory to extract into (made, empty, 0700). */
export interface Staging {
  tmp: string;
  /** Swaps tmp in for the destination. */
  commit(): void;
  /** Removes tmp (after a failure). */
  abort(): void;
}

/** A path with its existing part's symlinks resolved (the rest as written). */
function realish(path: string): string {
  const abs = resolve(path);
  try {
    return realpathSync(abs);
  } catch {
    const parent = dirname(abs);
    return parent === abs ? abs : join(realish(parent), basename(abs));
  }
}

/** The current directory, real; undefined when it was removed (nothing can be inside it). */
function currentDir(): string | undefined {
  try {
    return realish(process.cwd());
  } catch {
    return undefined;
  }
}

/**
 * Why a restore must not replace the directory `dst` (a real path): it is or holds what the user
 * did not name. undefined when it may.
 */
function protectedDestination(dst: string): string | undefined {
  if (dst === "/") return "it is /";
  const state = realish(cvisorHome());
  const cwd = currentDir();
  const home = process.env.HOME ? realish(process.env.HOME) : undefined;
  const named: [string | undefined, string][] = [
    [cwd, "the current directory"],
    [home, "$HOME"],
    [state, "cvisor's state directory"],
  ];
  for (const [x, what] of named) {
    if (x === dst) return `it is ${what}`;
    if (x?.startsWith(`${dst}/`)) return `it holds ${what}`;
  }
  if (dst.startsWith(`${state}/`)) return "it is inside cvisor's state directory";
  return undefined;
}

/**
 * The real directory a host restore into `path` would replace, or a CvisorError when it must
 * not (it is or holds what the user did not name). Decided once, before the lookup: the
 * restore then works on this path (stageHost), whatever the user's path leads to by then.
 */
export function hostDestination(path: string): string {
  const dst = realish(path); // a symlink the user named: restore where it leads
  const why = protectedDestination(dst);
  if (why) {
    const instead = why.includes("inside")
      ? "restore somewhere outside it"
      : `restore into a directory of its own (such as ${join(path, "deps")})`;
    throw new UsageError(
      `cache restore: refusing to replace ${path}: ${why}, and a restore replaces its ` +
        `destination whole; ${instead}`,
    );
  }
  return dst;
}

/**
 * Puts the directory tmp at dst, replacing what is there in one step (RENAME_EXCHANGE: there is
 * no moment without either); the old one, now at tmp, is removed after. Killed in between, tmp
 * (named by its owner record) holds the old one and the next restore or run removes it.
 */
function swapIn(tmp: string, dst: string): void {
  try {
    renameExchange(tmp, dst);
  } catch (err) {
    if (errCode(err) !== "ENOENT") throw err;
    renameSync(tmp, dst); // nothing there to replace
    return;
  }
  crashAt("restore:swapped");
  removeTree(tmp);
}

/** Prepares a restore into the host directory dst (hostDestination's answer for `path`). */
export function stageHost(dst: string, path: string): Staging {
  const there = lstatSync(dst, { throwIfNoEntry: false });
  if (there && !there.isDirectory()) {
    throw new NotFoundError(`${path}: exists and is not a directory`, "ENOTDIR");
  }
  makeDirs(dirname(dst));
  removeDeadLeftovers(dirname(dst), ".cvisor-restore~");
  const tmp = `${dirname(dst)}/.cvisor-restore~${ownerRecord()}`;
  mkdirSync(tmp, { mode: 0o700 });
  return {
    tmp,
    commit() {
      swapIn(tmp, dst);
    },
    abort() {
      removeTree(tmp);
    },
  };
}

/** Prepares a restore into sb:VPATH of the sandbox whose layer is {upper, work}. */
export function stageSandbox(
  layer: { upper: string; work: string },
  vpath: string,
  hidden: readonly string[],
  lowers: readonly string[] = [],
): Staging {
  const view = new MergedView(layer.upper, { hidden, lowers });
  let parent: ViewDir;
  let name: string;
  try {
    let r;
    try {
      r = view.resolve(vpath, true);
    } catch (err) {
      if (err instanceof ViewError) throw new NotFoundError(`sb:${err.message}`, err.code);
      throw err;
    }
    if (r.entry && !r.entry.st.isDirectory()) {
      throw new NotFoundError(`sb:${vpath}: exists and is not a directory`, "ENOTDIR");
    }
    if (r.entry?.open === view.root || r.name === "") {
      throw new UsageError(`sb:${vpath}: cannot restore over the sandbox's root`);
    }
    if (r.name.startsWith(WHITEOUT_PREFIX)) {
      throw new UsageError(`sb:${vpath}: names starting with .wh. are reserved`);
    }
    parent = r.parent;
    name = r.name;
  } catch (err) {
    view.dispose();
    throw err;
  }
  makeDirs(layer.work, 0o700);
  removeDeadLeftovers(layer.work, UPPER_RESTORE_STAGING);
  const tmp = `${layer.work}/${UPPER_RESTORE_STAGING}${ownerRecord()}`;
  mkdirSync(tmp, { mode: 0o700 });
  return {
    tmp,
    commit() {
      try {
        const fd = openDirPath(tmp);
        try {
          makeOpaqueIfNeeded(view, parent, name, fd);
        } finally {
          closeQuietly(fd);
        }
        const parentFd = upperDirOf(view, parent, layer.work);
        swapIn(tmp, at(parentFd, name));
        removeWhiteoutAt(parentFd, name);
      } finally {
        view.dispose();
      }
    },
    abort() {
      view.dispose();
      removeTree(tmp);
    },
  };
}
