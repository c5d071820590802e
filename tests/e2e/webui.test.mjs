// The web chat in Debian's chromium (playwright-core) against a real
// `kiln serve` with the stories260K model: send, stream, stop, regenerate,
// edit and resend, settings, a reload keeps the conversation, the list
// (rename, export, delete, import), markdown with a table, code and math,
// reasoning and tool-call cards, attachments, a model switch, a
// conversation that overflows the context, the API-key prompt, dark mode
// and a phone's screen.  Screenshots of each state go to KILN_E2E_OUT
// (ctest: BUILD/e2e-out).  When the build embedded the plain page
// (KILN_WEBUI_PAGE=plain: no node/npm at build time) only that page's own
// test runs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, model, root } from './lib.mjs';

const exe = process.env.CHROMIUM || '/usr/bin/chromium';
const page_kind = process.env.KILN_WEBUI_PAGE || 'bundle';
const out = process.env.KILN_E2E_OUT || path.join(root, 'build', 'e2e-out');
const noChromium = !fs.existsSync(exe) && 'chromium is not installed';
const bundled = page_kind === 'bundle';

let browser;
let srv;     // two chat models (stories260K and stories-b) and an embedding model, 512 tokens of context
let keyed;   // --api-key
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-webui-'));

before(async () => {
  if (noChromium) return;
  fs.mkdirSync(out, { recursive: true });
  const b = path.join(tmp, 'stories-b.gguf');
  fs.symlinkSync(model, b);
  [srv, keyed] = await Promise.all([
    startServer(['-m', b, '-m', path.join(root, 'tests', 'data', 'fixtures', 'bert-embed.gguf'), '-c', '512', '-t', '1', '--parallel', '2']),
    bundled ? startServer(['-c', '256', '-t', '1', '--parallel', '1', '--api-key', 'sesame']) : null,
  ]);
  const html = await (await fetch(srv.base + '/')).text();
  if (bundled && !/assets\/app-/.test(html)) {
    throw new Error('the build found node and npm but embedded the plain page: the bundle failed to build '
      + '(see the warning in the build log; -DKILN_WEBUI=OFF builds without it)');
  }
  // playwright gives each launch a new, empty --user-data-dir
  browser = await chromium.launch({
    executablePath: exe,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  if (browser) await browser.close();
  const codes = await Promise.all([srv, keyed].filter(Boolean).map((s) => s.stop()));
  fs.rmSync(tmp, { recursive: true, force: true });
  for (const c of codes) assert.equal(c, 0, 'the server exits cleanly');
});

// A fresh browser profile (empty localStorage); page errors fail the test.
async function open(base, opts = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 720 }, ...opts });
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.requests = [];
  page.on('request', (r) => { if (r.url().endsWith('/api/chat')) page.requests.push(JSON.parse(r.postData())); });
  await page.goto(base + '/');
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(out, name + '.png') });
}

async function modelsLoaded(page) {
  await page.waitForFunction(() => document.querySelector('select.model')?.options.length > 0, null, { timeout: 10000 });
}

// Sets this conversation's settings through the dialog.
async function settings(page, { system, asDefault, ...params }) {
  await page.click('button[aria-label="Conversation settings"]');
  await page.waitForSelector('.modal.settings');
  if (system !== undefined) await page.fill('.settings textarea[name=system]', system);
  for (const [k, v] of Object.entries(params)) await page.fill(`.settings input[name=${k}]`, String(v));
  if (asDefault) await page.check('.settings .check input');
  await page.click('.settings .apply');
  await page.waitForSelector('.modal.settings', { state: 'detached' });
}

async function sendAndWait(page, text) {
  const n = await page.locator('.msg.assistant').count();
  await page.fill('.prompt', text);
  await page.keyboard.press('Enter');
  await page.waitForFunction((k) => document.querySelectorAll('.msg.assistant').length > k
    && !document.querySelector('.msg.assistant.live'), n, { timeout: 30000 });
}

const lastReply = (page) => page.locator('.msg.assistant').last();

// stories260K writes thousands of tokens a second here, a whole reply within
// a frame or two; a slow network (chromium's own throttling) lets the
// tests watch a reply stream in and stop it halfway.
async function throttle(page, bytesPerSecond) {
  const cdp = page.cdp || (page.cdp = await page.context().newCDPSession(page));
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false, latency: 0, uploadThroughput: -1,
    downloadThroughput: bytesPerSecond > 0 ? bytesPerSecond : -1,
  });
}

