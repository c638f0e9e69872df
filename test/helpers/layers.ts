// Layer trees built by hand for the tests of the merged view, squash, diff and export: a spec
// maps relative paths to a file's content, a symlink, or a directory (whiteouts and opaque
// markers are just files named `.wh.NAME` and `.wh..wh..opq`); and the whole merged view dumped
// as path -> what is there, to compare two views (or a view and an expected tree).
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { MergedView, type ViewDir } from "../../src/sandbox/view.js";

export type Spec = Record<string, string | { link: string } | { dir: true } | null>;

/** Fixed, whole-second times, so that copies compare equal. */
export const T0 = 1_300_000_000;

/** Makes the objects of spec under root (a directory: null or {dir: true}). */
export function build(root: string, spec: Spec): void {
  mkdirSync(root, { recursive: true });
  for (const [rel, v] of Object.entries(spec)) {
    const p = join(root, rel);
    if (v === null || (typeof v === "object" && "dir" in v)) {
      mkdirSync(p, { recursive: true });
      continue;
    }
    mkdirSync(dirname(p), { recursive: true });
    if (typeof v === "string") writeFileSync(p, v);
    else symlinkSync(v.link, p);
  }
}

export interface DumpOptions {
  /** Add each object's mode and mtime. */
  modes?: boolean;
  /** Only below this directory of the view (a symlink-free path), not from the root. */
  under?: string;
}

/** The view's whole tree: "/a/b" -> "file:CONTENT" | "link:TARGET" | "dir" | "other", sorted. */
export function dumpView(view: MergedView, opts: DumpOptions = {}): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: ViewDir): void => {
    for (const name of view.list(dir).names) {
      const e = view.lookup(dir, name);
      if (e === undefined) {
        out[`${dir.vpath === "/" ? "" : dir.vpath}/${name}`] = "listed but not found";
        continue;
      }
      const meta = opts.modes ? ` ${(e.st.mode & 0o7777).toString(8)} ${e.st.mtimeMs}` : "";
      if (e.st.isDirectory()) {
        out[e.vpath] = `dir${meta}`;
        const d = view.openDir(dir, e);
        try {
          walk(d);
        } finally {
          view.close(d);
        }
      } else if (e.st.isSymbolicLink()) {
        out[e.vpath] = `link:${view.readlink(dir, e)}${meta}`;
      } else if (e.st.isFile()) {
        out[e.vpath] = `file:${readFileSync(view.realPath(dir, e), "utf8")}${meta}`;
      } else {
        out[e.vpath] = "other";
      }
    }
  };
  const top = opts.under === undefined ? undefined : view.resolve(`${opts.under}/.`, true).entry;
  walk(top?.open ?? view.root);
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** dumpView of upper over lowers over host, disposed after. */
export function dumpLayers(
  upper: string,
  lowers: readonly string[],
  host: string,
  opts: DumpOptions = {},
): Record<string, string> {
  const view = new MergedView(upper, { host, lowers });
  try {
    return dumpView(view, opts);
  } finally {
    view.dispose();
  }
}

/** Gives every directory and file below root (and root) the time T0, deepest first. */
export function fixTimes(root: string, rel = ""): void {
  const p = rel ? join(root, rel) : root;
  const st = lstatSync(p);
  if (st.isDirectory()) {
    for (const name of readdirSync(p)) fixTimes(root, rel ? `${rel}/${name}` : name);
  }
  if (!st.isSymbolicLink()) utimesSync(p, T0, T0);
}
