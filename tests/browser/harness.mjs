// Shared by the browser test and the screenshot script: starts `kvlm serve` on a free port and waits until it is
// ready, and launches Debian's chromium headless through playwright-core. Both stop with the process.
import { spawn } from 'node:child_process';
import { chromium } from 'playwright-core';

export const KVLM = process.env.KVLM || 'build/kvlm';
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

const servers = [];
process.on('exit', () => { for (const s of servers) s.proc.kill('SIGKILL'); });

// `kvlm serve --port 0 ARGS`; resolves {url, port, proc, log()} once it says "ready".
export function startServer(args, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const proc = spawn(KVLM, ['serve', '--port', '0', '--access-log', 'off', ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '', port = 0, up = false;
    const timer = setTimeout(() => fail(new Error('kvlm serve did not get ready in time:\n' + log)), timeoutMs);
    const fail = e => { clearTimeout(timer); proc.kill('SIGKILL'); reject(e); };
    proc.on('error', fail);
    proc.on('exit', code => { if (!/kvlm serve: ready/.test(log)) fail(new Error(`kvlm serve exited with ${code}:\n${log}`)); });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', d => {
      log += d;
      const m = log.match(/listening on http:\/\/[^\s]*:(\d+)/);
      if (m) port = Number(m[1]);
      if (!up && port && /kvlm serve: ready/.test(log)) {
        up = true;
        clearTimeout(timer);
        const s = { url: `http://127.0.0.1:${port}`, port, proc, log: () => log };
        servers.push(s);
        resolve(s);
      }
    });
  });
}

// SIGTERM, and the exit; throws when the server failed or a sanitizer reported anything (a build-san/kvlm).
export async function stopServer(s) {
  if (!s) return;
  if (s.proc.exitCode === null) {
    const done = new Promise(r => s.proc.once('close', r));
    s.proc.kill('SIGTERM');
    await done;
  }
  if (s.proc.exitCode !== 0 || /Sanitizer|runtime error/.test(s.log()))
    throw new Error(`kvlm serve exited with ${s.proc.exitCode}:\n${s.log()}`);
}

// Headless Debian chromium; as root it needs --no-sandbox, and a small /dev/shm (containers) is avoided.
export async function launch() {
  return chromium.launch({
    executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

// A page at 1280x800 that records console errors and uncaught exceptions in `errors`.
export async function openPage(browser, url, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.errors = [];
  page.on('console', m => { if (m.type() === 'error') page.errors.push(m.text()); });
  page.on('pageerror', e => page.errors.push(String(e)));
  await page.goto(url);
  return page;
}

// The API, from the test's side (no browser): JSON in, JSON out.
export async function api(server, path, body, headers = {}) {
  const res = await fetch(server.url + path, {
    method: body === undefined ? 'GET' : 'POST', headers: { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${text}`);
  return path === '/metrics' ? text : JSON.parse(text);
}

// One value of /metrics, 0 when absent.
export async function metric(server, name) {
  const text = await api(server, '/metrics');
  const line = text.split('\n').find(l => l.startsWith(name + ' '));
  return line ? Number(line.slice(name.length + 1)) : 0;
}
