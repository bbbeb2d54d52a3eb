// Small helpers shared by the views: element lookup and creation, number formats, the status line.

export const $ = id => document.getElementById(id);

// An element with attributes (class, text, dataset entries as data-*) and children.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function setStatus(text, isError) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', !!isError);
}

// Seven significant digits: what the token and measure views show of a probability, so a reader (or a test)
// gets the API's value to 1e-6 relative.
export const prob = p => {
  const x = Number(p);
  return x !== 0 && Math.abs(x) < 1e-3 ? x.toExponential(6) : x.toPrecision(7);
};
export const pct = p => (100 * p).toFixed(1) + '%';
export const fixed = (x, d) => (x === null || x === undefined || Number.isNaN(x) ? '–' : Number(x).toFixed(d));

export function bytes(n) {
  if (n === null || n === undefined) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + ' ' + u[i];
}

// A token's text as it should show: control characters visible, an empty piece (a special token) marked.
export function tokenLabel(t) {
  if (t === '') return '∅';
  return t.replace(/\n/g, '↵').replace(/\t/g, '⇥').replace(/ /g, '·');
}
