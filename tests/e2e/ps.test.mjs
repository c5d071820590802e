// kiln ps and kiln stop against a running kiln serve, as ollama ps / stop:
// the table and --json agree with /api/ps, stop unloads (and a request loads
// the model again), errors are one line with a non-zero exit; the ID column
// is a store model's pack id.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, bin, model } from './lib.mjs';

const KEY = 'ps-test-key';
const T = { timeout: 20000 };
let srv, host;

before(async () => {
  srv = await startServer(['--parallel', '1', '-c', '512', '-t', '1', '--api-key', KEY, '--keep-alive', '10m']);
  host = `127.0.0.1:${srv.port}`;
});
after(async () => { assert.equal(await srv.stop(), 0); });

function kiln(args, env = {}) {
  return new Promise((resolve) => {
    execFile(bin, args, { env: { ...process.env, KILN_API_KEY: KEY, ...env }, timeout: 15000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

async function apiPs() {
  const r = await fetch(srv.base + '/api/ps', { headers: { authorization: 'Bearer ' + KEY } });
  assert.equal(r.status, 200);
  return (await r.json()).models;
}

test('kiln ps: the table and --json', T, async () => {
  const r = await kiln(['ps', '--host', host]);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  assert.match(lines[0], /^NAME\s+ID\s+SIZE\s+PROCESSOR\s+CONTEXT\s+UNTIL$/);
  assert.equal(lines.length, 2);
  const row = lines[1];
  assert.match(row, /^stories260K\s+-\s/); // a -m file has no store id
  assert.match(row, /\s1\.2 MB\s+100% CPU\s+512\s+(9|10) minutes from now$/);
  const j = await kiln(['ps', '--json', '--host', 'http://' + host + '/']);
  assert.equal(j.code, 0, j.stderr);
  const listed = JSON.parse(j.stdout);
  const api = await apiPs();
  assert.deepEqual(listed.map((m) => [m.name, m.size, m.context_length]),
                   api.map((m) => [m.name, m.size, m.context_length]));
});

test('kiln stop unloads; the next request loads it again', T, async () => {
  const r = await kiln(['stop', 'stories260K', '--host', host]);
  assert.equal(r.code, 0, r.stderr);
  let left = await apiPs();
  for (let i = 0; i < 100 && left.length; i++) {
    await new Promise((res) => setTimeout(res, 50));
    left = await apiPs();
  }
  assert.deepEqual(left, []);
  const empty = await kiln(['ps', '--host', host]);
  assert.equal(empty.stdout.trim().split('\n').length, 1, 'only the header');
  const again = await kiln(['stop', 'stories260K', '--host', host]);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /^kiln stop: model 'stories260K' is not loaded/);
  const g = await fetch(srv.base + '/api/generate', { method: 'POST', headers: { authorization: 'Bearer ' + KEY },
    body: JSON.stringify({ model: 'stories260K', prompt: 'Once', stream: false, keep_alive: '10m',
                           options: { num_predict: 2 } }) });
  assert.equal(g.status, 200);
  assert.equal((await apiPs()).length, 1);
});

test('errors: no server, no key, no name', T, async () => {
  const none = await kiln(['ps', '--host', '127.0.0.1:1']);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /^kiln ps: no kiln server at http:\/\/127\.0\.0\.1:1: /);
  const nokey = await kiln(['ps', '--host', host], { KILN_API_KEY: '' });
  assert.equal(nokey.code, 1);
  assert.match(nokey.stderr, /answered 401/);
  const withFlag = await kiln(['ps', '--host', host, '--api-key', KEY], { KILN_API_KEY: '' });
  assert.equal(withFlag.code, 0);
  const noname = await kiln(['stop', '--host', host]);
  assert.equal(noname.code, 2);
  assert.equal(noname.stderr.trim().split('\n')[0], 'kiln stop: name the model to stop (kiln ps lists them)');
  const hostEnv = await kiln(['ps'], { KILN_HOST: host });
  assert.equal(hostEnv.code, 0);
  assert.match(hostEnv.stdout, /stories260K/);
});

test('kiln ps: a store model\'s ID is its pack id, as kiln ls prints it', T, async () => {
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-ps-'));
  let s2;
  try {
    const imp = spawnSync(bin, ['import', model, '--name', 'pstiny', '--link'], { env: { ...process.env, KILN_STORE: store }, encoding: 'utf8' });
    assert.equal(imp.status, 0, imp.stderr);
    const id = /\(([0-9a-f]{12})\)/.exec(imp.stderr)[1];
    s2 = await startServer(['-c', '256', '-t', '1', '-m', 'pstiny'], { KILN_STORE: store }, null);
    const r = await kiln(['ps', '--host', `127.0.0.1:${s2.port}`], { KILN_API_KEY: '' });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout.trim().split('\n')[1], new RegExp(`^pstiny\\s+${id}\\s`));
  } finally {
    if (s2) assert.equal(await s2.stop(), 0);
    fs.rmSync(store, { recursive: true, force: true });
  }
});
