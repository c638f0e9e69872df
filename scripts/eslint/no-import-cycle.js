// ESLint rule: no module may reach itself through static relative imports (types only do not
// count: TypeScript erases them). A cycle means two modules own each other's job; it also makes
// load order matter. The graph is read from the files themselves, once per lint run.
import { existsSync, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

const IMPORT = /(?:^|\n)\s*(?:import|export)\s+(?!type\s)([^;]*?)\s*from\s*"(\.[^"]+)"/g;
const BARE = /(?:^|\n)\s*import\s*"(\.[^"]+)"/g;

const edges = new Map();

/** The file a relative specifier names (sources are .ts/.tsx/.cts, imported as .js/.cjs). */
function target(from, spec) {
  const base = resolve(dirname(from), spec);
  for (const c of [
    base,
    base.replace(/\.js$/, ".ts"),
    base.replace(/\.js$/, ".tsx"),
    base.replace(/\.cjs$/, ".cts"),
  ]) {
    if (existsSync(c) && /\.(ts|tsx|cts)$/.test(c)) return c;
  }
  return undefined;
}

/** The runtime imports of file, with the offset of each in its text. */
function importsOf(file) {
  let out = edges.get(file);
  if (out) return out;
  out = [];
  let text = "";
  try {
    text = readFileSync(file, "utf8");
  } catch {
    // Not readable: no edges.
  }
  for (const m of text.matchAll(IMPORT)) {
    const names = m[1].trim();
    // import { type A, type B } from ...: erased.
    const braces = /^\{([^}]*)\}$/.exec(names);
    if (braces && braces[1].split(",").every((n) => n.trim() === "" || /^type\s/.test(n.trim())))
      continue;
    const t = target(file, m[2]);
    if (t) out.push({ file: t, index: m.index + m[0].indexOf("from") });
  }
  for (const m of text.matchAll(BARE)) {
    const t = target(file, m[1]);
    if (t) out.push({ file: t, index: m.index });
  }
  edges.set(file, out);
  return out;
}

/** A path of files from start back to goal, or undefined. */
function pathBack(start, goal) {
  const seen = new Set();
  const stack = [[start, [start]]];
  while (stack.length > 0) {
    const [file, path] = stack.pop();
    if (file === goal) return path;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const e of importsOf(file)) stack.push([e.file, [...path, e.file]]);
  }
  return undefined;
}

export default {
  meta: {
    type: "problem",
    docs: { description: "forbid import cycles between modules of the project" },
    schema: [],
    messages: { cycle: "import cycle: {{cycle}}" },
  },
  create(context) {
    const file = resolve(context.filename);
    return {
      "Program:exit"(node) {
        for (const e of importsOf(file)) {
          const back = pathBack(e.file, file);
          if (!back) continue;
          const root = context.cwd ?? process.cwd();
          const cycle = [file, ...back].map((f) => f.slice(root.length + 1)).join(" -> ");
          const loc = context.sourceCode.getLocFromIndex(e.index);
          context.report({ node, loc, messageId: "cycle", data: { cycle } });
          return;
        }
      },
    };
  },
};
