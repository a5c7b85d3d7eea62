// The console's actions: each asks in a dialog, calls the API, and says what came of it.
// Destructive ones (restore, deletes) are refused until the user types the name of what
// they change; every one is also checked by the daemon (role, state) like a CLI call.

import { post, del, seg, may } from './api.js';
import { formDialog, toast, button, h } from './ui.js';
import { parseSize, time } from './fmt.js';

/** Ask the current view to load again now (app.js listens). */
export function refresh() {
  window.dispatchEvent(new Event('strata:refresh'));
}

/** A button for an action that needs `role`: disabled, with the reason, for lesser roles. */
export function actionButton(label, role, onclick, opts = {}) {
  const allowed = may(role);
  return button(label, onclick, {
    ...opts,
    disabled: !allowed || opts.disabled,
    title: allowed ? opts.title : `needs the ${role} role`,
  });
}

function stamp() {
  return time(Date.now() * 1e6).replace(/[-: ]/g, '').replace(/^(\d{8})(\d{6})$/, '$1-$2');
}

export async function createVolume(pools, pool) {
  const v = await formDialog({
    title: 'Create volume',
    intro: 'A thin volume: a POSIX file system (or a block LUN) that takes space only as data is written.',
    fields: [
      { name: 'pool', label: 'Pool', type: 'select', options: pools, value: pool || pools[0] },
      { name: 'name', label: 'Name', placeholder: 'pgdata', required: true },
      { name: 'size', label: 'Size limit', placeholder: 'none (e.g. 100G)', help: 'Thin: a limit, not a reservation.' },
      { name: 'compression', label: 'Compression', type: 'select', options: ['off', 'lz4', 'zstd'], value: 'lz4' },
      { name: 'record', label: 'Record size', type: 'select', options: ['default (16K)', '4K', '8K', '16K', '32K', '64K', '128K', '1M'] },
      { name: 'sync', label: 'Sync', type: 'select', options: ['standard', 'always', 'disabled'], value: 'standard' },
      { name: 'lun', label: 'Block LUN of size', placeholder: 'no (e.g. 20G for NBD/iSCSI)' },
    ],
    submitLabel: 'Create',
    submit: (f) => {
      const body = { name: f.name, compression: f.compression, sync: f.sync };
      const size = parseSize(f.size);
      if (size !== null) body.size_bytes = size;
      if (!f.record.startsWith('default')) body.record_size = parseSize(f.record);
      const lun = parseSize(f.lun);
      if (lun !== null) body.lun_bytes = lun;
      return post(`/v1/pools/${seg(f.pool)}/volumes`, body);
    },
  });
  if (v) {
    toast(`Volume ${v.pool}/${v.name} created`);
    refresh();
  }
}

export async function snapshot(pool, vol) {
  const s = await formDialog({
    title: `Snapshot ${pool}/${vol}`,
    intro: 'A read-only image of the volume as it is now, in constant time and space.',
    fields: [
      { name: 'name', label: 'Name', value: `console-${stamp()}`, required: true },
      { name: 'quiesce', label: 'Quiesce database (optional)', placeholder: 'postgresql://postgres@/postgres?host=/run/postgresql' },
    ],
    submitLabel: 'Take snapshot',
    submit: (f) => post(`/v1/pools/${seg(pool)}/volumes/${seg(vol)}/snapshots`, { name: f.name, quiesce: f.quiesce || null }),
  });
  if (s) {
    toast(s.warning ? `Snapshot ${s.volume}@${s.name} taken: ${s.warning}` : `Snapshot ${s.volume}@${s.name} taken`, s.warning ? 'warn' : 'ok');
    refresh();
  }
}

export async function clone(pool, vol, snap) {
  const c = await formDialog({
    title: `Clone ${pool}/${vol}@${snap}`,
    intro: 'A writable volume that starts as the snapshot and shares its blocks: no copy, whatever the size.',
    fields: [{ name: 'name', label: 'New volume', value: `${vol}-${snap}-clone`, required: true }],
    submitLabel: 'Clone',
    // Answers with the clones made (an array: a group clone makes several).
    submit: async (f) => (await post(`/v1/pools/${seg(pool)}/clones`, { origin: `${vol}@${snap}`, name: f.name }))[0],
  });
  if (c) {
    toast(`Clone ${c.pool}/${c.name} made from ${c.origin}`);
    refresh();
  }
}

export async function restore(pool, vol, snap) {
  const r = await formDialog({
    title: `Restore ${pool}/${vol} to @${snap}`,
    intro: h('div', {},
      h('p', {}, 'The volume becomes what it was when the snapshot was taken. ',
        h('strong', {}, 'Everything written since the latest snapshot is lost.'),
        ' Every snapshot is kept, later ones included.'),
      h('p', {}, 'A mounted volume is unmounted and mounted again: stop what uses it first (the daemon refuses while files are open).')),
    danger: true,
    confirm: vol,
    submitLabel: 'Restore',
    submit: () => post(`/v1/pools/${seg(pool)}/volumes/${seg(vol)}/restore`, { snapshot: snap }),
  });
  if (r) {
    toast(`${pool}/${vol} restored to @${snap}`);
    refresh();
  }
}

export async function deleteSnapshot(pool, vol, snap) {
  const r = await formDialog({
    title: `Delete snapshot ${pool}/${vol}@${snap}`,
    intro: 'Frees what only this snapshot holds (its unique space). Snapshots with clones cannot be deleted.',
    danger: true,
    confirm: `${vol}@${snap}`,
    submitLabel: 'Delete snapshot',
    submit: () => del(`/v1/pools/${seg(pool)}/volumes/${seg(vol)}/snapshots/${seg(snap)}`),
  });
  if (r) {
    toast(`Snapshot ${vol}@${snap} deleted`);
    refresh();
  }
}

