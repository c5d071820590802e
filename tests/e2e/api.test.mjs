// The OpenAI and Ollama npm clients against a real kiln serve with the
// bundled stories260K model: streaming and not, errors, cancellation,
// concurrency equal to sequential, prefix cache, embeddings, SIGTERM.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { startServer, metric } from './lib.mjs';

let srv, oai, oll;
const MODEL = 'stories260K';

before(async () => {
  srv = await startServer(['--parallel', '4', '-c', '512', '-t', '1']);
  oai = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
  oll = new Ollama({ host: srv.base });
});

after(async () => {
  const code = await srv.stop();
  assert.equal(code, 0, 'SIGTERM drains and exits 0');
});

const greedy = { temperature: 0, max_tokens: 24 };

test('health, models, version', async () => {
  const h = await fetch(srv.base + '/health');
  assert.equal(h.status, 200);
  const models = await oai.models.list();
  assert.ok(models.data.some((m) => m.id === MODEL));
  const v = await (await fetch(srv.base + '/api/version')).json();
  assert.match(v.version, /^\d+\.\d+\.\d+/);
  // an Ollama version that version-checking clients accept (0.12 or later), kiln's own beside it
  const [maj, min] = v.version.split('.').map(Number);
  assert.ok(maj > 0 || min >= 12, v.version);
  assert.match(v.kiln_version, /^\d+\.\d+\.\d+/);
});

test('completions: non-streamed equals streamed, usage and finish_reason', async () => {
  const prompt = 'Once upon a time';
  const r = await oai.completions.create({ model: MODEL, prompt, ...greedy });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  const s = await oai.completions.create({ model: MODEL, prompt, ...greedy, stream: true,
                                           stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 24);
});

test('chat: streamed deltas equal the whole message', async () => {
  const messages = [{ role: 'user', content: 'Tom had a little dog.' }];
  const r = await oai.chat.completions.create({ model: MODEL, messages, ...greedy });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  const content = r.choices[0].message.content;
  assert.ok(content.length > 0);
  const s = await oai.chat.completions.create({ model: MODEL, messages, ...greedy, stream: true });
  let text = '', chunks = 0;
  for await (const ch of s) { chunks++; text += ch.choices[0]?.delta?.content ?? ''; }
  assert.ok(chunks > 3, 'several chunks');
  assert.equal(text, content);
});

test('stop strings, seed, logprobs', async () => {
  const base = await oai.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 40 });
  const full = base.choices[0].text;
  const word = full.trim().split(/\s+/)[3];
  const cut = await oai.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 40,
                                            stop: [word] });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.ok(!cut.choices[0].text.includes(word));
  assert.ok(full.startsWith(cut.choices[0].text));
  const a = await oai.completions.create({ model: MODEL, prompt: 'The sun', temperature: 1, seed: 7, max_tokens: 20 });
  const b = await oai.completions.create({ model: MODEL, prompt: 'The sun', temperature: 1, seed: 7, max_tokens: 20 });
  assert.equal(a.choices[0].text, b.choices[0].text, 'same seed, same text');
  const lp = await oai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }],
                                                 temperature: 0, max_tokens: 5, logprobs: true, top_logprobs: 3 });
  const entries = lp.choices[0].logprobs.content;
  assert.equal(entries.length, 5);
  for (const e of entries) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.logprob - 1e-6, 'greedy picks the top token');
  }
});

test('errors: malformed JSON, unknown model, context overflow, bad params', async () => {
  let r = await fetch(srv.base + '/v1/chat/completions', { method: 'POST', body: '{"model": "x", "messages": [}' });
  assert.equal(r.status, 400);
  let j = await r.json();
  assert.match(j.error.message, /column \d+/);
  assert.equal(j.error.type, 'invalid_request_error');
  await assert.rejects(oai.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e.status === 404);
  // a prompt that itself fills the context is refused, never truncated
  await assert.rejects(oai.completions.create({ model: MODEL, prompt: 'Once upon a time '.repeat(200), max_tokens: 8 }),
                       (e) => e.status === 400 && /leaving no room/.test(e.message) && /512/.test(e.message));
  await assert.rejects(oll.generate({ model: MODEL, prompt: 'Once upon a time '.repeat(200) }),
                       (e) => e.status_code === 400 && /leaving no room/.test(e.message));
  await assert.rejects(oai.completions.create({ model: MODEL, prompt: 'x', temperature: 'hot' }),
                       (e) => e.status === 400);
  r = await fetch(srv.base + '/v1/nothing');
  assert.equal(r.status, 404);
  r = await fetch(srv.base + '/v1/completions', { method: 'POST', body: 'x'.repeat(9 << 20) }).catch(() => null);
  assert.ok(!r || r.status === 413, 'body over the limit is refused');
});

