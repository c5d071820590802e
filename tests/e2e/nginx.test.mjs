// nginx (tests/e2e/nginx/kiln.conf.in) in front of two kiln replicas:
// requests and streams pass through, both replicas serve, and when one
// replica drains after SIGTERM the other takes the traffic.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { startServer, metric } from './lib.mjs';

const nginx = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p));
const here = path.dirname(new URL(import.meta.url).pathname);

function freePort() {
  return new Promise((res) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
  });
}

test('two replicas behind nginx', { skip: !nginx && 'nginx is not installed' }, async () => {
  const a = await startServer(['-c', '256', '-t', '1']);
  const b = await startServer(['-c', '256', '-t', '1']);
  const prefix = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-nginx-'));
  const port = await freePort();
  const conf = fs.readFileSync(path.join(here, 'nginx', 'kiln.conf.in'), 'utf8')
    .replaceAll('@PREFIX@', prefix).replaceAll('@PORT@', String(port))
    .replaceAll('@A@', String(a.port)).replaceAll('@B@', String(b.port));
  fs.writeFileSync(path.join(prefix, 'nginx.conf'), conf);
  const ng = spawn(nginx, ['-p', prefix, '-c', path.join(prefix, 'nginx.conf')], { stdio: 'ignore' });
  const base = `http://127.0.0.1:${port}`;
  try {
    for (let i = 0; i < 100; i++) {
      const r = await fetch(base + '/health').catch(() => null);
      if (r && r.status === 200) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    const ask = () => fetch(base + '/v1/completions', { method: 'POST', body: JSON.stringify({
      model: 'stories260K', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 }) }).then((r) => r.json());
    const outs = await Promise.all(Array.from({ length: 8 }, ask));
    for (const o of outs) assert.equal(o.choices[0].text, outs[0].choices[0].text);
    assert.ok(await metric(a.base, 'kiln_generation_tokens_total') > 0, 'replica A served');
    assert.ok(await metric(b.base, 'kiln_generation_tokens_total') > 0, 'replica B served');
    // a stream arrives in pieces through the proxy (200 tokens: the tiny model
    // writes 64 in about 10 ms, which one read could take whole)
    const r = await fetch(base + '/v1/completions', { method: 'POST', body: JSON.stringify({
      model: 'stories260K', prompt: 'Once upon a time', max_tokens: 200, stream: true }) });
    let reads = 0, text = '';
    for await (const chunk of r.body) { reads++; text += Buffer.from(chunk).toString(); }
    assert.ok(text.trimEnd().endsWith('data: [DONE]'));
    assert.ok(reads > 1, 'streamed, not buffered');
    // replica A drains: everything goes to B
    assert.equal(await a.stop(), 0);
    const after = await Promise.all(Array.from({ length: 4 }, ask));
    for (const o of after) assert.equal(o.choices[0].text, outs[0].choices[0].text);
  } finally {
    ng.kill('SIGTERM');
    await new Promise((res) => ng.on('exit', res));
    await a.stop();
    assert.equal(await b.stop(), 0);
    fs.rmSync(prefix, { recursive: true, force: true });
  }
});
