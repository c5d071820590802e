// Hostile clients against a real kiln serve: 300 connections that trickle a
// request line (from another loopback address, then from the clients' own),
// a declared body over --max-body, several Host headers, a malformed pull
// reference and a token limit past 2^31.  /health and completions keep being
// answered; every wait is bounded and every socket is closed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer } from './lib.mjs';

const HEADER_TIMEOUT = 2; // seconds (--header-timeout)
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
let srv;

before(async () => {
  srv = await startServer(['-c', '256', '-t', '1', '--header-timeout', String(HEADER_TIMEOUT),
    '--max-body', '65536']);
});

after(async () => {
  assert.equal(await srv.stop(), 0);
});

// n sockets from localAddress that send a request line a byte at a time
// (every 200 ms, so never idle); stop() closes them.  opened: how many
// connected; closed: how many the server has closed so far.
async function flood(n, localAddress) {
  const socks = [];
  let closed = 0;
  await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: srv.port, localAddress });
    s.setTimeout(20000, () => s.destroy());
    s.on('connect', () => { socks.push(s); s.write('G'); resolve(); });
    s.on('error', () => resolve());
    s.on('close', () => { closed++; resolve(); });
    s.on('data', () => {});
  })));
  const line = 'ET /health HTTP/1.1\r\n';
  let i = 0;
  const timer = setInterval(() => {
    const c = line[i++ % line.length];
    for (const s of socks) if (!s.destroyed) s.write(c);
  }, 200);
  return {
    opened: socks.length,
    closed: () => closed,
    open: () => socks.filter((s) => !s.destroyed && s.readyState === 'open').length,
    stop() { clearInterval(timer); for (const s of socks) s.destroy(); },
  };
}

// whether the system routes 127.0.0.2 to this host (Linux does)
function canBind(addr) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: srv.port, localAddress: addr });
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// GET /health with a deadline: { status, ms } (status 0: no answer)
async function health() {
  const t0 = Date.now();
  const r = await fetch(srv.base + '/health', { signal: AbortSignal.timeout(5000) }).catch(() => null);
  return { status: r ? r.status : 0, ms: Date.now() - t0 };
}

async function complete(extra = {}) {
  const r = await fetch(srv.base + '/v1/completions', {
    method: 'POST', signal: AbortSignal.timeout(20000),
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ...extra }),
  });
  return { status: r.status, body: await r.json() };
}

// The response to raw bytes, as text, once the server has sent its head
// and body (or closed); bounded.
function raw(bytes, ms = 3000) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: srv.port });
    let got = '';
    const t0 = Date.now();
    const done = () => { clearTimeout(timer); s.destroy(); resolve({ text: got, ms: Date.now() - t0 }); };
    const timer = setTimeout(done, ms);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => {
      got += d;
      const m = /content-length: (\d+)/i.exec(got);
      const at = got.indexOf('\r\n\r\n');
      if (m && at >= 0 && got.length - at - 4 >= Number(m[1])) done();
    });
    s.on('error', done);
    s.on('close', done);
  });
}

test('a flood from another address leaves /health, completions and a running stream served', async (t) => {
  if (!(await canBind('127.0.0.2'))) return t.skip('127.0.0.2 is not routed here');
  // a streamed completion starts before the flood and is read slowly through it
  const stream = await fetch(srv.base + '/v1/completions', {
    method: 'POST', signal: AbortSignal.timeout(30000),
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 64, temperature: 0, stream: true }),
  });
  assert.equal(stream.status, 200);
  const reader = stream.body.getReader();
  const dec = new TextDecoder();
  let text = dec.decode((await reader.read()).value ?? new Uint8Array());
  const f = await flood(300, '127.0.0.2');
  try {
    assert.ok(f.opened >= 32, `${f.opened} connections opened`);
    await sleep(300);
    assert.ok(f.open() <= 32, `${f.open()} held from one address (the cap is 32)`);
    for (let i = 0; i < 3; i++) {
      const h = await health();
      assert.equal(h.status, 200);
      assert.ok(h.ms < 1000, `/health took ${h.ms} ms under the flood`);
    }
    const c = await complete();
    assert.equal(c.status, 200, JSON.stringify(c.body));
    assert.ok(c.body.choices[0].text.length > 0);
    // the stream, paused past the head deadline, runs to its end
    await sleep((HEADER_TIMEOUT + 1) * 1000);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'the stream ended whole');
    // the trickling connections were cut at the deadline though never idle
    for (let i = 0; i < 40 && f.open() > 0; i++) await sleep(50);
    assert.equal(f.open(), 0, `${f.open()} trickling connections still open`);
  } finally {
    f.stop();
  }
});

