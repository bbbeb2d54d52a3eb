// `make screenshots`: the pictures of docs/web.md, taken at 1280x800 in headless chromium from a live kvlm serve.
// The playground, token and measure views run the shipped Shakespeare GPT-2; the engine view runs a synthetic
// GPT-2 124M (random weights, the GPT-2 tokenizer), slow enough on a CPU that requests are still running when
// the picture is taken: four streams, two of which share a long prompt (prefix-cache hits, shared blocks).
//   node tests/browser/screenshots.mjs OUT_DIR
import { mkdirSync } from 'node:fs';
import { startServer, stopServer, launch, openPage } from './harness.mjs';

const out = process.argv[2] || 'docs/img';
mkdirSync(out, { recursive: true });
const shot = (page, name, opts = {}) => page.screenshot({ path: `${out}/${name}`, ...opts });

const [shk, syn, browser] = await Promise.all([
  startServer(['-m', 'models/shakespeare-gpt2']),
  startServer(['--synthetic', 'gpt2-124m', '--tokenizer', 'models/gpt2-tokenizer', '--kv-blocks', '192']),
  launch(),
]);
try {
  // Playground: a system prompt and two seeded turns.
  let page = await openPage(browser, shk.url + '/#chat');
  await page.fill('#system-prompt', 'You are a player in a tragedy; answer in verse.');
  await page.fill('#s-max-tokens', '32');
  await page.fill('#s-seed', '7');
  await page.fill('#s-stop', '\\nuser:');
  for (const msg of ['Who goes there?', 'What news from Verona?']) {
    await page.fill('#chat-input', msg);
    await page.click('#chat-send');
    await page.waitForSelector('#chat-send:not([disabled])');
  }
  await shot(page, 'web-chat.png');
  await page.context().close();

  // Token view: a seeded completion, one token's alternatives open.
  page = await openPage(browser, shk.url + '/#tokens');
  await page.fill('#tok-prompt', 'JULIET:');
  await page.fill('#tok-max', '48');
  await page.fill('#tok-seed', '5');
  await page.click('#tok-run');
  await page.waitForFunction(() => /completion of/.test(document.getElementById('tok-source').textContent));
  await page.locator('#tok-text .tok').nth(6).hover();
  await shot(page, 'web-tokens.png');
  await page.context().close();

  // Engine view: load on the synthetic model, history for a few seconds, then the picture mid-generation.
  page = await openPage(browser, syn.url + '/#engine');
  const shared = 'The quality of mercy is not strained; it droppeth as the gentle rain from heaven upon the place '.repeat(3);
  const post = body => fetch(syn.url + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  }).then(r => r.text());
  const load = [
    post({ prompt: 'Now is the winter of our discontent', max_tokens: 40, seed: 4 }),
    post({ prompt: shared + 'beneath.', max_tokens: 260, seed: 1 }),
    post({ prompt: 'To be, or not to be', max_tokens: 300, n: 2, seed: 2 }),
  ];
  await new Promise(r => setTimeout(r, 2500));
  load.push(post({ prompt: shared + 'above.', max_tokens: 200, seed: 3 }));
  await load[0];   // one finished request: the time-per-token chart has a point
  await new Promise(r => setTimeout(r, 2000));
  await page.waitForFunction(() => document.querySelectorAll('#eng-running tbody tr[data-key]').length >= 3);
  await page.locator('#eng-grid .blk.shared').first().hover();
  await shot(page, 'web-engine.png');
  await page.context().close();
  await Promise.all(load);

  // Measure: three temperatures of one prompt, and the capacity planner.
  page = await openPage(browser, shk.url + '/#measure');
  await page.fill('#m-prompt', 'ROMEO:');
  await page.fill('#m-temps', '0.5, 1, 1.5');
  await page.fill('#m-top', '8');
  await page.click('#m-run');
  await page.waitForSelector('#m-bars figure');
  await page.waitForSelector('#cap-table tbody tr');
  await shot(page, 'web-measure.png', { fullPage: true });
  await page.context().close();
} finally {
  await browser.close();
  await Promise.all([stopServer(shk), stopServer(syn)]);
}
