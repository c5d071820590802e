// Reasoning and tool calls end to end: the OpenAI and Ollama npm clients
// against kiln serve with the scripted fixture tests/data/fixtures/toolcall.gguf.
// Whatever the prompt, that model answers with the same tokens:
//   <think>I should look up the weather.</think><tool_call>{"name": "get_weather",
//   "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call><|im_end|>
// (the arguments spread over five tokens), so the server's parsing of a
// real generation can be checked exactly.  The expected values come from
// the fixture's json, written by tests/gen_fixtures.py.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { startServer, root } from './lib.mjs';

const FIXTURE = path.join(root, 'tests', 'data', 'fixtures', 'toolcall');
const fx = JSON.parse(fs.readFileSync(FIXTURE + '.json', 'utf8'));
const MODEL = 'toolcall';
const THOUGHT = fx.reasoning;                  // "I should look up the weather."
const CALL = fx.tool_call;                     // {name, arguments: {...}}
const TOOLS = fx.tools;                        // OpenAI-shaped get_weather
const ARGS_TEXT = '{"city": "Paris", "unit": "celsius"}'; // as the model writes them
const ASK = [{ role: 'user', content: fx.messages[0].content }];
const T = { timeout: 15000 };

let srv, oai, oll;
assert.deepEqual(JSON.parse(ARGS_TEXT), CALL.arguments);

before(async () => {
  srv = await startServer(['--parallel', '2', '-c', '2048', '-t', '1'], {}, FIXTURE + '.gguf');
  oai = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 10000 });
  oll = new Ollama({ host: srv.base });
});

after(async () => {
  const code = await srv.stop();
  assert.equal(code, 0, 'SIGTERM drains and exits 0');
});

// A stream of chat.completion.chunk objects folded as a client would.
async function accumulate(stream) {
  const r = { reasoning: '', reasoningPieces: 0, content: '', calls: [], argPieces: 0, finish: [], chunks: 0,
              order: [] };
  for await (const ch of stream) {
    r.chunks++;
    const c = ch.choices[0];
    if (!c) continue;
    if (c.finish_reason) r.finish.push(c.finish_reason);
    const d = c.delta ?? {};
    if (d.reasoning_content) { r.reasoning += d.reasoning_content; r.reasoningPieces++; r.order.push('reasoning'); }
    if (d.content) { r.content += d.content; r.order.push('content'); }
    for (const tc of d.tool_calls ?? []) {
      if (tc.id) {
        assert.equal(r.calls[tc.index], undefined, 'a call is opened once');
        assert.equal(tc.index, r.calls.length, 'calls open in order');
        r.calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: '' } };
        r.order.push('header');
      }
      const call = r.calls[tc.index];
      assert.ok(call, 'argument piece for an opened call');
      const piece = tc.function?.arguments ?? '';
      if (piece) { call.function.arguments += piece; r.argPieces++; r.order.push('args'); }
    }
  }
  return r;
}

test('openai chat: a tool call with reasoning, not streamed', T, async () => {
  const r = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS });
  const ch = r.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  const m = ch.message;
  assert.equal(m.role, 'assistant');
  assert.equal(m.content, null, 'a reply of calls only has content null, as OpenAI\'s');
  assert.equal(m.reasoning_content, THOUGHT);
  assert.equal(m.tool_calls.length, 1);
  const tc = m.tool_calls[0];
  assert.equal(tc.type, 'function');
  assert.equal(typeof tc.id, 'string');
  assert.ok(tc.id.length > 0);
  assert.equal(tc.function.name, CALL.name);
  assert.equal(typeof tc.function.arguments, 'string');
  assert.deepEqual(JSON.parse(tc.function.arguments), CALL.arguments);
  // the arguments' text as the model wrote it, as a stream joins it
  assert.equal(tc.function.arguments, ARGS_TEXT);
  // every scripted token but the end-of-generation one is counted
  assert.equal(r.usage.completion_tokens, fx.greedy_ids.length - 1);
});

