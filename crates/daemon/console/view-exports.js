// Exports (NFS, NBD, iSCSI) and FUSE mounts: where each volume can be reached from.

import { get, allVolumes } from './api.js';
import { h, badge, card, table, page, empty, link, formDialog } from './ui.js';
import * as act from './actions.js';

const volLink = (v) => {
  const [pool, rest] = v.split('/');
  return link(`#/volumes/${encodeURIComponent(pool)}/${encodeURIComponent(rest.split('@')[0])}`, v);
};

export default {
  refreshSeconds: 5,
  async render() {
    const pools = await get('/v1/pools');
    const [exports, mounts, vols] = await Promise.all([get('/v1/exports'), get('/v1/mounts'), allVolumes(pools)]);
    const names = vols.map((v) => `${v.pool}/${v.name}`);
    const newExport = act.actionButton('New export', 'operator', async () => {
      const pick = await formDialog({
        title: 'New export: which volume?',
        fields: [{ name: 'volume', label: 'Volume', type: 'select', options: names }],
        submitLabel: 'Next',
        submit: async (f) => f.volume,
      });
      if (pick) act.createExport(pick, !!vols.find((v) => `${v.pool}/${v.name}` === pick)?.lun);
    }, { action: 'new-export', cls: 'primary', disabled: names.length === 0 });
    const exportRows = exports.map((x) => [
      `#${x.id}`, badge(x.protocol, 'info'), volLink(x.volume),
      h('code', { class: 'wrap' }, x.uri || x.mount || x.path),
      x.clients.join(', '),
      x.read_only ? 'read-only' : 'read-write',
      x.protocol === 'nfs' ? x.squash : (x.chap ? 'CHAP' : '–'),
      x.active ? badge('active', 'ok') : h('span', { title: x.note || null }, badge('waiting', 'warn')),
      act.actionButton('Delete', 'operator', () => act.deleteExport(x), { action: 'delete-export', cls: 'danger' }),
    ]);
    const mountRows = mounts.map((m) => [
      volLink(m.volume), h('code', {}, m.path), m.active ? badge('active', 'ok') : badge('waiting for pool', 'warn'),
      act.actionButton('Unmount', 'operator', () => act.unmount(m), { action: 'unmount', cls: 'danger' }),
    ]);
    return page('Exports and mounts', [newExport],
      card(`Exports (${exports.length})`, exports.length
        ? table([{ label: 'Id' }, { label: 'Protocol' }, { label: 'Volume' }, { label: 'Client access' }, { label: 'Clients' },
          { label: 'Mode' }, { label: 'Squash / auth' }, { label: 'State' }, { label: '' }], exportRows,
        (i) => ({ dataset: { export: String(exports[i].id) } }))
        : empty('No exports.', 'NFS for file access from other hosts, NBD or iSCSI for block LUNs.')),
      card(`FUSE mounts (${mounts.length})`, mounts.length
        ? table([{ label: 'Volume' }, { label: 'Path' }, { label: 'State' }, { label: '' }], mountRows,
          (i) => ({ dataset: { mount: mounts[i].path } }))
        : empty('No mounts.', 'Mount a volume from its page (on the daemon\'s host).')));
  },
};