// About 450 tokens: the room left in the 512-token context is a few dozen,
// which the stories model fills without an end-of-text (greedy).
const LONG = 'Tom had a red ball. He liked to play with it in the park every day. '.repeat(18);

test('max_tokens far above the context is a cap: the reply fills the context, finish length', async () => {
  const c = await oai.completions.create({ model: MODEL, prompt: LONG, temperature: 0, max_tokens: 32000 });
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.ok(c.usage.completion_tokens > 0);
  assert.equal(c.usage.prompt_tokens + c.usage.completion_tokens, 512);
  const messages = [{ role: 'user', content: LONG }];
  const ch = await oai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_completion_tokens: 32000 });
  assert.equal(ch.choices[0].finish_reason, 'length');
  assert.equal(ch.usage.prompt_tokens + ch.usage.completion_tokens, 512);
  // streamed: the same cap and reason
  const s = await oai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 32000,
                                               stream: true, stream_options: { include_usage: true } });
  let finish = null, usage = null;
  for await (const x of s) {
    if (x.usage) usage = x.usage;
    for (const k of x.choices) if (k.finish_reason) finish = k.finish_reason;
  }
  assert.equal(finish, 'length');
  assert.equal(usage.prompt_tokens + usage.completion_tokens, 512);
  // Ollama's num_predict the same way
  const g = await oll.generate({ model: MODEL, prompt: LONG, options: { temperature: 0, num_predict: 32000 } });
  assert.equal(g.done_reason, 'length');
  assert.equal(g.prompt_eval_count + g.eval_count, 512);
  const o = await oll.chat({ model: MODEL, messages, options: { temperature: 0, num_predict: 32000 } });
  assert.equal(o.done_reason, 'length');
  assert.equal(o.prompt_eval_count + o.eval_count, 512);
  // a smaller number still holds
  const few = await oai.completions.create({ model: MODEL, prompt: LONG, temperature: 0, max_tokens: 5 });
  assert.equal(few.usage.completion_tokens, 5);
  assert.equal(few.choices[0].finish_reason, 'length');
});

test('a reply caught in a loop ends with the repetition reason', async () => {
  // greedy, the stories model ends "Tom" in "It is not angry." again and
  // again; the guard (256 tokens by default) ends it before the context does
  const c = await oai.completions.create({ model: MODEL, prompt: 'Tom', temperature: 0, max_tokens: 32000 });
  assert.equal(c.choices[0].finish_reason, 'repetition');
  assert.ok(c.usage.prompt_tokens + c.usage.completion_tokens < 512, JSON.stringify(c.usage));
  assert.match(c.choices[0].text, /(It is not angry\. ){20}/);
  const s = await oai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Tom' }],
                                               temperature: 0, max_tokens: 32000, stream: true });
  let finish = null;
  for await (const x of s) for (const k of x.choices) if (k.finish_reason) finish = k.finish_reason;
  assert.equal(finish, 'repetition');
  const g = await oll.generate({ model: MODEL, prompt: 'Tom', options: { temperature: 0, repeat_penalty: 1 } });
  assert.equal(g.done_reason, 'repetition');
  assert.equal(g.eval_count, c.usage.completion_tokens);
  // a limit below the loop's length is still the length
  const few = await oai.completions.create({ model: MODEL, prompt: 'Tom', temperature: 0, max_tokens: 300 });
  assert.equal(few.choices[0].finish_reason, 'length');
});

test('greedy: concurrent requests equal sequential ones', async () => {
  const prompts = ['Once upon a time', 'The little girl', 'One day, a cat', 'Tim and Sue went', 'There was a big',
                   'Lily liked to'];
  const one = (p) => oai.completions.create({ model: MODEL, prompt: p, temperature: 0, max_tokens: 48 })
    .then((r) => r.choices[0].text);
  const seq = [];
  for (const p of prompts) seq.push(await one(p));
  const par = await Promise.all(prompts.map(one));
  assert.deepEqual(par, seq);
});

