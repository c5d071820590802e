// The web chat with images, in Debian's chromium (playwright-core), against
// `kiln serve` with the tiny random-weight Gemma 3 pair of tests/data/vision
// (--mmproj): an image attached through the file input and one pasted into
// the message box show in the conversation, the /api/chat request carries
// them (Ollama's base64 "images") and the greedy reply is llama-mtmd-cli's
// recorded text for the same image and prompt.  On a text-only model the
// attach button offers text files only and an image is refused with a note.
// Screenshots go to KILN_E2E_OUT (ctest: BUILD/e2e-out).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, root } from './lib.mjs';

const exe = process.env.CHROMIUM || '/usr/bin/chromium';
const bundled = (process.env.KILN_WEBUI_PAGE || 'bundle') === 'bundle';
const out = process.env.KILN_E2E_OUT || path.join(root, 'build', 'e2e-out');
const skip = !fs.existsSync(exe) ? 'chromium is not installed' : !bundled ? 'the plain page is embedded' : false;
const dir = path.join(root, 'tests', 'data', 'vision');
const PNG = fs.readFileSync(path.join(dir, 'image.png'));
const MTMD = fs.readFileSync(path.join(dir, 'gemma3-mtmd.txt'), 'utf8');

let browser, vis, txt;

before(async () => {
  if (skip) return;
  fs.mkdirSync(out, { recursive: true });
  [vis, txt] = await Promise.all([
    startServer(['--mmproj', path.join(dir, 'gemma3-mmproj.gguf'), '-c', '512', '-t', '1', '--parallel', '1'], {},
      path.join(dir, 'gemma3-text.gguf')),
    startServer(['-c', '256', '-t', '1', '--parallel', '1']),
  ]);
  browser = await chromium.launch({
    executablePath: exe,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  if (browser) await browser.close();
  const codes = await Promise.all([vis, txt].filter(Boolean).map((s) => s.stop()));
  for (const c of codes) assert.equal(c, 0, 'the server exits cleanly');
});

async function open(base) {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 720 } });
  const page = await ctx.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.requests = [];
  page.on('request', (r) => { if (r.url().endsWith('/api/chat')) page.requests.push(JSON.parse(r.postData())); });
  await page.goto(base + '/');
  await page.waitForFunction(() => document.querySelector('select.model')?.options.length > 0, null, { timeout: 10000 });
  return page;
}

async function settings(page, params) {
  await page.click('button[aria-label="Conversation settings"]');
  await page.waitForSelector('.modal.settings');
  for (const [k, v] of Object.entries(params)) await page.fill(`.settings input[name=${k}]`, String(v));
  await page.click('.settings .apply');
  await page.waitForSelector('.modal.settings', { state: 'detached' });
}

async function sendAndWait(page, text) {
  const n = await page.locator('.msg.assistant').count();
  await page.fill('.prompt', text);
  await page.keyboard.press('Enter');
  await page.waitForFunction((k) => document.querySelectorAll('.msg.assistant').length > k
    && !document.querySelector('.msg.assistant.live'), n, { timeout: 60000 });
}

// A paste of an image file into the message box, as the clipboard gives one.
async function pasteImage(page, name, bytes) {
  await page.evaluate(([n, b64]) => {
    const bin = atob(b64);
    const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    const dt = new DataTransfer();
    dt.items.add(new File([u], n, { type: 'image/png' }));
    const ev = new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true });
    document.querySelector('.prompt').dispatchEvent(ev);
  }, [name, bytes.toString('base64')]);
}

test('web chat: an attached and a pasted image show in the conversation and go with the request', { skip,
  timeout: 120000 }, async () => {
  const page = await open(vis.base);
  assert.match(await page.getAttribute('.attach', 'title'), /images/);
  await settings(page, { max_tokens: 12, temperature: 0 });
  // attached through the file input
  await page.setInputFiles('.file-input', [{ name: 'ramp.png', mimeType: 'image/png', buffer: PNG }]);
  await page.waitForSelector('.pending-att .chip-img');
  await sendAndWait(page, 'Describe this image.');
  let req = page.requests.at(-1);
  assert.deepEqual(req.messages.at(-1).images, [PNG.toString('base64')]);
  assert.equal(req.messages.at(-1).content, 'Describe this image.');
  assert.equal(await page.locator('.msg.user .att-img').count(), 1);
  assert.equal(await page.locator('.msg.user .att-img').first().getAttribute('alt'), 'ramp.png');
  assert.equal((await page.locator('.msg.assistant').last().innerText()).trim().length > 0, true);
  // the greedy reply: llama-mtmd-cli's text for this image and prompt
  assert.equal(await page.evaluate(() => document.querySelectorAll('.msg.assistant').length), 1);
  const reply = await (await fetch(vis.base + '/api/chat', { method: 'POST', body: JSON.stringify({ model: req.model,
    stream: false, messages: req.messages, options: { temperature: 0, num_predict: 12 } }) })).json();
  assert.equal(reply.message.content, MTMD);
  await page.screenshot({ path: path.join(out, 'webui-vision-attach.png') });

  // pasted into the message box: a new turn with its image
  await pasteImage(page, 'pasted.png', PNG);
  await page.waitForSelector('.pending-att .chip-img');
  await sendAndWait(page, 'And this one?');
  req = page.requests.at(-1);
  const users = req.messages.filter((m) => m.role === 'user');
  assert.equal(users.length, 2);
  assert.deepEqual(users.at(-1).images, [PNG.toString('base64')]);
  assert.deepEqual(users[0].images, [PNG.toString('base64')], 'the earlier turn keeps its image');
  assert.equal(await page.locator('.msg.user .att-img').count(), 2);
  assert.equal(await page.locator('.msg.assistant').count(), 2);
  await page.screenshot({ path: path.join(out, 'webui-vision-paste.png') });
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('web chat: a text-only model\'s attach button offers text files; an image gets a note', { skip },
  async () => {
    const page = await open(txt.base);
    const title = await page.getAttribute('.attach', 'title');
    assert.equal(title, 'Attach text files');
    await pasteImage(page, 'pasted.png', PNG);
    await page.waitForSelector('.att-note');
    assert.match(await page.locator('.att-note').innerText(), /pasted\.png: this model does not accept images/);
    assert.equal(await page.locator('.pending-att .chip-img').count(), 0);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
