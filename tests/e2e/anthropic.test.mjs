// Anthropic's Messages API end to end: the official @anthropic-ai/sdk
// client, unchanged, against kiln serve.
//   - the scripted fixture tests/data/fixtures/toolcall.gguf (whatever the
//     prompt it writes <think>I should look up the weather.</think> and a
//     <tool_call> for get_weather) gives thinking and tool_use blocks, streamed
//     and not, whose values come from the fixture's json (tests/gen_fixtures.py);
//   - the stories260K model checks that the text is the chat API's text for the
//     same conversation (greedy), and stop_sequences / max_tokens.
// The request's translation is checked through the prompt: count_tokens of an
// Anthropic conversation equals the token count of the same conversation in
// OpenAI's form rendered by /apply-template and counted by /tokenize.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startServer, root } from './lib.mjs';

const FIXTURE = path.join(root, 'tests', 'data', 'fixtures', 'toolcall');
const fx = JSON.parse(fs.readFileSync(FIXTURE + '.json', 'utf8'));
const THOUGHT = fx.reasoning;
const CALL = fx.tool_call;
const ARGS_TEXT = '{"city": "Paris", "unit": "celsius"}';
const TOOLS = fx.tools.map((t) => ({ name: t.function.name, description: t.function.description,
                                     input_schema: t.function.parameters }));
const KEY = 'sk-ant-local-test';
const T = { timeout: 20000 };

let tc, st, ant, antStories, oaiStories;

before(async () => {
  tc = await startServer(['--parallel', '2', '-c', '2048', '-t', '1', '--api-key', KEY], {}, FIXTURE + '.gguf');
  st = await startServer(['--parallel', '2', '-c', '512', '-t', '1']);
  ant = new Anthropic({ baseURL: tc.base, apiKey: KEY, maxRetries: 0, timeout: 15000 });
  antStories = new Anthropic({ baseURL: st.base, apiKey: 'unused', maxRetries: 0, timeout: 15000 });
  oaiStories = new OpenAI({ baseURL: st.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 15000 });
});

after(async () => {
  assert.equal(await tc.stop(), 0);
  assert.equal(await st.stop(), 0);
});

async function post(base, route, body) {
  const r = await fetch(base + route, { method: 'POST', headers: { 'content-type': 'application/json',
                                                                   authorization: 'Bearer ' + KEY },
                                        body: JSON.stringify(body) });
  assert.equal(r.status, 200, route);
  return r.json();
}

// Tokens of an OpenAI-shaped conversation as the server would prompt it.
async function chatTokens(base, messages, tools) {
  const { prompt } = await post(base, '/apply-template', { messages, tools });
  const { tokens } = await post(base, '/tokenize', { content: prompt, add_special: true, parse_special: true });
  return { prompt, n: tokens.length };
}

test('messages.create: thinking and tool_use blocks, stop_reason tool_use, usage', T, async () => {
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200, tools: TOOLS,
                                        messages: [{ role: 'user', content: fx.messages[0].content }] });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, 'toolcall');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[0].thinking, THOUGHT);
  const use = m.content[1];
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, CALL.name);
  assert.deepEqual(use.input, CALL.arguments);
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.stop_sequence, null);
  // the fixture's rendered prompt is this conversation in OpenAI's form
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, fx.prompt_ids.length);
  assert.equal(m.usage.output_tokens, fx.greedy_ids.length - 1, 'every token but the end of turn');
  const count = await ant.messages.countTokens({ model: 'toolcall', tools: TOOLS,
                                                  messages: [{ role: 'user', content: fx.messages[0].content }] });
  assert.equal(count.input_tokens, fx.prompt_ids.length);
});

test('tool_choice tool and any force a tool_use block whose input follows the schema', T, async () => {
  const clock = { name: 'get_time', description: 'The time in a zone.',
                  input_schema: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } },
                                  required: ['tz'] } };
  const ask = [{ role: 'user', content: fx.messages[0].content }];
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200, tools: [...TOOLS, clock],
                                        tool_choice: { type: 'tool', name: 'get_time' }, messages: ask });
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[1].name, 'get_time');
  assert.deepEqual(Object.keys(m.content[1].input), ['tz']);
  assert.ok(['UTC', 'CET'].includes(m.content[1].input.tz), JSON.stringify(m.content[1].input));
  assert.equal(m.stop_reason, 'tool_use');
  const any = await ant.messages.create({ model: 'toolcall', max_tokens: 200, tools: [clock, ...TOOLS],
                                          tool_choice: { type: 'any' }, messages: ask });
  assert.equal(any.content[1].name, CALL.name, 'any: the model picks the tool');
  assert.deepEqual(any.content[1].input, CALL.arguments);
});