test('greedy: long prompts past 256 positions, concurrent equal sequential', async () => {
  // attention switches to a float accumulator past 256 positions; the
  // choice is per position, so neither batching nor the prefix cache (the
  // shared start, cached after the first request) may change a token
  const start = 'Tom had a red ball. He liked to play with it in the park every day. '.repeat(11);
  const prompts = ['Then a dog came.', 'One day it rained.', 'His mom said no.', 'Sue saw the ball.']
    .map((e) => start + e);
  // the log-probabilities too: equal floats, not just equal argmaxes
  const one = (p) => oai.completions.create({ model: MODEL, prompt: p, temperature: 0, max_tokens: 40, logprobs: 1 })
    .then((r) => ({ text: r.choices[0].text, lp: r.choices[0].logprobs.token_logprobs, n: r.usage.prompt_tokens }));
  const seq = [];
  for (const p of prompts) seq.push(await one(p));
  assert.ok(seq.every((r) => r.n > 256 && r.n + 40 <= 512), `prompt tokens ${seq.map((r) => r.n)}`);
  const par = await Promise.all(prompts.map(one));
  assert.deepEqual(par, seq);
});

test('cancellation frees the sequence at once', async () => {
  const ac = new AbortController();
  const s = await oai.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0.8, max_tokens: 400,
                                          stream: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const ch of s) { if (++n === 3) ac.abort(); }
  } catch (e) { /* aborted */ }
  let running = 1;
  for (let i = 0; i < 50 && running > 0; i++) {
    await new Promise((res) => setTimeout(res, 40));
    running = await metric(srv.base, 'kiln_requests_running');
  }
  assert.equal(running, 0);
  assert.equal(await metric(srv.base, 'kiln_kv_cache_blocks{model_name="stories260K",state="used"}'), 0);
  // a non-streamed request whose client goes away is cancelled too
  const gen0 = await metric(srv.base, 'kiln_generation_tokens_total');
  const ac2 = new AbortController();
  const p = fetch(srv.base + '/v1/completions', { method: 'POST', signal: ac2.signal,
    body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 480, temperature: 0.8 }) });
  setTimeout(() => ac2.abort(), 30);
  await p.catch(() => {});
  for (let i = 0; i < 50; i++) {
    await new Promise((res) => setTimeout(res, 40));
    if (await metric(srv.base, 'kiln_requests_running') === 0) break;
  }
  assert.equal(await metric(srv.base, 'kiln_requests_running'), 0);
  const gen1 = await metric(srv.base, 'kiln_generation_tokens_total');
  assert.ok(gen1 - gen0 < 480, `cancelled after ${gen1 - gen0} tokens`);
});

test('prefix cache: a repeated prompt reports cached tokens', async () => {
  const system = 'Once upon a time there was a little boy named Tim. Tim liked to play with his red ball in the park. ' +
    'One day he saw a big dog. The dog was brown and happy. ';
  const ask = (q) => oai.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 8,
    messages: [{ role: 'system', content: system }, { role: 'user', content: q }] });
  const a = await ask('What did Tim do?');
  const b = await ask('Where was the dog?');
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= 32, `cached ${b.usage.prompt_tokens_details.cached_tokens}`);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens < b.usage.prompt_tokens);
  assert.ok(a.usage.prompt_tokens > 40);
  assert.ok(await metric(srv.base, 'kiln_prefix_cache_hits_total') > 0);
});

test('ollama: list, show, generate, chat, ps, embed', async () => {
  const list = await oll.list();
  assert.ok(list.models.some((m) => m.name === MODEL));
  const show = await oll.show({ model: MODEL });
  assert.equal(show.details.format, 'gguf');
  const g = await oll.generate({ model: MODEL, prompt: 'Once upon a time', options: { temperature: 0, num_predict: 16 } });
  assert.ok(g.done && g.response.length > 0);
  assert.equal(g.eval_count, 16);
  let streamed = '';
  for await (const part of await oll.generate({ model: MODEL, prompt: 'Once upon a time', stream: true,
                                                 options: { temperature: 0, num_predict: 16 } })) {
    streamed += part.response;
  }
  assert.equal(streamed, g.response);
  const c = await oll.chat({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }],
                             options: { temperature: 0, num_predict: 8 } });
  assert.equal(c.message.role, 'assistant');
  assert.ok(c.done);
  const ps = await oll.ps();
  assert.ok(ps.models.some((m) => m.name === MODEL));
  const e = await oll.embed({ model: MODEL, input: ['hello world', 'a cat'] });
  assert.equal(e.embeddings.length, 2);
  const norm = Math.hypot(...e.embeddings[0]);
  assert.ok(Math.abs(norm - 1) < 1e-3);
  const oe = await oai.embeddings.create({ model: MODEL, input: 'hello world', encoding_format: 'float' });
  assert.equal(oe.data[0].embedding.length, e.embeddings[0].length);
  for (let i = 0; i < 4; i++) assert.ok(Math.abs(oe.data[0].embedding[i] - e.embeddings[0][i]) < 1e-5);
});

