/**
 * Hand-written SVG helpers for the HTML report: scales, nice ticks, axes, polylines, bars, legend.
 * Everything returns strings; every piece of text goes through escapeXml.
 */

export function escapeXml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

/** Coordinates rounded to 0.1 px (short, stable output). */
export function num(value: number): string {
  const rounded = Math.round(value * 10) / 10;
  return Object.is(rounded, -0) ? '0' : String(rounded);
}

/** Tick values at a 1 / 2 / 5 × 10^k step covering [min, max], about `count` of them. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (max === min) return [min];
  const raw = (max - min) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].map((factor) => factor * power).find((candidate) => candidate >= raw) ??
    10 * power) as number;
  const ticks: number[] = [];
  for (let value = Math.ceil(min / step - 1e-9) * step; value <= max + step * 1e-9; value += step)
    ticks.push(Number(value.toPrecision(12)));
  return ticks;
}

/** Extends [min, max] outward to the nice step, so the axis ends on ticks. */
export function niceDomain(min: number, max: number, count = 5): [number, number] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (max === min) return min === 0 ? [0, 1] : [Math.min(0, min), Math.max(0, max) * 1.1 || 1];
  const raw = (max - min) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((factor) => factor * power).find((candidate) => candidate >= raw) ?? 10 * power;
  return [Math.floor(min / step) * step, Math.ceil(max / step) * step];
}

export interface Scale {
  readonly domain: readonly [number, number];
  readonly range: readonly [number, number];
  (value: number): number;
}

export function linearScale(domain: readonly [number, number], range: readonly [number, number]): Scale {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  const fn = (value: number): number => (d1 === d0 ? (r0 + r1) / 2 : r0 + ((value - d0) / (d1 - d0)) * (r1 - r0));
  return Object.assign(fn, { domain, range });
}

export interface Frame {
  readonly width: number;
  readonly height: number;
  readonly left: number;
  readonly right: number;
  readonly top: number;
  readonly bottom: number;
}

export const DEFAULT_FRAME: Frame = { width: 640, height: 360, left: 60, right: 150, top: 36, bottom: 48 };

export function plotArea(frame: Frame): { x0: number; x1: number; y0: number; y1: number } {
  return { x0: frame.left, x1: frame.width - frame.right, y0: frame.height - frame.bottom, y1: frame.top };
}

export function text(x: number, y: number, content: string, attrs = ''): string {
  return `<text x="${num(x)}" y="${num(y)}"${attrs ? ` ${attrs}` : ''}>${escapeXml(content)}</text>`;
}

export function formatTick(value: number): string {
  if (Math.abs(value) >= 1000) return String(Math.round(value));
  return String(Number(value.toPrecision(4)));
}

/** Bottom axis with ticks at `ticks` (or labelled categories), left axis with y ticks and grid lines. */
export function axes(
  frame: Frame,
  x: { scale: (value: number) => number; ticks: readonly { value: number; label: string }[]; label: string },
  y: { scale: Scale; ticks: readonly number[]; label: string },
): string {
  const area = plotArea(frame);
  const parts = [`<g class="axes" font-size="11" fill="#333">`];
  parts.push(
    `<line x1="${num(area.x0)}" y1="${num(area.y0)}" x2="${num(area.x1)}" y2="${num(area.y0)}" stroke="#333"/>`,
  );
  parts.push(
    `<line x1="${num(area.x0)}" y1="${num(area.y0)}" x2="${num(area.x0)}" y2="${num(area.y1)}" stroke="#333"/>`,
  );
  for (const tick of x.ticks) {
    const px = x.scale(tick.value);
    parts.push(`<line x1="${num(px)}" y1="${num(area.y0)}" x2="${num(px)}" y2="${num(area.y0 + 4)}" stroke="#333"/>`);
    parts.push(text(px, area.y0 + 16, tick.label, 'text-anchor="middle"'));
  }
  for (const tick of y.ticks) {
    const py = y.scale(tick);
    parts.push(`<line x1="${num(area.x0)}" y1="${num(py)}" x2="${num(area.x1)}" y2="${num(py)}" stroke="#e5e5e5"/>`);
    parts.push(text(area.x0 - 6, py + 4, formatTick(tick), 'text-anchor="end"'));
  }
  parts.push(text((area.x0 + area.x1) / 2, frame.height - 10, x.label, 'text-anchor="middle"'));
  parts.push(
    text(
      14,
      (area.y0 + area.y1) / 2,
      y.label,
      `text-anchor="middle" transform="rotate(-90 14 ${num((area.y0 + area.y1) / 2)})"`,
    ),
  );
  parts.push('</g>');
  return parts.join('');
}

export function polyline(
  points: readonly (readonly [number, number])[],
  color: string,
  options: { dashed?: boolean; label?: string } = {},
): string {
  const coords = points.map(([px, py]) => `${num(px)},${num(py)}`).join(' ');
  const dash = options.dashed ? ' stroke-dasharray="6 4"' : '';
  const label = options.label === undefined ? '' : ` data-series="${escapeXml(options.label)}"`;
  return `<polyline${label} points="${coords}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`;
}

/** One data point as a dot: a series of one point has no line to draw (a one-point sweep). */
export function marker(x: number, y: number, color: string, options: { label?: string; title?: string } = {}): string {
  const label = options.label === undefined ? '' : ` data-series="${escapeXml(options.label)}"`;
  const tooltip = options.title === undefined ? '' : `<title>${escapeXml(options.title)}</title>`;
  return `<circle${label} cx="${num(x)}" cy="${num(y)}" r="5" fill="${color}">${tooltip}</circle>`;
}

export function rect(x: number, y: number, width: number, height: number, color: string, title?: string): string {
  const tooltip = title === undefined ? '' : `<title>${escapeXml(title)}</title>`;
  return `<rect x="${num(x)}" y="${num(y)}" width="${num(Math.max(0, width))}" height="${num(Math.max(0, height))}" fill="${color}">${tooltip}</rect>`;
}

export interface LegendItem {
  readonly label: string;
  readonly color: string;
  readonly kind?: 'line' | 'dashed' | 'box';
}

/** Legend in the frame's right margin. */
export function legend(frame: Frame, items: readonly LegendItem[]): string {
  const x = frame.width - frame.right + 14;
  const parts = [`<g class="legend" font-size="11" fill="#333">`];
  items.forEach((item, index) => {
    const y = frame.top + 8 + index * 18;
    if (item.kind === 'box') parts.push(rect(x, y - 6, 16, 10, item.color));
    else
      parts.push(
        `<line x1="${num(x)}" y1="${num(y)}" x2="${num(x + 16)}" y2="${num(y)}" stroke="${item.color}" ` +
          `stroke-width="2"${item.kind === 'dashed' ? ' stroke-dasharray="6 4"' : ''}/>`,
      );
    parts.push(text(x + 22, y + 4, item.label));
  });
  parts.push('</g>');
  return parts.join('');
}

export function svg(frame: Frame, title: string, body: string): string {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${frame.width}" height="${frame.height}" viewBox="0 ` +
    `0 ${frame.width} ${frame.height}" role="img" aria-label="${escapeXml(title)}">` +
    `<title>${escapeXml(title)}</title>` +
    text(frame.left, 20, title, 'font-size="14" font-weight="bold" fill="#111"') +
    body +
    '</svg>'
  );
}
