// `make test-browser`: kvlm serve's web page in headless chromium (playwright-core), against two servers: the
// shipped Shakespeare GPT-2 (fast: the playground, token and measure checks) and a synthetic GPT-2 124M with the
// GPT-2 tokenizer (about 40 tokens/s on two cores: long enough to press Stop mid-stream and to watch the KV grid
// fill and empty). Every number the page shows is compared with what the API answers for the same request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, stopServer, launch, openPage, api, metric } from './harness.mjs';

let shk, syn, browser;

before(async () => {
  [shk, syn, browser] = await Promise.all([
    startServer(['-m', 'models/shakespeare-gpt2']),
    startServer(['--synthetic', 'gpt2-124m', '--tokenizer', 'models/gpt2-tokenizer', '--kv-blocks', '256']),
    launch(),
  ]);
});

after(async () => {
  if (browser) await browser.close();
  await Promise.all([stopServer(shk), stopServer(syn)]);
});

// Fills form fields: {selector: value}.
async function fill(page, fields) {
  for (const [sel, v] of Object.entries(fields)) await page.fill(sel, v);
}

// Ends a test's page: no console error on the way.
async function closeClean(page) {
  assert.deepEqual(page.errors, []);
  await page.context().close();
}

const relClose = (shown, exact, what) => {
  const rel = Math.abs(shown - exact) / Math.max(Math.abs(exact), 1e-30);
  assert.ok(rel <= 1e-6, `${what}: shown ${shown}, the API says ${exact} (relative ${rel})`);
};

test('the page and its files load with no console error, and the views switch by keyboard', async () => {
  const page = await openPage(browser, shk.url + '/');
  await page.waitForFunction(() => document.getElementById('model-name').textContent.includes('shakespeare-gpt2'));
  await page.focus('#tab-chat');
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('#tab-tokens', 'aria-selected'), 'true');
  assert.equal(await page.isVisible('#view-tokens'), true);
  assert.equal(await page.isVisible('#view-chat'), false);
  await page.keyboard.press('End');
  await page.waitForSelector('#cap-table tbody tr');
  await closeClean(page);
});

test('a chat message streams a reply in several chunks', async () => {
  const page = await openPage(browser, shk.url + '/#chat');
  await fill(page, { '#s-max-tokens': '40', '#s-seed': '3', '#chat-input': 'Speak, friend.' });
  await page.press('#chat-input', 'Enter');
  await page.waitForSelector('#chat-send:not([disabled])');
  await page.waitForFunction(() => /chunks/.test(document.getElementById('chat-stats').textContent));
  const stats = await page.textContent('#chat-stats');
  const chunks = Number(stats.match(/(\d+) chunks/)[1]);
  assert.ok(chunks >= 5, `only ${chunks} chunks: ${stats}`);
  const reply = await page.textContent('#transcript .msg.assistant .msg-body');
  assert.ok(reply.length > 10, `reply "${reply}"`);
  // The conversation survives a reload (localStorage).
  await page.reload();
  await page.waitForSelector('#transcript .msg.assistant');
  assert.equal(await page.textContent('#transcript .msg.assistant .msg-body'), reply);
  // The reply's tokens open in the token view, their texts making up the reply.
  await page.click('#transcript .msg.assistant button.link');
  assert.equal(await page.getAttribute('#tab-tokens', 'aria-selected'), 'true');
  const texts = await page.locator('#tok-text .tok').evaluateAll(spans => spans.length);
  assert.equal(texts, Number(stats.match(/^(\d+) tokens/)[1]));
  await closeClean(page);
});

test('completion mode continues the prompt as it streams', async () => {
  const page = await openPage(browser, shk.url + '/#chat');
  await page.check('input[name=mode][value=completion]');
  assert.equal(await page.isVisible('#system-prompt'), false);
  await fill(page, { '#s-max-tokens': '20', '#s-seed': '5', '#chat-input': 'ROMEO:' });
  await page.click('#chat-send');
  await page.waitForFunction(() => /finish: length/.test(document.querySelector('#transcript .msg.completion .msg-note')?.textContent));
  const shown = await page.textContent('#transcript .msg.completion .msg-body');
  const ref = await api(shk, '/v1/completions', { prompt: 'ROMEO:', max_tokens: 20, seed: 5, temperature: 0.8, top_k: 40,
    top_p: 0.95, min_p: 0, presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1 });
  assert.equal(shown, ref.choices[0].text);
  await closeClean(page);
});

