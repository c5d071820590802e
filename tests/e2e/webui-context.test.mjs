// The web chat's context fitting (web/src/context.js), without a browser:
// which turns a conversation keeps for a context, and how the server's
// "does not fit" answers are read.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fitStart, reserveFor, parseOverflow, estimateTokens } from '../../web/src/context.js';

const msg = (role, n) => ({ role, content: 'x'.repeat(n) });

test('everything that fits is kept', () => {
  const api = [msg('system', 30), msg('user', 30), msg('assistant', 30), msg('user', 30)];
  assert.equal(fitStart(api, 512, 100, 3), 1);
  assert.equal(fitStart(api.slice(1), 512, 100, 3), 0, 'no system prompt');
});

test('the oldest whole turns go first; the system prompt and the last message stay', () => {
  // each message costs 30/3 + 6 = 16 tokens
  const api = [msg('system', 30), msg('user', 30), msg('assistant', 30), msg('user', 30), msg('assistant', 30),
    msg('user', 30)];
  assert.equal(estimateTokens('x'.repeat(30), 3), 16);
  assert.equal(fitStart(api, 96 + 20, 20, 3), 1, '96 tokens fit in 116 - 20');
  assert.equal(fitStart(api, 95 + 20, 20, 3), 3, 'one token short: the first turn (user + reply) goes');
  assert.equal(fitStart(api, 64 + 20, 20, 3), 3);
  assert.equal(fitStart(api, 63 + 20, 20, 3), 5, 'then the second');
  assert.equal(fitStart(api, 10, 5, 3), 5, 'never past the message being answered');
});

test('a turn is a user message and every reply after it', () => {
  const api = [msg('user', 30), msg('assistant', 30), msg('assistant', 30), msg('user', 30)];
  assert.equal(fitStart(api, 40, 0, 3), 3);
  assert.equal(fitStart(api, 1000, 0, 3, 1), 3, 'extraDrop: one more turn than the estimate asks');
});

test('room for the reply', () => {
  assert.equal(reserveFor(512, 40), 40);
  assert.equal(reserveFor(512, 0), 128, 'a quarter of the context');
  assert.equal(reserveFor(32768, undefined), 1024, 'at most 1024');
  assert.equal(reserveFor(100, 500), 99, 'never the whole context');
});

test("the server's overflow messages", () => {
  assert.deepEqual(parseOverflow('the prompt has 600 tokens; the context holds 512, leaving no room to generate'),
    { prompt: 600, ctx: 512 });
  assert.deepEqual(parseOverflow('the prompt (500 tokens) plus max_tokens (40) is 540 tokens, more than the context of 512 tokens'),
    { prompt: 500, ctx: 512 });
  assert.deepEqual(parseOverflow('the input exceeds the context window'), { prompt: 0, ctx: 0 });
  assert.equal(parseOverflow("model 'x' not found"), null);
  assert.equal(parseOverflow(undefined), null);
});
