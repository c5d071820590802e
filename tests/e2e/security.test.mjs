// Cross-site requests and DNS rebinding against a real kiln serve.  Chromium
// resolves evil.example and friend.example to 127.0.0.1, so pages on those
// origins (served by a small node server here) run fetch() at kiln the way an
// attacker's page would.  friend.example is allowed with --cors-origins;
// evil.example is not, and must neither change nor read anything.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, bin, model } from './lib.mjs';

const exe = process.env.CHROMIUM || '/usr/bin/chromium';
const haveChromium = fs.existsSync(exe);
let srv, pages, pagePort, store, browser;

// GET with any Host header (fetch() may not set Host).
function rawGet(port, urlPath, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: urlPath, headers }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error('timeout')));
    req.end();
  });
}

async function tags() {
  const j = await (await fetch(srv.base + '/api/tags')).json();
  return j.models.map((m) => m.name);
}

before(async () => {
  store = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-sec-'));
  const imp = spawnSync(bin, ['import', model, '--name', 'victim', '--link'], {
    env: { ...process.env, KILN_STORE: store }, encoding: 'utf8',
  });
  assert.equal(imp.status, 0, imp.stderr);
  // the attacker's (and the friend's) pages, and a GGUF a pull could fetch
  pages = http.createServer((req, res) => {
    if (req.url === '/m.gguf') {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      fs.createReadStream(model).pipe(res);
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end('<!doctype html><title>page</title><p>hello');
  });
  await new Promise((res) => pages.listen(0, '127.0.0.1', res));
  pagePort = pages.address().port;
  srv = await startServer(['-c', '256', '-t', '1', '--cors-origins', `http://friend.example:${pagePort}`],
    { KILN_STORE: store });
  if (haveChromium) {
    browser = await chromium.launch({
      executablePath: exe,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync',
        '--host-resolver-rules=MAP evil.example 127.0.0.1, MAP friend.example 127.0.0.1'],
    });
  }
});

after(async () => {
  if (browser) await browser.close();
  assert.equal(await srv.stop(), 0);
  await new Promise((res) => pages.close(res));
  fs.rmSync(store, { recursive: true, force: true });
});

// Runs the same attempts from a page on origin; returns what the page saw.
async function attempts(origin) {
  const page = await browser.newPage();
  try {
    await page.goto(`${origin}/`);
    return await page.evaluate(async ({ base, pullUrl }) => {
      const out = {};
      const simple = (url, body) => fetch(base + url, {
        method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify(body),
      }).then(() => 'sent', (e) => 'error ' + e);
      // "simple" requests: no preflight, so only the server can stop them
      out.pull = await simple('/api/pull', { model: 'csrf:1', url: pullUrl, stream: false });
      out.copy = await simple('/api/copy', { source: 'victim', destination: 'copied' });
      // preflighted requests and reads
      out.del = await fetch(base + '/api/delete', {
        method: 'DELETE', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'victim' }),
      }).then((r) => r.status, (e) => 'error ' + e);
      out.tags = await fetch(base + '/api/tags').then((r) => r.json(), (e) => 'error ' + e);
      out.gen = await fetch(base + '/v1/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'stories260K', prompt: 'Once', max_tokens: 2 }),
      }).then((r) => r.status, (e) => 'error ' + e);
      return out;
    }, { base: srv.base, pullUrl: `http://127.0.0.1:${pagePort}/m.gguf` });
  } finally {
    await page.close();
  }
}

test('a page on another origin can neither change nor read anything', { skip: !haveChromium && 'no chromium' },
  async () => {
    const seen = await attempts(`http://evil.example:${pagePort}`);
    // the browser sends the opaque requests; the server refused them
    assert.match(String(seen.del), /^error/, 'DELETE needs a preflight, which is refused');
    assert.match(String(seen.tags), /^error/, 'a read is blocked: no CORS headers for this origin');
    assert.match(String(seen.gen), /^error/);
    const names = await tags();
    assert.ok(names.includes('victim:latest') || names.includes('victim'), names.join(','));
    assert.ok(!names.some((n) => n.startsWith('csrf')), 'the cross-site pull did not run: ' + names);
    assert.ok(!names.some((n) => n.startsWith('copied')), 'the cross-site copy did not run: ' + names);
  });

test('an allowed origin reads and changes, preflight included', { skip: !haveChromium && 'no chromium' },
  async () => {
    const seen = await attempts(`http://friend.example:${pagePort}`);
    assert.ok(Array.isArray(seen.tags.models), 'the page read /api/tags: ' + JSON.stringify(seen.tags));
    assert.equal(seen.gen, 200);
    assert.equal(seen.del, 200, 'DELETE went through its preflight');
    const names = await tags();
    assert.ok(names.some((n) => n.startsWith('csrf:1')), 'the pull ran: ' + names);
    assert.ok(names.some((n) => n.startsWith('copied')), 'the copy ran: ' + names);
    assert.ok(!names.some((n) => n.startsWith('victim')), 'the delete ran: ' + names);
  });

test('a loopback origin is allowed by default', { skip: !haveChromium && 'no chromium' }, async () => {
  const page = await browser.newPage();
  try {
    await page.goto(`http://127.0.0.1:${pagePort}/`);
    const ids = await page.evaluate(async (base) => {
      const j = await (await fetch(base + '/v1/models')).json();
      return j.data.map((m) => m.id);
    }, srv.base);
    assert.ok(ids.includes('stories260K'), ids.join(','));
  } finally {
    await page.close();
  }
});

