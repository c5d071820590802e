// What a request leaves out: sampling defaults (llama-server's on the
// OpenAI API, Ollama's on /api), a fresh seed per request from the OS, and
// the seed used in the request's log line, so a reply can be replayed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './lib.mjs';

const post = (base, url, body) => fetch(base + url, { method: 'POST', body: JSON.stringify(body) });
const complete = async (base, body) => {
  const r = await post(base, '/v1/completions', { model: 'stories260K', prompt: 'Once upon a time', ...body });
  assert.equal(r.status, 200);
  return (await r.json()).choices[0].text;
};

test('unseeded requests differ; the log names the seed, which replays the reply', async () => {
  const srv = await startServer(['-t', '1', '--log-format', 'json']);
  try {
    const texts = [];
    for (let i = 0; i < 8; i++) texts.push(await complete(srv.base, { max_tokens: 64 }));
    const distinct = new Set(texts).size;
    assert.ok(distinct >= 6, `8 unseeded replies, ${distinct} distinct:\n${texts.join('\n')}`);
    const lines = srv.log().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
      .filter((l) => l.path === '/v1/completions');
    assert.equal(lines.length, 8, 'a log line per request');
    assert.ok(lines.every((l) => Number.isInteger(l.seed)), 'each line has the seed');
    assert.equal(new Set(lines.map((l) => l.seed)).size, 8, 'eight different seeds');
    const again = await complete(srv.base, { max_tokens: 64, seed: lines[3].seed });
    assert.equal(again, texts[3], 'the logged seed replays the reply');
  } finally {
    await srv.stop();
  }
});

test("sampling defaults: llama-server's on /v1, Ollama's on /api", async () => {
  const srv = await startServer(['-t', '1']);
  try {
    for (const seed of [5, 6, 7]) {
      const dflt = await complete(srv.base, { max_tokens: 40, seed });
      const llama = await complete(srv.base, { max_tokens: 40, seed, temperature: 0.8, top_k: 40, top_p: 0.95,
                                                 min_p: 0.05, repeat_penalty: 1.0 });
      assert.equal(dflt, llama, `seed ${seed}: the defaults are temperature 0.8, top_k 40, top_p 0.95, min_p 0.05`);
      const gen = async (options) => {
        const r = await post(srv.base, '/api/generate', { model: 'stories260K', prompt: 'Once upon a time',
                                                          stream: false, options: { num_predict: 40, seed, ...options } });
        assert.equal(r.status, 200);
        return (await r.json()).response;
      };
      assert.equal(await gen({}), await gen({ temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0, repeat_penalty: 1.1 }),
                   `seed ${seed}: Ollama's defaults on /api/generate`);
    }
  } finally {
    await srv.stop();
  }
});
