// Hand-drawn SVG charts: a line chart with a grid, y labels and a legend, and a sparkline
// for tables. Values are drawn newest on the right over a fixed window of `capacity`
// points (one a second), so a chart fills from the right as samples arrive.

import { h } from './ui.js';

const PAD_L = 62;
const PAD_R = 8;
const PAD_T = 8;
const PAD_B = 18;

/** The smallest "round" number at or above v: 1, 2, 2.5, 5 × 10^k, or with `binary` a
 *  power of two (so that a quarter of it is a round number of KiB or MiB). */
function niceMax(v, binary = false) {
  if (!(v > 0)) return 1;
  if (binary) return 2 ** Math.ceil(Math.log2(v));
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function points(values, capacity, x0, x1, y0, y1, max) {
  const n = values.length;
  const dx = (x1 - x0) / Math.max(1, capacity - 1);
  const out = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined || Number.isNaN(v)) return;
    const x = x1 - (n - 1 - i) * dx;
    const y = y1 - (Math.min(v, max) / max) * (y1 - y0);
    out.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  return out;
}

/**
 * series: [{key, name, cls, values, fill?}] (same length, oldest first); format: value ->
 * text; floor: the least top of the scale (an idle volume shows a flat line at 0 on a
 * sensible scale, not on 0–1 B/s); width: the drawing's width in CSS pixels (the page
 * measures its container), so that text is drawn at its real size.
 * The returned element carries data-metric, data-points and data-latest-KEY (the newest
 * value of each series, unformatted): what the browser test reads.
 */
export function lineChart({ metric, title, series, format, floor = 1, binary = false, width = 600, capacity = 120, height = 170 }) {
  const W = Math.max(240, Math.round(width));
  const y0 = PAD_T;
  const y1 = height - PAD_B;
  const all = series.flatMap((s) => s.values).filter((v) => Number.isFinite(v));
  const max = niceMax(Math.max(floor, ...all), binary);
  const svg = h('svg:svg', { viewBox: `0 0 ${W} ${height}`, width: W, height, class: 'chart-svg', role: 'img', 'aria-label': title });
  for (let i = 0; i <= 4; i += 1) {
    const y = y1 - (i / 4) * (y1 - y0);
    svg.append(h('svg:line', { x1: PAD_L, x2: W - PAD_R, y1: y, y2: y, class: i === 0 ? 'axis' : 'grid' }));
    svg.append(h('svg:text', { x: PAD_L - 6, y: y + 4, class: 'ylabel', 'text-anchor': 'end' }, format((max * i) / 4)));
  }
  svg.append(h('svg:text', { x: PAD_L, y: height - 3, class: 'xlabel' }, `−${capacity} s`));
  svg.append(h('svg:text', { x: W - PAD_R, y: height - 3, class: 'xlabel', 'text-anchor': 'end' }, 'now'));
  for (const s of series) {
    const pts = points(s.values, capacity, PAD_L, W - PAD_R, y0, y1, max);
    if (pts.length === 0) continue;
    if (s.fill && pts.length > 1) {
      const first = pts[0].split(',')[0];
      const last = pts[pts.length - 1].split(',')[0];
      svg.append(h('svg:polygon', { points: `${first},${y1} ${pts.join(' ')} ${last},${y1}`, class: `area ${s.cls}` }));
    }
    svg.append(h('svg:polyline', { points: pts.join(' '), class: `line ${s.cls}` }));
  }
  const dataset = { metric, points: String(Math.max(0, ...series.map((s) => s.values.length))) };
  const legend = series.map((s) => {
    const last = s.values.length ? s.values[s.values.length - 1] : null;
    dataset[`latest${s.key[0].toUpperCase()}${s.key.slice(1)}`] = last === null || !Number.isFinite(last) ? '' : String(last);
    return h('span', { class: 'legend-item' }, h('span', { class: `swatch ${s.cls}` }), s.name, ' ',
      h('strong', {}, last === null || !Number.isFinite(last) ? '–' : format(last)));
  });
  return h('div', { class: 'chart', dataset },
    h('div', { class: 'chart-head' }, h('h4', {}, title), h('div', { class: 'legend' }, legend)), svg);
}

/** A small line for a table cell (no axes). */
export function sparkline(values, cls = 's-write', capacity = 60) {
  const w = 120;
  const ht = 26;
  const max = niceMax(Math.max(0, ...values.filter((v) => Number.isFinite(v))));
  const svg = h('svg:svg', { viewBox: `0 0 ${w} ${ht}`, class: 'spark' });
  svg.append(h('svg:line', { x1: 0, x2: w, y1: ht - 1, y2: ht - 1, class: 'axis' }));
  const pts = points(values.slice(-capacity), capacity, 1, w - 1, 2, ht - 2, max);
  if (pts.length) svg.append(h('svg:polyline', { points: pts.join(' '), class: `line ${cls}` }));
  return svg;
}
