// A bounded load test: 240 requests (a mix of streamed chat and plain
// completions, 8 at a time) against one server.  No request may fail, and
// the server's RSS after the run stays within 8 MiB of its RSS after a
// 40-request warm-up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, rssKiB } from './lib.mjs';

const MODEL = 'stories260K';

async function one(base, i) {
  const stream = i % 2 === 0;
  const url = base + (i % 3 === 0 ? '/v1/chat/completions' : '/v1/completions');
  const body = i % 3 === 0
    ? { model: MODEL, messages: [{ role: 'user', content: `Story number ${i % 7}` }], max_tokens: 32, stream }
    : { model: MODEL, prompt: `Once upon a time ${i % 5}`, max_tokens: 32, stream, temperature: 0.7, seed: i };
  const r = await fetch(url, { method: 'POST', body: JSON.stringify(body) });
  const t = await r.text();
  if (r.status !== 200) throw new Error(`request ${i}: ${r.status} ${t}`);
  if (stream) assert.ok(t.trimEnd().endsWith('data: [DONE]'), 'stream ends with [DONE]');
}

async function batch(base, from, n, conc) {
  let next = from;
  const end = from + n;
  await Promise.all(Array.from({ length: conc }, async () => {
    while (next < end) await one(base, next++);
  }));
}

test('load: no errors and flat memory', async () => {
  const srv = await startServer(['--parallel', '8', '-c', '256', '-t', '1']);
  try {
    await batch(srv.base, 0, 40, 8);
    const warm = await rssKiB(srv.proc.pid);
    const t0 = Date.now();
    await batch(srv.base, 40, 200, 8);
    const secs = (Date.now() - t0) / 1000;
    const end = await rssKiB(srv.proc.pid);
    console.log(`# 200 requests in ${secs.toFixed(1)} s; RSS ${warm} KiB after warm-up, ${end} KiB at the end`);
    // AddressSanitizer keeps freed memory in quarantine, so RSS only means
    // something on a plain build (scripts/test.sh sets KILN_SANITIZED there).
    if (!process.env.KILN_SANITIZED) assert.ok(end - warm < 8 * 1024, `RSS grew by ${end - warm} KiB`);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});