test('openai chat: streamed deltas add up to the same call', T, async () => {
  const whole = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS });
  const s = await accumulate(await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS,
                                                                 stream: true }));
  assert.equal(s.reasoning, THOUGHT);
  assert.ok(s.reasoningPieces > 1, 'reasoning arrives in several deltas');
  assert.equal(s.content, '');
  assert.equal(s.calls.length, 1);
  const call = s.calls[0], want = whole.choices[0].message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0);
  assert.equal(call.function.name, want.function.name);
  // ids are unique per response, so tool results of different turns can't be mixed up
  assert.match(call.id, /^call_/);
  assert.notEqual(call.id, want.id);
  assert.ok(s.argPieces > 1, `arguments in ${s.argPieces} fragments`);
  assert.deepEqual(JSON.parse(call.function.arguments), JSON.parse(want.function.arguments));
  // the pieces join into the arguments' text as the model wrote it
  assert.equal(call.function.arguments, ARGS_TEXT);
  // reasoning first, then the header, then the arguments
  const firstHeader = s.order.indexOf('header');
  assert.ok(firstHeader > s.order.lastIndexOf('reasoning'));
  assert.ok(firstHeader < s.order.indexOf('args'));
  assert.deepEqual(s.finish, ['tool_calls'], 'one finish_reason, in the last chunk');
});

test('openai chat: the raw event stream ends with the finish chunk and [DONE]', T, async () => {
  const r = await fetch(srv.base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: ASK, tools: TOOLS, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = (await r.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  const last = chunks.at(-1);
  assert.equal(last.choices[0].finish_reason, 'tool_calls');
  assert.ok(chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === 'chat.completion.chunk'));
});

test('openai chat: max_tokens inside the arguments', T, async () => {
  // 10 tokens end right after '{"city": ': the name is settled, the arguments are not
  const req = { model: MODEL, messages: ASK, tools: TOOLS, max_tokens: 10 };
  const s = await accumulate(await oai.chat.completions.create({ ...req, stream: true }));
  assert.deepEqual(s.finish, ['length']);
  assert.equal(s.calls.length, 1, 'the streamed header stands');
  assert.equal(s.calls[0].function.name, CALL.name);
  assert.equal(s.calls[0].function.arguments, '{"city": ');
  const r = await oai.chat.completions.create(req);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].message.reasoning_content, THOUGHT);
  assert.equal(r.choices[0].message.content, '<tool_call>{"name": "get_weather", "arguments": {"city": ',
               'not streamed, the cut block stays content as written');
});

test('openai chat: the tool result goes back and renders', T, async () => {
  const first = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS });
  const asked = first.choices[0].message;
  const result = JSON.stringify({ temperature: 21, condition: 'sunny' });
  const messages = [...ASK, asked, { role: 'tool', tool_call_id: asked.tool_calls[0].id, content: result }];
  const r = await oai.chat.completions.create({ model: MODEL, messages, tools: TOOLS });
  // the scripted model answers the same way; the prompt grew by the turn
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens + result.length,
            `${r.usage.prompt_tokens} prompt tokens after ${first.usage.prompt_tokens}`);
  // arguments as a string of JSON or as an object both render
  const objArgs = { ...asked, tool_calls: [{ ...asked.tool_calls[0],
                                             function: { name: CALL.name, arguments: CALL.arguments } }] };
  const raw = await fetch(srv.base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, tools: TOOLS,
                           messages: [...ASK, objArgs, { role: 'tool', tool_call_id: 'x', content: result }] }),
  });
  assert.equal(raw.status, 200);
  assert.equal((await raw.json()).usage.prompt_tokens, r.usage.prompt_tokens);
});

