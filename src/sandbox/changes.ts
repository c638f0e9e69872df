// What a sandbox changed against the host, read from its layers on disk (the format is in
// docs/ARCHITECTURE.md, "The overlay"): the upper over the read-only snapshot layers amounts to
// one layer (./effective-layer.ts), whose whiteouts delete what the host has, whose opaque
// directories replace the host's directory of their path, and whose other entries are added
// (nothing at that path on the host) or changed (the host has something there). Used by
// `cvisor diff`.
import { lstatSync, readdirSync } from "node:fs";
import { shownText, walkEffective } from "./effective-layer.js";

/** One changed path, as `docker diff` reports it. */
export interface Change {
  kind: "A" | "C" | "D";
  /** Absolute, in the sandbox's view. */
  path: string;
}

function hostHas(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The host directory's names (byte strings); none when it is not a directory. */
function hostNames(path: string): string[] {
  try {
    return readdirSync(path || "/", { encoding: "buffer" }).map((b) => b.toString("latin1"));
  } catch {
    return [];
  }
}

/**
 * The changes of a stack of layers (absolute roots, top first: the upper, then the snapshot
 * layers) against the host root, sorted by path. A name deleted in some layer is `D` only when
 * the host has it; a directory that no longer shows the host's (opaque) makes the host's other
 * entries there `D`.
 */
export function layerChanges(layers: readonly string[], host = ""): Change[] {
  const out = new Map<string, Change["kind"]>();
  const hostPath = (rel: string): string => `${host}/${shownText(rel)}`;
  // Directories that hide the host's: the names the layers show in each.
  const shadowing: { rel: string; names: Set<string> | undefined }[] = [];
  for (const e of walkEffective(layers)) {
    const parent = shadowing[shadowing.length - 1];
    if (e.kind !== "leave") parent?.names?.add(e.name);
    if (e.kind === "whiteout") {
      if (hostHas(hostPath(e.rel))) out.set(`/${shownText(e.rel)}`, "D");
      continue;
    }
    if (e.kind === "leave") {
      const done = shadowing.pop();
      if (done?.names) {
        for (const n of hostNames(hostPath(done.rel))) {
          const rel = done.rel === "" ? n : `${done.rel}/${n}`;
          if (!done.names.has(n)) out.set(`/${shownText(rel)}`, "D");
        }
      }
      continue;
    }
    if (e.rel !== "") out.set(`/${shownText(e.rel)}`, hostHas(hostPath(e.rel)) ? "C" : "A");
    if (e.st.isDirectory()) {
      shadowing.push({ rel: e.rel, names: e.below ? undefined : new Set() });
    }
  }
  return [...out]
    .map(([path, kind]) => ({ kind, path }))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
