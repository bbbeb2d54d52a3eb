// The measure view: the next-token distribution of a prompt at several temperatures (entropy, top-1 probability,
// top-5 mass, tokens needed for 90% of the mass, the most likely tokens) from /kvlm/measure/next-token, and KV
// bytes per token with a capacity planner (how many requests of a given context fit a memory budget, f32 vs f16)
// from /kvlm/model. Numbers are shown as the server computed them, to seven significant digits.
import { getJSON, postJSON } from './api.js';
import { $, el, prob, bytes, tokenLabel, setStatus } from './util.js';

let model = null;

function parseTemps(text) {
  const ts = text.split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ts.length || ts.some(t => !Number.isFinite(t)))
    throw new Error('temperatures: give numbers separated by commas');
  return ts;
}

function bars(r) {
  const max = Math.max(...r.top.map(t => t.p), 1e-12);
  return el('figure', { class: 'bar-chart' },
    el('figcaption', { text: `temperature ${r.temperature}` }),
    ...r.top.map(t => el('div', { class: 'bar-row', title: `id ${t.id}, p ${prob(t.p)}` },
      el('span', { class: 'mono label', text: tokenLabel(t.text) }),
      el('span', { class: 'track' }, el('span', { class: 'bar', style: `width:${(100 * t.p / max).toFixed(2)}%` })),
      el('span', { class: 'num', text: prob(t.p) }))));
}

async function run() {
  $('m-run').disabled = true;
  try {
    const body = {
      prompt: $('m-prompt').value, temperatures: parseTemps($('m-temps').value), top: Number($('m-top').value),
    };
    const r = await postJSON('/kvlm/measure/next-token', body);
    const rows = r.temperatures;
    $('m-info').textContent =
      `${r.prompt_tokens} prompt tokens; one forward pass, the same logits at every temperature.`;
    $('m-table').tBodies[0].replaceChildren(...rows.map(x => el('tr', { 'data-temperature': x.temperature },
      el('td', { class: 'num', text: String(x.temperature) }),
      el('td', { class: 'num entropy', text: prob(x.entropy_bits) }),
      el('td', { class: 'num top1', text: prob(x.top1) }),
      el('td', { class: 'num top5', text: prob(x.top5) }),
      el('td', { class: 'num n90', text: String(x.n90) }))));
    $('m-bars').replaceChildren(...rows.map(bars));
  } catch (e) {
    $('m-info').textContent = e.status === 404 ? 'This server has no /kvlm/measure/next-token.' : e.message;
    if (e.status !== 404) setStatus(e.message, true);
  }
  $('m-run').disabled = false;
}

// One request's KV at ctx tokens in whole blocks of each layer type: a type whose window releases blocks keeps
// only the blocks from the one holding position ctx + 1 - window on (as the server's pool counts them).
function requestBytes(m, bpt, ctx) {
  const bs = m.kv.block_size, rows = Math.ceil(ctx / bs);
  const types = m.layers ? m.layers.types : [{ window: 0, n_layers: m.n_layers, releases: false }];
  return types.reduce((sum, t) => {
    const start = t.releases && ctx + 1 > t.window ? ctx + 1 - t.window : 0;
    return sum + bpt / m.n_layers * t.n_layers * (rows - Math.floor(start / bs)) * bs;
  }, 0);
}

// Requests that fit: the budget over the KV of one request (requestBytes).
function plan() {
  if (!model) return;
  const kv = model.kv, budget = Number($('cap-mem').value) * 1048576, ctx = Math.max(1, Number($('cap-ctx').value));
  $('cap-table').tBodies[0].replaceChildren(...Object.entries(kv.bytes_per_token_by_dtype).map(([d, bpt]) => {
    const per = requestBytes(model, bpt, ctx);
    return el('tr', { 'data-dtype': d }, el('td', { text: d + (d === kv.dtype ? ' (serving)' : '') }),
      el('td', { class: 'num', text: String(bpt) }), el('td', { class: 'num', text: bytes(per) }),
      el('td', { class: 'num fits', text: String(Math.floor(budget / per)) }));
  }));
}

async function loadModel() {
  try {
    model = await getJSON('/kvlm/model');
  } catch (e) {
    $('cap-model').tBodies[0].replaceChildren(el('tr', {}, el('td', {
      class: 'hint', text: e.status === 404 ? 'This server has no /kvlm/model.' : e.message })));
    return;
  }
  const m = model, kv = m.kv, by = kv.bytes_per_token_by_dtype;
  const rows = [
    ['architecture', m.architecture], ['layers', m.n_layers],
    ['attention heads', `${m.n_heads} (${m.n_kv_heads} KV heads)`],
    ['head dimension', m.head_dim], ['embedding', m.n_embd], ['vocabulary', m.vocab], ['context window', m.n_ctx],
    ['weights', `${m.weights.params.toLocaleString('en')} parameters, ${m.weights.dtype}, ${bytes(m.weights.bytes)}`],
    ['KV per token', `2 × ${m.n_layers} layers × ${m.n_kv_heads} KV heads × bytes per head ` +
      `(${m.head_dim} numbers; q8_0: ${m.head_dim} int8 + a 2-byte scale per 32) = ` +
      Object.entries(by).map(([d, b]) => `${b} B (${d})`).join(', ')],
    ['attention', !m.layers || !m.layers.window ? `every layer global (${m.n_layers})` :
      m.layers.types.map(t => t.window ? `${t.n_layers} layers window ${t.window}` +
        (t.releases ? '' : ' (kept whole)') : `${t.n_layers} global`).join(', ') +
      `; KV at the ${m.n_ctx}-token context ${bytes(kv.max_context_bytes)} (${kv.dtype})`],
    ['KV pool', `${kv.pool_blocks} blocks of ${kv.block_size} tokens = ${kv.pool_tokens} tokens, ${kv.dtype}, ` +
      `${bytes(kv.pool_bytes)}; up to ${kv.max_seqs} sequences`],
  ];
  $('cap-model').tBodies[0].replaceChildren(...rows.map(([k, v]) =>
    el('tr', {}, el('th', { text: k }), el('td', { text: String(v) }))));
  if (!$('cap-ctx').value) $('cap-ctx').value = m.n_ctx;
  plan();
}

export function show() { if (!model) loadModel(); }

export function init() {
  $('m-form').addEventListener('submit', e => { e.preventDefault(); run(); });
  $('cap-form').addEventListener('input', plan);
  $('cap-form').addEventListener('submit', e => e.preventDefault());
}
