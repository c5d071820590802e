// OpenAI's Responses API end to end: the official openai client's
// responses.create and responses.stream, unchanged, against kiln serve.
//   - the scripted fixture tests/data/fixtures/toolcall.gguf gives a reasoning
//     item and a function_call whose values come from the fixture's json;
//   - the stories260K model checks that the text is the chat API's text for
//     the same conversation (greedy), and max_output_tokens.
// Input items are checked through the prompt: usage.input_tokens of a
// conversation given as items equals the token count of the same
// conversation in chat form (/apply-template, /tokenize).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root } from './lib.mjs';

const FIXTURE = path.join(root, 'tests', 'data', 'fixtures', 'toolcall');
const fx = JSON.parse(fs.readFileSync(FIXTURE + '.json', 'utf8'));
const THOUGHT = fx.reasoning;
const CALL = fx.tool_call;
const ARGS_TEXT = '{"city": "Paris", "unit": "celsius"}';
const TOOLS = fx.tools.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description,
                                     parameters: t.function.parameters, strict: false }));
const T = { timeout: 20000 };

let tc, st, oai, oaiStories;

before(async () => {
  tc = await startServer(['--parallel', '2', '-c', '2048', '-t', '1'], {}, FIXTURE + '.gguf');
  st = await startServer(['--parallel', '2', '-c', '512', '-t', '1']);
  oai = new OpenAI({ baseURL: tc.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 15000 });
  oaiStories = new OpenAI({ baseURL: st.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 15000 });
});

after(async () => {
  assert.equal(await tc.stop(), 0);
  assert.equal(await st.stop(), 0);
});

async function post(base, route, body) {
  const r = await fetch(base + route, { method: 'POST', headers: { 'content-type': 'application/json' },
                                        body: JSON.stringify(body) });
  assert.equal(r.status, 200, route);
  return r.json();
}

async function chatTokens(base, messages, tools) {
  const { prompt } = await post(base, '/apply-template', { messages, tools });
  const { tokens } = await post(base, '/tokenize', { content: prompt, add_special: true, parse_special: true });
  return tokens.length;
}

test('responses.create: a reasoning item and a function_call', T, async () => {
  const r = await oai.responses.create({ model: 'toolcall', input: fx.messages[0].content, tools: TOOLS });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'completed');
  assert.equal(r.store, false);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'function_call']);
  assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: THOUGHT }]);
  const fc = r.output[1];
  assert.equal(fc.name, CALL.name);
  assert.equal(fc.arguments, ARGS_TEXT, 'the arguments as the model wrote them');
  assert.deepEqual(JSON.parse(fc.arguments), CALL.arguments);
  assert.match(fc.call_id, /^call_/);
  assert.equal(fc.status, 'completed');
  assert.equal(r.output_text, '');
  assert.equal(r.usage.input_tokens, fx.prompt_ids.length);
  assert.equal(r.usage.output_tokens, fx.greedy_ids.length - 1);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.tools.length, 1, 'the request\'s tools are repeated');
});

test('responses.stream: events in order with sequence numbers; the final response is the same', T, async () => {
  const stream = oai.responses.stream({ model: 'toolcall', input: fx.messages[0].content, tools: TOOLS });
  const types = [];
  const seqs = [];
  let reasoning = '', args = '', argPieces = 0;
  for await (const e of stream) {
    types.push(e.type);
    seqs.push(e.sequence_number);
    if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
    if (e.type === 'response.function_call_arguments.delta') { args += e.delta; argPieces++; }
  }
  const r = await stream.finalResponse();
  assert.deepEqual(seqs, seqs.map((_, i) => i), 'sequence_number counts from 0');
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  assert.equal(types.filter((t) => t === 'response.output_item.added').length, 2);
  assert.equal(types.filter((t) => t === 'response.output_item.done').length, 2);
  assert.ok(types.includes('response.function_call_arguments.done'));
  assert.ok(types.includes('response.reasoning_text.done'));
  assert.equal(reasoning, THOUGHT);
  assert.equal(args, ARGS_TEXT);
  assert.ok(argPieces > 1, 'the arguments stream as they are written');
  assert.equal(r.status, 'completed');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'function_call']);
  assert.equal(r.output[1].arguments, ARGS_TEXT);
  // the same through create({stream: true})
  const raw = await oai.responses.create({ model: 'toolcall', input: fx.messages[0].content, tools: TOOLS,
                                           stream: true });
  let last;
  for await (const e of raw) last = e;
  assert.equal(last.type, 'response.completed');
  assert.deepEqual(last.response.output.map((o) => o.type), ['reasoning', 'function_call']);
});

