// The token view: each generated token as a span coloured by the probability the model gave it, or by the entropy
// of the whole next-token distribution (the server's kvlm_entropy extension), with the alternatives and their
// probabilities on hover or focus. Everything shown comes from the API's own logprobs of the request.
import { stream, ApiError } from './api.js';
import { $, el, prob, fixed, tokenLabel, setStatus } from './util.js';

const ENTROPY_SCALE_BITS = 8;   // the entropy colour scale's red end
let tokens = [];                // [{text, logprob, entropy, top: [{token, logprob}]}]
let entropyRefused = false;     // the server does not know kvlm_entropy

// Sends body with "kvlm_entropy": true; a server that refuses the field gets the request again without it.
export async function withEntropy(body, run) {
  if (!entropyRefused) {
    try {
      return await run({ ...body, kvlm_entropy: true });
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 400 && /kvlm_entropy/.test(e.message))) throw e;
      entropyRefused = true;
    }
  }
  return run(body);
}

// One chunk's chat logprobs ({content: [{token, logprob, top_logprobs, entropy_bits}]}) as token entries.
export function chatTokens(lp) {
  return (lp.content || []).map(c => ({
    text: c.token, logprob: c.logprob, entropy: c.entropy_bits ?? null,
    top: (c.top_logprobs || []).map(t => ({ token: t.token, logprob: t.logprob })),
  }));
}

// One chunk's completion logprobs ({tokens, token_logprobs, top_logprobs: [{token: lp}], kvlm_entropy}).
export function completionTokens(lp) {
  return (lp.tokens || []).map((t, i) => ({
    text: t, logprob: lp.token_logprobs[i], entropy: lp.kvlm_entropy ? lp.kvlm_entropy[i] : null,
    top: Object.entries((lp.top_logprobs && lp.top_logprobs[i]) || {})
      .map(([token, logprob]) => ({ token, logprob })).sort((a, b) => b.logprob - a.logprob),
  }));
}

function colourBy() { return document.querySelector('input[name=tok-colour]:checked').value; }

// Red (unlikely / uncertain) to green (likely / certain).
function colour(t, by) {
  let x;
  if (by === 'entropy') {
    if (t.entropy === null) return 'transparent';
    x = 1 - Math.min(t.entropy / ENTROPY_SCALE_BITS, 1);
  } else x = Math.exp(t.logprob);
  return `hsl(${(x * 120).toFixed(0)}, 75%, 82%)`;
}

function legend() {
  const by = colourBy();
  $('tok-legend').replaceChildren(
    el('span', { text: by === 'entropy' ? `${ENTROPY_SCALE_BITS}+ bits` : 'p = 0' }),
    el('span', { class: 'ramp' }),
    el('span', { text: by === 'entropy' ? '0 bits' : 'p = 1' }));
}

function detail(i) {
  const t = tokens[i];
  for (const s of document.querySelectorAll('#tok-text .tok.sel')) s.classList.remove('sel');
  const span = document.querySelector(`#tok-text .tok[data-i="${i}"]`);
  if (span) span.classList.add('sel');
  const rows = t.top.map(a => el('tr', { class: a.token === t.text ? 'chosen' : null },
    el('td', { class: 'mono', text: tokenLabel(a.token) }),
    el('td', { class: 'num p', text: prob(Math.exp(a.logprob)) }),
    el('td', { class: 'num', text: prob(a.logprob) }),
    el('td', {}, el('span', { class: 'bar', style: `width:${(100 * Math.exp(a.logprob)).toFixed(1)}%` }))));
  $('tok-detail').replaceChildren(
    el('h3', {}, 'token ', el('span', { class: 'mono', text: tokenLabel(t.text) }), ` (#${i})`),
    el('dl', {},
      el('dt', { text: 'probability' }), el('dd', { class: 'num', id: 'tok-p', text: prob(Math.exp(t.logprob)) }),
      el('dt', { text: 'log-probability' }), el('dd', { class: 'num', id: 'tok-lp', text: prob(t.logprob) }),
      el('dt', { text: 'entropy' }),
      el('dd', { class: 'num', text: t.entropy === null ? 'not given' : fixed(t.entropy, 4) + ' bits' })),
    rows.length ? el('table', { class: 'data alts' },
      el('thead', {}, el('tr', {}, el('th', { text: 'token' }), el('th', { class: 'num', text: 'p' }),
        el('th', { class: 'num', text: 'log p' }), el('th', { text: '' }))),
      el('tbody', {}, ...rows)) : el('p', { class: 'hint', text: 'No alternatives were asked for.' }));
}

// A token as it reads in the text: a line break keeps a visible mark (so it can be hovered), a special token
// (no text) shows as ∅.
const shown = text => (text === '' ? '∅' : text.replace(/\n/g, '↵\n'));

function render() {
  const by = colourBy();
  legend();
  const box = $('tok-text');
  box.replaceChildren(...tokens.map((t, i) => el('span', {
    class: 'tok' + (t.text === '' ? ' special' : ''), tabindex: '0', 'data-i': i,
    'data-logprob': t.logprob, style: `background:${colour(t, by)}`, text: shown(t.text),
    title: `p ${prob(Math.exp(t.logprob))}` + (t.entropy === null ? '' : `, entropy ${fixed(t.entropy, 3)} bits`),
  })));
  const noEntropy = tokens.length && tokens.every(t => t.entropy === null);
  document.querySelector('input[name=tok-colour][value=entropy]').disabled = !!noEntropy;
  if (noEntropy && by === 'entropy') document.querySelector('input[name=tok-colour][value=p]').checked = true;
}

export function showTokens(list, source) {
  tokens = list;
  $('tok-source').textContent = `${list.length} tokens from ${source}` +
    (entropyRefused ? ' (this server does not give entropies: kvlm_entropy was refused)' : '');
  render();
  if (tokens.length) detail(0);
}

async function generate() {
  const body = {
    prompt: $('tok-prompt').value, max_tokens: Number($('tok-max').value), temperature: Number($('tok-temp').value),
    logprobs: Number($('tok-top').value), stream: true,
  };
  if ($('tok-seed').value !== '') body.seed = Number($('tok-seed').value);
  $('tok-run').disabled = true;
  const got = [];
  try {
    await withEntropy(body, b => {
      got.length = 0;
      return stream('POST', '/v1/completions', b, ev => {
        const c = ev.choices && ev.choices[0];
        if (c && c.logprobs) { got.push(...completionTokens(c.logprobs)); showTokens(got, 'a seeded completion'); }
      });
    });
    showTokens(got,
      `the completion of "${body.prompt}" (seed ${body.seed ?? 'random'}, temperature ${body.temperature})`);
  } catch (e) {
    setStatus(e.message, true);
  }
  $('tok-run').disabled = false;
}

export function init() {
  $('tok-form').addEventListener('submit', e => { e.preventDefault(); generate(); });
  for (const r of document.querySelectorAll('input[name=tok-colour]')) r.addEventListener('change', render);
  const pick = e => { const s = e.target.closest('.tok'); if (s) detail(Number(s.dataset.i)); };
  $('tok-text').addEventListener('mouseover', pick);
  $('tok-text').addEventListener('focusin', pick);
  $('tok-text').addEventListener('keydown', e => {
    const s = e.target.closest('.tok');
    if (!s) return;
    const next = e.key === 'ArrowRight' ? s.nextElementSibling
      : e.key === 'ArrowLeft' ? s.previousElementSibling : null;
    if (next) { e.preventDefault(); next.focus(); }
  });
  legend();
}
