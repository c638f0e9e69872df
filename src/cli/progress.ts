// The progress line on stderr that long commands (cp, cache save and restore) show on a
// terminal: redrawn in place at most every 100 ms, cleared before any other line is written.

const EVERY_MS = 100;

export class ProgressLine {
  private readonly start = Date.now();
  private last = 0;
  private shown = false;

  /** enabled: stderr is a terminal (and no --json); nothing shows before delayMs. */
  constructor(
    private readonly enabled: boolean,
    private readonly write: (text: string) => void,
    private readonly delayMs = 0,
  ) {}

  /** Seconds since the command started (never 0: rates divide by it). */
  seconds(): number {
    return Math.max((Date.now() - this.start) / 1000, 0.001);
  }

  /** Redraws the line with text() when it is time (text is only built then). */
  update(text: () => string): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.last < EVERY_MS || now - this.start < this.delayMs) return;
    this.last = now;
    this.shown = true;
    this.write(`\r\x1b[K${text()}`);
  }

  /** Removes the line (before a warning, and at the end). */
  clear(): void {
    if (this.shown) this.write("\r\x1b[K");
    this.shown = false;
    this.last = 0;
  }
}
