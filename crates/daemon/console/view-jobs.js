// Jobs: the long operations (check, scrub, clone split, mirror transfer, rebuild) with
// their progress, from GET /v1/jobs; a daemon without that endpoint (404) gets an empty
// state. Below, what the pools themselves report running (scrubs and rebuilds), which
// every daemon has.

import { get, getOptional } from './api.js';
import { h, badge, bar, card, table, page, empty, link, errorBox } from './ui.js';
import * as fmt from './fmt.js';
import * as act from './actions.js';

let missingSince = 0; // when GET /v1/jobs last answered 404: asked again after a minute

/** Running and recent jobs, or null when the daemon has no jobs endpoint. */
export async function loadJobs() {
  if (Date.now() - missingSince < 60000) return null;
  const jobs = await getOptional('/v1/jobs');
  if (jobs === null) {
    missingSince = Date.now();
    return null;
  }
  return jobs.slice().sort((a, b) => (a.state === 'running') - (b.state === 'running') || a.id - b.id).reverse();
}

/** Scrubs and rebuilds from pool status: [{kind, pool, state, percent, done, total, rate, eta}]. */
export function poolActivity(pools) {
  const out = [];
  for (const p of pools) {
    if (p.scrub && p.scrub.state !== 'none') {
      const s = p.scrub;
      out.push({ kind: 'scrub', pool: p.name, state: s.state, percent: s.percent, done: s.done_bytes, total: s.total_bytes,
        rate: s.bytes_per_second, eta: s.state === 'running' ? s.eta_seconds : null, seconds: s.seconds });
    }
    if (p.rebuild) {
      const r = p.rebuild;
      out.push({ kind: `rebuild ${r.device}`, pool: p.name, state: 'running', percent: r.percent, done: r.done_bytes,
        total: r.total_bytes, rate: r.scan_bytes_per_second, eta: r.eta_seconds });
    }
  }
  return out;
}

export function progress(percent, state, done, total) {
  return h('div', { class: 'progress-cell' }, bar((percent || 0) / 100, state === 'running' ? 'info' : state === 'failed' ? 'bad' : 'ok'),
    h('span', { class: 'small' }, `${fmt.percent(percent)} · ${fmt.bytes(done)}${total ? ` of ${fmt.bytes(total)}` : ''}`));
}

export function jobsTable(jobs) {
  return table(
    [{ label: 'Job' }, { label: 'Kind' }, { label: 'Pool / target' }, { label: 'State' }, { label: 'Progress' },
      { label: 'Rate', cls: 'num' }, { label: 'Time left', cls: 'num' }, { label: 'Started by' }, { label: 'Started' }, { label: '' }],
    jobs.map((j) => [
      `#${j.id}`, j.kind, j.target ? `${j.pool} / ${j.target}` : j.pool,
      h('span', {}, badge(j.state), j.error ? h('div', { class: 'small bad-text' }, j.error.message) : null),
      progress(j.percent, j.state, j.done, j.total),
      j.state === 'running' ? fmt.rate(j.per_second) : '–',
      j.state === 'running' && j.eta_seconds !== null && j.eta_seconds !== undefined ? fmt.seconds(j.eta_seconds) : '–',
      j.caller, fmt.ago(j.started_ns),
      j.cancellable && j.state === 'running'
        ? act.actionButton('Cancel', 'operator', () => act.cancelJob(j), { action: 'cancel-job', cls: 'danger' }) : '',
    ]),
    (i) => ({ dataset: { job: String(jobs[i].id), kind: jobs[i].kind, state: jobs[i].state, percent: String(jobs[i].percent) } }));
}

export function activityTable(items) {
  return table(
    [{ label: 'Pool' }, { label: 'Operation' }, { label: 'State' }, { label: 'Progress' }, { label: 'Rate', cls: 'num' },
      { label: 'Time left', cls: 'num' }],
    items.map((a) => [link(`#/pools/${encodeURIComponent(a.pool)}`, a.pool), a.kind, badge(a.state),
      progress(a.percent, a.state, a.done, a.total), a.state === 'running' ? fmt.rate(a.rate) : '–',
      a.eta !== null && a.eta !== undefined ? fmt.seconds(a.eta) : '–']),
    (i) => ({ dataset: { activity: `${items[i].kind} ${items[i].pool}`, state: items[i].state, percent: String(items[i].percent) } }));
}

export default {
  refreshSeconds: 1,
  async render() {
    const [jobs, pools] = await Promise.all([loadJobs().catch((e) => e), get('/v1/pools')]);
    const activity = poolActivity(pools);
    let jobsCard;
    if (jobs instanceof Error) jobsCard = card('Jobs', errorBox(jobs));
    else if (jobs === null) {
      jobsCard = card('Jobs', h('div', { class: 'empty', dataset: { jobs: 'unsupported' } },
        h('p', {}, 'This daemon does not report jobs (GET /v1/jobs answered 404).'),
        h('p', { class: 'muted' }, 'Scrubs and rebuilds still show below, from the pools\' status.')));
    } else {
      jobsCard = card(`Jobs (${jobs.filter((j) => j.state === 'running').length} running)`,
        jobs.length ? jobsTable(jobs) : h('div', { dataset: { jobs: 'none' } }, empty('No jobs yet.', 'Checks, scrubs, clone splits, mirror transfers and rebuilds appear here.')));
    }
    return page('Jobs', [], jobsCard,
      card('Pool activity', activity.length ? activityTable(activity) : empty('No scrub or rebuild since the daemon started.')));
  },
};