test('ollama chat: tools and think, not streamed', T, async () => {
  const r = await oll.chat({ model: MODEL, messages: ASK, tools: TOOLS, think: true, stream: false });
  assert.equal(r.done, true);
  assert.equal(r.message.role, 'assistant');
  assert.equal(r.message.content, '');
  assert.equal(r.message.thinking, THOUGHT);
  assert.equal(r.message.tool_calls.length, 1);
  assert.equal(r.message.tool_calls[0].function.name, CALL.name);
  assert.deepEqual(r.message.tool_calls[0].function.arguments, CALL.arguments, 'arguments as an object');
  // think reaches the template as enable_thinking: Qwen3's template then
  // closes an empty think block in the prompt ("<think>\n\n</think>\n\n",
  // six tokens in this vocabulary); the scripted model still writes its own
  const off = await oll.chat({ model: MODEL, messages: ASK, tools: TOOLS, think: false, stream: false });
  assert.equal(off.prompt_eval_count, r.prompt_eval_count + 6);
  assert.deepEqual(off.message.tool_calls, r.message.tool_calls);
  // with think: false, Ollama leaves reasoning the model writes anyway in
  // the content, as written
  assert.ok(!off.message.thinking, JSON.stringify(off.message));
  assert.equal(off.message.content, `<think>${THOUGHT}</think>`);
});

test('raw text where the request asked for no parsing', T, async () => {
  const whole = `<think>${THOUGHT}</think><tool_call>{"name": "${CALL.name}", "arguments": ${ARGS_TEXT}}</tool_call>`;
  // no tools offered: a <tool_call> block stays content, as written
  const r = await oai.chat.completions.create({ model: MODEL, messages: ASK });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].message.reasoning_content, THOUGHT);
  assert.equal(r.choices[0].message.content, whole.slice(`<think>${THOUGHT}</think>`.length));
  const o = await oll.chat({ model: MODEL, messages: ASK, stream: false });
  assert.equal(o.message.tool_calls, undefined);
  assert.equal(o.message.content, whole.slice(`<think>${THOUGHT}</think>`.length));
  // completions are the text itself, tags and all, streamed or not
  const prompt = fx.prompt_text;
  const c = await oai.completions.create({ model: MODEL, prompt, max_tokens: 32 });
  assert.equal(c.choices[0].text, whole);
  // special-token text in the prompt is read as those tokens, as llama.cpp does
  assert.equal(c.usage.prompt_tokens, fx.prompt_ids.length);
  let streamed = '';
  for await (const ch of await oai.completions.create({ model: MODEL, prompt, max_tokens: 32, stream: true }))
    streamed += ch.choices[0]?.text ?? '';
  assert.equal(streamed, whole);
});

test('ollama chat: tools and think, streamed', T, async () => {
  let thinking = '', content = '', parts = 0, calls = [], last = null;
  for await (const p of await oll.chat({ model: MODEL, messages: ASK, tools: TOOLS, think: true, stream: true })) {
    parts++;
    thinking += p.message?.thinking ?? '';
    content += p.message?.content ?? '';
    if (p.message?.tool_calls) calls.push(...p.message.tool_calls);
    last = p;
  }
  assert.ok(parts > 3);
  assert.equal(thinking, THOUGHT);
  assert.equal(content, '');
  assert.equal(calls.length, 1, 'each call comes whole, once');
  assert.equal(calls[0].function.name, CALL.name);
  assert.deepEqual(calls[0].function.arguments, CALL.arguments);
  assert.equal(last.done, true);
  assert.equal(last.done_reason, 'stop');
  assert.equal(last.eval_count, fx.greedy_ids.length - 1);
});

test('ollama chat: the tool result goes back; show lists the capabilities', T, async () => {
  const first = await oll.chat({ model: MODEL, messages: ASK, tools: TOOLS, stream: false });
  const messages = [...ASK, first.message, { role: 'tool', content: '21 degrees, sunny' }];
  const r = await oll.chat({ model: MODEL, messages, tools: TOOLS, stream: false });
  assert.equal(r.message.tool_calls[0].function.name, CALL.name);
  assert.ok(r.prompt_eval_count > first.prompt_eval_count);
  const show = await oll.show({ model: MODEL });
  assert.ok(show.capabilities.includes('tools'), JSON.stringify(show.capabilities));
  assert.ok(show.capabilities.includes('thinking'), JSON.stringify(show.capabilities));
});

