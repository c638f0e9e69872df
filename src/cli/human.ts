// Sizes, times and tables as people read them, the same in every command's output.

/** n bytes in binary steps: the value and the index of its unit (0: bytes, 1: KiB, ... 4: TiB). */
export function scaleBytes(n: number): { value: number; unit: number } {
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    unit++;
  }
  return { value, unit };
}

/** 1536 -> "1.5 KB" (binary units, one decimal). */
export function humanBytes(n: number): string {
  const { value, unit } = scaleBytes(n);
  return `${unit === 0 ? value : value.toFixed(1)} ${["B", "KB", "MB", "GB", "TB"][unit]}`;
}

/** "2026-12-02T07:01:02.704Z" -> "2026-12-02 07:01:02Z"; null -> "never". */
export function humanTime(iso: string | null): string {
  if (iso === null) return "never";
  return iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** Rows (the first one the header) as aligned columns, two spaces apart, on stdout. */
export function writeTable(rows: readonly (readonly string[])[]): void {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
  for (const r of rows) {
    const line = r.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ");
    process.stdout.write(`${line.trimEnd()}\n`);
  }
}

/** What the ignore files kept out of a copy or a save: "left out 2 entries that ... (--no-ignore copies them)". */
export function ignoredNote(count: number, verb: "copies" | "saves"): string {
  const what = count === 1 ? "1 entry" : `${count} entries`;
  return `left out ${what} that .gitignore or .dockerignore exclude (--no-ignore ${verb} them)`;
}