test('function_call and function_call_output items render as the chat conversation', T, async () => {
  const callId = 'call_7';
  const input = [
    { role: 'user', content: [{ type: 'input_text', text: fx.messages[0].content }] },
    { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: THOUGHT }] },
    { type: 'function_call', call_id: callId, name: CALL.name, arguments: ARGS_TEXT },
    { type: 'function_call_output', call_id: callId, output: '18 degrees and sunny' },
    { role: 'user', content: 'And tomorrow?' },
  ];
  const chat = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: fx.messages[0].content },
    { role: 'assistant', content: '', reasoning_content: THOUGHT,
      tool_calls: [{ id: callId, type: 'function', function: { name: CALL.name, arguments: ARGS_TEXT } }] },
    { role: 'tool', tool_call_id: callId, content: '18 degrees and sunny' },
    { role: 'user', content: 'And tomorrow?' },
  ];
  const want = await chatTokens(tc.base, chat, fx.tools);
  const r = await oai.responses.create({ model: 'toolcall', instructions: 'Be brief.', input, tools: TOOLS });
  assert.equal(r.usage.input_tokens, want);
  assert.equal(r.instructions, 'Be brief.');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'function_call']);
});

test('text equals the chat API (greedy); streamed deltas join into output_text', T, async () => {
  const instructions = 'A short story.';
  const user = 'Once upon a time';
  const chat = await oaiStories.chat.completions.create({ model: 'stories260K', temperature: 0, max_tokens: 30,
    messages: [{ role: 'system', content: instructions }, { role: 'user', content: user }] });
  const want = chat.choices[0].message.content;
  const args = { model: 'stories260K', temperature: 0, max_output_tokens: 30, instructions, input: user };
  const r = await oaiStories.responses.create(args);
  assert.equal(r.output_text, want);
  assert.deepEqual(r.output.map((o) => o.type), ['message']);
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(r.status, chat.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
  let text = '';
  const s = oaiStories.responses.stream(args);
  s.on('response.output_text.delta', (e) => { text += e.delta; });
  await s.done();
  assert.equal(text, want);
});

test('max_output_tokens makes the response incomplete', T, async () => {
  const r = await oaiStories.responses.create({ model: 'stories260K', temperature: 0, max_output_tokens: 3,
                                                input: 'Once upon a time' });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.usage.output_tokens, 3);
  const raw = await oaiStories.responses.create({ model: 'stories260K', temperature: 0, max_output_tokens: 3,
                                                  input: 'Once upon a time', stream: true });
  let last;
  for await (const e of raw) last = e;
  assert.equal(last.type, 'response.incomplete');
  assert.equal(last.response.status, 'incomplete');
});

test('max_output_tokens far above the context is a cap: incomplete, max_output_tokens', T, async () => {
  // about 450 tokens of the 512-token context
  const long = 'Tom had a red ball. He liked to play with it in the park every day. '.repeat(18);
  const r = await oaiStories.responses.create({ model: 'stories260K', temperature: 0, max_output_tokens: 32000,
                                                input: long });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.ok(r.usage.output_tokens > 0);
  assert.equal(r.usage.input_tokens + r.usage.output_tokens, 512);
  await assert.rejects(oaiStories.responses.create({ model: 'stories260K', max_output_tokens: 5, input: long.repeat(2) }),
    (e) => e.status === 400 && /leaving no room/.test(e.message));
});

test('a reply caught in a loop is incomplete with the reason repetition', T, async () => {
  const r = await oaiStories.responses.create({ model: 'stories260K', temperature: 0, input: 'Tom' });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'repetition' });
});

test('json_schema output through text.format', T, async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 } }, required: ['name'],
                   additionalProperties: false };
  const r = await oaiStories.responses.create({ model: 'stories260K', temperature: 0, max_output_tokens: 60,
    input: 'Once upon a time', text: { format: { type: 'json_schema', name: 'x', schema, strict: true } } });
  const v = JSON.parse(r.output_text);
  assert.deepEqual(Object.keys(v), ['name']);
  assert.equal(typeof v.name, 'string');
});

test('tool_choice required or a named function forces a function_call', T, async () => {
  const clock = { type: 'function', name: 'get_time', strict: false,
                  parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } },
                                required: ['tz'] } };
  const named = await oai.responses.create({ model: 'toolcall', input: fx.messages[0].content, max_output_tokens: 200,
                                            tools: [...TOOLS, clock], tool_choice: { type: 'function', name: 'get_time' } });
  const fc = named.output.find((o) => o.type === 'function_call');
  assert.equal(fc.name, 'get_time');
  const args = JSON.parse(fc.arguments);
  assert.deepEqual(Object.keys(args), ['tz']);
  assert.ok(['UTC', 'CET'].includes(args.tz), fc.arguments);
  const req = await oai.responses.create({ model: 'toolcall', input: fx.messages[0].content, tools: [clock, ...TOOLS],
                                          tool_choice: 'required' });
  assert.equal(req.output.find((o) => o.type === 'function_call').arguments, ARGS_TEXT);
});

test('what kiln does not keep is refused by name', T, async () => {
  await assert.rejects(oai.responses.create({ model: 'toolcall', input: 'hi', previous_response_id: 'resp_1' }),
    (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message));
  await assert.rejects(oai.responses.create({ model: 'toolcall', input: [{ type: 'item_reference', id: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /item_reference/.test(e.message));
  await assert.rejects(oai.responses.create({ model: 'toolcall', input: 'hi', tools: [{ type: 'web_search' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /web_search/.test(e.message));
  await assert.rejects(oai.responses.create({ model: 'nope', input: 'hi' }),
    (e) => e instanceof OpenAI.NotFoundError);
});
