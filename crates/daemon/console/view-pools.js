// Pools: health, capacity and devices; a pool's page adds its scrub, rebuild, commits and
// the actions scrub and check.

import { get, seg } from './api.js';
import { h, badge, bar, capacityBar, card, facts, table, page, empty, link } from './ui.js';
import * as fmt from './fmt.js';
import { actionButton, scrub, check } from './actions.js';

/** A pool's summary card (also on the overview). */
export function poolCard(p) {
  const body = p.size_bytes === undefined
    ? [h('p', { class: 'muted' }, p.reason || 'not open')]
    : [
      capacityBar(p.allocated_bytes, p.size_bytes),
      h('div', { class: 'cap-line' },
        h('span', {}, h('strong', {}, fmt.bytes(p.allocated_bytes)), ' used of ', fmt.bytes(p.size_bytes)),
        h('span', { class: 'muted' }, `${fmt.bytes(p.available_bytes)} available`)),
      facts([
        ['Volumes', String(p.volumes)],
        ['Logical', `${fmt.bytes(p.logical_bytes)} (${fmt.ratio(p.compress_ratio)})`],
        ['Saved', fmt.bytes(p.saved_bytes)],
        ['Layout', `${p.layout}, ${p.devices.length} device${p.devices.length === 1 ? '' : 's'}`],
        p.scrub && p.scrub.state === 'running' ? ['Scrub', `${fmt.percent(p.scrub.percent)}, ${fmt.rate(p.scrub.bytes_per_second)}`] : null,
      ]),
      p.warnings.length ? h('ul', { class: 'warnings' }, p.warnings.map((w) => h('li', {}, w))) : null,
    ];
  return h('a', { class: 'card pool-card', href: `#/pools/${seg(p.name)}`, dataset: { pool: p.name, state: p.state } },
    h('div', { class: 'card-title' }, h('h3', {}, p.name), badge(p.state)), ...body);
}

function scrubSection(p) {
  const s = p.scrub;
  const running = s && s.state === 'running';
  const paused = s && s.state === 'paused';
  const buttons = [
    !running && !paused ? actionButton('Start scrub', 'operator', () => scrub(p.name, 'start'), { action: 'scrub-start', cls: 'primary' }) : null,
    running ? actionButton('Pause', 'operator', () => scrub(p.name, 'pause'), { action: 'scrub-pause' }) : null,
    paused ? actionButton('Resume', 'operator', () => scrub(p.name, 'resume'), { action: 'scrub-resume' }) : null,
    running || paused ? actionButton('Cancel', 'operator', () => scrub(p.name, 'cancel'), { action: 'scrub-cancel', cls: 'danger' }) : null,
  ];
  if (!s || s.state === 'none') return card('Scrub', h('p', { class: 'muted' }, 'No scrub since the daemon started.'), h('div', { class: 'actions' }, buttons));
  const r = s.report;
  return card('Scrub',
    h('div', { class: 'progress-line', dataset: { scrubState: s.state, percent: String(s.percent) } },
      badge(s.state), bar(s.percent / 100, running ? 'info' : 'ok'), h('span', {}, fmt.percent(s.percent))),
    facts([
      ['Verified', `${fmt.bytes(s.done_bytes)} of ${fmt.bytes(s.total_bytes)}`],
      ['Rate', fmt.rate(s.bytes_per_second)],
      running ? ['Limit', s.limit_bytes_per_second ? `${fmt.rate(s.limit_bytes_per_second)} beside clients` : 'none (idle pool)'] : null,
      running && s.eta_seconds !== null ? ['Time left', fmt.seconds(s.eta_seconds)] : null,
      ['Elapsed', fmt.seconds(s.seconds)],
      r ? ['Found', `${r.checksum_errors} damaged cop${r.checksum_errors === 1 ? 'y' : 'ies'}, ${fmt.bytes(r.repaired_bytes)} repaired, ${r.check.clean ? 'invariants hold' : `${r.check.errors.length} problem(s)`}`] : null,
      s.message ? ['Note', s.message] : null,
    ]),
    h('div', { class: 'actions' }, buttons));
}