test('preflight: allowed origins get CORS headers, others 403', async () => {
  const ok = await fetch(srv.base + '/v1/chat/completions', {
    method: 'OPTIONS',
    headers: { Origin: 'http://localhost:3000', 'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers': 'content-type,authorization' },
  });
  assert.equal(ok.status, 204);
  assert.equal(ok.headers.get('access-control-allow-origin'), 'http://localhost:3000');
  assert.match(ok.headers.get('access-control-allow-methods'), /POST/);
  assert.match(ok.headers.get('access-control-allow-headers'), /authorization/);
  const bad = await fetch(srv.base + '/v1/chat/completions', {
    method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' },
  });
  assert.equal(bad.status, 403);
  assert.equal(bad.headers.get('access-control-allow-origin'), null);
  // a simple cross-site POST is refused before its body is parsed
  const post = await fetch(srv.base + '/api/copy', {
    method: 'POST', headers: { Origin: 'http://evil.example', 'Content-Type': 'text/plain' },
    body: JSON.stringify({ source: 'copied', destination: 'x' }),
  });
  assert.equal(post.status, 403);
  assert.match((await post.json()).error, /origin/);
  // curl-style clients send no Origin and keep working with any content type
  const curl = await fetch(srv.base + '/api/show', {
    method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: JSON.stringify({ model: 'stories260K' }),
  });
  assert.equal(curl.status, 200);
});

test('a foreign Host is refused (DNS rebinding); loopback names are served', async () => {
  const evil = await rawGet(srv.port, '/api/tags', { Host: `attacker.example:${srv.port}` });
  assert.equal(evil.status, 403);
  assert.ok(!evil.body.includes('victim') && !evil.body.includes('copied'), 'nothing leaks: ' + evil.body);
  const evil2 = await rawGet(srv.port, '/v1/models', { Host: 'attacker.example' });
  assert.equal(evil2.status, 403);
  assert.equal((await rawGet(srv.port, '/', { Host: 'rebind.example' })).status, 403);
  for (const h of [`localhost:${srv.port}`, `127.0.0.1:${srv.port}`, `[::1]:${srv.port}`, 'app.localhost']) {
    assert.equal((await rawGet(srv.port, '/api/tags', { Host: h })).status, 200, h);
  }
});

test('with --api-key the page loads without it, asks for it and uses it', async () => {
  const keyed = await startServer(['-c', '256', '-t', '1', '--api-key', 'sesame'], { KILN_STORE: store });
  try {
    const page = await fetch(keyed.base + '/');
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type'), /text\/html/);
    const no = await fetch(keyed.base + '/v1/models');
    assert.equal(no.status, 401);
    assert.ok((await no.json()).error, 'a JSON error');
    const yes = await fetch(keyed.base + '/v1/models', { headers: { Authorization: 'Bearer sesame' } });
    assert.equal(yes.status, 200);
    assert.equal((await fetch(keyed.base + '/api/tags')).status, 401);
    if (!haveChromium) return;
    const p = await browser.newPage();
    try {
      let asked = 0;
      p.on('dialog', (d) => { asked++; d.accept('sesame'); });
      await p.goto(keyed.base + '/');
      if (process.env.KILN_WEBUI_PAGE === 'plain') {
        await p.waitForFunction(() => document.querySelector('#model').options.length > 0, null, { timeout: 10000 });
        assert.equal(await p.$eval('#model', (s) => s.value), 'stories260K');
      } else { // the bundled page asks in a dialog of its own (webui.test.mjs tests it further)
        await p.waitForSelector('.key-modal', { timeout: 10000 });
        asked++;
        await p.fill('.key-input', 'sesame');
        await p.keyboard.press('Enter');
        await p.waitForFunction(() => document.querySelector('select.model')?.options.length > 0, null, { timeout: 10000 });
        assert.equal(await p.$eval('select.model', (s) => s.value), 'stories260K');
      }
      assert.equal(asked, 1, 'the page asked for the key once');
      assert.equal(await p.evaluate(() => localStorage.getItem('kiln.key')), 'sesame');
    } finally {
      await p.close();
    }
  } finally {
    assert.equal(await keyed.stop(), 0);
  }
});

test('--host takes an IPv6 address, and checks Host there too', async () => {
  const hasV6 = Object.values(os.networkInterfaces()).flat().some((a) => a && a.address === '::1');
  if (!hasV6) return;
  const { spawn } = await import('node:child_process');
  const proc = spawn(bin, ['serve', '-m', model, '--host', '::1', '--port', '0', '-c', '128', '-t', '1'],
    { env: { ...process.env, KILN_STORE: store }, stdio: ['ignore', 'ignore', 'pipe'] });
  try {
    let log = '';
    const port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no start: ' + log)), 20000);
      proc.stderr.on('data', (d) => {
        log += d;
        const m = /listening on http:\/\/\[::1\]:(\d+)/.exec(log);
        if (m) { clearTimeout(timer); resolve(Number(m[1])); }
      });
      proc.on('exit', (c) => { clearTimeout(timer); reject(new Error(`exited ${c}: ${log}`)); });
    });
    let h = null;
    for (let i = 0; i < 100 && !(h && h.status === 200); i++) {
      h = await fetch(`http://[::1]:${port}/health`).catch(() => null);
      if (!h || h.status !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(h.status, 200);
    const v6get = (headers) => new Promise((resolve, reject) => {
      http.get({ host: '::1', family: 6, port, path: '/api/version', headers }, (res) => {
        res.resume();
        resolve(res.statusCode);
      }).on('error', reject);
    });
    assert.equal(await v6get({ Host: `[::1]:${port}` }), 200);
    assert.equal(await v6get({ Host: 'attacker.example' }), 403);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => (proc.exitCode !== null ? r() : proc.on('exit', r)));
  }
});
