// The console's shell: sign-in, navigation (#/view/params...), and the refresh loop. Each
// view module exports { nav, refreshSeconds, render(params) -> Promise<Node>, live?(root) }:
// render loads what it needs from the API and builds its page; live(root), when present,
// updates the page in place after each statistics sample (charts, once a second).

import { get, token, setToken, clearToken, onRefused, session } from './api.js';
import * as stats from './stats.js';
import { h, errorBox } from './ui.js';
import overview from './view-overview.js';
import pools from './view-pools.js';
import volumes from './view-volumes.js';
import snapshots from './view-snapshots.js';
import exportsView from './view-exports.js';
import jobs from './view-jobs.js';
import events from './view-events.js';

const VIEWS = { '': overview, pools, volumes, snapshots, exports: exportsView, jobs, events };
const $ = (id) => document.getElementById(id);

let generation = 0; // bumps on navigation: a render that finishes late is dropped
let timer = null;
let unsubscribe = null;

function route() {
  const parts = window.location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const name = parts[0] || '';
  return { name: VIEWS[name] ? name : '', view: VIEWS[name] || overview, params: parts.slice(1) };
}

async function show(navigated) {
  if (!token()) return;
  const { name, view, params } = route();
  const gen = navigated ? ++generation : generation;
  clearTimeout(timer);
  document.querySelectorAll('[data-nav]').forEach((a) => {
    a.classList.toggle('active', a.dataset.nav === (name || 'overview'));
  });
  const main = $('main');
  if (navigated) {
    main.replaceChildren(h('div', { class: 'loading' }, 'Loading…'));
    main.dataset.view = name || 'overview';
  }
  let node;
  try {
    node = await view.render(params);
  } catch (e) {
    node = h('div', { class: 'page' }, errorBox(e));
  }
  if (gen !== generation || !token()) return;
  // Keep the old DOM when nothing changed (a focused button stays focused).
  if (navigated || main.firstElementChild?.outerHTML !== node.outerHTML) main.replaceChildren(node);
  if (unsubscribe) unsubscribe();
  unsubscribe = view.live ? stats.subscribe(() => view.live(main)) : null;
  if (view.live) view.live(main);
  clearTimeout(timer);
  timer = setTimeout(() => show(false), (view.refreshSeconds || 5) * 1000);
}

function showLogin(err) {
  clearTimeout(timer);
  generation += 1;
  stats.stop();
  document.querySelectorAll('dialog').forEach((d) => d.remove());
  $('shell').hidden = true;
  $('login').hidden = false;
  $('login-error').replaceChildren(err ? errorBox(err) : '');
  document.body.dataset.signedIn = 'false';
  $('login-token').value = '';
  $('login-token').focus();
}

async function enter() {
  const health = await get('/v1/health');
  session.caller = health.caller;
  session.role = health.role;
  $('login').hidden = true;
  $('shell').hidden = false;
  $('whoami').replaceChildren(h('div', { class: 'caller' }, health.caller), h('div', { class: 'muted small' }, `strata ${health.version}`));
  document.body.dataset.signedIn = 'true';
  document.body.dataset.role = health.role;
  stats.start();
  await show(true);
}

function liveIndicator() {
  const e = stats.error();
  const el = $('live');
  el.className = e ? 'live bad' : 'live ok';
  el.textContent = e ? `statistics: ${e.message}` : 'live';
}

onRefused((err) => {
  clearToken();
  showLogin(err);
});

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const t = $('login-token').value.trim();
  if (!t) return;
  setToken(t);
  try {
    await enter();
  } catch (e) {
    // 401/403 went through onRefused already; anything else (unreachable) is shown here.
    clearToken();
    showLogin(e);
  }
});

$('logout').addEventListener('click', () => {
  clearToken();
  showLogin(null);
});

window.addEventListener('hashchange', () => show(true));
window.addEventListener('strata:refresh', () => show(false));
stats.subscribe(liveIndicator);

if (token()) {
  enter().catch((e) => {
    clearToken();
    showLogin(e);
  });
} else {
  showLogin(null);
}
