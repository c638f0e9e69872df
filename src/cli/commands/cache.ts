// `cvisor [--sandbox NAME] cache save|restore|ls|rm`: directory caches for CI, as actions/cache
// keeps them (cache/ holds the work: formats, lookup, backends, safe extraction). PATH is a host
// directory or sb:/DIR of the sandbox (--sandbox, else "default"): save reads the sandbox's
// merged view, restore writes its upper layer. Messages go to stderr, --json summaries to
// stdout, a progress line to stderr when it is a terminal.
import type { Command } from "commander";
import { sandboxHelp, type ToPlan } from "./define.js";
import { isatty } from "node:tty";
import { CvisorError, UsageError } from "../../core/errors.js";
import type { CachePath } from "../../sandbox/caches.js";
import type { Skipped } from "../../sandbox/copy-tree.js";
import { targetSandbox } from "./define.js";
import { writeStderr } from "../errors.js";
import { EXIT_CACHE_MISS, EXIT_OK } from "../exit-codes.js";
import { ProgressLine } from "../progress.js";
import { humanBytes, humanTime, ignoredNote, writeTable } from "../human.js";
import type { StoreCommandPlan } from "../plan.js";

const SB = "sb:";

function usage(message: string): CvisorError {
  return new UsageError(message);
}

/** The progress line of a save or restore: bytes (of the total, with an ETA, when known), rate. */
function progressText(
  p: ProgressLine,
  label: string,
  done: number,
  total?: number,
  extra = "",
): string {
  const rate = done / p.seconds();
  let text = `${label} ${humanBytes(done)}`;
  if (total !== undefined && total > 0) {
    const eta = rate > 0 ? Math.max(0, (total - done) / rate) : 0;
    text += ` of ${humanBytes(total)} (${Math.floor((done / total) * 100)}%), ETA ${Math.ceil(eta)}s`;
  }
  return `${text}${extra}, ${humanBytes(rate)}/s`;
}

type Target = { kind: "host"; path: string } | { kind: "sb"; vpath: string };