test('openai chat: tool_choice none hides the tools', T, async () => {
  const auto = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, tool_choice: 'auto' });
  assert.equal(auto.choices[0].finish_reason, 'tool_calls');
  const none = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, tool_choice: 'none',
                                                   max_tokens: 64 });
  const m = none.choices[0].message;
  assert.equal(m.tool_calls, undefined, 'no tool calls with tool_choice none');
  assert.notEqual(none.choices[0].finish_reason, 'tool_calls');
  assert.ok(none.usage.prompt_tokens < auto.usage.prompt_tokens, 'the tools are not in the prompt');
});

// A second tool the scripted model never calls by itself: forcing it must
// still give a call of it whose arguments follow its schema.
const CLOCK = { type: 'function', function: { name: 'get_time', description: 'The time in a zone.',
  parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] },
                                              h24: { type: 'boolean' } }, required: ['tz', 'h24'] } } };

// The subset of JSON Schema these tools use, checked independently of kiln.
function validate(v, s, where = '$') {
  if (s.enum) assert.ok(s.enum.includes(v), `${where}: ${JSON.stringify(v)} not in ${JSON.stringify(s.enum)}`);
  if (s.type === 'object') {
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), `${where}: not an object`);
    for (const k of s.required ?? []) assert.ok(k in v, `${where}: '${k}' missing`);
    for (const [k, x] of Object.entries(v)) {
      assert.ok(s.properties && k in s.properties, `${where}: '${k}' is no property`);
      validate(x, s.properties[k], `${where}.${k}`);
    }
  } else if (s.type === 'string') assert.equal(typeof v, 'string', where);
  else if (s.type === 'boolean') assert.equal(typeof v, 'boolean', where);
}

test('openai chat: a named tool_choice forces that call, its arguments valid', T, async () => {
  for (const stream of [false, true]) {
    const req = { model: MODEL, messages: ASK, tools: [...TOOLS, CLOCK], max_tokens: 200,
                  tool_choice: { type: 'function', function: { name: 'get_time' } } };
    const m = stream ? await accumulate(await oai.chat.completions.create({ ...req, stream: true }))
                     : (await oai.chat.completions.create(req)).choices[0].message;
    const calls = stream ? m.calls : m.tool_calls;
    assert.equal(calls.length, 1, JSON.stringify(m));
    assert.equal(calls[0].function.name, 'get_time');
    validate(JSON.parse(calls[0].function.arguments), CLOCK.function.parameters);
    assert.equal(stream ? m.reasoning : m.reasoning_content, THOUGHT, 'the model still reasons first');
    assert.ok(!(stream ? m.content : m.content), 'no text besides the call');
  }
  // the call the model would make anyway is unchanged by forcing it
  const same = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: [...TOOLS, CLOCK],
    tool_choice: { type: 'function', function: { name: CALL.name } } });
  assert.equal(same.choices[0].message.tool_calls[0].function.arguments, ARGS_TEXT);
});

test('openai chat: tool_choice required gives a call of one of the tools', T, async () => {
  const r = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: [CLOCK, ...TOOLS],
                                               tool_choice: 'required', max_tokens: 200 });
  const tc = r.choices[0].message.tool_calls;
  assert.equal(tc.length, 1);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(tc[0].function.name, CALL.name, 'the model picks among the tools');
  validate(JSON.parse(tc[0].function.arguments), TOOLS[0].function.parameters);
  // without a system of tools to force, or naming a missing one: a 400
  for (const [body, words] of [[{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, /'nope'/],
    [{ tool_choice: 'required' }, /no function/], [{ tools: TOOLS, tool_choice: 'sometimes' }, /must be/],
    [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, /response_format/]]) {
    const x = await fetch(srv.base + '/v1/chat/completions', {
      method: 'POST', body: JSON.stringify({ model: MODEL, messages: ASK, ...body }) });
    assert.equal(x.status, 400, JSON.stringify(body));
    const e = (await x.json()).error;
    assert.equal(e.param, 'tool_choice');
    assert.match(e.message, words);
  }
});

