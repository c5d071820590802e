// A source that cannot answer fails a pull at once, with the reason: a
// refused connection (a closed port on 127.0.0.1) and a host name that does
// not resolve (under .invalid, which RFC 6761 reserves so that it never
// does) are not transient, so no retry is made, through the official ollama
// client (/api/pull, streamed and not), `kiln pull` and `kiln show --remote`.
// The server keeps the default retry count (six), so a retried failure would
// show "retry" events and take over 30 s; every call here is bounded at 10 s.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Ollama } from 'ollama';
import { startServer, bin } from './lib.mjs';

const T = { timeout: 10000 };
const NOWHERE = 'kiln-e2e-nowhere.invalid';
let dir, closed, refused, unresolved;

// A port on 127.0.0.1 that nothing listens on: one the OS handed out, closed again.
async function closedPort() {
  const s = net.createServer();
  await new Promise((res) => s.listen(0, '127.0.0.1', res));
  const { port } = s.address();
  await new Promise((res) => s.close(res));
  return port;
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-unreachable-'));
  closed = await closedPort();
  const env = (hub) => ({ KILN_STORE: path.join(dir, 'store'), HF_ENDPOINT: hub, HF_TOKEN: '',
                          HUGGING_FACE_HUB_TOKEN: '', HF_HOME: dir, KILN_PULL_RETRIES: '' });
  refused = await startServer(['-t', '1'], env(`http://127.0.0.1:${closed}`), null);
  unresolved = await startServer(['-t', '1'], env(`https://${NOWHERE}`), null);
});

after(async () => {
  if (refused) assert.equal(await refused.stop(), 0);
  if (unresolved) assert.equal(await unresolved.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// The pull's events, streamed; the error the client throws at the error event.
async function streamed(oll, model) {
  const events = [];
  const err = await (async () => {
    try {
      for await (const e of await oll.pull({ model, stream: true })) events.push(e);
    } catch (e) {
      return e;
    }
    return null;
  })();
  assert.ok(err, `the pull of ${model} failed: ${JSON.stringify(events)}`);
  assert.ok(!events.some((e) => /retry/.test(e.status)), JSON.stringify(events));
  return err.message;
}

const CASES = [
  { what: 'a refused connection', srv: () => refused, reason: /connection refused/,
    url: () => `http://127.0.0.1:${closed}/tiny.gguf` },
  { what: 'a host that does not resolve', srv: () => unresolved, reason: /does not resolve/,
    url: () => `https://${NOWHERE}/tiny.gguf` },
];

for (const c of CASES) {
  test(`/api/pull, ${c.what}: an error with the reason, no retry`, T, async () => {
    const oll = new Ollama({ host: c.srv().base });
    for (const model of [c.url(), 'hf.co/acme/tiny-GGUF:Q8_0']) {
      const e = await oll.pull({ model, stream: false }).then(() => null, (x) => x);
      assert.ok(e, `the pull of ${model} failed`);
      assert.match(e.message, c.reason, model);
      assert.ok(e.status_code >= 500, `${model}: ${e.status_code}`);
      assert.match(await streamed(oll, model), c.reason, model);
    }
    // nothing was installed
    assert.deepEqual((await oll.list()).models, []);
  });

  test(`kiln pull and kiln show --remote, ${c.what}: exit 1 with the reason`, T, () => {
    const env = { ...process.env, KILN_STORE: path.join(dir, 'cli-store'), HF_HOME: dir, HF_TOKEN: '',
                  HUGGING_FACE_HUB_TOKEN: '', KILN_PULL_RETRIES: '',
                  HF_ENDPOINT: c.srv() === refused ? `http://127.0.0.1:${closed}` : `https://${NOWHERE}` };
    for (const args of [['pull', c.url()], ['pull', 'hf.co/acme/tiny-GGUF:Q8_0'],
                        ['show', '--remote', 'hf.co/acme/tiny-GGUF:Q8_0']]) {
      const r = spawnSync(bin, args, { env, encoding: 'utf8', timeout: 9000 });
      assert.equal(r.error, undefined, `${args.join(' ')}: ${r.error}`);
      assert.equal(r.status, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, c.reason, args.join(' '));
      assert.doesNotMatch(r.stderr, /retry/, args.join(' '));
    }
  });
}
