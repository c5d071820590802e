// kiln serve --spec: speculative decoding for every request of the model.
// Greedy completions are the plain server's, byte for byte, alone and four
// at once (continuous batching with several speculating sequences); the
// final response carries llama.cpp-style timings with the draft counts, and
// /metrics the spec_decode counters, which an unload and reload keep.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, metric, root } from './lib.mjs';

const prompts = [
  'Once upon a time, there was a little girl. Once upon a time, there was',
  'Tom had a red ball. He liked the ball. Tom had a',
  'The cat sat on the mat. The dog sat on the',
  'One day, a big bird',
];

async function complete(base, prompt) {
  const r = await fetch(base + '/v1/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', prompt, max_tokens: 48, temperature: 0 }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

test('spec: greedy text unchanged, timings and metrics carry the draft counts', async () => {
  const plain = await startServer();
  const want = [];
  try {
    for (const p of prompts) want.push((await complete(plain.base, p)).choices[0].text);
  } finally {
    await plain.stop();
  }
  const draft = path.join(root, 'tests', 'data', 'spec', 'spec-llama.gguf');
  for (const args of [['--spec', 'ngram'], ['--spec', 'draft', '-md', draft, '--spec-n', '4']]) {
    const s = await startServer(args);
    try {
      const one = await complete(s.base, prompts[0]);
      assert.equal(one.choices[0].text, want[0], args.join(' '));
      assert.equal(typeof one.timings.draft_n, 'number');
      assert.ok(one.timings.draft_n_accepted <= one.timings.draft_n);
      assert.equal(one.timings.predicted_n, one.usage.completion_tokens);
      const all = await Promise.all(prompts.map((p) => complete(s.base, p)));
      all.forEach((r, i) => assert.equal(r.choices[0].text, want[i], `${args.join(' ')}: prompt ${i}`));
      const drafted = all.reduce((n, r) => n + r.timings.draft_n, one.timings.draft_n);
      const accepted = all.reduce((n, r) => n + r.timings.draft_n_accepted, one.timings.draft_n_accepted);
      assert.ok(drafted > 0, `${args.join(' ')}: nothing proposed`);
      assert.equal(await metric(s.base, 'kiln_spec_decode_num_draft_tokens_total'), drafted);
      assert.equal(await metric(s.base, 'kiln_spec_decode_num_accepted_tokens_total'), accepted);
      const rate = await metric(s.base, 'kiln_spec_decode_acceptance_rate');
      assert.ok(Math.abs(rate - accepted / drafted) < 1e-5);
      // the counters are totals since the server started: an unload and the
      // reload of the next request keep them and count on
      const un = await fetch(s.base + '/api/generate', { method: 'POST',
        body: JSON.stringify({ model: 'stories260K', keep_alive: 0 }) });
      assert.equal((await un.json()).done_reason, 'unload');
      let loaded = 1;
      for (let i = 0; i < 100 && loaded; i++) {
        await new Promise((res) => setTimeout(res, 50));
        loaded = await metric(s.base, 'kiln_model_loaded');
      }
      assert.equal(loaded, 0, `${args.join(' ')}: the model did not unload`);
      assert.equal(await metric(s.base, 'kiln_spec_decode_num_draft_tokens_total'), drafted);
      const again = await complete(s.base, prompts[0]);
      assert.equal(again.choices[0].text, want[0], `${args.join(' ')}: after the reload`);
      assert.equal(await metric(s.base, 'kiln_spec_decode_num_draft_tokens_total'), drafted + again.timings.draft_n);
      assert.equal(await metric(s.base, 'kiln_spec_decode_num_accepted_tokens_total'),
        accepted + again.timings.draft_n_accepted);
    } finally {
      await s.stop();
    }
  }
  // a draft of another vocabulary: the model cannot load, the server says why and exits
  const bad = await startServer(['--spec', 'draft', '-md', path.join(root, 'tests', 'data', 'fixtures', 'llama.gguf')])
    .catch((e) => ({ failed: e }));
  if (bad.failed) {
    assert.match(String(bad.failed), /another vocabulary than the target: token 259/);
  } else {
    for (let i = 0; i < 200 && bad.proc.exitCode === null; i++) await new Promise((res) => setTimeout(res, 100));
    const code = bad.proc.exitCode;
    if (code === null) await bad.stop();
    assert.ok(code !== null && code !== 0, `the server kept running without its model (exit ${code})`);
    assert.match(bad.log(), /another vocabulary than the target: token 259/);
  }
});
