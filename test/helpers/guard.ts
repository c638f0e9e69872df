// The before/after oracle of the e2e suite. Each guarded test gets its own fixture tree; the
// tree and $HOME are snapshotted before the test (type, mode, owner, size, link count, mtime,
// ctime, content hash, symlink target, xattrs) and compared afterwards: any difference fails
// the test, naming the paths. $HOME is walked breadth-first with bounds, skipping caches and
// toolchains that other programs change on their own.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, lstatSync, openSync, readdirSync, readlinkSync, readSync } from "node:fs";
import path from "node:path";
import test, { type TestContext } from "node:test";
import { xattrTool } from "./cc.js";
import { createFixture, removeFixture, type Fixture, type FixtureOptions } from "./fixture.js";
import { homeDir } from "./repo.js";

export interface WalkOptions {
  maxEntries: number;
  maxDepth: number;
  /** Files up to this size are content-hashed; bigger ones are compared by metadata only. */
  hashMaxBytes: number;
  /** True to leave out an entry (and, for a directory, everything under it). */
  skip: (rel: string, name: string) => boolean;
  /**
   * Directories cvisor itself may create or touch (the parents of its state dir): their
   * times and link count are not compared, and they may appear. Their contents still are.
   */
  ownParents?: ReadonlySet<string>;
}

export interface Snapshot {
  root: string;
  entries: Map<string, string>;
  /** The walk stopped at maxEntries (later entries are not covered). */
  truncated: boolean;
  ownParents: ReadonlySet<string>;
}

const S_IFMT = 0o170000;
const TYPES: Record<number, string> = {
  0o100000: "file",
  0o040000: "dir",
  0o120000: "symlink",
  0o010000: "fifo",
  0o140000: "socket",
  0o020000: "chardev",
  0o060000: "blockdev",
};

function hashFile(file: string, size: bigint, max: number): string {
  if (size > BigInt(max)) return "big";
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (err) {
    return `unreadable:${(err as NodeJS.ErrnoException).code ?? "?"}`;
  }
  try {
    const hash = createHash("sha256");
    const buf = Buffer.alloc(65536);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
    }
    return hash.digest("hex");
  } catch (err) {
    return `unreadable:${(err as NodeJS.ErrnoException).code ?? "?"}`;
  } finally {
    closeSync(fd);
  }
}

function describeEntry(abs: string, hashMaxBytes: number, timeless = false): string {
  let st;
  try {
    st = lstatSync(abs, { bigint: true });
  } catch (err) {
    return `gone:${(err as NodeJS.ErrnoException).code ?? "?"}`;
  }
  const fmt = Number(st.mode) & S_IFMT;
  const type = TYPES[fmt] ?? `type${fmt.toString(8)}`;
  const parts = [
    type,
    `mode=${(Number(st.mode) & 0o7777).toString(8)}`,
    `owner=${st.uid}:${st.gid}`,
    ...(timeless ? [] : [`nlink=${st.nlink}`, `mtime=${st.mtimeNs}`, `ctime=${st.ctimeNs}`]),
  ];
  if (type !== "dir") parts.push(`size=${st.size}`);
  if (type === "file") parts.push(`sha256=${hashFile(abs, st.size, hashMaxBytes)}`);
  if (type === "symlink") {
    try {
      parts.push(`target=${readlinkSync(abs)}`);
    } catch {
      parts.push("target=?");
    }
  }
  return parts.join(" ");
}

