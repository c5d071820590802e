// The official OpenAI npm client's audio API against kiln serve with a
// Whisper model: transcriptions in every response_format, translations
// refused on an English-only model, bad uploads (a form without its closing
// boundary, audio longer than --max-audio-seconds), and a cancelled request
// that frees the model's gate for the next one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { startServer, root } from './lib.mjs';

const data = path.join(root, 'tests', 'data', 'whisper');
const EN = path.join(data, 'tiny-en-f16.bin');
const ML = path.join(data, 'tiny-ml-f32.bin');
let srv, oai;

before(async () => {
  srv = await startServer(['-m', EN, '-m', ML, '-t', '2', '--max-audio-seconds', '300']);
  oai = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const code = await srv.stop();
  assert.equal(code, 0, 'SIGTERM drains and exits 0');
});

// 16-bit mono WAV of a gliding tone with a little noise, `seconds` long.
function wav(seconds, rate = 16000) {
  const n = Math.round(seconds * rate);
  const b = Buffer.alloc(44 + 2 * n);
  b.write('RIFF', 0); b.writeUInt32LE(36 + 2 * n, 4); b.write('WAVE', 8); b.write('fmt ', 12);
  b.writeUInt32LE(16, 16); b.writeUInt16LE(1, 20); b.writeUInt16LE(1, 22); b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(2 * rate, 28); b.writeUInt16LE(2, 32); b.writeUInt16LE(16, 34); b.write('data', 36);
  b.writeUInt32LE(2 * n, 40);
  let seed = 1;
  for (let i = 0, ph = 0; i < n; i++) {
    ph += (2 * Math.PI * (150 + 50 * Math.sin(i / rate))) / rate;
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    const v = 0.2 * Math.sin(ph) * (0.5 + 0.5 * Math.sin(6 * Math.PI * i / rate)) + 0.01 * (seed / 0x7fffffff - 0.5);
    b.writeInt16LE(Math.round(v * 32767), 44 + 2 * i);
  }
  return b;
}

test('transcription: json, text, srt, vtt, verbose_json', async () => {
  const file = () => fs.createReadStream(path.join(data, 'clip5s.wav'));
  const j = await oai.audio.transcriptions.create({ file: file(), model: 'tiny-en-f16' });
  assert.equal(typeof j.text, 'string');
  const t = await oai.audio.transcriptions.create({ file: file(), model: 'whisper-1', response_format: 'text' });
  assert.equal(typeof t, 'string');
  assert.equal(t.trim(), j.text.trim());
  const srt = await oai.audio.transcriptions.create({ file: file(), model: 'whisper-1', response_format: 'srt' });
  assert.match(srt, /^1\n00:00:0\d,\d{3} --> 00:00:0\d,\d{3}\n/);
  const vtt = await oai.audio.transcriptions.create({ file: file(), model: 'whisper-1', response_format: 'vtt' });
  assert.match(vtt, /^WEBVTT\n\n00:00:0\d\.\d{3} --> /);
  const v = await oai.audio.transcriptions.create({
    file: file(), model: 'whisper-1', response_format: 'verbose_json', timestamp_granularities: ['segment'],
    language: 'en', temperature: 0, prompt: 'hello world',
  });
  assert.equal(v.task, 'transcribe');
  assert.equal(v.language, 'english');
  assert.equal(v.duration, 5);
  assert.ok(Array.isArray(v.segments));
  for (const s of v.segments) assert.ok(s.start >= 0 && s.end >= s.start && s.end <= 5);
});

test('multilingual model: detected language, translation', async () => {
  const file = await toFile(wav(3), 'tone.wav');
  const v = await oai.audio.transcriptions.create({ file, model: 'tiny-ml-f32', response_format: 'verbose_json' });
  assert.equal(typeof v.language, 'string');
  assert.ok(v.language.length > 1);
  const tr = await oai.audio.translations.create({ file: await toFile(wav(2), 'b.wav'), model: 'tiny-ml-f32' });
  assert.equal(typeof tr.text, 'string');
});

