// POST /v1/images/generations through the official openai client's
// images.generate, against `kiln serve --image PACK` with the tiny
// random-weight pack of tests/data/image (4 steps by the pack's defaults).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root } from './lib.mjs';

const pack = path.join(root, 'tests', 'data', 'image', 'tiny');
let srv, client;

before(async () => {
  srv = await startServer(['--image', pack]);
  client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
});

after(async () => { if (srv) await srv.stop(); });

function pngSize(b64) {
  const png = Buffer.from(b64, 'base64');
  assert.equal(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a');
  return [png.readUInt32BE(16), png.readUInt32BE(20)];
}

test('openai images.generate: n b64_json PNGs of 256x256, the same bytes for the same seed', async () => {
  const req = { prompt: 'a red circle on a blue background', n: 2, size: '256x256', response_format: 'b64_json' };
  const r = await client.images.generate(req);
  assert.equal(r.data.length, 2);
  assert.ok(typeof r.created === 'number' && r.created > 0);
  for (const d of r.data) assert.deepEqual(pngSize(d.b64_json), [256, 256]);
  assert.notEqual(r.data[0].b64_json, r.data[1].b64_json); // seeds 42 and 43
  const again = await client.images.generate({ ...req, n: 1 });
  assert.equal(again.data[0].b64_json, r.data[0].b64_json);
  // response_format may be left out: b64_json is the only one served
  const plain = await client.images.generate({ prompt: 'a green square on a white background' });
  assert.equal(plain.data.length, 1);
  assert.deepEqual(pngSize(plain.data[0].b64_json), [256, 256]);
});

test('openai images.generate: what is not supported is a 400 naming it', async () => {
  const cases = [
    [{ size: '512x512' }, 'size'],
    [{ response_format: 'url' }, 'response_format'],
    [{ n: 9 }, 'n'],
    [{ style: 'vivid' }, 'style'],
    [{ prompt: '' }, 'prompt'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(
      client.images.generate({ prompt: 'a red circle', ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param,
      JSON.stringify(extra),
    );
  }
  const long = Array(300).fill('circle').join(' ');
  await assert.rejects(client.images.generate({ prompt: long }),
    (e) => e.status === 400 && /at most 120/.test(e.message));
});
