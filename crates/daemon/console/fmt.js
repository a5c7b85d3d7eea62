// Number formatting for the console: sizes in binary units (as the CLI prints them),
// rates, latencies, times. Pure functions, no DOM.

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

/** 1536 -> "1.5 KiB"; null/undefined -> "–". */
export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${UNITS[i]}`;
}

/** Bytes per second. */
export function rate(n) {
  return `${bytes(n)}/s`;
}

/** 12345 -> "12.3k"; small numbers keep one decimal when fractional. */
export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const a = Math.abs(n);
  if (a >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  if (Number.isInteger(n) || a >= 100) return `${Math.round(n)}`;
  return n.toFixed(1);
}

/** Operations per second. */
export function iops(n) {
  return `${count(n)}/s`;
}

/** A latency in microseconds: "850 µs", "1.2 ms", "3.4 s". */
export function micros(us) {
  if (us === null || us === undefined || Number.isNaN(us)) return '–';
  if (us < 1000) return `${Math.round(us)} µs`;
  if (us < 1e6) return `${(us / 1000).toFixed(us < 1e4 ? 2 : 1)} ms`;
  return `${(us / 1e6).toFixed(2)} s`;
}

/** Seconds as "45 s", "3 min 20 s", "2 h 05 min". */
export function seconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return '–';
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(s / 3600);
  if (h < 48) return `${h} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** A percentage with one decimal. */
export function percent(p) {
  if (p === null || p === undefined || Number.isNaN(p)) return '–';
  return `${Number(p).toFixed(p >= 99.95 || p === 0 ? 0 : 1)} %`;
}

/** Nanoseconds since 1970 -> "2026-11-03 14:05:09" (local time). */
export function time(ns) {
  if (!ns) return '–';
  const d = new Date(Number(ns) / 1e6);
  const p = (x) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Nanoseconds since 1970 -> "5 s ago", "3 min ago", "2 h ago", or the date. */
export function ago(ns) {
  if (!ns) return '–';
  const s = (Date.now() - Number(ns) / 1e6) / 1000;
  if (s < 0) return 'now';
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return time(ns).slice(0, 10);
}

/** A compression ratio: 2.513 -> "2.51×". */
export function ratio(r) {
  return r === null || r === undefined ? '–' : `${Number(r).toFixed(2)}×`;
}

/** "16K", "10G", "1.5T" (binary units, as the CLI) -> bytes; "" -> null; throws on nonsense. */
export function parseSize(s) {
  const t = String(s || '').trim();
  if (t === '') return null;
  const m = /^([0-9]*\.?[0-9]+)\s*([KMGTP]?)(i?B)?$/i.exec(t);
  if (!m) throw new Error(`size "${t}": use a number with K, M, G, T or P (e.g. 10G)`);
  const mult = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40, P: 2 ** 50 }[m[2].toUpperCase()];
  return Math.round(Number(m[1]) * mult);
}
