// The overview: every pool's health and capacity, the busiest volumes right now, what is
// running, and the latest events.

import { get, allVolumes } from './api.js';
import { h, card, page, empty, link } from './ui.js';
import * as fmt from './fmt.js';
import * as stats from './stats.js';
import { sparkline, lineChart } from './chart.js';
import { poolCard } from './view-pools.js';
import { jobsTable, activityTable, poolActivity, loadJobs } from './view-jobs.js';
import { eventsTable, recentEvents } from './view-events.js';

function busiest(vols) {
  const rows = vols.map((v) => {
    const k = `${v.pool}/${v.name}`;
    const l = stats.latest(k);
    return { v, k, l, total: l ? l.writeBps + l.readBps : 0 };
  }).sort((a, b) => b.total - a.total || a.k.localeCompare(b.k)).slice(0, 6);
  return h('table', { class: 'grid' },
    h('thead', {}, h('tr', {}, ['Volume', 'Used', 'Write', 'Read', 'IOPS', 'Last minute'].map((t, i) => h('th', { class: i && i < 5 ? 'num' : null }, t)))),
    h('tbody', {}, rows.map(({ v, k, l }) => {
      const s = stats.series(k);
      return h('tr', { dataset: { volume: k } },
        h('td', {}, link(`#/volumes/${encodeURIComponent(v.pool)}/${encodeURIComponent(v.name)}`, k)),
        h('td', { class: 'num' }, fmt.bytes(v.used_bytes)),
        h('td', { class: 'num' }, l ? fmt.rate(l.writeBps) : '–'),
        h('td', { class: 'num' }, l ? fmt.rate(l.readBps) : '–'),
        h('td', { class: 'num' }, l ? fmt.count(l.readIops + l.writeIops) : '–'),
        h('td', {}, sparkline(s.writeBps.map((w, i) => w + s.readBps[i]))));
    })));
}

/** Throughput of all volumes together, `width` pixels wide. */
function ioChart(width) {
  const t = stats.total();
  return lineChart({ metric: 'throughput-all', title: 'Throughput, all volumes', format: fmt.rate, floor: 2 ** 20,
    binary: true, width, height: 190, capacity: 60,
    series: [{ key: 'write', name: 'write', cls: 's-write', values: t.writeBps, fill: true },
      { key: 'read', name: 'read', cls: 's-read', values: t.readBps }] });
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

export default {
  refreshSeconds: 2,
  live(root) {
    root.querySelectorAll('[data-live-total]').forEach((el) => el.replaceChildren(ioChart(el.clientWidth || 600)));
  },
  async render() {
    const pools = await get('/v1/pools');
    const [vols, jobs, events] = await Promise.all([allVolumes(pools), loadJobs(), recentEvents(8)]);
    const running = (jobs || []).filter((j) => j.state === 'running');
    const activity = poolActivity(pools).filter((a) => a.state === 'running' || a.state === 'paused');
    const totals = pools.filter((p) => p.size_bytes !== undefined).reduce((t, p) => ({
      size: t.size + p.size_bytes, used: t.used + p.allocated_bytes, saved: t.saved + p.saved_bytes,
    }), { size: 0, used: 0, saved: 0 });
    const unhealthy = pools.filter((p) => p.state !== 'ONLINE').length;
    return page('Overview', [],
      h('div', { class: 'kpis' },
        h('div', { class: `kpi ${unhealthy ? 'bad' : 'ok'}` }, h('span', {}, 'Pools'), h('strong', {}, String(pools.length)),
          h('small', {}, unhealthy ? `${unhealthy} need attention` : 'all online')),
        h('div', { class: 'kpi' }, h('span', {}, 'Volumes'), h('strong', {}, String(vols.length)),
          h('small', {}, plural(vols.filter((v) => v.origin).length, 'clone'))),
        h('div', { class: 'kpi' }, h('span', {}, 'Used'), h('strong', {}, fmt.bytes(totals.used)),
          h('small', {}, `of ${fmt.bytes(totals.size)}`)),
        h('div', { class: 'kpi' }, h('span', {}, 'Saved'), h('strong', {}, fmt.bytes(totals.saved)),
          h('small', {}, 'compression, dedup, zeros')),
        h('div', { class: 'kpi' }, h('span', {}, 'Running'), h('strong', {}, String(running.length + activity.length)),
          h('small', {}, jobs === null ? 'scrubs and rebuilds' : 'jobs, scrubs, rebuilds'))),
      h('div', { class: 'overview-top' },
        h('div', { class: 'pool-stack' }, pools.map(poolCard)),
        card('Live I/O', h('div', { dataset: { liveTotal: 'all' } }, ioChart(600)))),
      card('Busiest volumes (live)', vols.length ? busiest(vols) : empty('No volumes yet.')),
      running.length ? card('Running jobs', jobsTable(running)) : null,
      activity.length ? card('Pool activity', activityTable(activity)) : null,
      card(h('span', {}, 'Latest events ', link('#/events', 'all events →')), events.length ? eventsTable(events) : empty('No events.')));
  },
};