/** Walks `root` breadth-first (sorted, so the same bound cuts the same set each time). */
export function snapshot(root: string, opts: WalkOptions, withXattrs = true): Snapshot {
  const entries = new Map<string, string>();
  const ownParents = opts.ownParents ?? new Set<string>();
  entries.set(".", describeEntry(root, opts.hashMaxBytes, ownParents.has(".")));
  let truncated = false;
  const queue: { rel: string; depth: number }[] = [{ rel: "", depth: 0 }];
  while (queue.length > 0 && !truncated) {
    const item = queue.shift();
    if (!item) break;
    const dirAbs = item.rel ? path.join(root, item.rel) : root;
    let names: string[];
    try {
      names = readdirSync(dirAbs).sort();
    } catch (err) {
      entries.set(
        `${item.rel || "."}/*`,
        `unlistable:${(err as NodeJS.ErrnoException).code ?? "?"}`,
      );
      continue;
    }
    for (const name of names) {
      const rel = item.rel ? `${item.rel}/${name}` : name;
      if (opts.skip(rel, name)) continue;
      if (entries.size >= opts.maxEntries) {
        truncated = true;
        break;
      }
      const desc = describeEntry(path.join(root, rel), opts.hashMaxBytes, ownParents.has(rel));
      entries.set(rel, desc);
      if (desc.startsWith("dir ") && item.depth + 1 < opts.maxDepth) {
        queue.push({ rel, depth: item.depth + 1 });
      }
    }
  }
  if (withXattrs) addXattrs(root, entries);
  return { root, entries, truncated, ownParents };
}

/** Appends " xattr:NAME=VALUEHEX" to each entry that has xattrs (one xattr-tool run). */
function addXattrs(root: string, entries: Map<string, string>): void {
  const rels = [...entries.keys()].filter((rel) => !rel.endsWith("/*"));
  const input = rels.map((rel) => `${rel === "." ? root : path.join(root, rel)}\0`).join("");
  const out = spawnSync(xattrTool(), ["dump"], { input, maxBuffer: 64 << 20 });
  if (out.status !== 0) {
    throw new Error(`xattr-tool dump failed: ${out.stderr?.toString() ?? String(out.error)}`);
  }
  for (const line of out.stdout.toString().split("\n")) {
    if (!line) continue;
    const [idx, name, value] = line.split("\t");
    const rel = rels[Number(idx)];
    if (rel === undefined) continue;
    const decoded =
      name === "ERR"
        ? `xattrs-unreadable(${value ?? ""})`
        : `xattr:${Buffer.from(name ?? "", "hex").toString()}=${value ?? ""}`;
    entries.set(rel, `${entries.get(rel) ?? ""} ${decoded}`);
  }
}

/** Lines describing what differs between two snapshots of the same root. */
export function diffSnapshots(before: Snapshot, after: Snapshot): string[] {
  const lines: string[] = [];
  for (const [rel, desc] of before.entries) {
    const now = after.entries.get(rel);
    if (now === undefined) {
      // A bounded walk may cut differently if entries were added before this one.
      if (!after.truncated) lines.push(`removed ${rel} (was: ${desc})`);
    } else if (now !== desc) {
      lines.push(`changed ${rel}\n    before: ${desc}\n    after:  ${now}`);
    }
  }
  for (const [rel, desc] of after.entries) {
    if (!before.entries.has(rel) && !before.truncated && !after.ownParents.has(rel)) {
      lines.push(`added ${rel} (${desc})`);
    }
  }
  return lines;
}

const FIXTURE_WALK: WalkOptions = {
  maxEntries: 100_000,
  maxDepth: 64,
  hashMaxBytes: 64 << 20,
  skip: () => false,
};

/** Directories (by name, at any depth) left out of the $HOME walk: caches and toolchains. */
const HOME_SKIP_NAMES = new Set([
  "node_modules",
  ".cache",
  ".npm",
  ".claude",
  ".pyenv",
  ".rustup",
  ".cargo",
  ".m2",
  ".gradle",
  ".nvm",
  ".bun",
  ".deno",
  "go",
  ".vscode-server",
]);
/** Files other programs rewrite on their own. */
const HOME_VOLATILE = /(_history|\.lesshst|\.viminfo|\.wget-hsts|\.sudo_as_admin_successful)$/;