test('ollama options.num_ctx reloads the model with that context; /api/ps reports it', async () => {
  const ctxOf = async () => (await oll.ps()).models.find((m) => m.name === MODEL).context_length;
  assert.equal(await ctxOf(), 512);
  // about 700 tokens: more than -c 512 holds, less than 1024
  const long = 'Tom had a red ball. He liked to play with it in the park every day. '.repeat(28);
  await assert.rejects(oll.generate({ model: MODEL, prompt: long, options: { num_predict: 4 } }),
                       (e) => e.status_code === 400 && /leaving no room/.test(e.message));
  const g = await oll.generate({ model: MODEL, prompt: long, options: { num_ctx: 1024, num_predict: 4, temperature: 0 } });
  assert.ok(g.prompt_eval_count > 512 && g.prompt_eval_count < 1020, `${g.prompt_eval_count}`);
  assert.equal(g.eval_count, 4);
  assert.equal(await ctxOf(), 1024);
  // a request that names none takes the model as loaded
  const c = await oll.chat({ model: MODEL, messages: [{ role: 'user', content: long }], options: { num_predict: 2 } });
  assert.equal(c.eval_count, 2);
  assert.equal(await ctxOf(), 1024);
  await assert.rejects(oll.generate({ model: MODEL, prompt: 'x', options: { num_ctx: 'large' } }),
                       (e) => e.status_code === 400 && /num_ctx/.test(e.message));
  // back to 512 (the rest of this file counts on it), by a preload as Open WebUI sends one
  const r = await fetch(srv.base + '/api/generate', { method: 'POST',
                                                     body: JSON.stringify({ model: MODEL, options: { num_ctx: 512 } }) });
  assert.equal((await r.json()).done_reason, 'load');
  assert.equal(await ctxOf(), 512);
  const after = await oai.completions.create({ model: MODEL, prompt: LONG, temperature: 0, max_tokens: 32000 });
  assert.equal(after.usage.prompt_tokens + after.usage.completion_tokens, 512);
});

// JSON mode is an object (as OpenAI, llama.cpp and Ollama give), complete
// when the reply says "stop", an object's beginning when it ran out.
function checkJsonMode(text, reason, lengthReason) {
  assert.ok(text.trimStart().startsWith('{'), text);
  if (reason === 'stop') {
    const v = JSON.parse(text);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), text);
  } else {
    assert.equal(reason, lengthReason, text);
  }
}

test('JSON mode gives an object (ollama format json, openai json_object)', async () => {
  const g = await oll.generate({ model: MODEL, prompt: 'Data:', format: 'json',
                                 options: { temperature: 0, num_predict: 60 } });
  checkJsonMode(g.response, g.done_reason, 'length');
  const c = await oai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Data:' }], response_format: { type: 'json_object' },
    temperature: 0, max_tokens: 60 });
  checkJsonMode(c.choices[0].message.content, c.choices[0].finish_reason, 'length');
});

// Structured output: a schema of booleans and enums leaves the model only
// the choice of values and whitespace, so even the stories model finishes
// well inside the budget, with every property in order.
const SCHEMA = {
  type: 'object',
  properties: { ok: { type: 'boolean' }, color: { enum: ['red', 'green', 'blue'] },
                size: { type: 'string', enum: ['S', 'M'] }, note: { type: ['null', 'boolean'] } },
  required: ['ok', 'color', 'size'],
};
function checkSchema(text) {
  const v = JSON.parse(text);
  assert.equal(typeof v.ok, 'boolean', text);
  assert.ok(['red', 'green', 'blue'].includes(v.color), text);
  assert.ok(['S', 'M'].includes(v.size), text);
  const keys = Object.keys(v);
  assert.deepEqual(keys.slice(0, 3), ['ok', 'color', 'size'], text);
  if (keys.length > 3) assert.ok(v.note === null || typeof v.note === 'boolean', text);
}

