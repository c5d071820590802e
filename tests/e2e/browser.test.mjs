// Debian's chromium, driven by playwright-core, loads the embedded chat
// page, sends a message, watches the reply stream in and saves a screenshot
// (tests/e2e/out/chat.png).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from './lib.mjs';

const exe = process.env.CHROMIUM || '/usr/bin/chromium';

test('web chat streams a reply', { skip: !fs.existsSync(exe) && 'chromium is not installed' }, async () => {
  const srv = await startServer(['-c', '512', '-t', '1']);
  const browser = await chromium.launch({
    executablePath: exe,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 600 } });
    await page.goto(srv.base + '/');
    await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
    assert.equal(await page.$eval('#model', (s) => s.value), 'stories260K');
    // a base model: the page switches itself to completion mode
    await page.waitForFunction(() => document.querySelector('#compl').checked);
    await page.fill('#inp', 'Once upon a time');
    await page.click('#send');
    // streamed: the text grows over several reads before the stop button goes off
    const lens = [];
    for (let i = 0; i < 40; i++) {
      lens.push(await page.$eval('.assistant .body', (e) => e.textContent.length).catch(() => 0));
      if (await page.$eval('#stop', (b) => b.disabled)) break;
      await page.waitForTimeout(25);
    }
    await page.waitForFunction(() => document.querySelector('#stop').disabled, null, { timeout: 20000 });
    const reply = await page.$eval('.assistant .body', (e) => e.textContent);
    assert.ok(reply.length > 20, 'a reply arrived: ' + reply);
    assert.ok(new Set(lens.filter((n) => n > 0)).size >= 2 || lens.length < 3, 'it grew while streaming');
    const out = path.join(path.dirname(new URL(import.meta.url).pathname), 'out');
    fs.mkdirSync(out, { recursive: true });
    await page.screenshot({ path: path.join(out, 'chat.png') });
  } finally {
    await browser.close();
    assert.equal(await srv.stop(), 0);
  }
});
