// Images in, end to end: `kiln serve -m gemma3-text.gguf --mmproj
// gemma3-mmproj.gguf` (the tiny random-weight Gemma 3 pair of
// tests/data/vision, tests/gen_vision.py) takes the fixture image through
// the official clients: openai (chat.completions with an image_url data URL,
// responses with input_image), ollama (chat and generate with images) and
// @anthropic-ai/sdk (messages with an image block), streamed and not.  The
// greedy reply is the same text on every API, differs from the text-only
// reply, and on the chat APIs equals llama-mtmd-cli's recorded bytes for the
// same prompt (gemma3-mtmd.txt, 12 tokens).  A remote URL is a 400 unless
// --allow-image-urls; an image over --max-image-bytes a 413; with vision on
// the default body limit holds a base64 image up to --max-image-bytes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, root } from './lib.mjs';

const dir = path.join(root, 'tests', 'data', 'vision');
const TEXT = path.join(dir, 'gemma3-text.gguf');
const MMPROJ = path.join(dir, 'gemma3-mmproj.gguf');
const PNG = fs.readFileSync(path.join(dir, 'image.png'));
const B64 = PNG.toString('base64');
const URL64 = 'data:image/png;base64,' + B64;
const MTMD = fs.readFileSync(path.join(dir, 'gemma3-mtmd.txt'), 'utf8');
const PROMPT = 'Describe this image.';
const N = 12;
const MODEL = 'gemma3-text';

let srv, oai, oll, ant;

before(async () => {
  srv = await startServer(['--mmproj', MMPROJ, '-c', '512', '-t', '1', '--parallel', '1'], {}, TEXT);
  oai = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  oll = new Ollama({ host: srv.base });
  ant = new Anthropic({ baseURL: srv.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  if (srv) assert.equal(await srv.stop(), 0, 'the server exits cleanly');
});

const oaiMessages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: URL64 } },
  { type: 'text', text: PROMPT }] }];

async function oaiChat(stream) {
  const req = { model: MODEL, messages: oaiMessages, max_tokens: N, temperature: 0 };
  if (!stream) return (await oai.chat.completions.create(req)).choices[0].message.content;
  let s = '';
  for await (const c of await oai.chat.completions.create({ ...req, stream: true })) s += c.choices[0]?.delta?.content || '';
  return s;
}

test('openai chat.completions: an image_url data URL gives llama-mtmd-cli\'s greedy text, streamed and not',
  { timeout: 120000 }, async () => {
    const plain = await oaiChat(false);
    assert.equal(plain, MTMD);
    assert.equal(await oaiChat(true), plain);
    const textOnly = await oai.chat.completions.create({ model: MODEL, max_tokens: N, temperature: 0,
      messages: [{ role: 'user', content: PROMPT }] });
    assert.notEqual(textOnly.choices[0].message.content, plain, 'the image changes the reply');
    const u = (await oai.chat.completions.create({ model: MODEL, messages: oaiMessages, max_tokens: 1 })).usage;
    assert.ok(u.prompt_tokens > 16, `the image's 16 tokens are in the prompt (${u.prompt_tokens})`);
  });

test('openai responses: input_image, streamed and not', { timeout: 120000 }, async () => {
  const req = { model: MODEL, max_output_tokens: N, temperature: 0,
    input: [{ role: 'user', content: [{ type: 'input_image', image_url: URL64 },
      { type: 'input_text', text: PROMPT }] }] };
  const r = await oai.responses.create(req);
  assert.equal(r.output_text, MTMD);
  let s = '';
  for await (const ev of await oai.responses.create({ ...req, stream: true }))
    if (ev.type === 'response.output_text.delta') s += ev.delta;
  assert.equal(s, MTMD);
});

test('ollama chat and generate with images (base64), streamed and not', { timeout: 120000 }, async () => {
  const options = { temperature: 0, num_predict: N };
  const msg = [{ role: 'user', content: PROMPT, images: [B64] }];
  const c = await oll.chat({ model: MODEL, messages: msg, options });
  assert.equal(c.message.content, MTMD);
  let s = '';
  for await (const p of await oll.chat({ model: MODEL, messages: msg, options, stream: true })) s += p.message.content;
  assert.equal(s, MTMD);
  // generate with the chat template applied (no raw): the same conversation
  const g = await oll.generate({ model: MODEL, prompt: PROMPT, images: [B64], options });
  assert.equal(g.response, MTMD);
  // a Uint8Array is sent base64-encoded by the client
  s = '';
  for await (const p of await oll.generate({ model: MODEL, prompt: PROMPT, images: [new Uint8Array(PNG)], options,
    stream: true })) s += p.response;
  assert.equal(s, MTMD);
  const show = await oll.show({ model: MODEL });
  assert.ok(show.capabilities.includes('vision'), JSON.stringify(show.capabilities));
});

test('anthropic messages: an image block, streamed and not', { timeout: 120000 }, async () => {
  const req = { model: MODEL, max_tokens: N, temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: B64 } },
      { type: 'text', text: PROMPT }] }] };
  const m = await ant.messages.create(req);
  assert.equal(m.content[0].text, MTMD);
  let s = '';
  for await (const ev of ant.messages.stream(req))
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') s += ev.delta.text;
  assert.equal(s, MTMD);
});

