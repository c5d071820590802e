// API details clients of Ollama and llama-server rely on: a known path
// asked with the wrong method is a 405 with Allow; /api/* errors (401,
// 429, a bad option) come in Ollama's {"error": "..."} shape and /v1/* in
// OpenAI's; what a model cannot do (images, audio, thinking) is a 400,
// never silently dropped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './lib.mjs';

const MODEL = 'stories260K';
const req = (base, method, url, body, headers = {}) =>
  fetch(base + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
const isOllamaError = (j) => typeof j.error === 'string' && j.error.length > 0;
const isOpenAIError = (j) => j.error && typeof j.error.message === 'string' && typeof j.error.type === 'string';

test('405 with Allow for a known path asked with another method', async () => {
  const srv = await startServer(['-t', '1']);
  try {
    for (const [method, url, allow] of [['GET', '/v1/chat/completions', /POST/], ['GET', '/v1/completions', /POST/],
                                        ['PUT', '/v1/embeddings', /POST/], ['POST', '/v1/models', /GET/],
                                        ['POST', '/health', /GET/], ['POST', '/metrics', /GET/]]) {
      const r = await req(srv.base, method, url, method === 'POST' || method === 'PUT' ? {} : undefined);
      assert.equal(r.status, 405, `${method} ${url}`);
      assert.match(r.headers.get('allow') || '', allow, `${method} ${url}: Allow`);
      assert.ok(isOpenAIError(await r.json()));
    }
    for (const [method, url] of [['POST', '/api/tags'], ['POST', '/api/ps'], ['GET', '/api/chat'],
                                 ['GET', '/api/generate']]) {
      const r = await req(srv.base, method, url, method === 'POST' ? {} : undefined);
      assert.equal(r.status, 405, `${method} ${url}`);
      assert.ok(isOllamaError(await r.json()), `${method} ${url}: Ollama's shape`);
    }
    const r = await req(srv.base, 'GET', '/v1/nosuch');
    assert.equal(r.status, 404, 'an unknown path stays a 404');
  } finally {
    await srv.stop();
  }
});

test("errors on /api in Ollama's shape: 401, a bad option; /v1 in OpenAI's", async () => {
  const srv = await startServer(['-t', '1', '--api-key', 'sekret']);
  try {
    let r = await req(srv.base, 'POST', '/api/chat', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 401);
    assert.ok(isOllamaError(await r.json()), '401 on /api');
    r = await req(srv.base, 'GET', '/api/tags');
    assert.equal(r.status, 401);
    assert.ok(isOllamaError(await r.json()), '401 on GET /api/tags');
    r = await req(srv.base, 'POST', '/v1/completions', { model: MODEL, prompt: 'x' });
    assert.equal(r.status, 401);
    assert.ok(isOpenAIError(await r.json()), '401 on /v1');
    const auth = { Authorization: 'Bearer sekret' };
    r = await req(srv.base, 'POST', '/api/generate', { model: MODEL, prompt: 'x', stream: false,
                                                        options: { temperature: 'hot' } }, auth);
    assert.equal(r.status, 400);
    const bad = await r.json();
    assert.ok(isOllamaError(bad) && /temperature/.test(bad.error), JSON.stringify(bad));
  } finally {
    await srv.stop();
  }
});

test('images, audio or thinking a model cannot take are a 400 that says so', async () => {
  const srv = await startServer(['-t', '1']);
  try {
    const png = 'iVBORw0KGgo=';
    const cases = [
      ['/api/chat', { model: MODEL, stream: false, messages: [{ role: 'user', content: 'what is this', images: [png] }] },
       /does not take images/],
      ['/api/generate', { model: MODEL, stream: false, prompt: 'what is this', images: [png] }, /does not take images/],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [
        { type: 'text', text: 'what is this' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,' + png } }] }] },
       /does not take images/],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [
        { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] }, /does not accept audio/],
      ['/api/chat', { model: MODEL, stream: false, think: true, messages: [{ role: 'user', content: 'hi' }] },
       /does not support thinking/],
      ['/api/generate', { model: MODEL, stream: false, think: true, prompt: 'hi' }, /does not support thinking/],
    ];
    for (const [url, body, why] of cases) {
      const r = await req(srv.base, 'POST', url, body);
      assert.equal(r.status, 400, `${url} ${JSON.stringify(body).slice(0, 120)}`);
      const j = await r.json();
      const msg = url.startsWith('/api/') ? j.error : j.error.message;
      assert.match(msg, why);
    }
    // the same requests without the part the model lacks are served
    let r = await req(srv.base, 'POST', '/api/chat', { model: MODEL, stream: false, think: false,
                                                       options: { num_predict: 4 },
                                                       messages: [{ role: 'user', content: 'hi', images: [] }] });
    assert.equal(r.status, 200);
    r = await req(srv.base, 'POST', '/v1/chat/completions', { model: MODEL, max_tokens: 4, messages: [
      { role: 'user', content: [{ type: 'text', text: 'hi' }] }] });
    assert.equal(r.status, 200);
  } finally {
    await srv.stop();
  }
});

test('the default context: min(declared, 4096) per sequence, said on the load line', async () => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const { model } = await import('./lib.mjs');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-ctx-'));
  try {
    // the stories model declaring 131072 tokens: its uint32 after the key
    const buf = Buffer.from(fs.readFileSync(model));
    const key = Buffer.from('llama.context_length');
    const at = buf.indexOf(key);
    assert.ok(at > 0 && buf.readUInt32LE(at + key.length) === 4, 'a uint32 context length');
    buf.writeUInt32LE(131072, at + key.length + 4);
    const file = path.join(dir, 'long.gguf');
    fs.writeFileSync(file, buf);
    const srv = await startServer(['-t', '1', '--parallel', '4'], {}, file);
    try {
      // a prompt longer than the 4096 tokens is refused with the context's size
      const r = await req(srv.base, 'POST', '/v1/completions', { model: 'long', prompt: 'Once upon a time '.repeat(1200),
                                                                 max_tokens: 5 });
      assert.equal(r.status, 400);
      assert.match((await r.json()).error.message, /the context holds 4096/);
      assert.match(srv.log(), /long ready \(generation, 4096 tokens x 4 sequences/);
    } finally {
      await srv.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