test('errors: translation on an English-only model, bad audio, bad format, unknown model', async () => {
  const file = () => fs.createReadStream(path.join(data, 'clip16k.wav'));
  await assert.rejects(oai.audio.translations.create({ file: file(), model: 'tiny-en-f16' }),
    (e) => e.status === 400 && /English-only/.test(e.message));
  await assert.rejects(
    oai.audio.transcriptions.create({ file: await toFile(Buffer.from('not audio at all'), 'x.wav'), model: 'whisper-1' }),
    (e) => e.status === 400 && /not an audio file/.test(e.message));
  await assert.rejects(oai.audio.transcriptions.create({ file: file(), model: 'whisper-1', response_format: 'docx' }),
    (e) => e.status === 400);
  await assert.rejects(oai.audio.transcriptions.create({ file: file(), model: 'no-such-model' }),
    (e) => e.status === 404);
  await assert.rejects(oai.audio.transcriptions.create({ file: file(), model: 'tiny-en-f16', language: 'xx' }),
    (e) => e.status === 400 && /unknown language/.test(e.message));
});

test('a form without its closing boundary is refused, not cut short', async () => {
  const b = 'kilnBoundary7MA4YWxk';
  const part = (name, value, extra = '') =>
    Buffer.concat([Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="${name}"${extra}\r\n\r\n`),
      Buffer.from(value)]);
  const body = Buffer.concat([
    part('model', 'tiny-en-f16'), Buffer.from('\r\n'),
    part('response_format', 'text'), Buffer.from('\r\n'),
    part('file', fs.readFileSync(path.join(data, 'clip16k.wav')), '; filename="clip16k.wav"'),
  ]);
  const post = (buf) => fetch(srv.base + '/v1/audio/transcriptions', {
    method: 'POST', headers: { 'Content-Type': `multipart/form-data; boundary=${b}` }, body: buf });
  const cut = await post(body);
  assert.equal(cut.status, 400);
  assert.match((await cut.json()).error.message, /closing boundary/);
  // the same form closed is transcribed
  const whole = await post(Buffer.concat([body, Buffer.from(`\r\n--${b}--\r\n`)]));
  assert.equal(whole.status, 200, await whole.clone().text());
  assert.equal(typeof (await whole.text()), 'string');
});

test('audio longer than --max-audio-seconds: 413 naming the limit and the length', async () => {
  // 400 s at 8 kHz: 6.4 MB, under the 8 MiB body limit
  const file = await toFile(wav(400, 8000), 'long.wav');
  await assert.rejects(oai.audio.transcriptions.create({ file, model: 'tiny-en-f16' }),
    (e) => e.status === 413 && /400\.0 s/.test(e.message) && /limit of 300 s/.test(e.message) &&
      /--max-audio-seconds/.test(e.message));
});

test('a cancelled transcription frees the gate', async () => {
  const short = () => oai.audio.transcriptions.create({
    file: fs.createReadStream(path.join(data, 'clip16k.wav')), model: 'tiny-en-f16', response_format: 'json' });
  let t0 = Date.now();
  await short();
  const alone = Date.now() - t0;
  // about 200 s of audio: 100 windows of the English model (2-s windows), each
  // with beam search and fallbacks: minutes of work, many times the short one
  const long = await toFile(wav(200), 'long.wav');
  const ac = new AbortController();
  const p = oai.audio.transcriptions.create({ file: long, model: 'tiny-en-f16' }, { signal: ac.signal });
  setTimeout(() => ac.abort(), 700);
  await assert.rejects(p);
  // the next request on the same model is served at once, not after the long one
  t0 = Date.now();
  const r = await short();
  assert.equal(typeof r.text, 'string');
  const took = Date.now() - t0;
  assert.ok(took < 4 * alone + 5000, `cancelled work held the gate (${took} ms, ${alone} ms alone)`);
});