test('web chat: send, stream, stats, settings, stop, regenerate, edit, reload', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  const page = await open(srv.base);
  await modelsLoaded(page);
  assert.equal(await page.$eval('select.model', (s) => s.value), 'stories260K');
  // the picker offers the chat models only (not the embedding model the server also serves)
  const offered = await page.$eval('select.model', (s) => [...s.options].map((o) => o.value));
  assert.deepEqual(offered.sort(), ['stories-b', 'stories260K']);
  // Escape closes the settings dialog
  await page.click('button[aria-label="Conversation settings"]');
  await page.waitForSelector('.modal.settings');
  await page.keyboard.press('Escape');
  await page.waitForSelector('.modal.settings', { state: 'detached', timeout: 2000 });
  await page.waitForSelector('.empty');
  await page.waitForFunction(() => /512 tokens of context/.test(document.querySelector('.empty').textContent));
  await shot(page, 'webui-empty');

  await settings(page, { system: 'A story for children.', max_tokens: 200, temperature: 0 });
  // streamed: the reply grows over several frames while it is live
  await page.evaluate(() => {
    window.__lens = [];
    const tick = () => {
      const e = document.querySelector('.msg.assistant.live .body');
      if (e) window.__lens.push(e.textContent.length);
      if (window.__lens.length < 5000) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  await throttle(page, 30000);
  await page.fill('.prompt', 'Once upon a time, there was a little dog');
  await page.keyboard.press('Enter');
  const live = await page.waitForSelector('.msg.assistant.live .body', { timeout: 10000 }).catch(() => null);
  if (live) await shot(page, 'webui-streaming');
  await page.waitForSelector('.msg.assistant:not(.live) .stats', { timeout: 30000 });
  await throttle(page, 0);
  const lens = await page.evaluate(() => window.__lens);
  assert.ok(new Set(lens.filter((n) => n > 0)).size >= 2, 'the reply grew while streaming: ' + lens.join(','));
  const reply1 = await lastReply(page).locator('.body').innerText();
  assert.ok(reply1.length > 20, 'a reply arrived: ' + reply1);
  const stats = await lastReply(page).locator('.stats').innerText();
  assert.match(stats, /^\d+ tokens · [\d.]+ t\/s · [\d.]+ s$/);
  const ctxText = await page.locator('.ctx-text').innerText();
  const [used, limit] = ctxText.split('/').map((s) => Number(s.trim()));
  assert.equal(limit, 512);
  assert.ok(used > 0 && used <= 512, 'context in use: ' + ctxText);
  // what was sent: the system prompt first, the settings as request fields
  const req = page.requests[0];
  assert.deepEqual(req.messages.map((m) => m.role), ['system', 'user']);
  assert.equal(req.messages[0].content, 'A story for children.');
  assert.equal(req.options.num_predict, 200);
  assert.equal(req.options.temperature, 0);
  assert.equal(req.stream, true);
  await shot(page, 'webui-reply');

  // regenerate: the reply is asked for again, in its place
  await lastReply(page).locator('.regen').click();
  await page.waitForFunction(() => !document.querySelector('.msg.assistant.live') && document.querySelector('.msg.assistant .stats'), null, { timeout: 30000 });
  assert.equal(page.requests.length, 2);
  assert.deepEqual(page.requests[1].messages, page.requests[0].messages, 'the same prompt once more');
  assert.equal(await page.locator('.msg').count(), 2, 'one question, one answer');
  // temperature 0: the same text again; the first version is kept
  assert.equal(await lastReply(page).locator('.body').innerText(), reply1);
  assert.equal(await lastReply(page).locator('.version-n').innerText(), '2/2');
  await lastReply(page).locator('.prev-version').click();
  assert.equal(await lastReply(page).locator('.version-n').innerText(), '1/2');
  await lastReply(page).locator('.next-version').click();

  // stop: a long reply (no token limit) is cut, the page is ready for more
  await settings(page, { max_tokens: '', temperature: 0.8 });
  await throttle(page, 8000);
  await page.fill('.prompt', 'Tell me a long story about a cat');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant.live .body')?.textContent.length || 0) > 30, null, { timeout: 20000 });
  await page.click('button.stop');
  await page.waitForSelector('button.send', { timeout: 10000 });
  await throttle(page, 0);
  assert.match(await lastReply(page).innerText(), /Stopped\./);
  await shot(page, 'webui-stopped');

  // edit and resend: the first question changes, what followed it goes
  await page.locator('.msg.user').first().hover();
  await page.locator('.msg.user').first().locator('.edit-msg').click();
  await page.fill('.edit-box textarea', 'Once upon a time, there was a big red ball');
  await page.click('.edit-box .save-resend');
  await page.waitForFunction(() => document.querySelectorAll('.msg').length === 2 && !document.querySelector('.msg.assistant.live')
    && document.querySelector('.msg.assistant .stats'), null, { timeout: 30000 });
  const lastReq = page.requests.at(-1);
  assert.equal(lastReq.messages.at(-1).content, 'Once upon a time, there was a big red ball');
  assert.equal(lastReq.messages.length, 2, 'system + the edited question');
  const edited = await lastReply(page).locator('.body').innerText();

  // a reload keeps the conversation, its settings and its place in the list
  await page.reload();
  await page.waitForSelector('.msg.assistant .body');
  assert.equal(await page.locator('.msg.user .user-text').innerText(), 'Once upon a time, there was a big red ball');
  assert.equal(await lastReply(page).locator('.body').innerText(), edited);
  assert.equal(await page.locator('.conv-item').count(), 1);
  assert.match(await page.locator('.conv-item.active .conv-title').innerText(), /little dog/, 'the title stays');
  assert.match(await page.locator('.ctx-text').innerText(), /^\d+ \/ 512$/);
  await page.click('button[aria-label="Conversation settings"]');
  assert.equal(await page.inputValue('.settings textarea[name=system]'), 'A story for children.');
  assert.equal(await page.inputValue('.settings input[name=temperature]'), '0.8');
  await shot(page, 'webui-settings');
  await page.click('.settings button[aria-label=Close]');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: the list (new, rename, export, delete, import), markdown, reasoning, tool calls, dark mode', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  const page = await open(srv.base);
  await modelsLoaded(page);
  await settings(page, { max_tokens: 24, asDefault: true });
  await sendAndWait(page, 'The sun was');
  await page.click('.new-chat');
  assert.equal(await page.locator('.msg').count(), 0, 'a new chat is empty');
  await sendAndWait(page, 'A frog sat');
  assert.equal(await page.locator('.conv-item').count(), 2);

  // rename
  const second = page.locator('.conv-item.active');
  await second.locator('button[aria-label=Rename]').click();
  await page.fill('.conv-item input.rename', 'Frog story');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('.conv-item.active .conv-title')?.textContent === 'Frog story');
  assert.equal(await page.locator('.top .title').innerText(), 'Frog story');

  // export as JSON
  const [dl] = await Promise.all([page.waitForEvent('download'), page.locator('.conv-item.active button[aria-label=Export]').click()]);
  const file = path.join(tmp, 'export.json');
  await dl.saveAs(file);
  const exported = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(exported.format, 'kiln-chat');
  assert.equal(exported.conversation.title, 'Frog story');
  assert.deepEqual(exported.conversation.messages.map((m) => m.role), ['user', 'assistant']);
  assert.equal(exported.conversation.params.max_tokens, 24);

  // delete asks once more, then the other conversation opens
  await page.locator('.conv-item.active button[aria-label=Delete]').click();
  await page.locator('.conv-item.active button:has-text("Delete?")').click();
  await page.waitForFunction(() => document.querySelectorAll('.conv-item').length === 1);
  assert.doesNotMatch(await page.locator('.conv-list').innerText(), /Frog story/);

  // import: a conversation with markdown, math, reasoning and a tool call
  const md = [
    'Here is a **table**:', '',
    '| Animal | Legs | Sound |', '|---|---:|---|', '| dog | 4 | woof |', '| bird | 2 | tweet |', '',
    '1. first', '2. second', '', 'A [link](https://example.org) and `inline code`.', '',
    '```python', 'def area(r):', '    return 3.14159 * r ** 2  # a circle', '```', '',
    'Euler: $e^{i\\pi} + 1 = 0$, and', '', '$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$', '',
    '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>', '',
    '![a cat](http://127.0.0.1:9/cat.png) <span style="background:url(http://127.0.0.1:9/bg.png)">styled</span>', '',
    '<tool_call>', '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}', '</tool_call>',
  ].join('\n');
  const conv = {
    format: 'kiln-chat', version: 1, conversation: {
      title: 'Markdown sampler', model: 'stories260K', system: '', params: {},
      messages: [
        { role: 'user', content: 'Show me markdown' },
        { role: 'assistant', reasoning: 'The user wants a table, code and math. I will show all three.', content: md,
          stats: { tokens: 120, tps: 54.2, ms: 2300, prompt: 12, cached: 0, ttft: 40 } },
      ],
    },
  };
  await page.setInputFiles('.import-input', { name: 'sampler.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(conv)) });
  await page.waitForSelector('.md table');
  assert.equal(await page.locator('.top .title').innerText(), 'Markdown sampler');
  assert.equal(await page.locator('.md table th').count(), 3);
  assert.equal(await page.locator('.md table tbody tr').count(), 2);
  assert.equal(await page.locator('.md ol li').count(), 2);
  assert.equal(await page.locator('.md a[href="https://example.org"]').getAttribute('target'), '_blank');
  assert.equal(await page.locator('.code .code-head span').innerText(), 'python');
  assert.ok(await page.locator('.code .hljs-keyword').count() >= 2, 'the code is highlighted');
  assert.ok(await page.locator('.code .hljs-comment').count() >= 1);
  assert.equal(await page.locator('.md .katex').count(), 2, 'inline and display math');
  assert.equal(await page.locator('.md .katex-display').count(), 1);
  assert.equal(await page.evaluate(() => window.__xss), undefined, 'no script from the reply runs');
  assert.equal(await page.locator('.md script').count(), 0);
  // images and styles from a reply fetch nothing: an image is a link
  assert.equal(await page.locator('.md img').count(), 0);
  assert.equal(await page.locator('.md a.md-image').getAttribute('href'), 'http://127.0.0.1:9/cat.png');
  assert.equal(await page.locator('.md span:has-text("styled")').getAttribute('style'), null);
  assert.ok(await page.locator('.md .katex [style]').count() > 0, 'KaTeX keeps its own styles');
  assert.equal(await page.locator('.tool-card .tool-name').innerText(), 'get_weather');
  assert.match(await page.locator('.tool-card .tool-args').innerText(), /"city": "Paris"/);
  assert.doesNotMatch(await lastReply(page).innerText(), /<tool_call>/);
  const think = page.locator('details.think');
  assert.equal(await think.getAttribute('open'), null, 'reasoning starts folded');
  await think.locator('summary').click();
  assert.match(await think.innerText(), /table, code and math/);
  await page.locator('.copy-code').click();
  await page.waitForFunction(() => document.querySelector('.copy-code').textContent === 'Copied');
  await page.waitForFunction(() => document.fonts.status === 'loaded');
  await shot(page, 'webui-markdown');
  await page.locator('.tool-card').scrollIntoViewIfNeeded();
  await shot(page, 'webui-toolcall');
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForTimeout(100);
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(27, 26, 25)', 'the system dark mode is followed');
  await shot(page, 'webui-markdown-dark');
  // the theme button overrides the system: auto -> light -> dark
  await page.click('.theme-btn');
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(247, 246, 243)');
  await page.click('.theme-btn');
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(27, 26, 25)');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: attachments; a model switch keeps each conversation with its model', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  const page = await open(srv.base);
  await modelsLoaded(page);
  await settings(page, { max_tokens: 16 });
  await page.setInputFiles('.file-input', [
    { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('The cat is called Tom.\n') },
    { name: 'photo.png', mimeType: 'image/png', buffer: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]) },
  ]);
  await page.waitForSelector('.pending-att .chip');
  assert.match(await page.locator('.pending-att').innerText(), /notes\.txt/);
  assert.match(await page.locator('.att-note').innerText(), /photo\.png: this model does not accept images/);
  await sendAndWait(page, 'Who is Tom?');
  const sent = page.requests.at(-1).messages.at(-1).content;
  assert.match(sent, /^Who is Tom\?\n\n\[File: notes\.txt\]\n```\nThe cat is called Tom\.\n/);
  assert.match(await page.locator('.msg.user .attachments').innerText(), /notes\.txt/);

  // switch: this conversation stays with stories260K, a new one starts on stories-b
  await page.selectOption('select.model', 'stories-b');
  assert.equal(await page.locator('.msg').count(), 0);
  await sendAndWait(page, 'A bird flew');
  assert.equal(page.requests.at(-1).model, 'stories-b');
  assert.equal(await page.locator('.conv-item').count(), 2);
  const metas = await page.locator('.conv-meta').allInnerTexts();
  assert.ok(metas.some((m) => m.startsWith('stories-b')) && metas.some((m) => m.startsWith('stories260K')), metas.join('|'));
  // back to the first: its model comes back with it
  await page.locator('.conv-item:has-text("Who is Tom") .conv-open').click();
  assert.equal(await page.$eval('select.model', (s) => s.value), 'stories260K');
  assert.match(await page.locator('.msg.user').first().innerText(), /Who is Tom/);
  await sendAndWait(page, 'And then?');
  assert.equal(page.requests.at(-1).model, 'stories260K');
  await shot(page, 'webui-attachment');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: a conversation longer than the context still works', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  const page = await open(srv.base);
  await modelsLoaded(page);
  await settings(page, { system: 'Stories.', max_tokens: 40 });
  const long = (k) => `Turn ${k}: ` + 'Lily and Ben went to the park to play with a red ball and a blue kite. '.repeat(4);
  for (let k = 1; k <= 5; k++) {
    await sendAndWait(page, long(k));
    assert.equal(await page.locator('.msg.assistant .error').count(), 0, `turn ${k} failed: `
      + await page.locator('.msg.assistant .error').allInnerTexts());
    const [used, limit] = (await page.locator('.ctx-text').innerText()).split('/').map((s) => Number(s.trim()));
    assert.ok(used <= limit && limit === 512, `turn ${k}: ${used} / ${limit}`);
  }
  // the oldest turns were left out, the system prompt and the new question kept, and the page says so
  const req = page.requests.at(-1);
  assert.equal(req.messages[0].content, 'Stories.');
  assert.match(req.messages.at(-1).content, /^Turn 5:/);
  assert.ok(!req.messages.some((m) => /^Turn 1:/.test(m.content)), 'turn 1 is out of the context');
  assert.match(await lastReply(page).locator('.overflow-note').innerText(), /earlier messages? did not fit in the model's context of 512 tokens/);
  assert.equal(await page.locator('.out-of-context').count(), 1);
  assert.equal(await page.locator('.msg').count(), 10, 'every turn stays on screen');
  await lastReply(page).scrollIntoViewIfNeeded();
  await shot(page, 'webui-overflow');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: with --api-key the page asks for the key, keeps it and sends it', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  // the page and its assets need no key; the API does
  const r = await fetch(keyed.base + '/');
  assert.equal(r.status, 200);
  const html = await r.text();
  const js = /src="(assets\/app-[^"]+\.js)"/.exec(html)[1];
  assert.equal((await fetch(keyed.base + '/' + js)).status, 200);
  assert.equal((await fetch(keyed.base + '/v1/models')).status, 401);

  const page = await open(keyed.base);
  await page.waitForSelector('.key-modal');
  await shot(page, 'webui-api-key');
  await page.fill('.key-input', 'wrong');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => /not accepted/.test(document.querySelector('.key-modal')?.textContent || ''));
  await page.fill('.key-input', 'sesame');
  await page.keyboard.press('Enter');
  await modelsLoaded(page);
  const auth = [];
  page.on('request', (q) => { if (/\/(v1|api)\//.test(q.url())) auth.push(q.headers().authorization); });
  await settings(page, { max_tokens: 16 });
  await sendAndWait(page, 'Hello');
  assert.ok((await lastReply(page).locator('.body').innerText()).length > 0);
  assert.ok(auth.length && auth.every((a) => a === 'Bearer sesame'), 'every API call carries the key: ' + auth);
  assert.equal(await page.evaluate(() => localStorage.getItem('kiln.key')), 'sesame');
  await page.reload();
  await modelsLoaded(page);
  assert.equal(await page.locator('.key-modal').count(), 0, 'the stored key is used after a reload');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: usable on a phone', { skip: noChromium || (!bundled && 'the plain page is embedded') }, async () => {
  const page = await open(srv.base, { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await modelsLoaded(page);
  await settings(page, { max_tokens: 40 });
  await sendAndWait(page, 'Once upon a time');
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(wide <= 390, 'nothing overflows sideways: ' + wide);
  assert.ok(await page.locator('.sidebar').evaluate((e) => e.getBoundingClientRect().right <= 0), 'the list is a drawer');
  assert.ok(await page.locator('button.send').isVisible());
  await shot(page, 'webui-phone');
  await page.click('.menu-btn');
  await page.waitForFunction(() => document.querySelector('.sidebar').getBoundingClientRect().left >= 0);
  await page.waitForTimeout(250);
  await shot(page, 'webui-phone-drawer');
  await page.click('.scrim', { position: { x: 370, y: 400 } });
  await page.waitForFunction(() => document.querySelector('.sidebar').getBoundingClientRect().right <= 0);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('plain chat page (no bundle) streams a reply', { skip: noChromium || (bundled && 'the bundled page is embedded') }, async () => {
  const page = await open(srv.base);
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
  await page.waitForFunction(() => document.querySelector('#compl').checked);
  await page.fill('#inp', 'Once upon a time');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('#stop').disabled
    && document.querySelector('.assistant .body').textContent.length > 20, null, { timeout: 20000 });
  await shot(page, 'webui-plain');
  await page.context().close();
});
