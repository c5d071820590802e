// Benchmark (not a test): aggregate generated tokens/s at 1, 4 and 8
// concurrent streams, and time to first token for a ~1000-token shared
// system prompt, cold and cached.  Greedy sampling, so the figures measure
// the batched forward pass rather than sorting the vocabulary.  The three
// concurrencies run in turn, ROUNDS times, and each round's 8-stream /
// 1-stream ratio is taken within the round: on a machine whose speed drifts
// over minutes (a shared VM), runs seconds apart compare fairly where runs a
// minute apart don't.  The summary gives the medians.
//   node bench.mjs MODEL.gguf [tokens-per-request] [rounds]
import { startServer } from './lib.mjs';

const modelPath = process.argv[2];
const maxTokens = Number(process.argv[3] || 64);
const rounds = Number(process.argv[4] || 3);
const srv = await startServer(['--parallel', '8', '-c', '2048'], {}, modelPath);
process.on('uncaughtException', (e) => { srv.proc.kill('SIGTERM'); throw e; });
const name = (await (await fetch(srv.base + '/v1/models')).json()).data[0].id;

async function complete(prompt, i) {
  const r = await fetch(srv.base + '/v1/completions', { method: 'POST', body: JSON.stringify({
    model: name, prompt, max_tokens: maxTokens, temperature: 0 }) });
  const j = await r.json();
  return j.usage.completion_tokens;
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const rates = { 1: [], 4: [], 8: [] }, ratios = [];
for (let round = 1; round <= rounds; round++) {
  for (const conc of [1, 4, 8]) {
    await complete('Warm up.', 0);
    const t0 = performance.now();
    const counts = await Promise.all(Array.from({ length: conc }, (_, i) =>
      complete(`Write a story about the number ${i}.`, i + 1)));
    const secs = (performance.now() - t0) / 1000;
    const toks = counts.reduce((a, b) => a + b, 0);
    rates[conc].push(toks / secs);
    console.log(`round ${round}, ${conc} stream(s): ${toks} tokens in ${secs.toFixed(2)} s = ` +
      `${(toks / secs).toFixed(1)} tok/s aggregate`);
  }
  ratios.push(rates[8][round - 1] / rates[1][round - 1]);
  console.log(`round ${round}: 8 streams / 1 stream = ${ratios[round - 1].toFixed(2)}x`);
}
console.log(`median of ${rounds} rounds: 1 stream ${median(rates[1]).toFixed(1)}, 4 streams ` +
  `${median(rates[4]).toFixed(1)}, 8 streams ${median(rates[8]).toFixed(1)} tok/s; ` +
  `8 / 1 within a round ${median(ratios).toFixed(2)}x (${ratios.map((r) => r.toFixed(2)).join(', ')})`);

const system = Array.from({ length: 110 }, (_, i) => `Rule ${i}: answer politely and briefly.`).join(' ');
async function ttft(question) {
  const t0 = performance.now();
  const r = await fetch(srv.base + '/v1/chat/completions', { method: 'POST', body: JSON.stringify({
    model: name, stream: true, max_tokens: 4, temperature: 0, stream_options: { include_usage: true },
    messages: [{ role: 'system', content: system }, { role: 'user', content: question }] }) });
  const rd = r.body.getReader();
  let first = 0, text = '';
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    text += new TextDecoder().decode(value);
    /* the first token is the first data chunk; ": keep-alive" comments
     * that the server sends while a long prompt is prefilled do not count */
    if (!first && text.includes('data: ')) first = performance.now() - t0;
  }
  const usage = JSON.parse(text.split('\n').filter((l) => l.includes('"usage"')).pop().slice(6)).usage;
  return { ms: first, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens };
}
const cold = await ttft('What is rule 7?');
const warm = await ttft('What is rule 9?');
console.log(`TTFT, ${cold.prompt}-token prompt: cold ${cold.ms.toFixed(0)} ms (cached ${cold.cached}), ` +
  `shared system prompt ${warm.ms.toFixed(0)} ms (cached ${warm.cached})`);
await srv.stop();