test('messages.stream: the events fold into the same message; arguments arrive in pieces', T, async () => {
  const stream = ant.messages.stream({ model: 'toolcall', max_tokens: 200, tools: TOOLS,
                                       messages: [{ role: 'user', content: fx.messages[0].content }] });
  const types = [];
  let thinking = '', json = '', jsonPieces = 0;
  stream.on('streamEvent', (e) => types.push(e.type));
  stream.on('thinking', (d) => { thinking += d; });
  stream.on('inputJson', (d) => { json += d; jsonPieces++; });
  const m = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.filter((t) => t === 'content_block_start').length, 2);
  assert.equal(types.filter((t) => t === 'content_block_stop').length, 2);
  assert.equal(thinking, THOUGHT);
  assert.equal(json, ARGS_TEXT);
  assert.ok(jsonPieces > 1, 'the arguments stream as they are written');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[0].thinking, THOUGHT);
  assert.deepEqual(m.content[1].input, CALL.arguments);
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.usage.output_tokens, fx.greedy_ids.length - 1);
});

test('without tools the call stays text, stop_reason end_turn', T, async () => {
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200,
                                        messages: [{ role: 'user', content: 'hello' }] });
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.match(m.content[1].text, /^<tool_call>/);
  assert.deepEqual(JSON.parse(m.content[1].text.replace(/^<tool_call>|<\/tool_call>$/g, '')), CALL);
  assert.equal(m.stop_reason, 'end_turn');
});

test('a tool round trip renders as the same conversation in OpenAI form', T, async () => {
  const callId = 'toolu_01';
  const anthropicMsgs = [
    { role: 'user', content: [{ type: 'text', text: fx.messages[0].content }] },
    { role: 'assistant', content: [{ type: 'thinking', thinking: THOUGHT, signature: '' },
                                   { type: 'tool_use', id: callId, name: CALL.name, input: CALL.arguments }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: callId, content: '18 degrees and sunny' },
                              { type: 'text', text: 'And tomorrow?' }] },
  ];
  const openaiMsgs = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: fx.messages[0].content },
    { role: 'assistant', content: '', reasoning_content: THOUGHT,
      tool_calls: [{ id: callId, type: 'function', function: { name: CALL.name, arguments: CALL.arguments } }] },
    { role: 'tool', tool_call_id: callId, content: '18 degrees and sunny' },
    { role: 'user', content: 'And tomorrow?' },
  ];
  const want = await chatTokens(tc.base, openaiMsgs, fx.tools);
  assert.ok(want.prompt.includes('18 degrees and sunny') && want.prompt.includes('And tomorrow?'));
  const count = await ant.messages.countTokens({ model: 'toolcall', system: [{ type: 'text', text: 'Be brief.' }],
                                                  tools: TOOLS, messages: anthropicMsgs });
  assert.equal(count.input_tokens, want.n);
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200, system: 'Be brief.', tools: TOOLS,
                                        messages: anthropicMsgs });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, want.n);
  assert.equal(m.stop_reason, 'tool_use');
});

test('text equals the chat API for the same conversation (greedy)', T, async () => {
  const system = 'A short story.';
  const user = 'Once upon a time';
  const chat = await oaiStories.chat.completions.create({ model: 'stories260K', temperature: 0, max_tokens: 30,
    messages: [{ role: 'system', content: system }, { role: 'user', content: user }] });
  const m = await antStories.messages.create({ model: 'stories260K', temperature: 0, max_tokens: 30, system,
                                               messages: [{ role: 'user', content: user }] });
  assert.deepEqual(m.content.map((b) => b.type), ['text']);
  assert.equal(m.content[0].text, chat.choices[0].message.content);
  assert.equal(m.stop_reason, chat.choices[0].finish_reason === 'length' ? 'max_tokens' : 'end_turn');
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
  assert.equal(m.usage.output_tokens, chat.usage.completion_tokens);
  // streamed: the text deltas join into the same text
  let text = '';
  const s = antStories.messages.stream({ model: 'stories260K', temperature: 0, max_tokens: 30, system,
                                         messages: [{ role: 'user', content: user }] });
  s.on('text', (d) => { text += d; });
  const fm = await s.finalMessage();
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(fm.content[0].text, text);
});