test('ollama format with a JSON schema follows it', async () => {
  const g = await oll.generate({ model: MODEL, prompt: 'Data:', format: SCHEMA,
                                 options: { temperature: 0, num_predict: 450 } });
  assert.equal(g.done_reason, 'stop', g.response);
  checkSchema(g.response);
  const c = await oll.chat({ model: MODEL, messages: [{ role: 'user', content: 'A shirt' }], format: SCHEMA,
                             options: { temperature: 0.9, seed: 3, num_predict: 450 } });
  checkSchema(c.message.content);
});

test('openai response_format json_schema follows it', async () => {
  const r = await oai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'A shirt' }], temperature: 0, max_tokens: 450,
    response_format: { type: 'json_schema', json_schema: { name: 'shirt', schema: SCHEMA, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  checkSchema(r.choices[0].message.content);
});

// Ranges, patterns and formats hold what the stories model writes, at any
// temperature: an integer in 5..10 (never -0, never 40 digits), a code of
// the pattern, a date.
test('structured output holds number ranges, patterns and formats', async () => {
  const schema = {
    type: 'object',
    properties: { n: { type: 'integer', minimum: 5, maximum: 10 }, x: { type: 'number', minimum: -1, maximum: 1 },
                  code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' }, day: { type: 'string', format: 'date' } },
    required: ['n', 'x', 'code', 'day'],
  };
  for (const seed of [1, 2, 3]) {
    const g = await oll.generate({ model: MODEL, prompt: 'Data:', format: schema,
                                   options: { temperature: 1.0, seed, num_predict: 400 } });
    assert.equal(g.done_reason, 'stop', g.response);
    const v = JSON.parse(g.response);
    assert.ok(Number.isInteger(v.n) && v.n >= 5 && v.n <= 10 && !Object.is(v.n, -0), g.response);
    assert.ok(typeof v.x === 'number' && v.x >= -1 && v.x <= 1, g.response);
    assert.match(v.code, /^[A-Z]{2}-[0-9]{3}$/, g.response);
    assert.match(v.day, /^\d{4}-\d{2}-\d{2}$/, g.response);
    assert.ok(!Number.isNaN(Date.parse(v.day + 'T00:00:00Z')), g.response);
  }
});

test('a schema that cannot be enforced is a 400, not a looser answer', async () => {
  for (const [schema, why] of [[{ type: 'string', not: { const: 'a' } }, /'not' is not supported/],
                               [{ type: 'string', format: 'uri' }, /format 'uri' is not supported/],
                               [{ type: 'string', pattern: '(?=a)' }, /lookahead/]]) {
    const r = await fetch(srv.base + '/api/generate', { method: 'POST',
      body: JSON.stringify({ model: MODEL, prompt: 'x', format: schema, stream: false }) });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error, why);
  }
  const bad = { anyOf: [{ type: 'object' }, { type: 'object', properties: { a: {} } }] };
  const o = await fetch(srv.base + '/api/generate', { method: 'POST',
    body: JSON.stringify({ model: MODEL, prompt: 'x', format: bad, stream: false }) });
  assert.equal(o.status, 400);
  assert.match((await o.json()).error, /cannot be enforced.*begin alike/);
  await assert.rejects(oai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'strin' } } },
  }), (e) => e.status === 400 && /unknown type 'strin'/.test(e.message));
  const f = await fetch(srv.base + '/api/generate', { method: 'POST',
    body: JSON.stringify({ model: MODEL, prompt: 'x', format: 'yaml', stream: false }) });
  assert.equal(f.status, 400);
});

test('keep_alive 0 unloads, the next request loads again', async () => {
  const r = await fetch(srv.base + '/api/generate', { method: 'POST',
    body: JSON.stringify({ model: MODEL, keep_alive: 0 }) });
  assert.equal((await r.json()).done_reason, 'unload');
  let loaded = 1;
  for (let i = 0; i < 50 && loaded; i++) {
    await new Promise((res) => setTimeout(res, 50));
    loaded = await metric(srv.base, 'kiln_model_loaded');
  }
  assert.equal(loaded, 0);
  const g = await oll.generate({ model: MODEL, prompt: 'Once', options: { temperature: 0, num_predict: 4 } });
  assert.ok(g.done);
});