function target(text: string): Target {
  if (text === "") throw usage("cache: an empty path");
  if (!text.startsWith(SB)) return { kind: "host", path: text };
  const vpath = text.slice(SB.length);
  if (!vpath.startsWith("/"))
    throw usage(`cache: sandbox paths are absolute: sb:/PATH (not ${text})`);
  return { kind: "sb", vpath };
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function out(obj: unknown): void {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

export async function action(plan: StoreCommandPlan): Promise<number> {
  const [{ Cache }, { isFormat, validateKey }] = await Promise.all([
    import("../../sandbox/caches.js"),
    import("../../../cache/backend.js"),
  ]);
  const [sub, ...args] = plan.operands;
  const o = plan.options;
  const json = plan.json;
  const cache = new Cache(
    { backend: str(o.cacheBackend), readOnly: o.readOnly === true },
    "--cache-backend",
  );
  const description = await cache.description();
  const onSkip = (progress: ProgressLine) => (s: Skipped) => {
    progress.clear();
    writeStderr(`cvisor: cache: skipped ${s.path}: ${s.reason}\n`);
  };
  /** A PATH operand: a host path, or sb:/DIR of the sandbox the command acts on. */
  const cachePath = (text: string): CachePath => {
    const t = target(text);
    return t.kind === "host" ? t.path : { sandbox: targetSandbox(plan), path: t.vpath };
  };
  switch (sub) {
    case "save": {
      const [key = "", path = ""] = args;
      validateKey(key);
      const format = str(o.format) ?? "gzip";
      if (!isFormat(format)) {
        throw usage(`cache save: unknown --format ${format} (use gzip, zstd, estargz or none)`);
      }
      const from = cachePath(path);
      const progress = new ProgressLine(!json && isatty(2), writeStderr, 300);
      let result;
      try {
        result = await cache.save(key, from, {
          format,
          ignore: o.ignore !== false,
          force: o.force === true,
          onSkip: onSkip(progress),
          onProgress: (read, written) =>
            progress.update(() =>
              progressText(
                progress,
                "cache save:",
                read,
                undefined,
                ` read, ${humanBytes(written)} written`,
              ),
            ),
        });
      } finally {
        progress.clear();
      }
      if (!result.saved) {
        writeStderr(
          `cvisor: cache entry ${key} already exists in ${description}: not saved ` +
            `(entries are never replaced; --force replaces it)\n`,
        );
        if (json) out({ saved: false, key, backend: description, reason: "exists" });
        return EXIT_OK;
      }
      const { entry: meta, report } = result;
      if (json) {
        out({
          saved: true,
          key,
          backend: description,
          format: meta.format,
          size: meta.size,
          sha256: meta.sha256,
          created: meta.created,
          files: report.files,
          dirs: report.dirs,
          symlinks: report.symlinks,
          hardlinks: report.hardlinks,
          bytes: report.bytes,
          ignored: report.ignored,
          skipped: report.skipped,
        });
      } else {
        writeStderr(
          `cvisor: saved ${path} as cache entry ${key} in ${description}: ` +
            `${report.files} files, ${humanBytes(report.bytes)} -> ${humanBytes(meta.size)} ${meta.format}` +
            (report.ignored > 0 ? `; ${ignoredNote(report.ignored, "saves")}` : "") +
            "\n",
        );
      }
      return EXIT_OK;
    }
    case "restore": {
      const [key = "", path = ""] = args;
      const to = cachePath(path);
      const restoreKeys = Array.isArray(o.restoreKey) ? o.restoreKey : [];
      const progress = new ProgressLine(!json && isatty(2), writeStderr, 300);
      let result;
      try {
        result = await cache.restore(key, to, {
          restoreKeys,
          allowExternalLinks: o.allowExternalLinks === true,
          onSkip: onSkip(progress),
          onProgress: (read, total) =>
            progress.update(() => progressText(progress, "cache restore:", read, total)),
        });
      } finally {
        progress.clear();
      }
      if (result.hit === "miss" || result.entry === undefined) {
        const keys = restoreKeys.length > 0 ? " nor for the restore keys" : "";
        writeStderr(
          `cvisor: cache miss: no entry for ${key}${keys} in ${description}; ${path} is unchanged\n`,
        );
        if (json) out({ hit: "miss", key, backend: description, path });
        return o.failOnMiss === true ? EXIT_CACHE_MISS : EXIT_OK;
      }
      const { entry, report } = result;
      if (json) {
        out({
          hit: result.hit,
          key,
          matchedKey: entry.key,
          ...(result.matchedPrefix !== undefined ? { matchedPrefix: result.matchedPrefix } : {}),
          backend: description,
          path,
          format: entry.format,
          size: entry.size,
          created: entry.created,
          files: report?.files ?? 0,
          dirs: report?.dirs ?? 0,
          symlinks: report?.symlinks ?? 0,
          hardlinks: report?.hardlinks ?? 0,
          bytes: report?.bytes ?? 0,
          skipped: report?.skipped ?? [],
        });
      } else {
        const how =
          result.hit === "exact" ? "exact match" : `prefix match of ${result.matchedPrefix ?? key}`;
        writeStderr(
          `cvisor: restored cache entry ${entry.key} (${how}) into ${path}: ` +
            `${report?.files ?? 0} files, ${humanBytes(report?.bytes ?? 0)}\n`,
        );
      }
      return EXIT_OK;
    }
    case "ls": {
      const [prefix = ""] = args;
      const { entries, damaged } = await cache.list(prefix);
      if (damaged.length > 0) {
        const shown = damaged.slice(0, 3).join(", ") + (damaged.length > 3 ? ", ..." : "");
        writeStderr(
          `cvisor: ${damaged.length === 1 ? "1 cache entry" : `${damaged.length} cache entries`} in ` +
            `${description} ${damaged.length === 1 ? "is" : "are"} damaged (unreadable ` +
            `metadata: ${shown}); cvisor cache rm KEY or cache rm --all removes them\n`,
        );
      }
      if (json) {
        out(entries);
      } else {
        if (entries.length === 0) {
          process.stdout.write(
            prefix
              ? `no cache entries whose key starts with ${prefix} in ${description}\n`
              : `no cache entries yet in ${description} (cvisor cache save KEY PATH makes one)\n`,
          );
          return EXIT_OK;
        }
        writeTable([
          ["KEY", "FORMAT", "SIZE", "CREATED"],
          ...entries.map((e) => [e.key, e.format, humanBytes(e.size), humanTime(e.created)]),
        ]);
      }
      return EXIT_OK;
    }
    case "rm": {
      const [key] = args;
      if ((key === undefined) === (o.all !== true)) {
        throw usage("cache rm needs KEY or --all (not both)");
      }
      let removed: string[];
      let damaged = 0;
      if (key !== undefined) {
        await cache.remove(key);
        removed = [key];
      } else {
        ({ removed, damaged } = await cache.removeAll());
      }
      if (json) out({ backend: description, removed, ...(damaged ? { damaged } : {}) });
      else
        writeStderr(
          `cvisor: removed ${removed.length} cache entr${removed.length === 1 ? "y" : "ies"}` +
            (damaged ? ` and ${damaged} damaged one${damaged === 1 ? "" : "s"}` : "") +
            ` from ${description}\n`,
        );
      return EXIT_OK;
    }
    default:
      throw usage(`cache: unknown subcommand ${sub ?? ""} (save, restore, ls, rm)`);
  }
}

/** `cvisor [--sandbox NAME] cache save|restore|ls|rm` (action() above carries them out). */
export function define(program: Command, to: ToPlan): void {
  const cache = program
    .command("cache")
    .description(
      "directory caches for CI: save a directory (host, or sb:/DIR of the sandbox) under a key, restore it later",
    )
    .helpOption("-h, --help", "print this help");
  const common = (c: Command): Command =>
    c
      .option(
        "--cache-backend <spec>",
        "where entries live: disk (default), disk:/PATH or s3://BUCKET/PREFIX (else $CVISOR_CACHE_BACKEND)",
      )
      .option("--read-only", "refuse to write to the backend")
      .option("--json", "print a summary as JSON")
      .helpOption("-h, --help", "print this help");
  const run =
    (sub: string) =>
    (...args: unknown[]): void => {
      // commander passes the operands, then the options, then the command.
      const opts = args[args.length - 2] as StoreCommandPlan["options"];
      const operands = args
        .slice(0, -2)
        .flatMap((a) =>
          Array.isArray(a) ? (a as string[]) : a === undefined ? [] : [a as string],
        );
      to("cache", [sub, ...operands], opts);
    };
  common(
    cache
      .command("save")
      .description("save the directory PATH as the cache entry KEY (never replaces an entry)")
      .argument("<key>", "the entry's key (at most 512 characters)")
      .argument("<path>", "a host directory, or sb:/DIR in the sandbox (--sandbox, else 'default')")
      .option("--format <format>", "gzip (default), zstd, estargz or none")
      .option("--no-ignore", "save what .gitignore and .dockerignore exclude too")
      .option("--force", "replace an existing entry of that key")
      .addHelpText("after", sandboxHelp("the sandbox an sb:/DIR path is in")),
  ).action(run("save"));
  common(
    cache
      .command("restore")
      .description(
        "replace the directory PATH with the entry KEY, else the newest entry whose key starts with KEY, else with each --restore-key in order",
      )
      .argument("<key>", "the key to look up")
      .argument("<path>", "a host directory, or sb:/DIR in the sandbox (--sandbox, else 'default')")
      .option(
        "--restore-key <prefix>",
        "a key prefix to fall back to; repeatable, tried in order",
        (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
      )
      .option("--fail-on-miss", "exit 1 when no entry matches")
      .option(
        "--allow-external-links",
        "accept symlinks that lead outside PATH (absolute or ../ targets, e.g. a virtualenv's)",
      )
      .addHelpText("after", sandboxHelp("the sandbox an sb:/DIR path is in")),
  ).action(run("restore"));
  common(
    cache
      .command("ls")
      .description("list the entries (whose key starts with PREFIX), newest first")
      .argument("[prefix]", "a key prefix"),
  ).action(run("ls"));
  common(
    cache
      .command("rm")
      .description("remove the entry KEY (or every entry with --all)")
      .argument("[key]", "the entry to remove")
      .option("--all", "remove every entry"),
  ).action(run("rm"));
}
