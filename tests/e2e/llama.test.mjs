// llama-server's utility routes on kiln serve: /tokenize, /detokenize,
// /apply-template and /props, checked against the toolcall fixture's json
// (tests/gen_fixtures.py renders its prompt with the reference Jinja and
// tokenizes it independently) and against the chat API itself.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, root } from './lib.mjs';

const FIXTURE = path.join(root, 'tests', 'data', 'fixtures', 'toolcall');
const fx = JSON.parse(fs.readFileSync(FIXTURE + '.json', 'utf8'));
const T = { timeout: 20000 };
let srv;

before(async () => { srv = await startServer(['--parallel', '3', '-c', '1024', '-t', '1'], {}, FIXTURE + '.gguf'); });
after(async () => { assert.equal(await srv.stop(), 0); });

async function call(route, body, status = 200) {
  const r = await fetch(srv.base + route, body === undefined ? {} : {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(r.status, status, route);
  return r.json();
}

test('/apply-template renders the chat request\'s prompt', T, async () => {
  const { prompt } = await call('/apply-template', { messages: fx.messages, tools: fx.tools });
  assert.equal(prompt, fx.prompt_text);
});

test('/tokenize and /detokenize', T, async () => {
  const { tokens } = await call('/tokenize', { content: fx.prompt_text });
  assert.deepEqual(tokens, fx.prompt_ids, 'special tokens parsed by default, nothing added');
  const plain = await call('/tokenize', { content: fx.prompt_text, parse_special: false });
  assert.ok(plain.tokens.length > tokens.length, 'without parse_special the markers are text');
  const withPieces = await call('/tokenize', { content: 'What\'s the weather?', with_pieces: true });
  assert.ok(withPieces.tokens.every((t) => Number.isInteger(t.id)));
  assert.equal(withPieces.tokens.map((t) => t.piece).join(''), 'What\'s the weather?');
  const { content } = await call('/detokenize', { tokens: withPieces.tokens.map((t) => t.id) });
  assert.equal(content, 'What\'s the weather?');
  const gen = await call('/detokenize', { tokens: fx.greedy_ids.slice(0, -1) });
  assert.equal(gen.content, fx.expected_text.replace(/<\|im_end\|>$/, ''));
  const e = await call('/detokenize', { tokens: [1e9] }, 400);
  assert.match(e.error.message, /not a token id/);
  await call('/tokenize', { nope: 1 }, 400);
});

test('/props: context, template, special tokens and defaults', T, async () => {
  const p = await call('/props');
  assert.equal(p.default_generation_settings.n_ctx, 1024);
  assert.equal(p.total_slots, 3);
  const show = await call('/api/show', { model: 'toolcall' });
  assert.equal(p.chat_template, show.template);
  assert.ok(p.chat_template.includes('<tool_call>'));
  assert.equal(typeof p.default_generation_settings.params.temperature, 'number');
  assert.equal(p.model_alias, 'toolcall');
  const r = await fetch(srv.base + '/props?model=nope');
  assert.equal(r.status, 404);
});
