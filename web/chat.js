// The playground: chat (the server applies the model's chat template) or plain completion, streamed over server-sent
// events, with a Stop button that aborts the request (the server then cancels the sequence and frees its KV blocks).
// The conversation, system prompt and sampling settings persist in localStorage. Every reply asks for
// log-probabilities, so it can be opened in the token view.
import { stream, ApiError } from './api.js';
import { $, el, setStatus } from './util.js';
import { chatTokens, completionTokens, showTokens, withEntropy } from './tokens.js';
import { showView } from './app.js';

const STORE = 'kvlm.chat';
const FIELDS = ['max-tokens', 'temperature', 'top-k', 'top-p', 'min-p', 'presence', 'frequency', 'repetition', 'seed',
  'stop'];
let state = { mode: 'chat', system: '', messages: [], settings: {} };
let running = null;   // the AbortController of the request in flight

function save() {
  state.system = $('system-prompt').value;
  for (const f of FIELDS) state.settings[f] = $('s-' + f).value;
  try { localStorage.setItem(STORE, JSON.stringify(state)); } catch (_) { /* full or disabled: keep going */ }
}

function load() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE) || 'null');
    if (s && Array.isArray(s.messages)) state = { ...state, ...s };
  } catch (_) { /* a broken entry: start afresh */ }
  $('system-prompt').value = state.system || '';
  for (const f of FIELDS) if (state.settings[f] !== undefined) $('s-' + f).value = state.settings[f];
  const mode = state.mode === 'completion' ? 'completion' : 'chat';
  document.querySelector(`input[name=mode][value=${mode}]`).checked = true;
}

// The sampling fields of a request, as docs/server.md names them; empty inputs are left out.
function sampling() {
  const num = id => { const v = $('s-' + id).value.trim(); return v === '' ? undefined : Number(v); };
  const b = {
    max_tokens: num('max-tokens'), temperature: num('temperature'), top_k: num('top-k'), top_p: num('top-p'),
    min_p: num('min-p'), presence_penalty: num('presence'), frequency_penalty: num('frequency'),
    repetition_penalty: num('repetition'), seed: num('seed'),
  };
  const stop = $('s-stop').value;
  if (stop) b.stop = stop.replace(/\\n/g, '\n');
  for (const k of Object.keys(b)) if (b[k] === undefined) delete b[k];
  return b;
}

function bubble(m, i) {
  const body = el('div', { class: 'msg-body', text: m.content });
  const div = el('div', { class: 'msg ' + m.role, 'data-index': i },
    el('div', { class: 'msg-role', text: m.role === 'prompt' ? 'prompt' : m.role }), body);
  if (m.tokens && m.tokens.length) {
    div.append(el('button', {
      type: 'button', class: 'link', text: `${m.tokens.length} tokens: open in the token view`,
      onclick: () => { showTokens(m.tokens, `the playground's reply ${i}`); showView('tokens'); },
    }));
  }
  if (m.note) div.append(el('div', { class: 'msg-note', text: m.note }));
  return div;
}

function render() {
  const t = $('transcript');
  t.replaceChildren(...state.messages.map(bubble));
  if (!state.messages.length)
    t.append(el('p', {
      class: 'hint', text: state.mode === 'chat' ? 'No messages yet.' : 'Write a prompt; the model continues it.',
    }));
  t.scrollTop = t.scrollHeight;
  for (const e of document.querySelectorAll('.chat-only')) e.hidden = state.mode !== 'chat';
}

function busy(on) {
  $('chat-send').disabled = on;
  $('chat-stop').disabled = !on;
}

async function send() {
  const text = $('chat-input').value;
  if (running || (!text.trim() && state.mode === 'chat')) return;
  save();
  const chatMode = state.mode === 'chat';
  const history = state.messages.filter(m => m.role === 'user' || m.role === 'assistant');
  const body = { ...sampling(), stream: true, stream_options: { include_usage: true } };
  if (chatMode) {
    const sys = $('system-prompt').value.trim();
    body.messages = [...(sys ? [{ role: 'system', content: sys }] : []),
      ...history.map(m => ({ role: m.role, content: m.content })), { role: 'user', content: text }];
    body.logprobs = true;
    body.top_logprobs = 5;
    state.messages.push({ role: 'user', content: text });
  } else {
    body.prompt = text;
    body.logprobs = 5;
    state.messages.push({ role: 'prompt', content: text });
  }
  const reply = { role: chatMode ? 'assistant' : 'completion', content: '', tokens: [] };
  state.messages.push(reply);
  $('chat-input').value = '';
  render();
  const node = $('transcript').lastElementChild;
  const out = node.querySelector('.msg-body');
  node.classList.add('streaming');
  running = new AbortController();
  busy(true);
  const t0 = performance.now();
  let tFirst = 0, chunks = 0, finish = null, usage = null;
  const path = chatMode ? '/v1/chat/completions' : '/v1/completions';
  try {
    await withEntropy(body, b => stream('POST', path, b, ev => {
      if (ev.usage) usage = ev.usage;
      const c = ev.choices && ev.choices[0];
      if (!c) return;
      const piece = chatMode ? (c.delta && c.delta.content) || '' : c.text || '';
      if (piece) {
        if (!tFirst) tFirst = performance.now();
        chunks++;
        reply.content += piece;
        out.textContent = reply.content;
        $('transcript').scrollTop = $('transcript').scrollHeight;
      }
      if (c.logprobs) reply.tokens.push(...(chatMode ? chatTokens(c.logprobs) : completionTokens(c.logprobs)));
      if (c.finish_reason) finish = c.finish_reason;
    }, running.signal));
    reply.note = `finish: ${finish || '?'}`;
  } catch (e) {
    if (e.name === 'AbortError') reply.note = 'stopped: the server cancelled the request';
    else {
      reply.note = 'error: ' + e.message;
      setStatus(e.message, true);
      if (e instanceof ApiError && e.status === 401) { state.messages.splice(-2, 2); $('chat-input').value = text; }
    }
  }
  running = null;
  busy(false);
  const secs = (performance.now() - t0) / 1000;
  const n = usage ? usage.completion_tokens : reply.tokens.length;
  $('chat-stats').textContent = `${n} tokens in ${secs.toFixed(2)} s` +
    (tFirst ? `, first after ${((tFirst - t0)).toFixed(0)} ms, ${chunks} chunks` : '') +
    (usage ? `, prompt ${usage.prompt_tokens} tokens` : '') + (finish ? `, finish ${finish}` : '');
  render();
  save();
}

export function init() {
  load();
  render();
  $('chat-form').addEventListener('submit', e => { e.preventDefault(); send(); });
  $('chat-input').addEventListener('keydown', e => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('chat-stop').addEventListener('click', () => running && running.abort());
  $('chat-clear').addEventListener('click', () => {
    state.messages = [];
    save();
    render();
    $('chat-stats').textContent = '';
  });
  for (const r of document.querySelectorAll('input[name=mode]'))
    r.addEventListener('change', () => { state.mode = r.value; save(); render(); });
  $('sampling').addEventListener('change', save);
  $('system-prompt').addEventListener('change', save);
}