test('metrics are Prometheus text', async () => {
  const t = await (await fetch(srv.base + '/metrics')).text();
  for (const name of ['kiln_requests_running', 'kiln_requests_waiting', 'kiln_prompt_tokens_total',
    'kiln_generation_tokens_total', 'kiln_time_to_first_token_seconds_bucket', 'kiln_inter_token_latency_seconds_count',
    'kiln_kv_cache_usage_ratio', 'kiln_prefix_cache_hits_total']) assert.ok(t.includes(name), name);
});

test('API key guards everything but /health', async () => {
  const k = await startServer(['--api-key', 'sekret', '-c', '256']);
  try {
    assert.equal((await fetch(k.base + '/health')).status, 200);
    const r = await fetch(k.base + '/v1/models');
    assert.equal(r.status, 401);
    assert.equal((await r.json()).error.type, 'authentication_error');
    const ok = await fetch(k.base + '/v1/models', { headers: { Authorization: 'Bearer sekret' } });
    assert.equal(ok.status, 200);
    const c = new OpenAI({ baseURL: k.base + '/v1', apiKey: 'sekret', maxRetries: 0 });
    const x = await c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 });
    assert.equal(x.usage.completion_tokens, 2);
  } finally {
    assert.equal(await k.stop(), 0);
  }
});

test('a full queue answers 429 with Retry-After', async () => {
  const k = await startServer(['--parallel', '1', '--max-queue', '1', '-c', '512', '-t', '1']);
  try {
    const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 300, temperature: 0.8 });
    const reqs = Array.from({ length: 5 }, () => fetch(k.base + '/v1/completions', { method: 'POST', body }));
    const rs = await Promise.all(reqs);
    const limited = rs.filter((r) => r.status === 429);
    assert.ok(limited.length >= 1, 'some requests were refused');
    assert.equal(limited[0].headers.get('retry-after'), '1');
    await Promise.all(rs.map((r) => r.text()));
  } finally {
    assert.equal(await k.stop(), 0);
  }
});

test('a full queue on /api answers 429 in Ollama\'s error shape; -np is --parallel', async () => {
  const k = await startServer(['-np', '1', '--max-queue', '1', '-c', '512', '-t', '1']);
  try {
    const props = await (await fetch(k.base + '/props')).json();
    assert.equal(props.total_slots, 1, '-np 1 gives one slot');
    for (const [path, extra] of [['/api/generate', { prompt: 'Once upon a time' }],
      ['/api/chat', { messages: [{ role: 'user', content: 'Once upon a time' }] }]]) {
      const body = JSON.stringify({ model: MODEL, stream: false, options: { num_predict: 300, temperature: 0.8 }, ...extra });
      const rs = await Promise.all(Array.from({ length: 5 }, () => fetch(k.base + path, { method: 'POST', body })));
      const limited = rs.filter((r) => r.status === 429);
      assert.ok(limited.length >= 1, `${path}: some requests were refused`);
      assert.equal(limited[0].headers.get('retry-after'), '1');
      const j = await limited[0].json();
      assert.deepEqual(Object.keys(j), ['error'], `${path}: Ollama's shape is {"error": "..."}`);
      assert.match(j.error, /queue is full/);
      for (const r of rs.filter((r) => r.status !== 429)) {
        assert.equal(r.status, 200);
        assert.equal((await r.json()).done, true);
      }
    }
  } finally {
    assert.equal(await k.stop(), 0);
  }
});

test('SIGTERM lets a running stream finish, then exits 0', async () => {
  const k = await startServer(['-c', '512', '-t', '1', '--grace', '20']);
  const r = await fetch(k.base + '/v1/completions', { method: 'POST', body: JSON.stringify({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 300, temperature: 0.8, stream: true }) });
  const rd = r.body.getReader();
  await rd.read(); // the stream is running
  k.proc.kill('SIGTERM');
  let text = '';
  for (;;) { const { value, done } = await rd.read(); if (done) break; text += new TextDecoder().decode(value); }
  assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'the stream finished');
  const { code } = await k.exited;
  assert.equal(code, 0);
});