const cutSoFar = async () => Number(/^kiln_http_head_timeouts_total (\d+)/m.exec(
  await (await fetch(srv.base + '/metrics')).text())[1]);

test('a flood from the clients\' own address is cut at the head deadline', async () => {
  const before = await cutSoFar();
  const t0 = Date.now();
  const f = await flood(300, '127.0.0.1');
  try {
    // the address's 32 places are held (its other clients are refused
    // meanwhile) until the deadline cuts the trickling connections
    while (f.open() > 0 && Date.now() - t0 < (HEADER_TIMEOUT + 5) * 1000) await sleep(50);
    const cutAfter = Date.now() - t0;
    assert.equal(f.open(), 0, `${f.open()} trickling connections still open`);
    assert.ok(cutAfter < (HEADER_TIMEOUT + 3) * 1000, `cut after ${cutAfter} ms`);
    const h = await health();
    assert.equal(h.status, 200);
    assert.ok(h.ms < 1000, `/health took ${h.ms} ms`);
    const c = await complete();
    assert.equal(c.status, 200, JSON.stringify(c.body));
  } finally {
    f.stop();
  }
  const cut = (await cutSoFar()) - before;
  assert.ok(cut >= 24 && cut <= 32, `${cut} connections cut at the head deadline`);
});

test('a declared body over --max-body is refused at once, before it is sent', async () => {
  const r = await raw('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n' +
    'Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n');
  assert.match(r.text, /^HTTP\/1\.1 413/);
  assert.match(r.text, /exceeds the limit of 65536 bytes/);
  assert.ok(r.ms < 2000, `the 413 took ${r.ms} ms`);
  // through fetch with a real body over the limit
  const big = await fetch(srv.base + '/v1/completions', {
    method: 'POST', signal: AbortSignal.timeout(10000),
    body: JSON.stringify({ prompt: 'x'.repeat(70000), max_tokens: 1 }),
  }).catch((e) => e);
  if (!(big instanceof Error)) assert.equal(big.status, 413);
  assert.equal((await health()).status, 200);
});

test('Host: several, none or empty is a 400', async () => {
  const dup = await raw('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
  assert.match(dup.text, /^HTTP\/1\.1 400/);
  assert.match(dup.text, /more than one Host/);
  const none = await raw('GET /health HTTP/1.0\r\n\r\n');
  assert.match(none.text, /^HTTP\/1\.1 400/);
  const empty = await raw('GET /health HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n');
  assert.match(empty.text, /^HTTP\/1\.1 400/);
  const ok = await raw('GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n');
  assert.match(ok.text, /^HTTP\/1\.1 200/);
});

test('a malformed pull reference is a 400, streamed or not', async () => {
  for (const stream of [false, true]) {
    const r = await fetch(srv.base + '/api/pull', {
      method: 'POST', signal: AbortSignal.timeout(10000),
      body: JSON.stringify({ model: 'not a/valid::reference', stream }),
    });
    assert.equal(r.status, 400, `stream ${stream}`);
    assert.match((await r.json()).error, /not a model reference/);
  }
});

test('a token limit of 2^31 and past it asks for as many tokens as fit', async () => {
  for (const n of [2 ** 31, 2 ** 32 + 5, 2 ** 53]) {
    const c = await complete({ max_tokens: n });
    assert.equal(c.status, 200, `max_tokens ${n}: ${JSON.stringify(c.body)}`);
    assert.ok(c.body.usage.completion_tokens > 8);
  }
  const neg = await complete({ max_tokens: -(2 ** 32) + 3 });
  assert.equal(neg.status, 400);
  assert.match(neg.body.error.message, /at least 1/);
});
