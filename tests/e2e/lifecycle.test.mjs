// Models as engine instances behind kiln serve: the request gate (an urgent
// request overtakes queued ones and the running one), keep-alive per
// request, leases released at unload, no fixed table of models, what a
// model cannot do is a 400, embedding models served, -m models that fail
// to load end the server, and SIGTERM's drain (health 503, admitted work
// finishes, a model reports stopped only after its last request is over), a
// port in use (one reason, nothing drained), the page in the request log.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, model, bin, root, metric } from './lib.mjs';

const BERT = path.join(root, 'tests', 'data', 'fixtures', 'bert-embed.gguf');
const post = (base, url, body) => fetch(base + url, { method: 'POST', body: JSON.stringify(body) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function tmpStore() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-store-'));
}

function kiln(args, store) {
  const r = spawnSync(bin, args, { env: { ...process.env, KILN_STORE: store }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

// Reads a streamed completion; resolves when it ends.  onFirst runs once
// the first token is out.
async function streamed(base, body, onFirst) {
  const r = await post(base, '/v1/completions', { ...body, stream: true });
  assert.equal(r.status, 200);
  const rd = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '', text = '', finish = null, first = false;
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      const c = j.choices && j.choices[0];
      if (!c) continue;
      text += c.text || '';
      if (c.finish_reason) finish = c.finish_reason;
      if (!first && text) { first = true; if (onFirst) onFirst(); }
    }
  }
  return { text, finish };
}

test('gate: an urgent request overtakes the queued ones and the running one', async () => {
  const srv = await startServer(['--parallel', '1', '-c', '2048', '-t', '1']);
  try {
    const shortReq = { model: 'stories260K', prompt: 'Tom had a red', max_tokens: 12, temperature: 0 };
    const alone = (await (await post(srv.base, '/v1/completions', shortReq)).json()).choices[0].text;
    const done = [];
    let started;
    const firstToken = new Promise((r) => { started = r; });
    const long = streamed(srv.base, { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 1900,
                                      temperature: 0, ignore_eos: true }, started)
      .then((r) => { done.push('long'); return r; });
    await firstToken;
    const queued = ['B', 'C'].map((name) => post(srv.base, '/v1/completions', { ...shortReq, max_tokens: 40 })
      .then((r) => r.json()).then((j) => { done.push(name); return j; }));
    for (let i = 0; i < 400 && await metric(srv.base, 'kiln_requests_waiting') < 2; i++) await sleep(5);
    assert.equal(await metric(srv.base, 'kiln_requests_waiting'), 2, 'B and C wait for the only place');
    const urgent = await (await post(srv.base, '/v1/completions', { ...shortReq, urgent: true })).json();
    done.push('urgent');
    const [l] = await Promise.all([long, ...queued]);
    assert.equal(urgent.choices[0].text, alone, 'the urgent request gives the text it gives alone');
    assert.equal(l.finish, 'length');
    assert.deepEqual(done.slice(0, 2), ['urgent', 'long'],
                     `the urgent request took the running one's place, which came back before the queued ones: ${done}`);
    assert.deepEqual(done.slice(2).sort(), ['B', 'C']);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('keep_alive is per request; a store model releases its lease when it unloads', async () => {
  const store = tmpStore();
  try {
    assert.equal(kiln(['import', model, '--name', 'tiny:1'], store).code, 0);
    const srv = await startServer(['-t', '1'], { KILN_STORE: store }, null);
    try {
      const ask = (extra) => post(srv.base, '/api/generate', { model: 'tiny:1', prompt: 'Tom', stream: false,
                                                               options: { num_predict: 2 }, ...extra })
        .then((r) => r.json());
      const ps = async () => (await (await fetch(srv.base + '/api/ps')).json()).models;
      const first = await ask({});
      assert.ok(first.load_duration > 0, 'the first request waited for the load, and says so');
      assert.ok(first.total_duration >= first.load_duration + first.prompt_eval_duration + first.eval_duration);
      const second = await ask({});
      assert.equal(second.load_duration, 0, 'a loaded model takes no load time');
      assert.equal((await ps()).length, 1);
      // while it is loaded the store keeps the pack
      let r = await fetch(srv.base + '/api/delete', { method: 'DELETE', body: JSON.stringify({ model: 'tiny:1' }) });
      assert.equal(r.status, 409, 'a resident model is in use');
      await ask({ keep_alive: 0 });
      for (let i = 0; i < 200 && (await ps()).length; i++) await sleep(10);
      assert.equal((await ps()).length, 0, 'keep_alive 0 unloads after the request');
      await ask({}); // no keep_alive: the server's default again
      const m = await ps();
      assert.equal(m.length, 1, 'keep_alive 0 does not stick');
      const left = (new Date(m[0].expires_at) - Date.now()) / 1000;
      assert.ok(left > 240 && left <= 301, `expires in ${left} s, the default 5 minutes`);
      // load-only and unload-only requests (no prompt)
      const un = await (await post(srv.base, '/api/generate', { model: 'tiny:1', keep_alive: 0 })).json();
      assert.equal(un.done_reason, 'unload');
      for (let i = 0; i < 200 && (await ps()).length; i++) await sleep(10);
      r = await fetch(srv.base + '/api/delete', { method: 'DELETE', body: JSON.stringify({ model: 'tiny:1' }) });
      assert.equal(r.status, 200, 'unloaded, the lease is gone and the name can go');
    } finally {
      assert.equal(await srv.stop(), 0);
    }
  } finally {
    fs.rmSync(store, { recursive: true, force: true });
  }
});

test('no fixed table: 20 store names and 18 -m models, --max-loaded 2 unloads the idle ones first', async () => {
  const store = tmpStore();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-models-'));
  try {
    assert.equal(kiln(['import', model, '--name', 'm0'], store).code, 0);
    for (let i = 1; i < 20; i++) assert.equal(kiln(['cp', 'm0', `m${i}`], store).code, 0);
    const args = ['-t', '1', '--max-loaded', '2', '--parallel', '1', '-c', '256'];
    for (let i = 0; i < 18; i++) {
      const p = path.join(dir, `file${i}.gguf`);
      fs.symlinkSync(model, p);
      args.push('-m', p);
    }
    const srv = await startServer(args, { KILN_STORE: store }, null);
    try {
      const ids = (await (await fetch(srv.base + '/v1/models')).json()).data.map((m) => m.id);
      for (let i = 0; i < 18; i++) assert.ok(ids.includes(`file${i}`), `-m model file${i} is listed`);
      assert.match(srv.log(), /file2 loads when asked for \(--max-loaded 2\)/);
      const names = [...Array.from({ length: 20 }, (_, i) => `m${i}`), 'file17', 'file0'];
      for (const name of names) {
        const r = await post(srv.base, '/v1/completions', { model: name, prompt: 'Tom', max_tokens: 2 });
        assert.equal(r.status, 200, `${name}: ${await r.text()}`);
        const ps = (await (await fetch(srv.base + '/api/ps')).json()).models;
        assert.ok(ps.length <= 2, `${ps.length} models resident`);
        assert.ok(ps.some((m) => m.name === name));
      }
      assert.match(srv.log(), /unloading m0 \(idle the longest\) to make room for m2/);
    } finally {
      assert.equal(await srv.stop(), 0);
    }
  } finally {
    fs.rmSync(store, { recursive: true, force: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('embedding models through both APIs; what a model cannot do is a 400', async () => {
  const srv = await startServer(['-t', '1', '-m', BERT]);
  try {
    let r = await post(srv.base, '/v1/embeddings', { model: 'bert-embed', input: ['a cat', 'a dog'] });
    assert.equal(r.status, 200);
    const oai = await r.json();
    assert.equal(oai.data.length, 2);
    r = await post(srv.base, '/api/embed', { model: 'bert-embed', input: 'a cat' });
    assert.equal(r.status, 200);
    const oll = await r.json();
    assert.deepEqual(oll.embeddings[0].map((x) => x.toFixed(5)), oai.data[0].embedding.map((x) => x.toFixed(5)));
    r = await post(srv.base, '/v1/embeddings', { model: 'bert-embed', input: 'a cat', input_type: 'query' });
    assert.equal(r.status, 200, 'a query (urgent, with the query prefix)');
    for (const [url, body] of [['/v1/completions', { prompt: 'x' }], ['/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }] }], ['/api/generate', { prompt: 'x' }],
    ['/api/chat', { messages: [{ role: 'user', content: 'x' }] }]]) {
      r = await post(srv.base, url, { model: 'bert-embed', ...body });
      assert.equal(r.status, 400, url);
      const j = await r.json();
      assert.match(JSON.stringify(j), /embedding model: it cannot generate/);
    }
    r = await post(srv.base, '/v1/embeddings', { model: 'bert-embed', input: 'x', input_type: 'poem' });
    assert.equal(r.status, 400);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('a -m model that does not load ends the server with the error', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-broken-'));
  try {
    const junk = path.join(dir, 'broken.gguf');
    fs.writeFileSync(junk, 'this is not a model');
    const cut = path.join(dir, 'cut.gguf');
    fs.writeFileSync(cut, fs.readFileSync(model).subarray(0, 200000)); // header fine, tensors missing
    for (const [file, why] of [[junk, /broken\.gguf/], [cut, /cut/]]) {
      const r = spawnSync(bin, ['serve', '-m', file, '--port', '0', '-t', '1'],
                          { encoding: 'utf8', timeout: 20000 });
      assert.notEqual(r.status, 0, `serve -m ${path.basename(file)} exits non-zero`);
      assert.match(r.stderr, why);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('SIGTERM: health 503 and new work refused while admitted work finishes; stopped comes last', async () => {
  // The long grace outlasts the request on any build (an ASan build takes
  // ~15 s for it); the short one ends it early.
  for (const grace of ['300', '0.3']) {
    const srv = await startServer(['--parallel', '2', '-t', '1', '--grace', grace, '--log-format', 'json']);
    let started;
    const firstToken = new Promise((r) => { started = r; });
    const run = streamed(srv.base, { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 1800,
                                     temperature: 0, ignore_eos: true }, started).catch((e) => ({ error: e }));
    await firstToken;
    srv.proc.kill('SIGTERM');
    // bounded at 10 s: a loaded machine may take a while to run the signal thread
    for (let i = 0; i < 2000 && !/draining/.test(srv.log()); i++) await sleep(5);
    const h = await fetch(srv.base + '/health');
    assert.equal(h.status, 503, 'health during the drain');
    const late = await post(srv.base, '/v1/completions', { model: 'stories260K', prompt: 'x', max_tokens: 2 });
    assert.equal(late.status, 503, 'new work during the drain');
    const res = await run;
    const { code } = await srv.exited;
    assert.equal(code, 0);
    if (grace === '300') assert.equal(res.finish, 'length', 'the admitted request ran to its end');
    const lines = srv.log().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const reqAt = lines.findIndex((l) => l.path === '/v1/completions' && l.status === 200);
    const stopAt = lines.findIndex((l) => l.msg === 'stories260K stopped');
    assert.ok(reqAt >= 0 && stopAt > reqAt, `the request's line (${reqAt}) comes before stopped (${stopAt})`);
    if (grace === '300') assert.equal(lines[reqAt].completion_tokens, 1800);
    else assert.ok(lines[reqAt].completion_tokens < 1800, 'cancelled after the grace period');
    assert.ok(lines.every((l) => typeof l.time === 'string'), 'every line is JSON with a time');
  }
});

test('a port in use ends the server with one reason, nothing drained or cancelled; the page is logged with its status', async () => {
  const srv = await startServer(['-c', '256', '-t', '1']);
  try {
    const page = await fetch(srv.base + '/');
    assert.equal(page.status, 200);
    await page.text();
    for (let i = 0; i < 50 && !/GET \/ \d+/.test(srv.log()); i++) await sleep(20);
    assert.match(srv.log(), /GET \/ 200 /);
    const r = spawnSync(bin, ['serve', '-m', model, '--host', '127.0.0.1', '--port', String(srv.port)],
      { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /cannot listen on 127\.0\.0\.1 port \d+/);
    assert.doesNotMatch(r.stderr, /draining|cancelled/);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});
