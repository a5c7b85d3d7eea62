// Events: what happened to the storage (GET /v1/events), newest first. The first load
// takes the newest LIMIT; each refresh asks only for those after the last id seen.

import { get } from './api.js';
import { h, badge, table, page, empty, button, card } from './ui.js';
import * as fmt from './fmt.js';

const LIMIT = 500;
let seen = []; // oldest first
let filter = 'all';

/** The newest `n` events (used by the overview too). */
export async function recentEvents(n) {
  return (await get(`/v1/events?limit=${n}`)).reverse();
}

export function eventsTable(list) {
  return table(
    [{ label: 'Time' }, { label: 'Severity' }, { label: 'Event' }, { label: 'Pool' }, { label: 'Target' }, { label: 'What happened' }],
    list.map((e) => [h('span', { class: 'nowrap', title: fmt.time(e.time_ns) }, fmt.time(e.time_ns).slice(5)), badge(e.severity), h('code', {}, e.kind),
      e.pool || '–', e.target || '–', e.message]),
    (i) => ({ dataset: { eventId: String(list[i].id), kind: list[i].kind, severity: list[i].severity } }));
}

async function load() {
  const after = seen.length ? seen[seen.length - 1].id : null;
  const fresh = await get(after === null ? `/v1/events?limit=${LIMIT}` : `/v1/events?after=${after}&limit=${LIMIT}`);
  // Ids only grow; a smaller one means another daemon's history (a restart on new data).
  if (fresh.length && after !== null && fresh[0].id <= after) seen = [];
  seen = seen.concat(fresh).slice(-LIMIT);
}

export default {
  refreshSeconds: 3,
  async render() {
    await load();
    const shown = seen.filter((e) => filter === 'all' || (filter === 'warning' ? e.severity !== 'info' : e.severity === 'error')).reverse();
    const chip = (f, label) => button(label, () => { filter = f; window.dispatchEvent(new Event('strata:refresh')); },
      { cls: filter === f ? 'chip on' : 'chip', action: `filter-${f}` });
    return page('Events', [chip('all', 'All'), chip('warning', 'Warnings and errors'), chip('error', 'Errors')],
      card(null, shown.length ? eventsTable(shown) : empty('No events.', 'Mirror transfers, scrubs, device changes and refused requests are recorded here.')));
  },
};
