// Volumes: every volume's space and live activity; a volume's page adds its space in
// detail, live charts of IOPS, throughput and p99 latency (GET /v1/stats each second,
// stats.js), its snapshots with their clones, and its mount and exports.

import { get, seg, allVolumes } from './api.js';
import { h, badge, capacityBar, card, facts, table, page, empty, link } from './ui.js';
import * as fmt from './fmt.js';
import * as stats from './stats.js';
import { lineChart, sparkline } from './chart.js';
import * as act from './actions.js';

const key = (v) => `${v.pool}/${v.name}`;
const href = (v) => `#/volumes/${seg(v.pool)}/${seg(v.name)}`;

/** Bytes held only by snapshots: born in the volume, no longer live. */
export function snapshotBytes(v) {
  return v.origin ? null : Math.max(0, v.total_bytes - v.used_bytes);
}

function savings(v) {
  if (v.saved_bytes === null || v.saved_bytes === undefined) return '–';
  return `${fmt.bytes(v.saved_bytes)} (${fmt.ratio(v.compress_ratio)})`;
}

function where(v, mounts, exports) {
  const m = mounts.find((x) => x.volume === key(v));
  const xs = exports.filter((x) => x.volume === key(v) || x.volume.startsWith(`${key(v)}@`));
  return [
    v.lun ? badge(`LUN ${fmt.bytes(v.lun.size_bytes)}`, 'info') : null,
    m ? h('code', {}, m.path) : null,
    xs.map((x) => badge(x.protocol, 'ok')),
    !m && !xs.length && !v.lun ? h('span', { class: 'muted' }, '–') : null,
  ];
}

function liveCells(k) {
  const l = stats.latest(k);
  const s = stats.series(k);
  const through = s.writeBps.map((w, i) => w + s.readBps[i]);
  return [
    h('span', { class: 'rate', dataset: { liveRate: k } }, l ? `${fmt.rate(l.writeBps)} / ${fmt.rate(l.readBps)}` : '–'),
    h('span', { dataset: { liveSpark: k } }, sparkline(through)),
  ];
}

async function list() {
  const pools = await get('/v1/pools');
  const [vols, mounts, exports] = await Promise.all([allVolumes(pools), get('/v1/mounts'), get('/v1/exports')]);
  const create = act.actionButton('Create volume', 'operator', () => act.createVolume(pools.map((p) => p.name)),
    { action: 'create-volume', cls: 'primary' });
  if (!vols.length) return page('Volumes', [create], empty('No volumes yet.', 'Create one, then mount or export it.'));
  const rows = vols.map((v) => {
    const [rate, spark] = liveCells(key(v));
    return [
      h('span', {}, link(href(v), key(v)), v.origin ? h('div', { class: 'muted small' }, `clone of ${v.origin}`) : null),
      fmt.bytes(v.used_bytes),
      v.logical_bytes === null ? '–' : fmt.bytes(v.logical_bytes),
      savings(v),
      v.snapshots ? `${v.snapshots} · ${snapshotBytes(v) === null ? '–' : fmt.bytes(snapshotBytes(v))}` : '0',
      v.size_bytes ? h('span', {}, capacityBar(v.used_bytes, v.size_bytes), fmt.bytes(v.size_bytes)) : h('span', { class: 'muted' }, 'thin'),
      where(v, mounts, exports),
      rate,
      spark,
    ];
  });
  return page('Volumes', [create], card(null,
    table([{ label: 'Volume' }, { label: 'Used', cls: 'num' }, { label: 'Logical', cls: 'num' }, { label: 'Saved', cls: 'num' },
      { label: 'Snapshots · held', cls: 'num' }, { label: 'Limit' }, { label: 'Mounted / exported' },
      { label: 'Write / read', cls: 'num' }, { label: 'Throughput (60 s)' }],
    rows, (i) => ({ dataset: { volume: key(vols[i]), origin: vols[i].origin || '' } }))));
}

/** The three charts of POOL/VOLUME, each `width` pixels wide. */
function charts(k, width = 600) {
  const s = stats.series(k);
  return [
    lineChart({ metric: 'iops', title: 'Operations per second', format: fmt.count, floor: 10, width,
      series: [{ key: 'write', name: 'write', cls: 's-write', values: s.writeIops, fill: true },
        { key: 'read', name: 'read', cls: 's-read', values: s.readIops },
        { key: 'sync', name: 'sync', cls: 's-sync', values: s.syncIops }] }),
    lineChart({ metric: 'throughput', title: 'Throughput', format: fmt.rate, floor: 2 ** 20, binary: true, width,
      series: [{ key: 'write', name: 'write', cls: 's-write', values: s.writeBps, fill: true },
        { key: 'read', name: 'read', cls: 's-read', values: s.readBps }] }),
    lineChart({ metric: 'latency', title: 'Latency, p99 of each second', format: fmt.micros, floor: 100, width,
      series: [{ key: 'write', name: 'write', cls: 's-write', values: s.writeP99 },
        { key: 'read', name: 'read', cls: 's-read', values: s.readP99 }] }),
  ];
}

/** Chart width for a container: 3 side by side on a wide screen, 2 or 1 on smaller ones. */
function chartWidth(el) {
  const w = el.clientWidth || 900;
  const cols = w >= 1050 ? 3 : w >= 640 ? 2 : 1;
  el.dataset.cols = String(cols);
  return Math.floor((w - (cols - 1) * 18) / cols);
}

