/**
 * A one-line progress bar for long runs: redrawn in place on a terminal, one line per 10 % step
 * otherwise (CI logs, pipes), so progress shows either way without flooding a log.
 */
export interface ProgressSink {
  readonly isTTY: boolean;
  write(text: string): void;
}

export class ProgressBar {
  private done = 0;
  private total = 0;
  private label = '';
  private lastDecile = -1;
  private readonly startedAt: number;

  constructor(
    private readonly sink: ProgressSink,
    private readonly now: () => number = () => Date.now(),
    private readonly width = 24,
  ) {
    this.startedAt = now();
  }

  /** A new phase: `total` steps, described by `label`. */
  begin(label: string, total: number): void {
    this.label = label;
    this.total = total;
    this.done = 0;
    this.lastDecile = -1;
    this.draw();
  }

  tick(steps = 1): void {
    this.done = Math.min(this.total, this.done + steps);
    this.draw();
  }

  /** Ends the phase's line (terminal) so the next output starts on a new line. */
  end(): void {
    if (this.sink.isTTY) this.sink.write('\n');
  }

  /** The bar's text, e.g. `[######······] 12/24  50 %  cacheaware · seed 1  0:42`. */
  line(): string {
    const ratio = this.total === 0 ? 1 : this.done / this.total;
    const filled = Math.round(ratio * this.width);
    const elapsedS = Math.floor((this.now() - this.startedAt) / 1000);
    const clock = `${Math.floor(elapsedS / 60)}:${String(elapsedS % 60).padStart(2, '0')}`;
    return (
      `[${'#'.repeat(filled)}${'·'.repeat(this.width - filled)}] ${this.done}/${this.total} ${String(Math.floor(ratio * 100)).padStart(3)} ` +
      `%  ${this.label}  ${clock}`
    );
  }

  private draw(): void {
    if (this.sink.isTTY) {
      this.sink.write(`\r\x1b[2K${this.line()}`);
      return;
    }
    const decile = this.total === 0 ? 10 : Math.floor((10 * this.done) / this.total);
    if (decile !== this.lastDecile) {
      this.lastDecile = decile;
      this.sink.write(`${this.line()}\n`);
    }
  }
}