// The compact text of a JSON answer that obeys {ok: boolean}: a prefix of
// one of its two values (the fixture's answer is whatever the constraint
// lets through, so it may be cut by max_tokens, but never leave the schema).
const OK_SCHEMA = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
                    additionalProperties: false };
function obeysOk(text) {
  const t = text.replace(/\s+/g, '');
  return t.length > 0 && ['{"ok":true}', '{"ok":false}'].some((v) => v.startsWith(t));
}

test('structured output on a thinking model: the reasoning first, the schema after it', T, async () => {
  const rf = { type: 'json_schema', json_schema: { name: 'ok', schema: OK_SCHEMA } };
  for (const stream of [false, true]) {
    const req = { model: MODEL, messages: ASK, max_tokens: 60, temperature: 0, response_format: rf };
    const m = stream ? await accumulate(await oai.chat.completions.create({ ...req, stream: true }))
                     : (await oai.chat.completions.create(req)).choices[0].message;
    assert.equal(stream ? m.reasoning : m.reasoning_content, THOUGHT, 'the model reasons as it would unconstrained');
    assert.ok(obeysOk(m.content), JSON.stringify(m.content));
  }
  // json_object mode and Ollama's format the same way
  const jo = await oai.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 40, temperature: 0,
                                                response_format: { type: 'json_object' } });
  assert.equal(jo.choices[0].message.reasoning_content, THOUGHT);
  assert.ok(jo.choices[0].message.content && !/<tool_call>/.test(jo.choices[0].message.content),
            'the answer is the constraint\'s, not the call the model would write');
  const o = await oll.chat({ model: MODEL, messages: ASK, think: true, format: OK_SCHEMA,
                             options: { temperature: 0, num_predict: 60 } });
  assert.equal(o.message.thinking, THOUGHT);
  assert.ok(obeysOk(o.message.content), JSON.stringify(o.message.content));
});

test('a thinking budget ends the reasoning and the answer follows', T, async () => {
  // the block gets one token ("I should"), then its end is written for the model
  const rf = { type: 'json_schema', json_schema: { name: 'ok', schema: OK_SCHEMA } };
  const r = await oai.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 60, temperature: 0,
                                               response_format: rf, reasoning_budget: 1 });
  assert.equal(r.choices[0].message.reasoning_content.trim(), 'I should');
  assert.ok(obeysOk(r.choices[0].message.content), r.choices[0].message.content);
  // a forced call still comes, after the cut reasoning
  const f = await oai.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, tool_choice: 'required',
                                               max_tokens: 200, reasoning_budget: 2 });
  assert.equal(f.choices[0].message.reasoning_content.trim(), 'I should look up');
  assert.equal(f.choices[0].finish_reason, 'tool_calls');
  assert.equal(f.choices[0].message.tool_calls[0].function.name, CALL.name);
  validate(JSON.parse(f.choices[0].message.tool_calls[0].function.arguments), TOOLS[0].function.parameters);
  // reasoning_effort "none" is a budget of 0: an empty block
  const n = await oai.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 60, temperature: 0,
                                               response_format: rf, reasoning_effort: 'none' });
  assert.ok(!(n.choices[0].message.reasoning_content ?? '').trim(), JSON.stringify(n.choices[0].message));
  assert.ok(obeysOk(n.choices[0].message.content));
  // Ollama's think levels are budgets too; an unknown one is a 400
  const lo = await oll.chat({ model: MODEL, messages: ASK, think: 'low', options: { num_predict: 60 } });
  assert.equal(lo.message.thinking, THOUGHT, 'low is 1024 tokens: this short reasoning fits');
  await assert.rejects(oll.chat({ model: MODEL, messages: ASK, think: 'very' }),
                       (e) => e.status_code === 400 && /think/.test(e.message));
  // with no room left for the end of the block and an answer: the budget's own reason
  const cut = await oai.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 3, reasoning_budget: 1 });
  assert.equal(cut.choices[0].finish_reason, 'thinking_budget');
});
