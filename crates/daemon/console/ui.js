// DOM helpers. Everything the daemon returns reaches the page as text nodes (never
// innerHTML), so a volume named `<img onerror=…>` is just a name; with the CSP's
// script-src 'self' that is a second wall, not the only one.

/** h('div', {class: 'x', onclick: f, dataset: {a: 1}}, child, 'text', [more]) */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.entries(v).forEach(([dk, dv]) => { el.dataset[dk] = dv; });
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const STATE_CLASS = {
  ONLINE: 'ok', DEGRADED: 'warn', SUSPENDED: 'bad', UNAVAILABLE: 'bad', FAULTED: 'bad', OFFLINE: 'warn',
  REMOVED: 'bad', STALE: 'warn', REBUILDING: 'warn',
  running: 'info', succeeded: 'ok', finished: 'ok', failed: 'bad', cancelled: 'muted', interrupted: 'warn',
  paused: 'warn', yielded: 'warn', none: 'muted',
  info: 'info', warning: 'warn', error: 'bad', admin: 'bad', operator: 'warn', viewer: 'info',
};

/** A coloured label for a state, severity or role. */
export function badge(text, cls) {
  return h('span', { class: `badge ${cls || STATE_CLASS[text] || 'muted'}` }, text);
}

/** A horizontal bar filled to `fraction` (0–1). Width set through the CSSOM: the CSP
 *  forbids style attributes, not style properties. */
export function bar(fraction, cls = '', title = '') {
  const f = Math.max(0, Math.min(1, Number(fraction) || 0));
  const fill = h('div', { class: 'bar-fill' });
  fill.style.width = `${(f * 100).toFixed(2)}%`;
  return h('div', { class: `bar ${cls}`, title: title || null, dataset: { fraction: f.toFixed(4) } }, fill);
}

/** Capacity: colour from the share used. */
export function capacityBar(used, size) {
  const f = size > 0 ? used / size : 0;
  return bar(f, f > 0.9 ? 'bad' : f > 0.75 ? 'warn' : 'ok');
}

/** A table: columns [{label, cls?}], rows of arrays of cells; `rowAttrs(i)` per row. */
export function table(columns, rows, rowAttrs) {
  return h('table', { class: 'grid' },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.cls || null }, c.label)))),
    h('tbody', {}, rows.map((r, i) => h('tr', rowAttrs ? rowAttrs(i) : {},
      r.map((cell, j) => h('td', { class: columns[j].cls || null }, cell))))));
}

export function card(title, ...body) {
  return h('section', { class: 'card' }, title ? h('h3', {}, title) : null, ...body);
}

/** Label/value pairs. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export function empty(text, detail) {
  return h('div', { class: 'empty' }, h('p', {}, text), detail ? h('p', { class: 'muted' }, detail) : null);
}

export function errorBox(e) {
  return h('div', { class: 'error-box', role: 'alert' }, h('strong', {}, e.kind ? `${e.kind}: ` : ''), e.message,
    e.hint ? h('div', { class: 'hint' }, e.hint) : null);
}

export function button(label, onclick, opts = {}) {
  return h('button', {
    type: 'button', class: `btn ${opts.cls || ''}`, onclick, disabled: opts.disabled || false,
    title: opts.title || null, dataset: opts.action ? { action: opts.action } : null,
  }, label);
}

let toastTimer;
/** A short message in the corner. */
export function toast(text, kind = 'ok') {
  const t = document.getElementById('toast');
  t.replaceChildren(text);
  t.className = `toast show ${kind}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.className = 'toast'; }, kind === 'bad' ? 8000 : 4000);
}

/** A link inside the console. */
export function link(href, text) {
  return h('a', { href }, text);
}

/**
 * A modal form. fields: [{name, label, type ('text', 'number', 'select', 'checkbox'),
 * value, options, placeholder, help, required}]. `confirm`: a name the user must type
 * before the (destructive) submit button enables. `submit(values)` runs the action; its
 * error is shown in the dialog, which stays open. Resolves with submit's result, or null
 * when cancelled.
 */
export function formDialog({ title, intro, fields = [], submitLabel = 'OK', danger = false, confirm, submit }) {
  return new Promise((resolve) => {
    const inputs = {};
    const rows = fields.map((f) => {
      const id = `f-${f.name}`;
      let input;
      if (f.type === 'select') {
        input = h('select', { id, name: f.name }, f.options.map((o) => h('option', { value: o, selected: o === f.value }, o)));
      } else if (f.type === 'checkbox') {
        input = h('input', { id, name: f.name, type: 'checkbox', checked: !!f.value });
      } else {
        input = h('input', {
          id, name: f.name, type: f.type || 'text', value: f.value ?? '', placeholder: f.placeholder || null,
          required: f.required || false, autocomplete: 'off', spellcheck: 'false',
        });
      }
      inputs[f.name] = input;
      return h('div', { class: `field ${f.type === 'checkbox' ? 'check' : ''}` },
        h('label', { for: id }, f.label), input, f.help ? h('div', { class: 'help' }, f.help) : null);
    });
    const error = h('div', { class: 'dialog-error' });
    const ok = h('button', { type: 'submit', class: `btn ${danger ? 'danger' : 'primary'}` }, submitLabel);
    let typed = null;
    if (confirm) {
      typed = h('input', { id: 'f-confirm', name: 'confirm', type: 'text', autocomplete: 'off', spellcheck: 'false' });
      ok.disabled = true;
      typed.addEventListener('input', () => { ok.disabled = typed.value !== confirm; });
      rows.push(h('div', { class: 'field confirm' },
        h('label', { for: 'f-confirm' }, 'Type ', h('code', {}, confirm), ' to confirm'), typed));
    }
    const cancel = h('button', { type: 'button', class: 'btn', value: 'cancel' }, 'Cancel');
    const form = h('form', { method: 'dialog' },
      h('h2', {}, title), intro ? h('div', { class: 'intro' }, intro) : null, rows, error,
      h('div', { class: 'dialog-buttons' }, cancel, ok));
    const dlg = h('dialog', { class: danger ? 'danger' : null }, form);
    const close = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    cancel.addEventListener('click', () => close(null));
    dlg.addEventListener('cancel', (ev) => { ev.preventDefault(); close(null); });
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (confirm && typed.value !== confirm) return;
      const values = {};
      for (const [k, el] of Object.entries(inputs)) {
        values[k] = el.type === 'checkbox' ? el.checked : el.value.trim();
      }
      ok.disabled = true;
      error.replaceChildren();
      try {
        close(await submit(values));
      } catch (e) {
        error.replaceChildren(errorBox(e));
        ok.disabled = false;
      }
    });
    document.body.append(dlg);
    dlg.showModal();
    (Object.values(inputs)[0] || typed || ok).focus();
  });
}

/** A view's page: a title line with actions on the right, then its content. */
export function page(title, actions, ...content) {
  return h('div', { class: 'page' },
    h('header', { class: 'page-head' }, h('h1', {}, title), h('div', { class: 'actions' }, actions || [])),
    ...content);
}
