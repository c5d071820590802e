// The store through the Ollama API: /api/tags lists each model once (a store
// model that a request loaded is not listed again as a loaded file, and a
// pack without a name is not a model), and /api/copy refuses to overwrite a
// name, as kiln cp does without --force; /v1/models lists each model once,
// with the capabilities a chat picker filters on.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, bin, model, root } from './lib.mjs';

let srv, store, other, t0;

function kiln(...args) {
  const r = spawnSync(bin, args, { env: { ...process.env, KILN_STORE: store }, encoding: 'utf8' });
  assert.equal(r.status, 0, args.join(' ') + ': ' + r.stderr);
  return r.stdout;
}

async function tagNames() {
  const j = await (await fetch(srv.base + '/api/tags')).json();
  return j.models.map((m) => m.name);
}

before(async () => {
  t0 = Math.floor(Date.now() / 1000);
  store = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-store-'));
  other = path.join(store, 'other.gguf');
  fs.copyFileSync(model, other);
  kiln('import', model, '--name', 'tiny', '--link');
  kiln('import', other, '--name', 'spare', '--link');
  srv = await startServer(['-c', '256', '-t', '1'], { KILN_STORE: store });
});

after(async () => {
  assert.equal(await srv.stop(), 0);
  fs.rmSync(store, { recursive: true, force: true });
});

test('/api/tags lists each model once, also once a request loaded it from the store', async () => {
  const r = await fetch(srv.base + '/api/generate', {
    method: 'POST', body: JSON.stringify({ model: 'tiny', prompt: 'Once', stream: false, options: { num_predict: 2 } }),
  });
  assert.equal(r.status, 200);
  const names = await tagNames();
  assert.deepEqual([...names].sort(), ['spare:latest', 'stories260K', 'tiny:latest'], names.join(','));
  assert.ok(!names.includes(''), 'no nameless entry');
});

test('modified_at is when the name was installed; a -m file gives its mtime; /api/show has it', async () => {
  const j = await (await fetch(srv.base + '/api/tags')).json();
  const now = Math.floor(Date.now() / 1000) + 1;
  const secs = (m) => Date.parse(m.modified_at) / 1000;
  for (const m of j.models) {
    assert.match(m.modified_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, m.name);
    if (m.name === 'stories260K') assert.equal(secs(m), Math.floor(fs.statSync(model).mtimeMs / 1000), 'the file\'s mtime');
    else assert.ok(secs(m) >= t0 && secs(m) <= now, `${m.name}: ${m.modified_at} not in [${t0}, ${now}]`);
  }
  const ls = JSON.parse(kiln('ls', '--json'));
  const tiny = ls.find((e) => e.name === 'tiny:latest');
  assert.equal(secs(j.models.find((m) => m.name === 'tiny:latest')), tiny.modified);
  assert.ok(tiny.installed >= t0 && tiny.installed <= tiny.modified);
  assert.match(kiln('ls'), /MODIFIED[\s\S]*tiny:latest .*(second|minute|Less than)/);
  const show = await (await fetch(srv.base + '/api/show', { method: 'POST', body: JSON.stringify({ model: 'tiny' }) })).json();
  assert.equal(secs(show), tiny.modified);
});

test('/api/copy refuses to overwrite a name', async () => {
  const r = await fetch(srv.base + '/api/copy', {
    method: 'POST', body: JSON.stringify({ source: 'tiny', destination: 'spare' }),
  });
  assert.equal(r.status, 409);
  assert.match((await r.json()).error, /already names/);
  const ok = await fetch(srv.base + '/api/copy', {
    method: 'POST', body: JSON.stringify({ source: 'tiny', destination: 'tiny2' }),
  });
  assert.equal(ok.status, 200);
  // --force moves the name; the pack it named had no other name and goes
  kiln('cp', 'tiny', 'spare', '--force');
  const names = await tagNames();
  assert.deepEqual([...names].sort(), ['spare:latest', 'stories260K', 'tiny2:latest', 'tiny:latest'], names.join(','));
  const ls = JSON.parse(kiln('ls', '--json'));
  assert.equal(new Set(ls.map((e) => e.id)).size, 1, 'one pack left: ' + JSON.stringify(ls));
});

test('/v1/models lists each model once with its capabilities; an Anthropic client sees the chat models', async () => {
  kiln('import', path.join(root, 'tests', 'data', 'fixtures', 'bert-embed.gguf'), '--name', 'emb', '--link');
  const s2 = await startServer(['-c', '256', '-t', '1', '-m', 'tiny'], { KILN_STORE: store }, null);
  try {
    const j = await (await fetch(s2.base + '/v1/models')).json();
    const ids = j.data.map((m) => m.id);
    assert.equal(ids.filter((id) => id === 'tiny' || id === 'tiny:latest').length, 1, ids.join(','));
    assert.deepEqual([...ids].sort(), ['emb:latest', 'spare:latest', 'tiny', 'tiny2:latest'], ids.join(','));
    const caps = Object.fromEntries(j.data.map((m) => [m.id, m.capabilities]));
    assert.deepEqual(caps.tiny, ['completion']);
    assert.deepEqual(caps['emb:latest'], ['embedding']);
    const ant = new Anthropic({ baseURL: s2.base, apiKey: 'unused' });
    const listed = [];
    for await (const m of ant.models.list()) listed.push(m.id);
    assert.deepEqual([...listed].sort(), ['spare:latest', 'tiny', 'tiny2:latest'], listed.join(','));
  } finally {
    assert.equal(await s2.stop(), 0);
  }
});
