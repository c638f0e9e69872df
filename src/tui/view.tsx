// The pieces `cvisor ui` draws (Ink): the sandbox list, one sandbox's details (its snapshot
// tree and what it changed), the diff list, the caches, a confirm or input line, the help. They
// take plain data (./model.ts) and draw it within `width` columns; colours go with NO_COLOR.
import { Box, Text } from "ink";
import type { Change } from "../sandbox/changes.js";
import type { SandboxInfo } from "../sandbox/manage.js";
import type { EntryMeta } from "../store/cache-entry.js";
import { age, diffCounts, shortBytes, type TreeRow } from "./model.js";

/** A colour, or none when NO_COLOR is set (https://no-color.org). */
export function tint(color: string): string | undefined {
  const no = process.env.NO_COLOR;
  return no !== undefined && no !== "" ? undefined : color;
}

/** "just now", "5m ago". */
function ago(iso: string): string {
  const a = age(iso);
  return a === "now" ? "just now" : `${a} ago`;
}

/** s cut to width columns ("…" at the end when cut). */
export function fit(s: string, width: number): string {
  if (width <= 0) return "";
  return s.length <= width ? s : `${s.slice(0, Math.max(0, width - 1))}…`;
}

export function SandboxList(props: {
  list: readonly SandboxInfo[];
  selected: number;
  width: number;
  height: number;
}) {
  const { list, selected, width, height } = props;
  if (list.length === 0) {
    return <Text dimColor>{fit("no sandboxes (n makes one)", width)}</Text>;
  }
  const first = Math.max(0, Math.min(selected - Math.floor(height / 2), list.length - height));
  const shown = list.slice(first, first + height);
  return (
    <Box flexDirection="column">
      {shown.map((s, i) => {
        const at = first + i === selected;
        const running = s.running > 0 ? ` ▶${s.running}` : "";
        const right = s.damaged ? " damaged" : ` ${shortBytes(s.sizeBytes)}${running}`;
        const name = fit(s.name, Math.max(4, width - right.length - 2));
        const line = `${at ? "›" : " "} ${name}${right.padStart(width - name.length - 2)}`;
        return (
          <Text key={s.name} inverse={at} color={s.damaged ? tint("red") : undefined}>
            {fit(line, width)}
          </Text>
        );
      })}
    </Box>
  );
}

export function Details(props: {
  sandbox: SandboxInfo | undefined;
  tree: readonly TreeRow[];
  changes: readonly Change[] | undefined;
  width: number;
}) {
  const { sandbox: s, tree, changes, width } = props;
  if (!s) return <Text dimColor>{fit("select a sandbox", width)}</Text>;
  if (s.damaged) {
    return (
      <Box flexDirection="column">
        <Text bold>{fit(s.name, width)}</Text>
        <Text color={tint("red")} wrap="wrap">
          {s.damaged}
        </Text>
        <Text dimColor>{fit("x removes it", width)}</Text>
      </Box>
    );
  }
  const n = changes ? diffCounts(changes) : undefined;
  const facts = [
    `${s.layers} layer${s.layers === 1 ? "" : "s"}`,
    shortBytes(s.sizeBytes),
    `created ${ago(s.created)}`,
    s.lastRun ? `last run ${ago(s.lastRun)}` : "never run",
    s.running > 0 ? `${s.running} running` : "",
  ].filter(Boolean);
  return (
    <Box flexDirection="column">
      <Text bold>{fit(s.name, width)}</Text>
      <Text wrap="wrap">{facts.join(" · ")}</Text>
      <Text>
        {n === undefined ? (
          <Text dimColor>changes: …</Text>
        ) : (
          <>
            {"changes: "}
            <Text color={tint("green")}>{`A ${n.A}`}</Text>
            {"  "}
            <Text color={tint("yellow")}>{`C ${n.C}`}</Text>
            {"  "}
            <Text color={tint("red")}>{`D ${n.D}`}</Text>
          </>
        )}
      </Text>
      <Text> </Text>
      <Text bold>snapshots</Text>
      {tree.length === 0 ? (
        <Text dimColor>{fit("none (s takes one)", width)}</Text>
      ) : (
        tree.map((r) => {
          const mark = r.base ? " ← base" : r.from !== s.name ? ` (${r.from})` : "";
          const line = `${"  ".repeat(r.depth)}${r.depth ? "└ " : ""}${r.id}${mark}`;
          return (
            <Text key={r.id} color={r.base ? tint("cyan") : undefined}>
              {fit(line, width)}
            </Text>
          );
        })
      )}
    </Box>
  );
}

