// The engine view: the KV block pool as a grid (free / used / shared prefix / cached-evictable), who holds each
// block and its reference count, utilisation, prefix-cache hits, the running and waiting lists, fed live by
// /kvlm/engine/stream (docs/engine-view.md); and charts of the last minutes from /kvlm/engine/history.
import { stream, getJSON } from './api.js';
import { $, el, bytes, fixed, pct, setStatus } from './util.js';

const STREAM_MS = 250, HISTORY_MS = 5000;
const STATE = { '.': ['free', 'free'], u: ['used', 'used by one sequence'], s: ['shared', 'shared (refcount > 1)'],
  c: ['cached', 'cached, evictable (held only by the prefix cache)'] };
let live = null, historyTimer = 0, snap = null, selected = -1, owners = [];
let highlight = null;   // "id (choice n)" of the running row whose blocks are outlined

function cards(s) {
  const kv = s.kv, pc = kv.prefix_cache;
  const items = [
    ['blocks used', `${kv.blocks_used} / ${kv.n_blocks}`, `${kv.blocks_shared} shared, ${kv.blocks_cached} cached`],
    ['utilisation', kv.tokens_reserved ? pct(kv.utilisation) : '–',
      `${kv.tokens_held} tokens held / ${kv.tokens_reserved} reserved`],
    ['prefix cache', `${pc.hits} / ${pc.lookups} hits`, `${pc.hit_tokens} tokens reused`],
    ...(kv.tiers && (kv.tiers.ram_bytes || kv.tiers.disk_files || kv.tiers.ram_hits || kv.tiers.disk_hits)
      ? [['kv tiers', `${kv.tiers.ram_hits} memory / ${kv.tiers.disk_hits} disk hits`,
        `${bytes(kv.tiers.ram_bytes)} in memory, ${kv.tiers.disk_files} files (${bytes(kv.tiers.disk_bytes)})`]]
      : []),
    ['running', String(s.running.length), `${s.waiting.length} waiting`],
    ['engine steps', String(s.step), `${s.totals.requests} requests, ${s.totals.preemptions} preemptions`],
    ['tokens', String(s.totals.tokens_generated), `generated; ${s.totals.prompt_tokens} prompt`],
  ];
  $('eng-cards').replaceChildren(...items.map(([k, v, sub]) =>
    el('div', { class: 'card' }, el('div', { class: 'k', text: k }), el('div', { class: 'v', text: v }),
      el('div', { class: 'sub', text: sub }))));
  $('eng-pool-desc').textContent = `${kv.n_blocks} blocks of ${kv.block_size} tokens, ${kv.dtype}, ` +
    `${bytes(kv.bytes_per_block)} each (${bytes(kv.bytes_per_token)} per token)`;
}

function describe(i) {
  if (!snap || i < 0 || i >= snap.kv.n_blocks) return 'Hover or select a block to see who holds it.';
  const c = snap.kv.blocks[i], rc = snap.kv.refcounts[i];
  const who = owners[i] && owners[i].length ? 'held by ' + owners[i].join(', ')
    : c === 'c' ? 'held by the prefix cache only' : '';
  return `block ${i}: ${STATE[c] ? STATE[c][1] : c}, refcount ${rc}${who ? ', ' + who : ''}`;
}

function select(i) {
  const grid = $('eng-grid');
  const old = grid.children[selected];
  if (old) old.classList.remove('sel');
  selected = i;
  const b = grid.children[i];
  if (b) b.classList.add('sel');
  $('eng-block').textContent = describe(i);
}

function grid(s) {
  const g = $('eng-grid'), kv = s.kv;
  owners = Array.from({ length: kv.n_blocks }, () => []);
  for (const r of s.running)
    for (const b of r.blocks) if (b >= 0 && b < kv.n_blocks) owners[b].push(`${r.id} (choice ${r.choice})`);
  while (g.children.length > kv.n_blocks) g.lastChild.remove();
  while (g.children.length < kv.n_blocks) g.append(el('i', { 'data-i': g.children.length }));
  for (let i = 0; i < kv.n_blocks; i++) {
    const c = kv.blocks[i], b = g.children[i];
    const cls = 'blk ' + (STATE[c] ? STATE[c][0] : 'free') + (owners[i].includes(highlight) ? ' mine' : '') +
      (i === selected ? ' sel' : '');
    if (b.className !== cls) b.className = cls;
    b.dataset.state = c;
  }
  g.setAttribute('aria-label', `KV blocks: ${kv.n_blocks} in the pool`);
  if (selected >= 0) $('eng-block').textContent = describe(selected);
}

function tables(s) {
  $('eng-running').tBodies[0].replaceChildren(...s.running.map(r => {
    const key = `${r.id} (choice ${r.choice})`;
    return el('tr', { class: key === highlight ? 'sel' : null, tabindex: '0', 'data-key': key,
      title: 'select to outline its blocks' },
    el('td', { class: 'mono', text: r.id }), el('td', { class: 'num', text: r.choice }),
    el('td', { text: r.state }), el('td', { class: 'num', text: r.prompt_tokens }),
    el('td', { class: 'num', text: r.cached_prompt_tokens }), el('td', { class: 'num', text: r.generated }),
    el('td', { class: 'num', text: r.max_tokens }), el('td', { class: 'num', text: r.blocks.length }));
  }));
  if (!s.running.length)
    $('eng-running').tBodies[0].append(el('tr', {}, el('td', { colspan: 8, class: 'hint', text: 'nothing running' })));
  $('eng-waiting').tBodies[0].replaceChildren(...s.waiting.map(w => el('tr', {},
    el('td', { class: 'mono', text: w.id }), el('td', { class: 'num', text: w.prompt_tokens }),
    el('td', { class: 'num', text: `${fixed(w.queued_ms, 0)} ms` }))));
  if (!s.waiting.length)
    $('eng-waiting').tBodies[0].append(el('tr', {}, el('td', { colspan: 3, class: 'hint', text: 'nobody waiting' })));
}

