// `cvisor ui`'s screen and keys: the sandboxes (live), the selected one's details, and the views
// and actions the footer lists. Every action goes through `source` (the library); a failure is a
// line in the footer. Enter hands the selected sandbox to `onShell`, which ends this screen (the
// shell needs the terminal) and draws it again after.
import { Box, Text, useApp, useInput, useStdout } from "ink";
import { useCallback, useEffect, useRef, useState } from "react";
import type { Change } from "../sandbox/changes.js";
import { filtered, snapshotTree, type UiSource, type UiState } from "./model.js";
import { CacheList, Details, DiffList, fit, Footer, Help, SandboxList, tint } from "./view.js";

type Mode = "main" | "diff" | "caches" | "help";

interface Pending {
  ask: string;
  /** Set when the question takes typed text (a name); undefined for y/n. */
  input?: string;
  run: (text: string) => Promise<string>;
}

export interface AppProps {
  source: UiSource;
  /** Open a shell in this sandbox (the screen ends first). */
  onShell: (sandbox: string) => void;
  /** The sandbox to select at start (after a shell). */
  initial?: string;
  /** How often the list is read again (ms). */
  refreshMs?: number;
}

export function App({ source, onShell, initial, refreshMs = 2000 }: AppProps) {
  const { exit } = useApp();
  const { stdout } = useStdout();
  const [size, setSize] = useState({ cols: stdout.columns || 80, rows: stdout.rows || 24 });
  const [state, setState] = useState<UiState | undefined>(undefined);
  const [selectedName, setSelectedName] = useState<string | undefined>(initial);
  const [filter, setFilter] = useState("");
  const [mode, setModeState] = useState<Mode>("main");
  const [changes, setChanges] = useState<{ name: string; list: Change[] } | undefined>();
  const [top, setTop] = useState(0);
  const [pending, setPendingState] = useState<Pending | undefined>();
  // Keys of one chunk (a paste, fast typing) come in one go, before React draws again: the
  // handler reads the question and the view from refs, set with the state.
  const pendingRef = useRef<Pending | undefined>(undefined);
  const modeRef = useRef<Mode>("main");
  const setPending = (p: Pending | undefined): void => {
    pendingRef.current = p;
    setPendingState(p);
  };
  const setMode = (m: Mode): void => {
    modeRef.current = m;
    setModeState(m);
  };
  const [message, setMessage] = useState<{ text: string; error: boolean } | undefined>();
  const alive = useRef(true);

  const reload = useCallback(async () => {
    try {
      const next = await source.load();
      if (alive.current) setState(next);
    } catch (err) {
      if (alive.current) setMessage({ text: errorText(err), error: true });
    }
  }, [source]);

  useEffect(() => {
    void reload();
    const timer = setInterval(() => void reload(), refreshMs);
    const onResize = (): void => setSize({ cols: stdout.columns || 80, rows: stdout.rows || 24 });
    stdout.on("resize", onResize);
    return () => {
      alive.current = false;
      clearInterval(timer);
      stdout.off("resize", onResize);
    };
  }, [reload, refreshMs, stdout]);

  const list = filtered(state?.sandboxes ?? [], filter);
  const index = Math.max(
    0,
    list.findIndex((s) => s.name === selectedName),
  );
  const current = list[index];

  // What the selected sandbox changed: read when it is selected and when it changed (a run, a
  // snapshot, a rollback), not at every reload: a diff walks the whole layer.
  const name = current?.damaged ? undefined : current?.name;
  const version = current ? `${current.lastRun}/${current.sizeBytes}/${current.layers}` : "";
  useEffect(() => {
    if (name === undefined) return;
    let live = true;
    source.diff(name).then(
      (list) => live && setChanges({ name, list }),
      (err: unknown) => live && setMessage({ text: errorText(err), error: true }),
    );
    return () => {
      live = false;
    };
  }, [source, name, version]);

  const act = (p: Pending): void => {
    setMessage(undefined);
    setPending(p);
  };
  const finish = async (p: Pending, text: string): Promise<void> => {
    setPending(undefined);
    try {
      setMessage({ text: await p.run(text), error: false });
    } catch (err) {
      setMessage({ text: errorText(err), error: true });
    }
    await reload();
  };

  useInput((input, key) => {
    const pending = pendingRef.current;
    const mode = modeRef.current;
    if (pending) {
      if (pending.input !== undefined) {
        if (key.escape) setPending(undefined);
        else if (key.return) void finish(pending, pending.input.trim());
        else if (key.backspace || key.delete)
          setPending({ ...pending, input: pending.input.slice(0, -1) });
        else if (input && !key.ctrl && !key.meta)
          setPending({ ...pending, input: pending.input + input });
        return;
      }
      if (input === "y" || input === "Y") void finish(pending, "");
      else setPending(undefined);
      return;
    }
    if (mode !== "main") {
      const page = Math.max(1, size.rows - 4);
      const total = changes?.list.length ?? 0;
      if (key.escape || input === "q" || (mode === "help" && input === "?")) setMode("main");
      else if (mode === "diff" && (key.downArrow || input === "j"))
        setTop((t) => Math.min(t + 1, Math.max(0, total - 1)));
      else if (mode === "diff" && (key.upArrow || input === "k")) setTop((t) => Math.max(0, t - 1));
      else if (mode === "diff" && key.pageDown)
        setTop((t) => Math.min(t + page, Math.max(0, total - 1)));
      else if (mode === "diff" && key.pageUp) setTop((t) => Math.max(0, t - page));
      return;
    }
    setMessage(undefined);
    const move = (d: number): void => {
      const next = list[Math.min(list.length - 1, Math.max(0, index + d))];
      if (next) setSelectedName(next.name);
    };
    if (key.downArrow || input === "j") move(1);
    else if (key.upArrow || input === "k") move(-1);
    else if (input === "q" || (key.ctrl && input === "c")) exit();
    else if (input === "?") setMode("help");
    else if (input === "c") setMode("caches");
    else if (key.escape && filter !== "") setFilter("");
    else if (input === "/") {
      act({
        ask: "filter:",
        input: filter,
        run: async (text) => (
          setFilter(text),
          text ? `showing names with "${text}"` : "showing all"
        ),
      });
    } else if (input === "n") {
      act({
        ask: "new sandbox name:",
        input: "",
        run: async (name) => {
          await source.create(name);
          setSelectedName(name);
          return `made ${name}`;
        },
      });
    } else if (!current) {
      if ("sdrbx\r".includes(input) || key.return)
        setMessage({ text: "no sandbox selected", error: true });
    } else if (key.return) {
      if (current.damaged)
        setMessage({ text: `${current.name} is damaged: x removes it`, error: true });
      else {
        onShell(current.name);
        exit(); // Ink gives the terminal back (raw mode off, its stdin listener gone)
      }
    } else if (input === "d") {
      setTop(0);
      setMode("diff");
    } else if (input === "s") {
      act({
        ask: `snapshot ${current.name}?`,
        run: async () => `snapshot ${await source.snapshot(current.name)} taken`,
      });
    } else if (input === "x") {
      act({
        ask: `remove ${current.name}? its snapshots stay`,
        run: async () => {
          await source.remove(current.name);
          return `removed ${current.name}`;
        },
      });
    } else if (input === "r" || input === "b") {
      const base = current.base;
      if (base === null) {
        setMessage({ text: `${current.name} is on no snapshot yet (s takes one)`, error: true });
      } else if (input === "r") {
        act({
          ask: `roll ${current.name} back to ${base}? what changed since is lost`,
          run: async () => {
            await source.rollback(current.name, base);
            return `${current.name} rolled back to ${base}`;
          },
        });
      } else {
        act({
          ask: `branch ${base} as:`,
          input: "",
          run: async (to) => {
            await source.branch(current.name, to, base);
            setSelectedName(to);
            return `${to} branched from ${base}`;
          },
        });
      }
    }
  });

  const width = size.cols;
  const bodyRows = Math.max(3, size.rows - 3);
  const wide = width >= 80;
  const listWidth = wide ? Math.min(32, Math.floor(width / 3)) : width;
  const detailWidth = wide ? width - listWidth - 3 : width;
  const title = `cvisor · ${state ? `${state.sandboxes.length} sandboxes` : "reading…"}${filter ? ` · filter "${filter}"` : ""}`;
  const doctor = state ? `doctor: ${state.doctor}` : "";

  let body;
  if (mode === "help") body = <Help width={width} />;
  else if (mode === "caches") {
    body = (
      <CacheList
        caches={state?.caches ?? []}
        error={state?.cacheError}
        width={width}
        height={bodyRows - 1}
      />
    );
  } else if (mode === "diff") {
    body = (
      <DiffList
        name={current?.name ?? ""}
        changes={changes && changes.name === current?.name ? changes.list : undefined}
        top={top}
        width={width}
        height={bodyRows - 1}
      />
    );
  } else {
    const tree = current && state ? snapshotTree(state.snapshots, current) : [];
    const details = (
      <Details
        sandbox={current}
        tree={tree}
        changes={changes && changes.name === current?.name ? changes.list : undefined}
        width={detailWidth}
      />
    );
    const listView = (
      <SandboxList
        list={list}
        selected={index}
        width={listWidth}
        height={wide ? bodyRows : Math.max(3, Math.floor(bodyRows / 2))}
      />
    );
    body = wide ? (
      <Box>
        <Box width={listWidth} flexDirection="column">
          {listView}
        </Box>
        <Box width={3}>
          <Text> </Text>
        </Box>
        <Box width={detailWidth} flexDirection="column">
          {details}
        </Box>
      </Box>
    ) : (
      <Box flexDirection="column">
        {listView}
        <Text dimColor>{"─".repeat(Math.max(0, width))}</Text>
        {details}
      </Box>
    );
  }
  return (
    <Box flexDirection="column" width={width}>
      <Box justifyContent="space-between" width={width}>
        <Text bold color={tint("cyan")}>
          {fit(title, Math.max(0, width - doctor.length - 1))}
        </Text>
        <Text dimColor>{fit(doctor, width > 60 ? width - title.length - 1 : 0)}</Text>
      </Box>
      <Box flexDirection="column" height={bodyRows}>
        {body}
      </Box>
      <Footer ask={pending?.ask} input={pending?.input} message={message} width={width} />
    </Box>
  );
}

function errorText(err: unknown): string {
  return err instanceof Error ? (err.message.split("\n")[0] ?? String(err)) : String(err);
}
