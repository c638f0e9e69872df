// What `cvisor ui` shows, as plain data read through the library: the named sandboxes, the
// snapshots (as a tree for one sandbox), its changes, the caches, and a one-line doctor summary.
// No rendering here; the components (./view.tsx) draw it, the tests feed it.
import { scaleBytes } from "../cli/human.js";
import type { Change } from "../sandbox/changes.js";
import type { SandboxInfo } from "../sandbox/manage.js";
import type { EntryMeta } from "../store/cache-entry.js";
import type { SnapshotInfo } from "../../snapshots/ops.js";

export interface UiState {
  sandboxes: SandboxInfo[];
  snapshots: SnapshotInfo[];
  caches: EntryMeta[];
  /** Why the caches could not be listed, if they could not. */
  cacheError?: string;
  /** `doctor` in one line: "ok", or the checks that failed or warn. */
  doctor: string;
}

/** Where the UI's data comes from and where its actions go: the library (./main.ts). */
export interface UiSource {
  load(): Promise<UiState>;
  diff(sandbox: string): Promise<Change[]>;
  create(sandbox: string): Promise<void>;
  snapshot(sandbox: string): Promise<string>;
  rollback(sandbox: string, id: string): Promise<void>;
  branch(sandbox: string, to: string, id: string): Promise<void>;
  remove(sandbox: string): Promise<void>;
}

/** One row of a snapshot tree: the snapshot, how deep, and whether the sandbox sits on it. */
export interface TreeRow {
  id: string;
  depth: number;
  created: string;
  /** The sandbox was last set on it (its base). */
  base: boolean;
  /** Taken from another sandbox (a branch point shared with it). */
  from: string;
}

/**
 * The snapshots that concern `sb`: its base and every snapshot under it, the ones taken from
 * `sb`, and what branches from them; drawn as a tree by parent, oldest first.
 */
export function snapshotTree(all: readonly SnapshotInfo[], sb: SandboxInfo): TreeRow[] {
  const byId = new Map(all.filter((s) => !s.damaged).map((s) => [s.id, s]));
  const keep = new Set<string>();
  for (let id = sb.base; id !== null && !keep.has(id);) {
    keep.add(id);
    id = byId.get(id)?.parent ?? null;
  }
  for (const s of byId.values()) if (s.sandbox === sb.name) keep.add(s.id);
  // Branches off what is kept (another sandbox's snapshots on top of ours).
  for (let grew = true; grew;) {
    grew = false;
    for (const s of byId.values()) {
      if (!keep.has(s.id) && s.parent !== null && keep.has(s.parent)) {
        keep.add(s.id);
        grew = true;
      }
    }
  }
  const children = new Map<string | null, SnapshotInfo[]>();
  for (const id of keep) {
    const s = byId.get(id);
    if (!s) continue;
    const parent = s.parent !== null && keep.has(s.parent) ? s.parent : null;
    children.set(parent, [...(children.get(parent) ?? []), s]);
  }
  const rows: TreeRow[] = [];
  const walk = (parent: string | null, depth: number): void => {
    const kids = [...(children.get(parent) ?? [])].sort((a, b) =>
      a.created < b.created ? -1 : a.created > b.created ? 1 : a.id < b.id ? -1 : 1,
    );
    for (const s of kids) {
      rows.push({ id: s.id, depth, created: s.created, base: s.id === sb.base, from: s.sandbox });
      walk(s.id, depth + 1);
    }
  };
  walk(null, 0);
  return rows;
}

/** How many entries were added, changed and deleted. */
export function diffCounts(changes: readonly Change[]): { A: number; C: number; D: number } {
  const n = { A: 0, C: 0, D: 0 };
  for (const c of changes) n[c.kind]++;
  return n;
}

/** The sandboxes whose name holds filter (all when it is empty). */
export function filtered(list: readonly SandboxInfo[], filter: string): SandboxInfo[] {
  return filter === "" ? [...list] : list.filter((s) => s.name.includes(filter));
}

/** 1536 -> "1.5K": sizes in a narrow column. */
export function shortBytes(n: number): string {
  const { value, unit } = scaleBytes(n);
  return `${unit === 0 || value >= 10 ? Math.round(value) : value.toFixed(1)}${"BKMGT"[unit]}`;
}

/** An ISO time as an age: "now", "5m", "3h", "2d". */
export function age(iso: string | null, now = Date.now()): string {
  if (!iso) return "never";
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (Number.isNaN(s)) return "?";
  if (s < 60) return "now";
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}