function update(s) {
  snap = s;
  cards(s);
  grid(s);
  tables(s);
}

// One series as an SVG line chart: the newest value and the maximum as text, nulls as gaps.
function chart(title, t, ys, unit, digits = 1) {
  const W = 300, H = 70, ns = 'http://www.w3.org/2000/svg';
  const vals = ys.filter(v => v !== null && v !== undefined);
  const max = Math.max(1e-9, ...vals), last = vals.length ? vals[vals.length - 1] : null;
  const show = v => (v === null ? '–' : fixed(v, digits) + (unit ? ' ' + unit : ''));
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `${title}: latest ${show(last)}`);
  let d = '', pen = false;
  const dots = [];
  ys.forEach((v, i) => {
    if (v === null || v === undefined) { pen = false; return; }
    const x = ys.length > 1 ? (i / (ys.length - 1)) * W : W, y = H - 2 - (v / max) * (H - 6);
    d += `${pen ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`;
    if (!pen && (ys[i + 1] === null || ys[i + 1] === undefined)) dots.push([x, y]);   // no neighbour: a dot
    pen = true;
  });
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', d || 'M0,0');
  path.setAttribute('class', 'line');
  const base = document.createElementNS(ns, 'line');
  Object.entries({ x1: 0, x2: W, y1: H - 2, y2: H - 2, class: 'axis' }).forEach(([k, v]) => base.setAttribute(k, v));
  svg.append(base, path);
  for (const [x, y] of dots) {
    const c = document.createElementNS(ns, 'circle');
    Object.entries({ cx: x.toFixed(1), cy: y.toFixed(1), r: 2.5, class: 'dot' })
      .forEach(([k, v]) => c.setAttribute(k, v));
    svg.append(c);
  }
  const span = t.length > 1 ? Math.round(t[t.length - 1] - t[0]) : 0;
  return el('figure', { class: 'chart' },
    el('figcaption', {}, el('b', { text: title }),
      el('span', { text: `now ${show(last)}, max ${show(vals.length ? max : null)} (last ${span} s)` })),
    svg);
}

async function history() {
  try {
    const h = await getJSON('/kvlm/engine/history');
    $('eng-charts').replaceChildren(
      chart('time to first token, p50', h.t, h.ttft_ms_p50, 'ms'),
      chart('time per output token, p50', h.t, h.tpot_ms_p50, 'ms'),
      chart('output throughput', h.t, h.output_tok_s, 'tokens/s'),
      chart('running', h.t, h.running, '', 0),
      chart('waiting', h.t, h.waiting, '', 0),
      chart('KV blocks used', h.t, h.kv_blocks_used, '', 0));
  } catch (e) {
    $('eng-charts').replaceChildren(el('p', { class: 'hint', text: 'No history: ' + e.message }));
  }
}

// Follows the snapshot stream while the view is open; reconnects when the server drops it, stops on 404 (no
// engine view) and 401 (the key bar asks for a key; showing the view again starts over).
async function follow() {
  const ctl = new AbortController();
  live = ctl;
  try {
    while (live === ctl) {
      try {
        await stream('GET', `/kvlm/engine/stream?interval_ms=${STREAM_MS}`, undefined, update, ctl.signal);
      } catch (e) {
        if (e.name === 'AbortError' || e.status === 401) return;
        if (e.status === 404) {
          $('eng-block').textContent = 'This server has no engine view (/kvlm/engine/stream answered 404).';
          return;
        }
        setStatus('engine stream: ' + e.message, true);
      }
      await new Promise(r => setTimeout(r, 1000));
    }
  } finally {
    if (live === ctl) live = null;
  }
}

export function show() {
  if (!live) follow();
  history();
  clearInterval(historyTimer);
  historyTimer = setInterval(history, HISTORY_MS);
}

export function hide() {
  if (live) live.abort();
  live = null;
  clearInterval(historyTimer);
}

export function init() {
  const g = $('eng-grid');
  g.tabIndex = 0;
  g.addEventListener('mouseover', e => { if (e.target.dataset.i !== undefined) select(Number(e.target.dataset.i)); });
  g.addEventListener('click', e => { if (e.target.dataset.i !== undefined) select(Number(e.target.dataset.i)); });
  g.addEventListener('keydown', e => {
    if (!snap) return;
    const cols = Math.max(1, Math.round(g.clientWidth / (g.firstChild ? g.firstChild.offsetWidth + 2 : 16)));
    const d = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: cols, ArrowUp: -cols }[e.key];
    if (d === undefined) return;
    e.preventDefault();
    select(Math.min(snap.kv.n_blocks - 1, Math.max(0, (selected < 0 ? 0 : selected + d))));
  });
  const pickRow = e => {
    const tr = e.target.closest('tr[data-key]');
    if (!tr) return;
    highlight = highlight === tr.dataset.key ? null : tr.dataset.key;
    if (snap) update(snap);
  };
  $('eng-running').addEventListener('click', pickRow);
  $('eng-running').addEventListener('keydown', e => {
    if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pickRow(e); }
  });
}