test('Stop cancels the request on the server, and the KV grid shows blocks during generation and none after', async () => {
  const page = await openPage(browser, syn.url + '/#engine');
  await page.waitForSelector('#eng-grid .blk');
  assert.equal(await page.locator('#eng-grid .blk').count(), 256);
  const cancelled = 'kvlm_sequences_finished_total{reason="cancelled"}';
  const before = await metric(syn, cancelled);
  await page.click('#tab-chat');
  await fill(page, { '#s-max-tokens': '600', '#chat-input': 'Tell me a long story.' });
  await page.click('#chat-send');
  await page.waitForFunction(() => document.querySelector('#transcript .msg.assistant .msg-body').textContent.length > 0);
  await page.click('#tab-engine');
  await page.waitForFunction(() => document.querySelectorAll('#eng-grid .blk.used').length > 0, null, { timeout: 10000 });
  const row = await page.textContent('#eng-running tbody tr');
  assert.match(row, /chatcmpl-/);
  await page.click('#tab-chat');
  await page.click('#chat-stop');
  await page.waitForFunction(() => /stopped/.test(document.querySelector('#transcript .msg.assistant .msg-note')?.textContent));
  let after = before;
  for (let i = 0; i < 50 && after === before; i++) {
    await new Promise(r => setTimeout(r, 100));
    after = await metric(syn, cancelled);
  }
  assert.equal(after, before + 1, 'the server did not count a cancelled sequence');
  await page.click('#tab-engine');
  await page.waitForFunction(() => document.querySelectorAll('#eng-grid .blk.used, #eng-grid .blk.shared').length === 0,
    null, { timeout: 5000 });
  assert.match(await page.textContent('#eng-running tbody'), /nothing running/);
  await closeClean(page);
});

test("the token view shows the API's probabilities for the same seeded request", async () => {
  const page = await openPage(browser, shk.url + '/#tokens');
  await fill(page, { '#tok-prompt': 'JULIET:', '#tok-max': '24', '#tok-temp': '0.9', '#tok-seed': '11',
    '#tok-top': '4' });
  await page.click('#tok-run');
  await page.waitForSelector('#tok-run:not([disabled])');
  await page.waitForFunction(() => /completion of/.test(document.getElementById('tok-source').textContent));
  const ref = await api(shk, '/v1/completions',
    { prompt: 'JULIET:', max_tokens: 24, temperature: 0.9, seed: 11, logprobs: 4, kvlm_entropy: true });
  const lp = ref.choices[0].logprobs;
  const spans = page.locator('#tok-text .tok');
  assert.equal(await spans.count(), lp.tokens.length);
  for (let i = 0; i < lp.tokens.length; i++) {
    await spans.nth(i).hover();
    await page.waitForFunction(k => document.querySelector('#tok-text .tok.sel')?.dataset.i === String(k), i);
    relClose(Number(await page.textContent('#tok-p')), Math.exp(lp.token_logprobs[i]), `token ${i} p`);
    relClose(Number(await page.textContent('#tok-lp')), lp.token_logprobs[i], `token ${i} logprob`);
    const alts = Object.values(lp.top_logprobs[i]).sort((a, b) => b - a);
    const shown = await page.locator('#tok-detail table.alts td.p').allTextContents();
    assert.equal(shown.length, alts.length, `token ${i}: alternatives`);
    shown.forEach((p, k) => relClose(Number(p), Math.exp(alts[k]), `token ${i} alternative ${k}`));
    const ent = await page.textContent('#tok-detail dd:nth-of-type(3)');
    assert.ok(Math.abs(parseFloat(ent) - lp.kvlm_entropy[i]) <= 5e-5, `token ${i} entropy ${ent} vs ${lp.kvlm_entropy[i]}`);
  }
  // Colouring by entropy uses the server's entropies.
  await page.check('input[name=tok-colour][value=entropy]');
  assert.equal(await page.isDisabled('input[name=tok-colour][value=entropy]'), false);
  await closeClean(page);
});

