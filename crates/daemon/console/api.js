// The console's one way to the daemon. Every call sends the bearer token the user typed
// (kept in sessionStorage: gone when the tab closes, never sent by the browser on its own
// as a cookie would be, so no CSRF token is needed) and changes are application/json, as
// the guard requires. Errors become ApiError with the daemon's kind, message and hint; a
// 401 or 403 also ends the session (app.js shows the login with the message).

const KEY = 'strata.token';

export class ApiError extends Error {
  constructor(status, kind, message, hint) {
    super(message);
    this.status = status;
    this.kind = kind;
    this.hint = hint || '';
  }
}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t);
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

let refused = () => {};

/** What to do when the daemon refuses the token (401) or the caller (403). */
export function onRefused(f) {
  refused = f;
}

/** One request. `body` is sent as JSON for anything but GET ({} when absent). */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body ?? {});
  }
  let r;
  try {
    r = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'Unreachable', `the daemon did not answer (${e.message})`, 'is `strata serve --tcp` still running?');
  }
  const text = await r.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!r.ok) {
    const e = (data && data.error) || {};
    const err = new ApiError(r.status, e.kind || `HTTP ${r.status}`, e.message || text.slice(0, 200) || r.statusText, e.hint);
    if (r.status === 401 || r.status === 403) refused(err);
    throw err;
  }
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body);
export const del = (path, body) => api('DELETE', path, body);

/** GET that answers null on 404: for endpoints an older daemon may not have (jobs). */
export async function getOptional(path) {
  try {
    return await get(path);
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

/** A path segment: names are percent-encoded in paths. */
export const seg = (s) => encodeURIComponent(s);

/** Who is signed in (GET /v1/health): the caller's name and role. */
export const session = { caller: null, role: null };
const RANK = { viewer: 1, operator: 2, admin: 3 };

/** Whether the signed-in caller has at least `role`. */
export function may(role) {
  return (RANK[session.role] || 0) >= RANK[role];
}

/** Volumes of every open pool, each list in the pool's order. */
export async function allVolumes(pools) {
  const open = pools.filter((p) => p.state !== 'UNAVAILABLE');
  const lists = await Promise.all(open.map((p) => get(`/v1/pools/${seg(p.name)}/volumes`)));
  return lists.flat();
}

/** Snapshots of every open pool. */
export async function allSnapshots(pools) {
  const open = pools.filter((p) => p.state !== 'UNAVAILABLE');
  const lists = await Promise.all(open.map((p) => get(`/v1/pools/${seg(p.name)}/snapshots`)));
  return lists.flat();
}
