// The Qwen 3.5 hybrid family over HTTP: the reference models of
// tests/data/hybrid (qwen35 with F32 weights, qwen35moe with F16 weights and
// experts; no chat template, so a chat is its one user message as written)
// served by kiln serve and asked through the official OpenAI client.  A
// streamed greedy chat completion, a non-streamed one and three streamed at
// once (the batched step with a recurrent state per sequence) all give the
// text `kiln run` gives greedily on the same prompt, which is llama.cpp's
// continuation recorded in cases.json.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root, bin } from './lib.mjs';

const dir = path.join(root, 'tests', 'data', 'hybrid');
const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));

function kilnRun(file, prompt, n) {
  const r = spawnSync(bin, ['run', '-m', file, '-p', prompt, '-n', String(n), '--temp', '0', '-t', '1'],
    { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

async function streamed(oai, model, content, n) {
  const s = await oai.chat.completions.create({ model, messages: [{ role: 'user', content }], temperature: 0,
    max_tokens: n, stream: true });
  let text = '', finish = null;
  for await (const ch of s) {
    text += ch.choices[0]?.delta?.content ?? '';
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, finish };
}

for (const name of ['qwen35-spm-f32.gguf', 'qwen35moe-spm-f16.gguf']) {
  test(`${name}: streamed chat completion equals kiln run greedy`, async () => {
    const c = cases.find((x) => x.model === name);
    assert.ok(c, `no case for ${name}`);
    const file = path.join(dir, name);
    const n = c.n_predict;
    const want = kilnRun(file, c.prompt, n);
    assert.equal(want, c.expected_text, 'kiln run: llama.cpp\'s continuation');
    const srv = await startServer(['--parallel', '3', '-c', '256', '-t', '1'], {}, file);
    try {
      const oai = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });
      const model = (await oai.models.list()).data[0].id;
      const one = await streamed(oai, model, c.prompt, n);
      assert.equal(one.text, want);
      assert.equal(one.finish, 'length');
      const whole = await oai.chat.completions.create({ model, messages: [{ role: 'user', content: c.prompt }],
        temperature: 0, max_tokens: n });
      assert.equal(whole.choices[0].message.content, want);
      assert.equal(whole.usage.completion_tokens, n);
      const three = await Promise.all([0, 1, 2].map(() => streamed(oai, model, c.prompt, n)));
      three.forEach((r, i) => assert.equal(r.text, want, `concurrent request ${i}`));
    } finally {
      assert.equal(await srv.stop(), 0);
    }
  });
}