test('a remote image URL is refused with 400 naming --allow-image-urls', async () => {
  const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://127.0.0.1:9/x.png' } },
    { type: 'text', text: PROMPT }] }];
  await assert.rejects(oai.chat.completions.create({ model: MODEL, messages, max_tokens: 1 }),
    (e) => e.status === 400 && /--allow-image-urls/.test(e.message));
});

test('with --allow-image-urls a URL is fetched (an unreachable one is an error, never a hang)', { timeout: 60000 },
  async () => {
    const s2 = await startServer(['--mmproj', MMPROJ, '-c', '256', '-t', '1', '--parallel', '1',
      '--allow-image-urls'], {}, TEXT);
    try {
      const o2 = new OpenAI({ baseURL: s2.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 30000 });
      const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: s2.base + '/nothing.png' } },
        { type: 'text', text: PROMPT }] }];
      await assert.rejects(o2.chat.completions.create({ model: MODEL, messages, max_tokens: 1 }),
        (e) => e.status === 400 && !/--allow-image-urls/.test(e.message), 'a 404 URL is not an image');
    } finally {
      assert.equal(await s2.stop(), 0);
    }
  });

// A PNG grown by bytes after its IEND chunk (decoders stop at IEND): with
// vision on, the default body limit follows --max-image-bytes, so an image
// past 8 MiB of base64 is taken and one over the image limit is a 413 from
// the image check, not the body limit.  (The 413 goes first: once, on a connection
// kept alive after the 7 MiB request, node's fetch saw the 20.5 MiB upload
// cut, EPIPE; not reproduced since, nor with curl.)
test('the default body limit holds an image of up to --max-image-bytes as base64; over it 413', { timeout: 120000 },
  async () => {
    // 20.5 MiB: within the body limit as base64, over the image limit
    const over = Buffer.concat([PNG, Buffer.alloc((20 << 20) + (512 << 10), 0x41)]).toString('base64');
    const r2 = await fetch(srv.base + '/api/chat', { method: 'POST', body: JSON.stringify({ model: MODEL,
      messages: [{ role: 'user', content: PROMPT, images: [over] }] }) });
    assert.equal(r2.status, 413);
    assert.match(await r2.text(), /--max-image-bytes/);
    const b64 = Buffer.concat([PNG, Buffer.alloc(7 << 20, 0x41)]).toString('base64');
    assert.ok(b64.length > 8 << 20);
    const r = await fetch(srv.base + '/api/chat', { method: 'POST', body: JSON.stringify({ model: MODEL, stream: false,
      messages: [{ role: 'user', content: PROMPT, images: [b64] }], options: { temperature: 0, num_predict: N } }) });
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal((await r.json()).message.content, MTMD);
  });

test('a text-only model refuses an image with 400', { timeout: 60000 }, async () => {
  const s3 = await startServer(['-c', '256', '-t', '1', '--parallel', '1']);
  try {
    const o3 = new OpenAI({ baseURL: s3.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 30000 });
    await assert.rejects(o3.chat.completions.create({ model: 'stories260K', messages: oaiMessages, max_tokens: 1 }),
      (e) => e.status === 400 && /does not take images/.test(e.message));
  } finally {
    assert.equal(await s3.stop(), 0);
  }
});

test('an explicit --max-body holds with vision on', { timeout: 60000 }, async () => {
  const s4 = await startServer(['--mmproj', MMPROJ, '-c', '256', '-t', '1', '--parallel', '1', '--max-body', '65536'],
    {}, TEXT);
  try {
    const r = await fetch(s4.base + '/api/chat', { method: 'POST', body: JSON.stringify({ model: MODEL,
      messages: [{ role: 'user', content: PROMPT, images: [Buffer.alloc(60000, 0x41).toString('base64')] }] }) });
    assert.equal(r.status, 413);
    assert.match(await r.text(), /limit of 65536 bytes/);
  } finally {
    assert.equal(await s4.stop(), 0);
  }
});

// A pulled model's pack (manifest.json naming its mmproj): served by path
// with no --mmproj, it takes images and its body limit is the vision one.
test('a pack with a projector beside its model takes images and a body past 8 MiB', { timeout: 60000 }, async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-vision-pack-'));
  fs.copyFileSync(TEXT, path.join(tmp, 'model.gguf'));
  fs.copyFileSync(MMPROJ, path.join(tmp, 'mmproj.gguf'));
  fs.writeFileSync(path.join(tmp, 'manifest.json'), JSON.stringify({ artifacts: [
    { role: 'model', path: 'model.gguf' }, { role: 'mmproj', path: 'mmproj.gguf' }] }));
  const s5 = await startServer(['-c', '256', '-t', '1', '--parallel', '1'], {}, path.join(tmp, 'model.gguf'));
  try {
    const r = await fetch(s5.base + '/api/chat', { method: 'POST', body: '{"x": "' + 'A'.repeat(9 << 20) + '"' });
    assert.equal(r.status, 400, 'past 8 MiB: read, then refused as JSON, not as too big');
    const c = await new Ollama({ host: s5.base }).chat({ model: 'model', messages: [{ role: 'user', content: PROMPT,
      images: [B64] }], options: { temperature: 0, num_predict: N } });
    assert.equal(c.message.content, MTMD);
  } finally {
    assert.equal(await s5.stop(), 0);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
