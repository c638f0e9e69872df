// The ignore rules of a directory copy (`cvisor cp`, as cVisor's): the `.gitignore` and
// `.dockerignore` files found inside the copied tree, each in gitignore syntax (the `ignore`
// package), applied to the paths below its own directory, the way git applies nested
// .gitignore files: the rules of a deeper file win over those of the files above it, and within
// one directory .dockerignore's over .gitignore's; the last rule that matches decides, and a
// directory that is excluded is not entered (so nothing below it can be re-included). Ignore
// files above the copied directory, .git/info/exclude and the global excludes are not read.
// The ignore files themselves are copied unless a rule excludes them.
import ignore, { type Ignore } from "ignore";

/** The names read in each directory, lowest precedence first. */
export const IGNORE_FILES = [".gitignore", ".dockerignore"] as const;

interface Level {
  /** The directory the rules belong to, relative to the copy's root ("" for the root). */
  base: string;
  rules: Ignore;
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