function homeWalk(home: string): WalkOptions {
  // cvisor's own state (written by the supervisor, never by guests) and runtime dirs.
  const own: string[] = [];
  const env = process.env;
  const dataHome =
    env.XDG_DATA_HOME && path.isAbsolute(env.XDG_DATA_HOME)
      ? env.XDG_DATA_HOME
      : path.join(home, ".local", "share");
  for (const dir of [
    env.CVISOR_HOME,
    path.join(dataHome, "cvisor"),
    env.XDG_RUNTIME_DIR,
    env.TMPDIR,
  ]) {
    if (!dir || !path.isAbsolute(dir)) continue;
    const rel = path.relative(home, dir);
    if (rel && !rel.startsWith("..") && !path.isAbsolute(rel)) own.push(rel);
  }
  const ownParents = new Set<string>();
  for (const o of own) {
    for (let d = path.dirname(o); ; d = path.dirname(d)) {
      ownParents.add(d);
      if (d === ".") break;
    }
  }
  return {
    ownParents,
    maxEntries: 5000,
    maxDepth: 8,
    hashMaxBytes: 256 << 10,
    skip: (rel, name) =>
      HOME_SKIP_NAMES.has(name) ||
      HOME_VOLATILE.test(name) ||
      own.some((o) => rel === o || rel.startsWith(`${o}/`)),
  };
}

export function snapshotFixture(fx: Fixture): Snapshot {
  return snapshot(fx.root, FIXTURE_WALK);
}

export function snapshotHome(): Snapshot {
  const home = homeDir();
  return snapshot(home, homeWalk(home));
}

export interface GuardOptions {
  /** node:test timeout for the test (default 60 s). */
  timeout?: number;
  fixture?: FixtureOptions;
  skip?: boolean | string;
  /** A known gap: the test runs and is reported, and its failure does not fail the suite. */
  todo?: string;
  /** Leave $HOME out (never needed by e2e tests; for helper self-tests). */
  noHome?: boolean;
  /**
   * Adds to the fresh fixture tree before the "before" snapshot, so what it makes is guarded
   * like the rest of the tree (e.g. the differential suite's extra host files).
   */
  setup?: (fx: Fixture) => void;
}

/**
 * Runs `fn` with a fresh fixture, then fails if the fixture tree or $HOME changed.
 * Every e2e test goes through this (or `guarded` for subtests).
 */
export async function guarded(
  fn: (fx: Fixture) => Promise<void>,
  opts: GuardOptions = {},
): Promise<void> {
  const fx = createFixture(opts.fixture);
  try {
    opts.setup?.(fx);
    const beforeFx = snapshotFixture(fx);
    const beforeHome = opts.noHome ? undefined : snapshotHome();
    let failure: unknown;
    let failed = false;
    try {
      await fn(fx);
    } catch (err) {
      failure = err;
      failed = true;
    }
    const changes = diffSnapshots(beforeFx, snapshotFixture(fx)).map((l) => `fixture: ${l}`);
    if (beforeHome) {
      changes.push(...diffSnapshots(beforeHome, snapshotHome()).map((l) => `$HOME: ${l}`));
    }
    if (changes.length > 0) {
      const err = new assert.AssertionError({
        message:
          `the host changed while the guest ran (fixture ${fx.root}, $HOME ${homeDir()}):\n` +
          changes.join("\n"),
      });
      if (failed) err.cause = failure;
      throw err;
    }
    if (failed) throw failure;
  } finally {
    removeFixture(fx);
  }
}

/** A node:test test wrapped by the guard: `gtest("name", async (fx, t) => { ... })`. */
export function gtest(
  name: string,
  fn: (fx: Fixture, t: TestContext) => Promise<void>,
  opts: GuardOptions = {},
): void {
  const todo = opts.todo === undefined ? {} : { todo: opts.todo };
  void test(name, { timeout: opts.timeout ?? 60_000, skip: opts.skip ?? false, ...todo }, (t) =>
    guarded((fx) => fn(fx, t), opts),
  );
}
