// Snapshots and clones as a lineage: each volume, its snapshots (oldest first) and under
// each snapshot the clones made from it, which have snapshots and clones of their own.
// Space per snapshot: referenced (what it shows), written (born since the previous one),
// unique (what deleting it frees).

import { get, seg, allVolumes, allSnapshots } from './api.js';
import { h, badge, card, page, empty, link } from './ui.js';
import * as fmt from './fmt.js';
import * as act from './actions.js';

function snapshotNode(s, byOrigin, snapsOf, seen) {
  const clones = byOrigin.get(`${s.pool}/${s.volume}@${s.name}`) || [];
  return h('li', { class: 'snap', dataset: { snapshot: `${s.pool}/${s.volume}@${s.name}` } },
    h('div', { class: 'node' },
      h('span', { class: 'node-icon snap-icon', 'aria-hidden': 'true' }),
      h('span', { class: 'node-name' }, `@${s.name}`),
      s.group ? badge(`group ${s.group}`, 'muted') : null,
      h('span', { class: 'node-facts' },
        h('span', { title: 'when taken' }, fmt.ago(s.created_ns)),
        h('span', { title: 'referenced: what the snapshot shows' }, `refer ${fmt.bytes(s.referenced_bytes)}`),
        h('span', { title: 'written: born since the previous snapshot' }, `written ${fmt.bytes(s.written_bytes)}`),
        h('span', { title: 'unique: what deleting it frees' }, `unique ${fmt.bytes(s.unique_bytes)}`)),
      h('span', { class: 'row-actions' },
        act.actionButton('Clone', 'operator', () => act.clone(s.pool, s.volume, s.name), { action: 'clone' }),
        act.actionButton('Restore', 'operator', () => act.restore(s.pool, s.volume, s.name), { action: 'restore', cls: 'danger' }),
        act.actionButton('Delete', 'operator', () => act.deleteSnapshot(s.pool, s.volume, s.name),
          { action: 'delete-snapshot', cls: 'danger', disabled: clones.length > 0 }))),
    clones.length ? h('ul', {}, clones.map((c) => volumeNode(c, byOrigin, snapsOf, seen))) : null);
}

function volumeNode(v, byOrigin, snapsOf, seen) {
  const k = `${v.pool}/${v.name}`;
  seen.add(k);
  const snaps = snapsOf.get(k) || [];
  return h('li', { class: 'vol', dataset: { volume: k, origin: v.origin || '' } },
    h('div', { class: 'node' },
      h('span', { class: 'node-icon vol-icon', 'aria-hidden': 'true' }),
      link(`#/volumes/${seg(v.pool)}/${seg(v.name)}`, v.name),
      v.origin ? badge(`clone of ${v.origin}`, 'info') : null,
      h('span', { class: 'node-facts' },
        h('span', {}, `used ${fmt.bytes(v.used_bytes)}`),
        h('span', { title: 'born since the latest snapshot' }, `written ${fmt.bytes(v.written_bytes)}`),
        h('span', { title: 'born in this volume, snapshots included' }, `total ${fmt.bytes(v.total_bytes)}`)),
      h('span', { class: 'row-actions' },
        act.actionButton('Snapshot', 'operator', () => act.snapshot(v.pool, v.name), { action: 'snapshot' }))),
    snaps.length ? h('ul', {}, snaps.map((s) => snapshotNode(s, byOrigin, snapsOf, seen))) : null);
}

export default {
  refreshSeconds: 5,
  async render() {
    const pools = await get('/v1/pools');
    const [vols, snaps] = await Promise.all([allVolumes(pools), allSnapshots(pools)]);
    const snapsOf = new Map();
    for (const s of snaps.slice().sort((a, b) => a.txg - b.txg || a.id - b.id)) {
      const k = `${s.pool}/${s.volume}`;
      if (!snapsOf.has(k)) snapsOf.set(k, []);
      snapsOf.get(k).push(s);
    }
    const byOrigin = new Map();
    for (const v of vols.filter((x) => x.origin)) {
      const k = `${v.pool}/${v.origin}`;
      if (!byOrigin.has(k)) byOrigin.set(k, []);
      byOrigin.get(k).push(v);
    }
    const sections = pools.filter((p) => p.state !== 'UNAVAILABLE').map((p) => {
      const seen = new Set();
      const inPool = vols.filter((v) => v.pool === p.name);
      const roots = inPool.filter((v) => !v.origin).map((v) => volumeNode(v, byOrigin, snapsOf, seen));
      // A clone whose origin is not listed (should not happen): shown at the top level.
      const orphans = inPool.filter((v) => !seen.has(`${v.pool}/${v.name}`)).map((v) => volumeNode(v, byOrigin, snapsOf, seen));
      const count = snaps.filter((s) => s.pool === p.name);
      const unique = count.reduce((a, s) => a + s.unique_bytes, 0);
      return card(h('span', {}, `Pool ${p.name} `, h('span', { class: 'muted small' },
        `${count.length} snapshot${count.length === 1 ? '' : 's'}, ${fmt.bytes(unique)} unique`)),
      inPool.length ? h('ul', { class: 'tree' }, roots, orphans) : empty('No volumes.'));
    });
    return page('Snapshots and clones', [], snaps.length || vols.some((v) => v.origin) ? null
      : h('p', { class: 'muted' }, 'No snapshots yet: take one from a volume\'s page or here.'), sections);
  },
};