test('max_tokens and stop_sequences', T, async () => {
  const base = { model: 'stories260K', temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }] };
  const m = await antStories.messages.create({ ...base, max_tokens: 3 });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 3);
  const long = await antStories.messages.create({ ...base, max_tokens: 40 });
  const text = long.content[0].text;
  // a stop string taken from the middle of the greedy text
  const words = text.split(' ').filter((w) => w.length > 2);
  const stop = words[Math.floor(words.length / 2)];
  const at = text.indexOf(stop);
  const cut = await antStories.messages.create({ ...base, max_tokens: 40, stop_sequences: ['@@never@@', stop] });
  assert.equal(cut.stop_reason, 'stop_sequence');
  assert.equal(cut.stop_sequence, stop);
  assert.equal(cut.content.length ? cut.content[0].text : '', text.slice(0, at));
  const s = antStories.messages.stream({ ...base, max_tokens: 40, stop_sequences: [stop] });
  const fm = await s.finalMessage();
  assert.equal(fm.stop_reason, 'stop_sequence');
  assert.equal(fm.stop_sequence, stop);
});

test('max_tokens far above the context is a cap: the reply fills it, stop_reason max_tokens', T, async () => {
  // about 450 tokens of the 512-token context
  const long = 'Tom had a red ball. He liked to play with it in the park every day. '.repeat(18);
  const messages = [{ role: 'user', content: long }];
  const m = await antStories.messages.create({ model: 'stories260K', temperature: 0, max_tokens: 32000, messages });
  assert.equal(m.stop_reason, 'max_tokens');
  const u = m.usage;
  assert.ok(u.output_tokens > 0);
  assert.equal(u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) +
               u.output_tokens, 512);
  const fm = await antStories.messages.stream({ model: 'stories260K', temperature: 0, max_tokens: 32000,
                                               messages }).finalMessage();
  assert.equal(fm.stop_reason, 'max_tokens');
  assert.equal(fm.usage.output_tokens, u.output_tokens);
  // a prompt that does not fit is still refused
  await assert.rejects(antStories.messages.create({ model: 'stories260K', max_tokens: 5,
                                                    messages: [{ role: 'user', content: long.repeat(2) }] }),
    (e) => e instanceof Anthropic.BadRequestError && /leaving no room/.test(e.error.error.message));
});

test('thinking.budget_tokens cuts the thinking block; the call still follows', T, async () => {
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200, tools: TOOLS,
                                       thinking: { type: 'enabled', budget_tokens: 1 },
                                       messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  // one token of reasoning, then the budget's "\n</think>\n\n"; this model
  // opens <think> again after any line break and writes its whole thought, and
  // with only blank space between the two blocks they read as one
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[0].thinking, `I should\n${THOUGHT}`);
  assert.deepEqual(m.content[1].input, CALL.arguments);
  await assert.rejects(ant.messages.create({ model: 'toolcall', max_tokens: 20,
                                             thinking: { type: 'enabled', budget_tokens: 'many' },
                                             messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.BadRequestError && /budget_tokens/.test(e.error.error.message));
});

test('a reply caught in a loop stops with stop_reason repetition', T, async () => {
  const m = await antStories.messages.create({ model: 'stories260K', temperature: 0, max_tokens: 32000,
                                              messages: [{ role: 'user', content: 'Tom' }] });
  assert.equal(m.stop_reason, 'repetition');
  assert.match(m.content[0].text, /(It is not angry\. ){20}/);
});

test('errors come in Anthropic\'s shape; x-api-key is the key', T, async () => {
  await assert.rejects(ant.messages.create({ model: 'toolcall', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.type === 'error' &&
           e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message));
  await assert.rejects(ant.messages.create({ model: 'no-such-model', max_tokens: 5,
                                             messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
  const wrong = new Anthropic({ baseURL: tc.base, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model: 'toolcall', max_tokens: 5,
                                               messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
  await assert.rejects(ant.messages.create({ model: 'toolcall', max_tokens: 5, tool_choice: { type: 'tool', name: 'nope' },
                                             tools: TOOLS, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.BadRequestError && /'nope'/.test(e.error.error.message));
  // the raw header the SDK sends
  const r = await fetch(tc.base + '/v1/messages/count_tokens', { method: 'POST',
    headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'toolcall', messages: [{ role: 'user', content: 'hi' }] }) });
  assert.equal(r.status, 200);
  assert.ok((await r.json()).input_tokens > 0);
});