async function detail(pool, name) {
  const base = `/v1/pools/${seg(pool)}/volumes/${seg(name)}`;
  const [v, snaps, mounts, exports] = await Promise.all([get(base), get(`${base}/snapshots`), get('/v1/mounts'), get('/v1/exports')]);
  const k = key(v);
  const mount = mounts.find((m) => m.volume === k);
  const xs = exports.filter((x) => x.volume === k || x.volume.startsWith(`${k}@`));
  const held = snapshotBytes(v);
  const actions = [
    act.actionButton('Snapshot', 'operator', () => act.snapshot(pool, name), { action: 'snapshot', cls: 'primary' }),
    act.actionButton('Export', 'operator', () => act.createExport(k, !!v.lun), { action: 'export' }),
    mount ? act.actionButton('Unmount', 'operator', () => act.unmount(mount), { action: 'unmount' })
      : (!v.lun ? act.actionButton('Mount', 'operator', () => act.mount(k), { action: 'mount' }) : null),
    act.actionButton('Delete', 'operator', () => act.deleteVolume(pool, name, v.snapshots), { action: 'delete-volume', cls: 'danger' }),
  ];
  const snapRows = snaps.slice().reverse().map((s) => [
    h('strong', {}, s.name), fmt.ago(s.created_ns), fmt.bytes(s.referenced_bytes), fmt.bytes(s.written_bytes),
    fmt.bytes(s.unique_bytes),
    s.clones.length ? s.clones.map((c) => link(`#/volumes/${seg(pool)}/${seg(c)}`, c)) : h('span', { class: 'muted' }, '–'),
    h('span', { class: 'row-actions' },
      act.actionButton('Clone', 'operator', () => act.clone(pool, name, s.name), { action: 'clone' }),
      act.actionButton('Restore', 'operator', () => act.restore(pool, name, s.name), { action: 'restore', cls: 'danger' }),
      act.actionButton('Delete', 'operator', () => act.deleteSnapshot(pool, name, s.name), { action: 'delete-snapshot', cls: 'danger' })),
  ]);
  return page(h('span', {}, k, ' ', v.lun ? badge('LUN', 'info') : null, v.origin ? badge(`clone of ${v.origin}`, 'muted') : null), actions,
    h('div', { class: 'cols' },
      card('Space',
        v.size_bytes ? capacityBar(v.used_bytes, v.size_bytes) : null,
        facts([
          ['Used', `${fmt.bytes(v.used_bytes)}${v.size_bytes ? ` of ${fmt.bytes(v.size_bytes)} limit` : ' (thin, no limit)'}`],
          ['Logical', v.logical_bytes === null ? '–' : fmt.bytes(v.logical_bytes)],
          ['Saved', savings(v)],
          ['Written since last snapshot', fmt.bytes(v.written_bytes)],
          ['Total, snapshots included', fmt.bytes(v.total_bytes)],
          ['Held only by snapshots', held === null ? '– (a clone shares its origin\'s blocks)' : fmt.bytes(held)],
          ['Reservation', v.reservation_bytes ? fmt.bytes(v.reservation_bytes) : 'none'],
        ])),
      card('Settings',
        facts([
          ['Record size', fmt.bytes(v.record_size)],
          ['Compression', v.compression],
          ['Dedup', v.dedup ? 'on' : 'off'],
          ['Sync', v.sync],
          v.lun ? ['LUN', `${fmt.bytes(v.lun.size_bytes)}, ${v.lun.sector_bytes}-byte sectors`] : null,
          ['Created', `${fmt.time(v.created_ns)} (txg ${v.created_txg})`],
          ['Origin', v.origin || '–'],
          ['Mounted at', mount ? mount.path : '–'],
          ['Exports', xs.length ? xs.map((x) => `${x.protocol} #${x.id}`).join(', ') : '–'],
        ]))),
    card('Performance', h('div', { class: 'charts', dataset: { liveCharts: k } }, charts(k))),
    card(`Snapshots (${snaps.length})`, snaps.length
      ? table([{ label: 'Snapshot' }, { label: 'Taken' }, { label: 'Referenced', cls: 'num' }, { label: 'Written', cls: 'num' },
        { label: 'Unique', cls: 'num' }, { label: 'Clones' }, { label: '' }], snapRows,
      (i) => ({ dataset: { snapshot: `${k}@${snaps[snaps.length - 1 - i].name}` } }))
      : empty('No snapshots.', 'Take one: it costs no space until the volume changes.')),
    h('p', {}, link('#/volumes', '← All volumes')));
}

export default {
  refreshSeconds: 5,
  render(params) {
    return params.length >= 2 ? detail(params[0], params[1]) : list();
  },
  live(root) {
    root.querySelectorAll('[data-live-charts]').forEach((el) => el.replaceChildren(...charts(el.dataset.liveCharts, chartWidth(el))));
    root.querySelectorAll('[data-live-rate]').forEach((el) => {
      const [rate, spark] = liveCells(el.dataset.liveRate);
      el.replaceWith(rate);
      root.querySelector(`[data-live-spark="${CSS.escape(spark.dataset.liveSpark)}"]`)?.replaceWith(spark);
    });
  },
};