test("the measure view shows /kvlm/measure/next-token's numbers and the model's KV sizes", async () => {
  const page = await openPage(browser, shk.url + '/#measure');
  await fill(page, { '#m-prompt': 'KING HENRY:', '#m-temps': '0.5, 1, 1.5', '#m-top': '8' });
  await page.click('#m-run');
  await page.waitForSelector('#m-table tbody tr:nth-child(3)');
  const ref = await api(shk, '/kvlm/measure/next-token', { prompt: 'KING HENRY:', temperatures: [0.5, 1, 1.5], top: 8 });
  const rows = page.locator('#m-table tbody tr');
  for (let i = 0; i < 3; i++) {
    const r = ref.temperatures[i], row = rows.nth(i);
    relClose(Number(await row.locator('.entropy').textContent()), r.entropy_bits, `T=${r.temperature} entropy`);
    relClose(Number(await row.locator('.top1').textContent()), r.top1, `T=${r.temperature} top1`);
    relClose(Number(await row.locator('.top5').textContent()), r.top5, `T=${r.temperature} top5`);
    assert.equal(Number(await row.locator('.n90').textContent()), r.n90);
    const bars = page.locator('#m-bars figure').nth(i).locator('.bar-row .num');
    const ps = await bars.allTextContents();
    assert.equal(ps.length, r.top.length);
    ps.forEach((p, k) => relClose(Number(p), r.top[k].p, `T=${r.temperature} top token ${k}`));
  }
  const m = await api(shk, '/kvlm/model');
  const f32 = page.locator('#cap-table tr[data-dtype=f32] td');
  assert.equal(Number(await f32.nth(1).textContent()), m.kv.bytes_per_token_by_dtype.f32);
  assert.equal(m.kv.bytes_per_token_by_dtype.f32, 2 * m.n_layers * m.n_kv_heads * m.head_dim * 4);
  // 100 MiB at a 100-token context: 112 tokens in 7 blocks per request.
  await fill(page, { '#cap-mem': '100', '#cap-ctx': '100' });
  const per = m.kv.bytes_per_token_by_dtype.f16 * 112;
  assert.equal(Number(await page.textContent('#cap-table tr[data-dtype=f16] .fits')), Math.floor(100 * 1048576 / per));
  // q8_0: head_dim int8 and a 2-byte scale per 32 of them
  assert.equal(m.kv.bytes_per_token_by_dtype.q8_0, 2 * m.n_layers * m.n_kv_heads * (m.head_dim + m.head_dim / 16));
  assert.equal(Number(await page.textContent('#cap-table tr[data-dtype=q8_0] .fits')),
    Math.floor(100 * 1048576 / (m.kv.bytes_per_token_by_dtype.q8_0 * 112)));
  await closeClean(page);
});

test('with --api-key the page loads, asks for the key on 401 and then sends it', async () => {
  const keyed = await startServer(['-m', 'models/shakespeare-gpt2', '--api-key', 'sesame']);
  try {
    // Opened on the engine view: its stream is refused first, then follows once the key is given.
    const page = await openPage(browser, keyed.url + '/#engine');
    await page.waitForSelector('#key-form:not([hidden])');
    assert.equal(await page.locator('#eng-grid .blk').count(), 0);
    await page.fill('#api-key', 'sesame');
    await page.press('#api-key', 'Enter');
    await page.waitForFunction(() => document.getElementById('model-name').textContent.includes('shakespeare-gpt2'));
    await page.waitForSelector('#eng-grid .blk');
    await page.click('#tab-chat');
    await page.fill('#chat-input', 'Who is there?');
    await page.click('#chat-send');
    await page.waitForFunction(() => /finish: /.test(document.querySelector('#transcript .msg.assistant .msg-note')?.textContent));
    await page.click('#tab-measure');
    await page.click('#m-run');
    await page.waitForSelector('#m-table tbody tr');
    assert.equal(await page.locator('#key-form').isHidden(), true);
    // The only errors are the browser's notes of the 401s before the key was given.
    assert.ok(page.errors.every(e => /401/.test(e)), page.errors.join('\n'));
    await page.context().close();
  } finally {
    await stopServer(keyed);
  }
});

test('the layout holds at a narrow width', async () => {
  const page = await openPage(browser, shk.url + '/', { width: 390, height: 800 });
  await page.waitForFunction(() => document.getElementById('model-name').textContent.includes('shakespeare-gpt2'));
  for (const view of ['chat', 'tokens', 'engine', 'measure']) {
    await page.click('#tab-' + view);
    if (view === 'engine') await page.waitForSelector('#eng-grid .blk');
    if (view === 'measure') await page.waitForSelector('#cap-table tbody tr');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `the ${view} view is ${overflow}px wider than a 390px screen`);
  }
  await closeClean(page);
});

test('with several models, the picker lists them and the views follow the model picked', async () => {
  const two = await startServer(['-m', 'models/shakespeare-gpt2', '-m', 'models/shakespeare-llama', '--alias', 'bard',
    '--max-seqs', '2']);
  try {
    const page = await openPage(browser, two.url + '/#measure');
    await page.waitForFunction(() => document.querySelectorAll('#model-pick option').length === 2);
    assert.equal(await page.isVisible('#model-pick'), true);
    assert.equal(await page.inputValue('#model-pick'), 'shakespeare-gpt2');
    await page.waitForFunction(() => /gpt2/.test(document.getElementById('cap-model').textContent));
    await page.selectOption('#model-pick', 'bard');
    await page.waitForFunction(() => /llama/.test(document.getElementById('cap-model').textContent));
    assert.equal(await page.inputValue('#model-pick'), 'bard');
    await page.waitForFunction(() => document.getElementById('model-name').textContent.startsWith('bard'));
    const list = await api(two, '/v1/models');
    assert.deepEqual(list.data.map(m => m.status.value), ['loaded', 'loaded']);
    await closeClean(page);
  } finally {
    await stopServer(two);
  }
});