export function DiffList(props: {
  name: string;
  changes: readonly Change[] | undefined;
  top: number;
  width: number;
  height: number;
}) {
  const { name, changes, top, width, height } = props;
  const color = { A: tint("green"), C: tint("yellow"), D: tint("red") };
  return (
    <Box flexDirection="column">
      <Text bold>{fit(`changes in ${name} (esc: back, ↑↓ PgUp PgDn: scroll)`, width)}</Text>
      {changes === undefined ? (
        <Text dimColor>reading…</Text>
      ) : changes.length === 0 ? (
        <Text dimColor>{fit("nothing changed", width)}</Text>
      ) : (
        changes.slice(top, top + height).map((c) => (
          <Text key={`${c.kind}${c.path}`} color={color[c.kind]}>
            {fit(`${c.kind} ${c.path}`, width)}
          </Text>
        ))
      )}
    </Box>
  );
}

export function CacheList(props: {
  caches: readonly EntryMeta[];
  error: string | undefined;
  width: number;
  height: number;
}) {
  const { caches, error, width, height } = props;
  return (
    <Box flexDirection="column">
      <Text bold>{fit("caches (esc: back)", width)}</Text>
      {error !== undefined ? (
        <Text color={tint("red")}>{fit(error, width)}</Text>
      ) : caches.length === 0 ? (
        <Text dimColor>{fit("no cache entries", width)}</Text>
      ) : (
        caches.slice(0, height).map((e) => {
          const right = ` ${e.format} ${shortBytes(e.size)} ${age(e.created)}`;
          const key = fit(e.key, Math.max(4, width - right.length));
          return (
            <Text key={e.key}>{fit(`${key}${right.padStart(width - key.length)}`, width)}</Text>
          );
        })
      )}
    </Box>
  );
}

/** The one line at the bottom: a question, an input being typed, a message, or the keys. */
export function Footer(props: {
  ask: string | undefined;
  input: string | undefined;
  message: { text: string; error: boolean } | undefined;
  width: number;
}) {
  const { ask, input, message, width } = props;
  if (ask !== undefined && input !== undefined)
    return <Text>{fit(`${ask} ${input}▏`, width)}</Text>;
  if (ask !== undefined) return <Text color={tint("yellow")}>{fit(`${ask} (y/n)`, width)}</Text>;
  if (message) {
    return (
      <Text color={message.error ? tint("red") : tint("green")}>{fit(message.text, width)}</Text>
    );
  }
  return (
    <Text dimColor>
      {fit(
        "enter shell · n new · s snapshot · r rollback · b branch · x remove · d diff · c caches · / filter · ? help · q quit",
        width,
      )}
    </Text>
  );
}

export const HELP_LINES = [
  "↑/↓ or k/j   select a sandbox",
  "enter        open a shell in it (on its own terminal; exit to come back)",
  "n            new sandbox (asks for a name)",
  "s            snapshot its changes",
  "r            roll back to the snapshot it is on (drops what changed since)",
  "b            branch: a new sandbox on the snapshot it is on",
  "x            remove it (its snapshots stay)",
  "d            what it changed, as a list",
  "c            the caches",
  "/            filter the list by name (esc clears)",
  "?            this help",
  "q            quit",
];

export function Help(props: { width: number }) {
  return (
    <Box flexDirection="column">
      <Text bold>{fit("keys (esc: back)", props.width)}</Text>
      {HELP_LINES.map((l) => (
        <Text key={l}>{fit(l, props.width)}</Text>
      ))}
    </Box>
  );
}