async function detail(name) {
  const p = await get(`/v1/pools/${seg(name)}`);
  const actions = [actionButton('Check', 'operator', () => check(p.name), { action: 'check' })];
  if (p.size_bytes === undefined) {
    return page(h('span', {}, `Pool ${p.name} `, badge(p.state)), actions, card('Unavailable', h('p', {}, p.reason || '')));
  }
  const devices = table(
    [{ label: 'Device' }, { label: 'State' }, { label: 'Read errors', cls: 'num' }, { label: 'Write errors', cls: 'num' },
      { label: 'Checksum errors', cls: 'num' }, { label: 'Repaired', cls: 'num' }, { label: 'Note' }],
    p.devices.map((d) => [d.device, badge(d.state), String(d.read_errors), String(d.write_errors), String(d.checksum_errors),
      fmt.bytes(d.repaired_bytes), d.note || '']),
  );
  const rb = p.rebuild;
  return page(h('span', {}, `Pool ${p.name} `, badge(p.state)), actions,
    p.reason ? h('div', { class: 'error-box' }, p.reason) : null,
    p.latched ? h('div', { class: 'error-box' }, `Read-only: ${p.latched}`) : null,
    p.warnings.length ? h('ul', { class: 'warnings' }, p.warnings.map((w) => h('li', {}, w))) : null,
    h('div', { class: 'cols' },
      card('Capacity',
        capacityBar(p.allocated_bytes, p.size_bytes),
        facts([
          ['Size', fmt.bytes(p.size_bytes)],
          ['Allocated', fmt.bytes(p.allocated_bytes)],
          ['Free', fmt.bytes(p.free_bytes)],
          ['Available', fmt.bytes(p.available_bytes)],
          ['Held (deferred frees)', fmt.bytes(p.held_bytes)],
          ['Being destroyed', fmt.bytes(p.destroying_bytes)],
          ['Reserved', fmt.bytes(p.reserved_bytes)],
          ['Alert below', `${p.capacity_alert_percent} % available`],
        ])),
      card('Efficiency',
        facts([
          ['Logical', fmt.bytes(p.logical_bytes)],
          ['Saved', fmt.bytes(p.saved_bytes)],
          ['Ratio', fmt.ratio(p.compress_ratio)],
          ['Dedup saved', `${fmt.bytes(p.dedup_saved_bytes)} (${fmt.count(p.dedup_blocks)} blocks)`],
          ['Zero records elided', fmt.count(p.zero_records_elided)],
          ['Data cache', `${fmt.bytes(p.data_cache_bytes)} of ${fmt.bytes(p.data_cache_capacity_bytes)}, ${fmt.count(p.data_cache_hits)} hits`],
        ])),
      card('Commits',
        facts([
          ['Txg', String(p.txg)],
          ['Commits', fmt.count(p.commits.count)],
          ['Longest lock hold', fmt.micros(p.commits.locked_us_max)],
          ['Last lock hold', fmt.micros(p.commits.locked_us_last)],
          ['Intent log written', fmt.bytes(p.log_bytes_written)],
          ['Corruptions detected', String(p.corruptions_detected)],
          ['Device', p.device_io],
          p.log_device ? ['Log device', p.log_device] : null,
        ]))),
    card(`Devices (${p.layout})`, devices),
    scrubSection(p),
    rb ? card('Rebuild', h('div', { class: 'progress-line' }, bar(rb.percent / 100, 'info'), h('span', {}, fmt.percent(rb.percent))),
      facts([['Device', rb.device], ['Done', `${fmt.bytes(rb.done_bytes)} of ${fmt.bytes(rb.total_bytes)}`],
        ['Rate', fmt.rate(rb.scan_bytes_per_second)], ['Time left', fmt.seconds(rb.eta_seconds)],
        ['Copy limit', rb.limit_bytes_per_second ? `${fmt.rate(rb.limit_bytes_per_second)} beside clients` : 'none (idle pool)']])) : null,
    p.open_notes.length ? card('When opened', h('ul', {}, p.open_notes.map((n) => h('li', {}, n)))) : null,
    h('p', {}, link('#/pools', '← All pools')));
}

function poolsTable(pools) {
  return table(
    [{ label: 'Pool' }, { label: 'Health' }, { label: 'Devices' }, { label: 'Capacity' }, { label: 'Available', cls: 'num' },
      { label: 'Logical', cls: 'num' }, { label: 'Saved', cls: 'num' }, { label: 'Volumes', cls: 'num' }, { label: 'Scrub' }],
    pools.map((p) => {
      if (p.size_bytes === undefined) {
        return [link(`#/pools/${seg(p.name)}`, p.name), badge(p.state), h('span', { class: 'muted' }, p.reason || ''), '', '', '', '', '', ''];
      }
      const errors = p.devices.reduce((a, d) => a + d.read_errors + d.write_errors + d.checksum_errors, 0);
      const online = p.devices.filter((d) => d.state === 'ONLINE').length;
      return [
        link(`#/pools/${seg(p.name)}`, p.name), badge(p.state),
        h('span', {}, `${online}/${p.devices.length} online`, errors ? h('div', { class: 'small bad-text' }, `${errors} errors`) : null),
        h('div', { class: 'progress-cell' }, capacityBar(p.allocated_bytes, p.size_bytes),
          h('span', { class: 'small' }, `${fmt.bytes(p.allocated_bytes)} of ${fmt.bytes(p.size_bytes)}`)),
        fmt.bytes(p.available_bytes), fmt.bytes(p.logical_bytes), `${fmt.bytes(p.saved_bytes)} (${fmt.ratio(p.compress_ratio)})`,
        String(p.volumes),
        p.scrub && p.scrub.state !== 'none' ? h('span', {}, badge(p.scrub.state), ' ', fmt.percent(p.scrub.percent)) : h('span', { class: 'muted' }, '–'),
      ];
    }),
    (i) => ({ dataset: { pool: pools[i].name, state: pools[i].state } }));
}

export default {
  refreshSeconds: 3,
  async render(params) {
    if (params.length) return detail(params[0]);
    const pools = await get('/v1/pools');
    return page('Pools', [],
      pools.length ? card(null, poolsTable(pools)) : empty('No pools.', 'An admin creates one with `strata pool create`.'));
  },
};
