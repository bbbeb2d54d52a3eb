// The page's entry point: the tabs (keyboard as the ARIA tabs pattern: arrows, Home, End), the served model's name
// (or that it is still loading), the model picker when the server serves several, and the API key bar shown when
// the server asks for a key. Each view lives in a module of its own.
import { getJSON, apiKey, setApiKey, onNeedKey, currentModel, setModel } from './api.js';
import { $, setStatus } from './util.js';
import * as chat from './chat.js';
import * as tokens from './tokens.js';
import * as engine from './engine.js';
import * as measure from './measure.js';

const views = { chat, tokens, engine, measure };
const tabs = [...document.querySelectorAll('[role=tab]')];
let current = null;

export function showView(name) {
  if (current === name) return;
  for (const t of tabs) {
    const on = t.id === 'tab-' + name;
    t.setAttribute('aria-selected', on);
    t.tabIndex = on ? 0 : -1;
    $(t.getAttribute('aria-controls')).hidden = !on;
  }
  if (current && views[current].hide) views[current].hide();
  current = name;
  if (views[name].show) views[name].show();
  if (location.hash !== '#' + name) history.replaceState(null, '', '#' + name);
}

function tabKeys(e) {
  const i = tabs.indexOf(e.target);
  const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
  if (next === undefined) return;
  e.preventDefault();
  const t = tabs[(next + tabs.length) % tabs.length];
  t.focus();
  showView(t.id.slice(4));
}

function keyBar() {
  const form = $('key-form');
  onNeedKey(msg => {
    form.hidden = false;
    $('key-msg').textContent = apiKey() ? 'The key was refused: ' + msg : '';
    $('api-key').focus();
  });
  form.addEventListener('submit', e => {
    e.preventDefault();
    setApiKey($('api-key').value.trim());
    $('key-msg').textContent = '';
    form.hidden = true;
    loadModel();
    if (views[current].show) views[current].show();
  });
}

function modelLabel(m) {
  return m.max_model_len ? `${m.id} · context ${m.max_model_len}` : `${m.id} · not loaded yet`;
}

// Several models: a picker over /v1/models (a model the server no longer lists falls back to the first).
function modelPicker(list) {
  const pick = $('model-pick');
  pick.hidden = list.length < 2;
  if (list.length < 2) {
    setModel('');
    return;
  }
  const keep = list.some(m => m.id === currentModel()) ? currentModel() : list[0].id;
  pick.replaceChildren(...list.map(m => {
    const o = document.createElement('option');
    o.value = m.id;
    o.textContent = m.status && m.status.value === 'unloaded' ? `${m.id} (not loaded)` : m.id;
    o.selected = m.id === keep;
    return o;
  }));
  setModel(keep);
}

async function loadModel() {
  try {
    const list = await getJSON('/v1/models');
    modelPicker(list.data);
    const model = list.data.find(m => m.id === currentModel()) || list.data[0];
    $('model-name').textContent = modelLabel(model);
    setStatus('');
  } catch (e) {
    $('model-name').textContent = '';
    if (e.status === 503) { setStatus('the model is loading…'); setTimeout(loadModel, 1000); }
    else setStatus(e.message, true);
  }
}

// Another model: the page starts again over it (each view keeps what it fetched of the model).
$('model-pick').addEventListener('change', e => {
  setModel(e.target.value);
  location.reload();
});
for (const t of tabs) {
  t.addEventListener('click', () => showView(t.id.slice(4)));
  t.addEventListener('keydown', tabKeys);
}
keyBar();
for (const v of Object.values(views)) v.init();
const start = location.hash.slice(1);
showView(views[start] ? start : 'chat');
loadModel();
