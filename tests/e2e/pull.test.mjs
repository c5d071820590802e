// /api/pull by name through the official ollama client, against the
// stand-ins of tests/source_server.py (a Hugging Face hub with its CDN and an
// Ollama registry on 127.0.0.1): a registry name and an hf.co reference
// install under their reference and then serve requests; a private
// repository is a 404 (possibly private), a registry model that needs
// credentials a 401, a missing one a 404, each with the source's message.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Ollama } from 'ollama';
import { startServer, root, model } from './lib.mjs';

const T = { timeout: 30000 };
let src, srv, oll, dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-pull-'));
  src = spawn('/usr/bin/python3', ['source_server.py', '--file', model, '--chat-file',
    path.join(root, 'tests', 'data', 'fixtures', 'toolcall.gguf'), '--log', path.join(dir, 'log')],
    { cwd: path.join(root, 'tests'), stdio: ['ignore', 'pipe', 'inherit'] });
  const ports = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('source_server.py did not start')), 15000);
    let out = '';
    src.stdout.on('data', (d) => {
      out += d;
      const m = /PORTS (\d+) (\d+) (\d+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m.slice(1).map(Number)); }
    });
    src.on('exit', (code) => { clearTimeout(timer); reject(new Error('source_server.py exited ' + code)); });
  });
  srv = await startServer(['-t', '1', '-c', '1024'], {
    KILN_STORE: path.join(dir, 'store'), HF_ENDPOINT: `http://127.0.0.1:${ports[0]}`,
    KILN_REGISTRY: `http://127.0.0.1:${ports[2]}`, HF_TOKEN: '', HUGGING_FACE_HUB_TOKEN: '',
    HF_HOME: dir, KILN_PULL_RETRIES: '0' }, null);
  oll = new Ollama({ host: srv.base });
});

after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
  if (src) src.kill();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a registry name installs under its name and answers', T, async () => {
  const r = await oll.pull({ model: 'chatty', stream: false });
  assert.equal(r.status, 'success');
  const tags = await oll.list();
  assert.ok(tags.models.some((m) => m.name === 'chatty:latest' || m.name === 'chatty'), JSON.stringify(tags));
  const chat = await oll.chat({ model: 'chatty', messages: [{ role: 'user', content: 'hi' }], stream: false });
  assert.equal(chat.message.role, 'assistant');
  assert.ok(chat.eval_count > 0);
});

// chatty's layers: system "Be brief.", params {"temperature": 0, "num_predict": 8}; the
// model (the tool-call fixture) writes 15 tokens whatever it is asked
test('a pulled model\'s system prompt and options apply under the request\'s', T, async () => {
  const ask = [{ role: 'user', content: 'hi' }];
  const plain = await oll.chat({ model: 'chatty', messages: ask, stream: false });
  assert.equal(plain.eval_count, 8, 'num_predict from the pack');
  assert.equal(plain.done_reason, 'length');
  const withSys = await oll.chat({ model: 'chatty', stream: false,
                                   messages: [{ role: 'system', content: 'Be brief.' }, ...ask] });
  assert.equal(plain.prompt_eval_count, withSys.prompt_eval_count, 'the pack\'s system prompt is in the prompt');
  const other = await oll.chat({ model: 'chatty', stream: false,
                                 messages: [{ role: 'system', content: 'Be very very long.' }, ...ask] });
  assert.notEqual(other.prompt_eval_count, plain.prompt_eval_count, 'a request\'s own system prompt wins');
  const mine = await oll.chat({ model: 'chatty', messages: ask, stream: false, options: { num_predict: 3 } });
  assert.equal(mine.eval_count, 3, 'the request\'s options win');
  const oai = await (await fetch(srv.base + '/v1/chat/completions', { method: 'POST',
    body: JSON.stringify({ model: 'chatty', messages: ask }) })).json();
  assert.equal(oai.usage.completion_tokens, 8);
  assert.equal(oai.choices[0].finish_reason, 'length');
  assert.equal(oai.usage.prompt_tokens, plain.prompt_eval_count);
  const resp = await (await fetch(srv.base + '/v1/responses', { method: 'POST',
    body: JSON.stringify({ model: 'chatty', input: 'hi' }) })).json();
  assert.equal(resp.usage.output_tokens, 8);
  assert.equal(resp.status, 'incomplete');
  const gen = await oll.generate({ model: 'chatty', prompt: 'hi', stream: false });
  assert.equal(gen.eval_count, 8);
  assert.equal(gen.prompt_eval_count, plain.prompt_eval_count, '/api/generate templates with the system prompt');
});

// The registry's template layer is a Go template: the pack chats with it
// (Ollama's data model), not with the GGUF's own template.
test('a pulled model renders its own Go template', T, async () => {
  const apply = async (model, messages) => (await (await fetch(srv.base + '/apply-template', {
    method: 'POST', body: JSON.stringify({ model, messages }) })).json()).prompt;
  const conv = [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'yo' }, { role: 'user', content: 'again' }];
  // {{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n,
  // the pack's system prompt first
  const chatml = (ms) => ms.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
  assert.equal(await apply('chatty', conv), chatml([{ role: 'system', content: 'Be brief.' }, ...conv]));
  const show = await oll.show({ model: 'chatty' });
  assert.match(show.template, /^\{\{- range \.Messages \}\}<\|im_start\|>/);
  assert.equal((await oll.pull({ model: 'tiny', stream: false })).status, 'success');
  // {{ if .System }}<|system|>{{ .System }}\n{{ end }}{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}\n{{ end }}<|assistant|>
  const sys = 'You are a tiny test model.';
  assert.equal(await apply('tiny', conv.slice(0, 1)), `<|system|>${sys}\n<|system|>${sys}\n<|user|>hi\n<|assistant|>`);
  assert.equal(await apply('tiny', [{ role: 'system', content: 'S' }, ...conv]),
    '<|system|>S\n<|system|>S\n<|user|>hi\n<|assistant|>yo\n<|user|>again\n<|assistant|>');
  const r = await oll.chat({ model: 'tiny', messages: conv.slice(0, 1), stream: false, options: { num_predict: 2 } });
  assert.equal(r.done, true);
});

test('an hf.co reference streams progress and installs', T, async () => {
  const events = [];
  for await (const e of await oll.pull({ model: 'hf.co/acme/tiny-GGUF:Q8_0', stream: true })) events.push(e);
  assert.equal(events.at(-1).status, 'success');
  assert.ok(events.length > 1, 'progress before success');
  const g = await oll.generate({ model: 'hf.co/acme/tiny-GGUF:Q8_0', prompt: 'Once', raw: true, stream: false,
                                 options: { num_predict: 3, temperature: 0 } });
  assert.ok(g.response.length > 0);
});

test('source failures keep their kind', T, async () => {
  const post = (model) => fetch(srv.base + '/api/pull', { method: 'POST',
    body: JSON.stringify({ model, stream: false }) });
  // the hub hides a private repository: not found, possibly private
  const priv = await post('hf.co/acme/private-GGUF');
  assert.equal(priv.status, 404);
  assert.match((await priv.json()).error, /private/i);
  // the registry asks for credentials
  const auth = await post('team/private:latest');
  assert.equal(auth.status, 401);
  assert.match((await auth.json()).error, /authentication/i);
  const missing = await post('library/nothing-here:latest');
  assert.equal(missing.status, 404);
  assert.match((await missing.json()).error, /not found/i);
});
