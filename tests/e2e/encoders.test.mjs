// Encoders behind kiln serve: rerankers on /v1/rerank (and the /rerank,
// /v1/reranking, /reranking aliases; Jina/Cohere and TEI shapes) through
// the official openai client's generic request method, embeddings of
// EmbeddingGemma, ModernBERT and Qwen3 through /v1/embeddings, /api/embed
// and /api/embeddings, checked against the fixtures' float64 references, and
// what a model cannot do answered 400.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root } from './lib.mjs';

const DIR = path.join(root, 'tests', 'data', 'encoders');
const ref = (name) => JSON.parse(fs.readFileSync(path.join(DIR, name + '.json'), 'utf8'));
const post = (base, url, body) => fetch(base + url, { method: 'POST', body: JSON.stringify(body) });
const cos = (a, b) => {
  let d = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { d += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return d / Math.sqrt(na * nb);
};

async function withServer(fn) {
  const srv = await startServer(['-t', '1', '-m', path.join(DIR, 'bert-rerank.gguf'),
    '-m', path.join(DIR, 'qwen3-rerank.gguf'), '-m', path.join(DIR, 'gemma-embed.gguf'),
    '-m', path.join(DIR, 'modernbert-decide.gguf'),
    '-m', path.join(root, 'tests', 'data', 'fixtures', 'qwen3-embedding.gguf')], {}, null);
  try {
    await fn(srv, new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none' }));
  } finally {
    assert.equal(await srv.stop(), 0);
  }
}

// the pairs of a fixture the server can score as they are
function pairs(name) {
  const r = ref(name);
  return { query: r.query, pairs: r.pairs.filter((p) => !p.truncated && p.document.length) };
}

test('rerank: scores equal the float64 references, sorted, top_n, documents', async () => {
  await withServer(async (srv, oai) => {
    for (const [model, file] of [['bert-rerank', 'bert-rerank'], ['qwen3-rerank', 'qwen3-rerank']]) {
      const { query, pairs: ps } = pairs(file);
      const documents = ps.map((p) => p.document);
      const r = await oai.post('/rerank', { body: { model, query, documents } });
      assert.equal(r.model, model);
      assert.equal(r.object, 'list');
      assert.equal(r.results.length, ps.length);
      assert.ok(r.usage.total_tokens > 0 && r.usage.prompt_tokens === r.usage.total_tokens);
      for (let k = 0; k < r.results.length; k++) {
        const { index, relevance_score: s } = r.results[k];
        assert.ok(Math.abs(s - ps[index].score) < 1e-4, `${model} doc ${index}: ${s} vs ${ps[index].score}`);
        if (k) assert.ok(r.results[k - 1].relevance_score >= s, 'sorted, best first');
        assert.equal(r.results[k].document, undefined, 'no documents unless asked');
      }
      // top_n, return_documents, documents as {text} objects (Cohere, Jina)
      const top = await oai.post('/rerank', {
        body: { model, query, documents: documents.map((text) => ({ text })), top_n: 2, return_documents: true },
      });
      assert.equal(top.results.length, 2);
      assert.deepEqual(top.results.map((x) => x.index), r.results.slice(0, 2).map((x) => x.index));
      for (const x of top.results) assert.equal(x.document.text, documents[x.index]);
    }
  });
});

test('rerank: the aliases, the TEI shape, the default reranker, truncation and errors', async () => {
  await withServer(async (srv) => {
    const { query, pairs: ps } = pairs('bert-rerank');
    const documents = ps.map((p) => p.document);
    const scores = {};
    for (const url of ['/v1/rerank', '/rerank', '/v1/reranking', '/reranking']) {
      const r = await post(srv.base, url, { model: 'bert-rerank', query, documents });
      assert.equal(r.status, 200, url);
      const j = await r.json();
      for (const x of j.results) {
        if (scores[x.index] === undefined) scores[x.index] = x.relevance_score;
        assert.equal(x.relevance_score, scores[x.index], `${url}: the same score`);
      }
    }
    // Text Embeddings Inference: "texts" in, a bare array of {index, score, text} out
    let r = await post(srv.base, '/rerank', { model: 'bert-rerank', query, texts: documents, return_text: true });
    assert.equal(r.status, 200);
    const tei = await r.json();
    assert.ok(Array.isArray(tei) && tei.length === documents.length);
    for (const x of tei) {
      assert.equal(x.score, scores[x.index]);
      assert.equal(x.text, documents[x.index]);
    }
    // no model: the first -m reranker
    r = await post(srv.base, '/v1/rerank', { query, documents });
    assert.equal(r.status, 200);
    assert.equal((await r.json()).model, 'bert-rerank');
    // a document over the model's 128 tokens: cut (and listed) by default, a 400 with truncate false
    const long = Array(400).fill('kiln').join(' ');
    r = await post(srv.base, '/v1/rerank', { model: 'bert-rerank', query, documents: ['short one', long] });
    assert.equal(r.status, 200);
    assert.deepEqual((await r.json()).truncated, [1]);
    r = await post(srv.base, '/v1/rerank', { model: 'bert-rerank', query, documents: [long], truncate: false });
    assert.equal(r.status, 400);
    for (const [body, why] of [[{ documents }, /query/], [{ query, documents: [] }, /documents/],
      [{ query, documents: [1] }, /documents/], [{ query, documents, top_n: 0 }, /top_n/],
      [{ model: 'gemma-embed', query, documents }, /not a reranker/],
      [{ model: 'no-such-model', query, documents }, /no-such-model/]]) {
      r = await post(srv.base, '/v1/rerank', { model: 'bert-rerank', ...body });
      assert.ok(r.status === 400 || r.status === 404, JSON.stringify(body));
      assert.match(JSON.stringify(await r.json()), why);
    }
    // Ollama's show names what the model does
    r = await post(srv.base, '/api/show', { model: 'bert-rerank' });
    assert.deepEqual((await r.json()).capabilities, ['rerank']);
    // a reranker neither embeds nor generates
    for (const [url, body] of [['/v1/embeddings', { input: 'x' }], ['/api/embed', { input: 'x' }],
      ['/v1/completions', { prompt: 'x' }]]) {
      r = await post(srv.base, url, { model: 'qwen3-rerank', ...body });
      assert.equal(r.status, 400, url);
      assert.match(JSON.stringify(await r.json()), /reranker/);
    }
  });
});

test('embeddings: EmbeddingGemma, ModernBERT and Qwen3 equal the float64 references through both APIs', async () => {
  await withServer(async (srv, oai) => {
    const g = ref('gemma-embed');
    const q = g.inputs.filter((i) => i.kind === 'query');
    const d = g.inputs.filter((i) => i.kind === 'document' && !i.title);
    assert.ok(q.length && d.length);
    const rq = await oai.embeddings.create({ model: 'gemma-embed', input: q.map((i) => i.text), input_type: 'query',
      encoding_format: 'float' });
    const rd = await oai.embeddings.create({ model: 'gemma-embed', input: d.map((i) => i.text), encoding_format: 'float' });
    q.forEach((i, k) => assert.ok(cos(rq.data[k].embedding, i.vector) > 0.9999, 'gemma query ' + k));
    d.forEach((i, k) => assert.ok(cos(rd.data[k].embedding, i.vector) > 0.9999, 'gemma document ' + k));
    assert.equal(rd.data[0].embedding.length, g.n_embd);
    // Matryoshka: the first 32 dimensions, renormalized
    const m = await oai.embeddings.create({ model: 'gemma-embed', input: d[0].text, dimensions: 32,
      encoding_format: 'float' });
    const v = m.data[0].embedding;
    assert.equal(v.length, 32);
    assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-5);
    assert.ok(cos(v, d[0].vector.slice(0, 32)) > 0.9999);
    // Ollama's /api/embed and the legacy /api/embeddings
    let r = await post(srv.base, '/api/embed', { model: 'gemma-embed', input: [d[0].text] });
    assert.equal(r.status, 200);
    assert.ok(cos((await r.json()).embeddings[0], d[0].vector) > 0.9999);
    r = await post(srv.base, '/api/embeddings', { model: 'gemma-embed', prompt: d[0].text });
    assert.equal(r.status, 200);
    assert.ok(cos((await r.json()).embedding, d[0].vector) > 0.9999);
    // ModernBERT (the decision pack's encoder is the fixture's: mean-pooled vectors)
    const mb = ref('modernbert').inputs.filter((i) => i.text.length);
    const e = await oai.embeddings.create({ model: 'modernbert-decide', input: mb.map((i) => i.text),
      encoding_format: 'float' });
    mb.forEach((i, k) => assert.ok(cos(e.data[k].embedding, i.vector) > 0.9999, 'modernbert ' + k));
    // Qwen3 (a decoder's last-token pooling, served by its generation engine)
    const qw = JSON.parse(fs.readFileSync(path.join(root, 'tests', 'data', 'fixtures', 'qwen3-embedding.json'),
      'utf8')).inputs.filter((i) => !i.truncated && i.text.length);
    assert.ok(qw.length >= 2);
    const qe = await oai.embeddings.create({ model: 'qwen3-embedding', input: qw.map((i) => i.text),
      encoding_format: 'float' });
    qw.forEach((i, k) => assert.ok(cos(qe.data[k].embedding, i.vector) > 0.9999, 'qwen3 ' + k));
    r = await post(srv.base, '/api/embed', { model: 'qwen3-embedding', input: qw[0].text });
    assert.ok(cos((await r.json()).embeddings[0], qw[0].vector) > 0.9999);
    // an embedding model does not rerank
    r = await post(srv.base, '/v1/rerank', { model: 'modernbert-decide', query: 'q', documents: ['d'] });
    assert.equal(r.status, 400);
  });
});
