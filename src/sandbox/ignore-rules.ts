// The ignore rules of a directory copy (`cvisor cp`, as cVisor's): the `.gitignore` and
// `.dockerignore` files found inside the copied tree, each in gitignore syntax (the `ignore`
// package), applied to the paths below its own directory, the way git applies nested
// .gitignore files: the rules of a deeper file win over those of the files above it, and within
// one directory .dockerignore's over .gitignore's; the last rule that matches decides, and a
// directory that is excluded is not entered (so nothing below it can be re-included). Ignore
// files above the copied directory, .git/info/exclude and the global excludes are not read.
// The ignore files themselves are copied unless a rule excludes them.
import { closeSync, readSync, type Stats } from "node:fs";
import ignore, { type Ignore } from "ignore";

/** The names read in each directory, lowest precedence first. */
const IGNORE_FILES = [".gitignore", ".dockerignore"] as const;

/** Ignore files bigger than this are not read (no real one is). */
const MAX_IGNORE_FILE = 1 << 20;

/** Where the ignore files of a tree are read from: entries looked up and opened in a directory. */
export interface IgnoreSource<D, E extends { st: Stats }> {
  lookup(dir: D, name: string): E | undefined;
  openFile(dir: D, e: E): number;
}

/**
 * The text of the ignore file `name` in dir, or undefined when it is missing, not a regular
 * file, too big or unreadable (an unreadable entry is reported when the copy looks it up).
 */
function readIgnoreFile<D, E extends { st: Stats }>(
  src: IgnoreSource<D, E>,
  dir: D,
  name: string,
): string | undefined {
  let e: E | undefined;
  try {
    e = src.lookup(dir, name);
  } catch {
    return undefined;
  }
  if (e === undefined || !e.st.isFile() || e.st.size > MAX_IGNORE_FILE) return undefined;
  let fd: number;
  try {
    fd = src.openFile(dir, e);
  } catch {
    return undefined;
  }
  try {
    const buf = Buffer.alloc(e.st.size);
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    return buf.subarray(0, n).toString("utf8");
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

interface Level {
  /** The directory the rules belong to, relative to the copy's root ("" for the root). */
  base: string;
  rules: Ignore;
}

/** rules for the directory dir (at rel in the tree), with its own ignore files read from src. */
export function enterIgnoreFiles<D, E extends { st: Stats }>(
  rules: IgnoreRules,
  rel: string,
  src: IgnoreSource<D, E>,
  dir: D,
): IgnoreRules {
  return rules.enter(
    rel,
    IGNORE_FILES.map((n) => readIgnoreFile(src, dir, n)),
  );
}

export class IgnoreRules {
  private constructor(private readonly levels: readonly Level[]) {}

  /** No rules: nothing is ignored. */
  static none(): IgnoreRules {
    return new IgnoreRules([]);
  }

  /**
   * The rules inside the directory at `rel` (relative to the copy's root, "" for the root),
   * given the texts of its ignore files in IGNORE_FILES order (undefined: no such file).
   */
  enter(rel: string, texts: readonly (string | undefined)[]): IgnoreRules {
    const present = texts.filter((t): t is string => t !== undefined && t.trim() !== "");
    if (present.length === 0) return this;
    const rules = ignore({ allowRelativePaths: true });
    for (const text of present) rules.add(text);
    return new IgnoreRules([...this.levels, { base: rel, rules }]);
  }

  /** Is the entry at `rel` (relative to the copy's root) excluded? */
  ignores(rel: string, isDir: boolean): boolean {
    for (let i = this.levels.length - 1; i >= 0; i--) {
      const level = this.levels[i] as Level;
      const sub = level.base === "" ? rel : rel.slice(level.base.length + 1);
      let result;
      try {
        result = level.rules.test(isDir ? `${sub}/` : sub);
      } catch {
        continue; // a name the package cannot test: no rule applies
      }
      if (result.ignored) return true;
      if (result.unignored) return false;
    }
    return false;
  }
}