export async function deleteVolume(pool, vol, snapshots) {
  const r = await formDialog({
    title: `Delete volume ${pool}/${vol}`,
    intro: 'Its data is gone for good. A mounted or exported volume must be unmounted and unexported first.',
    fields: snapshots > 0 ? [{ name: 'recursive', label: `Also delete its ${snapshots} snapshot(s)`, type: 'checkbox' }] : [],
    danger: true,
    confirm: vol,
    submitLabel: 'Delete volume',
    submit: (f) => del(`/v1/pools/${seg(pool)}/volumes/${seg(vol)}${f.recursive ? '?recursive=true' : ''}`),
  });
  if (r) {
    toast(`Volume ${pool}/${vol} deleted`);
    window.location.hash = '#/volumes';
    refresh();
  }
}

export async function createExport(volume, isLun) {
  const e = await formDialog({
    title: `Export ${volume}`,
    intro: isLun ? 'A block LUN over NBD or iSCSI.' : 'An NFSv3 export (the daemon must run with --nfs-port).',
    fields: [
      { name: 'protocol', label: 'Protocol', type: 'select', options: isLun ? ['nbd', 'iscsi'] : ['nfs'] },
      { name: 'clients', label: 'Clients', placeholder: 'this host only (e.g. 10.0.0.0/8, 192.168.1.7)' },
      { name: 'read_only', label: 'Read-only', type: 'checkbox' },
      ...(isLun ? [] : [{ name: 'squash', label: 'Squash', type: 'select', options: ['root', 'none', 'all'], value: 'root' }]),
    ],
    submitLabel: 'Export',
    submit: (f) => {
      const body = { volume, protocol: f.protocol, read_only: f.read_only };
      const clients = (f.clients || '').split(/[\s,]+/).filter(Boolean);
      if (clients.length) body.clients = clients;
      if (f.squash) body.squash = f.squash;
      return post('/v1/exports', body);
    },
  });
  if (e) {
    toast(e.note ? `Export ${e.id} of ${e.volume}: ${e.note}` : `Export ${e.id} of ${e.volume} (${e.protocol}) created`, e.note ? 'warn' : 'ok');
    refresh();
  }
}

export async function deleteExport(x) {
  const r = await formDialog({
    title: `Delete export ${x.id} (${x.protocol} ${x.volume})`,
    intro: 'Its clients lose access at once; the volume and its data stay.',
    danger: true,
    submitLabel: 'Delete export',
    submit: () => del(`/v1/exports/${x.id}`),
  });
  if (r) {
    toast(`Export ${x.id} deleted`);
    refresh();
  }
}

export async function mount(volume) {
  const r = await formDialog({
    title: `Mount ${volume}`,
    intro: 'Through FUSE on the daemon\'s host; operators may mount under /mnt, /srv, /data, /var/lib/postgresql or /var/lib/mysql.',
    fields: [{ name: 'path', label: 'Directory', value: `/mnt/strata/${volume.split('/')[1]}`, required: true }],
    submitLabel: 'Mount',
    submit: (f) => post('/v1/mounts', { volume, path: f.path }),
  });
  if (r) {
    toast(`${volume} mounted at ${r.path}`);
    refresh();
  }
}

export async function unmount(m) {
  const r = await formDialog({
    title: `Unmount ${m.path}`,
    intro: `${m.volume} stops being reachable there (refused while files are open).`,
    danger: true,
    submitLabel: 'Unmount',
    submit: () => del('/v1/mounts', { path: m.path }),
  });
  if (r) {
    toast(`${m.path} unmounted`);
    refresh();
  }
}

/** Scrub: start, pause, resume or cancel. */
export async function scrub(pool, action) {
  const r = await formDialog({
    title: `${action[0].toUpperCase()}${action.slice(1)} the scrub of ${pool}`,
    intro: action === 'start'
      ? 'Reads and verifies every copy of every block in the background, repairing damaged copies from good ones.'
      : null,
    danger: action === 'cancel',
    submitLabel: action === 'start' ? 'Start scrub' : action[0].toUpperCase() + action.slice(1),
    submit: () => post(`/v1/pools/${seg(pool)}/scrub`, { action }),
  });
  if (r) {
    toast(action === 'start' ? `Scrub of ${pool} started` : `Scrub of ${pool}: ${action} requested`);
    refresh();
  }
}

export async function check(pool) {
  const r = await formDialog({
    title: `Check ${pool}`,
    intro: 'Verifies every invariant of the pool (and every data block\'s checksum) while it is served.',
    fields: [{ name: 'verify_data', label: 'Read and verify every data block', type: 'checkbox', value: true }],
    submitLabel: 'Run check',
    submit: (f) => post(`/v1/pools/${seg(pool)}/check`, { verify_data: f.verify_data }),
  });
  if (!r) return;
  if (r.state !== undefined && r.id !== undefined) toast(`Check of ${pool} started: job ${r.id}`);
  else toast(r.clean ? `Check of ${pool}: clean` : `Check of ${pool}: ${r.errors.length} problem(s)`, r.clean ? 'ok' : 'bad');
  refresh();
}

export async function cancelJob(job) {
  const r = await formDialog({
    title: `Cancel job ${job.id} (${job.kind} of ${job.target || job.pool})`,
    intro: 'It stops where it is; what it did so far stays done.',
    danger: true,
    submitLabel: 'Cancel job',
    submit: () => post(`/v1/jobs/${job.id}/cancel`, {}),
  });
  if (r) {
    toast(`Job ${job.id}: ${r.state}`);
    refresh();
  }
}
