// The server's HTTP API as the page uses it: JSON calls and server-sent event streams over fetch, with the API
// key (kept in localStorage) sent as "Authorization: Bearer" once the server has answered 401. On a server with
// several models, the model picked (setModel) goes with every call: as "model" in JSON bodies and as ?model= on the
// /kvlm/ GET endpoints.

const KEY_STORE = 'kvlm.apiKey';
let needKeyHandler = () => {};

export function apiKey() { return localStorage.getItem(KEY_STORE) || ''; }
export function setApiKey(k) {
  if (k) localStorage.setItem(KEY_STORE, k);
  else localStorage.removeItem(KEY_STORE);
}
// Called with the server's message when a request is refused for want of a (right) key.
export function onNeedKey(fn) { needKeyHandler = fn; }

// The model picked, kept for this tab (sessionStorage) so a reload starts every view over it.
const MODEL_STORE = 'kvlm.model';
let model = sessionStorage.getItem(MODEL_STORE) || '';
export function currentModel() { return model; }
export function setModel(m) {
  model = m || '';
  if (model) sessionStorage.setItem(MODEL_STORE, model);
  else sessionStorage.removeItem(MODEL_STORE);
}

function routed(method, path, body) {
  if (!model) return [path, body];
  if (body && typeof body === 'object' && !Array.isArray(body) && body.model === undefined) body = { ...body, model };
  if (method === 'GET' && path.startsWith('/kvlm/'))
    path += (path.includes('?') ? '&' : '?') + 'model=' + encodeURIComponent(model);
  return [path, body];
}

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const k = apiKey();
  if (k) h.Authorization = 'Bearer ' + k;
  return h;
}

async function failure(res) {
  let msg = `${res.status} ${res.statusText}`, code = null;
  try {
    const j = await res.json();
    if (j && j.error) { msg = j.error.message || msg; code = j.error.code || null; }
  } catch (_) { /* not JSON */ }
  if (res.status === 401) needKeyHandler(msg);
  return new ApiError(res.status, msg, code);
}

async function send(method, path, body, signal) {
  [path, body] = routed(method, path, body);
  const res = await fetch(path, {
    method, headers: headers(body !== undefined), signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await failure(res);
  return res;
}

export async function getJSON(path, signal) { return (await send('GET', path, undefined, signal)).json(); }
export async function postJSON(path, body, signal) { return (await send('POST', path, body, signal)).json(); }
export async function getText(path, signal) { return (await send('GET', path, undefined, signal)).text(); }

// Reads a text/event-stream response and calls onEvent with each data payload parsed as JSON ("[DONE]" ends it).
// Resolves when the stream ends; rejects with an AbortError when `signal` aborts (the server then cancels).
export async function stream(method, path, body, onEvent, signal) {
  const res = await send(method, path, body, signal);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = block.split('\n').filter(l => l.startsWith('data:')).map(l => l.slice(5).trimStart()).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      const ev = JSON.parse(data);
      if (ev.error) throw new ApiError(500, ev.error.message, ev.error.code);
      onEvent(ev);
    }
  }
}
