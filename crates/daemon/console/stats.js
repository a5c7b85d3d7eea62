// Live I/O figures: GET /v1/stats every second while signed in, turned into rates per
// volume (all protocols added up) as `strata iostat` does: the difference of two samples
// over the difference of their `uptime_seconds`. Latency percentiles are those of the
// interval, from the difference of the two latency histograms. The newest HISTORY points
// per volume are kept in memory (two minutes: enough to see a load start or stop).

import { get } from './api.js';

export const HISTORY = 120;
const PERIOD_MS = 1000;

let previous = null; // key -> totals of the last sample
let previousUptime = null;
const history = new Map(); // key -> {readIops: [], ...}
const listeners = new Set();
let timer = null;
let lastError = null;

const FIELDS = ['readIops', 'writeIops', 'syncIops', 'readBps', 'writeBps', 'readP99', 'writeP99'];

/** Totals of one volume over its protocols. */
function totals(entries) {
  const t = { read: 0, write: 0, sync: 0, readBytes: 0, writeBytes: 0, readHist: new Map(), writeHist: new Map() };
  for (const e of entries) {
    t.read += e.read.ops;
    t.write += e.write.ops;
    t.sync += e.sync.ops;
    t.readBytes += e.read.bytes;
    t.writeBytes += e.write.bytes;
    for (const [hi, n] of e.read.latency_us_buckets) t.readHist.set(hi, (t.readHist.get(hi) || 0) + n);
    for (const [hi, n] of e.write.latency_us_buckets) t.writeHist.set(hi, (t.writeHist.get(hi) || 0) + n);
  }
  return t;
}

/** The q-quantile of the operations between two histograms (null with none). */
function quantile(now, before, q) {
  const diff = [];
  let n = 0;
  for (const [hi, c] of now) {
    const d = c - ((before && before.get(hi)) || 0);
    if (d > 0) {
      diff.push([hi, d]);
      n += d;
    }
  }
  if (n === 0) return null;
  diff.sort((a, b) => a[0] - b[0]);
  const rank = Math.ceil(n * q);
  let seen = 0;
  for (const [hi, d] of diff) {
    seen += d;
    if (seen >= rank) return hi;
  }
  return diff[diff.length - 1][0];
}

function push(key, point) {
  let s = history.get(key);
  if (!s) {
    s = Object.fromEntries(FIELDS.map((f) => [f, []]));
    history.set(key, s);
  }
  for (const f of FIELDS) {
    s[f].push(point[f]);
    if (s[f].length > HISTORY) s[f].shift();
  }
}

async function sample() {
  let st;
  try {
    st = await get('/v1/stats');
    lastError = null;
  } catch (e) {
    lastError = e;
    return;
  }
  const byVolume = new Map();
  for (const e of st.volumes) {
    const key = `${e.pool}/${e.volume}`;
    if (!byVolume.has(key)) byVolume.set(key, []);
    byVolume.get(key).push(e);
  }
  const now = new Map([...byVolume].map(([k, v]) => [k, totals(v)]));
  if (previous) {
    const dt = st.uptime_seconds - previousUptime;
    for (const [key, t] of now) {
      const p = previous.get(key);
      // A counter that went down was reset (volume re-created, daemon restarted): skip.
      if (!p || dt <= 0 || t.read < p.read || t.write < p.write) continue;
      push(key, {
        readIops: (t.read - p.read) / dt,
        writeIops: (t.write - p.write) / dt,
        syncIops: (t.sync - p.sync) / dt,
        readBps: (t.readBytes - p.readBytes) / dt,
        writeBps: (t.writeBytes - p.writeBytes) / dt,
        readP99: quantile(t.readHist, p.readHist, 0.99),
        writeP99: quantile(t.writeHist, p.writeHist, 0.99),
      });
    }
  }
  previous = now;
  previousUptime = st.uptime_seconds;
  for (const f of listeners) f();
}

/** Start sampling (after sign-in). */
export function start() {
  if (timer) return;
  sample();
  timer = setInterval(sample, PERIOD_MS);
}

/** Stop and forget (sign-out). */
export function stop() {
  clearInterval(timer);
  timer = null;
  previous = null;
  history.clear();
}

/** The history of POOL/VOLUME: {readIops: [...], ...}, or empty arrays. */
export function series(key) {
  return history.get(key) || Object.fromEntries(FIELDS.map((f) => [f, []]));
}

/** The newest point of POOL/VOLUME, or null. */
export function latest(key) {
  const s = history.get(key);
  if (!s || s.readIops.length === 0) return null;
  return Object.fromEntries(FIELDS.map((f) => [f, s[f][s[f].length - 1]]));
}

/** Called after each sample. Returns the unsubscribe function. */
export function subscribe(f) {
  listeners.add(f);
  return () => listeners.delete(f);
}

export function error() {
  return lastError;
}

/** Every volume's history added up, aligned on the newest point (latencies: the worst). */
export function total() {
  const out = Object.fromEntries(FIELDS.map((f) => [f, []]));
  const n = Math.max(0, ...[...history.values()].map((s) => s.readIops.length));
  for (const f of FIELDS) {
    out[f] = new Array(n).fill(null);
    for (const s of history.values()) {
      const off = n - s[f].length;
      s[f].forEach((v, i) => {
        if (v === null) return;
        const cur = out[f][off + i];
        out[f][off + i] = cur === null ? v : f.endsWith('P99') ? Math.max(cur, v) : cur + v;
      });
    }
  }
  return out;
}
