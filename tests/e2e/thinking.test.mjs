// Structured output and forced tool calls on thinking models, through the
// official openai, ollama and @anthropic-ai/sdk clients: the model reasons
// first, its reasoning comes back as reasoning_content / thinking, and the
// JSON schema (or the forced call) holds only the answer after </think>.
//   - tests/data/fixtures/toolcall.gguf (Qwen3's template, which lets the
//     model open <think> itself): a scripted model that writes
//     <think>I should look up the weather.</think> and then a <tool_call>;
//     under a schema the reasoning is exactly its own, the answer the schema's.
//   - tests/data/hybrid/qwen35-spm-f32.gguf (the Qwen 3.5 architecture,
//     random weights) with a Qwen 3.5-style template written here, whose
//     generation prompt opens "<think>\n": the model never closes the block
//     by itself, so a thinking budget (kiln writes "\n</think>\n\n" when it is
//     spent) is what lets the answer begin.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { startServer, root, withChatTemplate } from './lib.mjs';

const FIXTURE = path.join(root, 'tests', 'data', 'fixtures', 'toolcall');
const fx = JSON.parse(fs.readFileSync(FIXTURE + '.json', 'utf8'));
const THOUGHT = fx.reasoning; // "I should look up the weather."
const ASK = [{ role: 'user', content: fx.messages[0].content }];
const T = { timeout: 30000 };

const SCHEMA = { type: 'object', additionalProperties: false, required: ['city', 'rain'],
                 properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, rain: { type: 'boolean' } } };
const FORMAT = { type: 'json_schema', json_schema: { name: 'weather', schema: SCHEMA, strict: true } };
const CLOCK = { type: 'function', function: { name: 'get_time', description: 'The time in a zone.',
  parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['tz'] } } };

// Qwen 3.5's generation prompt: the reply begins inside an open block
// unless thinking is turned off, which writes an empty one; offered tools
// are listed with how to call them, as <tool_call>{...}</tool_call>.
const QWEN35_TEMPLATE = "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n' }}{% for t in tools %}" +
  "{{ t | tojson }}{{ '\\n' }}{% endfor %}{{ 'Call one as <tool_call>{\"name\": ..., \"arguments\": ...}" +
  "</tool_call><|im_end|>\\n' }}{% endif %}" +
  "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + " +
  "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}" +
  "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}" +
  "{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}";
const BUDGET = 8; // the qwen35 server's --reasoning-budget

let dir, tc, q35, oai, oll, ant, oai35, oll35, ant35;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-thinking-'));
  const q35file = path.join(dir, 'qwen35-think.gguf');
  await withChatTemplate(path.join(root, 'tests', 'data', 'hybrid', 'qwen35-spm-f32.gguf'), q35file, QWEN35_TEMPLATE);
  tc = await startServer(['--parallel', '2', '-c', '2048', '-t', '1'], {}, FIXTURE + '.gguf');
  q35 = await startServer(['--parallel', '2', '-c', '1024', '-t', '1', '--reasoning-budget', String(BUDGET)], {},
                          q35file);
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 25000 };
  oai = new OpenAI({ baseURL: tc.base + '/v1', ...opts });
  oll = new Ollama({ host: tc.base });
  ant = new Anthropic({ baseURL: tc.base, ...opts });
  oai35 = new OpenAI({ baseURL: q35.base + '/v1', ...opts });
  oll35 = new Ollama({ host: q35.base });
  ant35 = new Anthropic({ baseURL: q35.base, ...opts });
});

after(async () => {
  if (tc) assert.equal(await tc.stop(), 0);
  if (q35) assert.equal(await q35.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// The answer as the schema has it: an object with exactly city (one of the
// enum) and rain (a boolean).
function follows(text) {
  assert.ok(!text.includes('<think>') && !text.includes('</think>'), `reasoning left in the answer: ${text}`);
  let v;
  assert.doesNotThrow(() => { v = JSON.parse(text); }, `not JSON: ${JSON.stringify(text)}`);
  assert.deepEqual(Object.keys(v).sort(), ['city', 'rain'], text);
  assert.ok(['Paris', 'Rome'].includes(v.city), text);
  assert.equal(typeof v.rain, 'boolean', text);
  return v;
}

// A chat.completion.chunk stream folded: reasoning, content, the order they came in.
async function fold(stream) {
  const r = { reasoning: '', content: '', finish: null, order: [] };
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    if (c.finish_reason) r.finish = c.finish_reason;
    if (c.delta?.reasoning_content) { r.reasoning += c.delta.reasoning_content; r.order.push('reasoning'); }
    if (c.delta?.content) { r.content += c.delta.content; r.order.push('content'); }
  }
  return r;
}

const model35 = async () => (await oai35.models.list()).data[0].id;

test('openai: json_schema after the model\'s own reasoning, streamed and not', T, async () => {
  const r = await oai.chat.completions.create({ model: 'toolcall', messages: ASK, temperature: 0,
                                                response_format: FORMAT });
  const ch = r.choices[0];
  assert.equal(ch.message.reasoning_content, THOUGHT, 'the model opened <think> and reasoned under the schema');
  assert.equal(ch.finish_reason, 'stop');
  follows(ch.message.content);
  const s = await fold(await oai.chat.completions.create({ model: 'toolcall', messages: ASK, temperature: 0,
                                                           response_format: FORMAT, stream: true }));
  assert.equal(s.reasoning, THOUGHT);
  assert.equal(s.content, ch.message.content, 'streamed as not streamed (greedy)');
  assert.equal(s.finish, 'stop');
  assert.ok(s.order.lastIndexOf('reasoning') < s.order.indexOf('content'), 'the reasoning before the answer');
});

test('openai: reasoning_budget cuts the reasoning; the answer still follows the schema', T, async () => {
  const r = await oai.chat.completions.create({ model: 'toolcall', messages: ASK, temperature: 0,
                                                response_format: FORMAT, reasoning_budget: 1 });
  assert.equal(r.choices[0].message.reasoning_content.trim(), 'I should', 'one token of reasoning, then </think>');
  assert.equal(r.choices[0].finish_reason, 'stop');
  follows(r.choices[0].message.content);
  // the blank lines after the budget's "\n</think>" separate the blocks; the answer begins at its value
  assert.match(r.choices[0].message.content, /^\{/);
});

test('ollama: format after thinking on chat and generate; think false holds the format from the start', T,
  async () => {
    const c = await oll.chat({ model: 'toolcall', messages: ASK, think: true, format: SCHEMA, stream: false,
                               options: { temperature: 0 } });
    assert.equal(c.message.thinking, THOUGHT);
    assert.equal(c.done_reason, 'stop');
    follows(c.message.content);
    let thinking = '', content = '', last = null;
    for await (const p of await oll.chat({ model: 'toolcall', messages: ASK, think: true, format: SCHEMA,
                                           stream: true, options: { temperature: 0 } })) {
      thinking += p.message.thinking ?? '';
      content += p.message.content;
      last = p;
    }
    assert.equal(thinking, THOUGHT);
    assert.equal(content, c.message.content);
    assert.equal(last.done_reason, 'stop');
    const g = await oll.generate({ model: 'toolcall', prompt: ASK[0].content, think: true, format: SCHEMA,
                                   stream: false, options: { temperature: 0 } });
    assert.equal(g.thinking, THOUGHT);
    follows(g.response);
    // think: false keeps what the model writes as content (Ollama's rule), so
    // the format holds from the first token, as Ollama applies it: the
    // content is the JSON alone, not a reasoning block before it
    for (const r of [await oll.chat({ model: 'toolcall', messages: ASK, think: false, format: SCHEMA, stream: false }),
                     await oll.generate({ model: 'toolcall', prompt: ASK[0].content, think: false, format: SCHEMA,
                                          stream: false })]) {
      assert.ok(!(r.message ?? r).thinking, JSON.stringify(r));
      follows(r.message ? r.message.content : r.response);
    }
  });

test('openai: a forced tool call after the reasoning, named or required', T, async () => {
  const named = await oai.chat.completions.create({ model: 'toolcall', messages: ASK, temperature: 0,
    tools: [...fx.tools, CLOCK], tool_choice: { type: 'function', function: { name: 'get_time' } } });
  const m = named.choices[0].message;
  assert.equal(m.reasoning_content, THOUGHT);
  assert.equal(named.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_time');
  const args = JSON.parse(m.tool_calls[0].function.arguments);
  assert.deepEqual(Object.keys(args), ['tz']);
  assert.ok(['UTC', 'CET'].includes(args.tz), m.tool_calls[0].function.arguments);
  const req = await oai.chat.completions.create({ model: 'toolcall', messages: ASK, temperature: 0,
                                                  tools: [CLOCK, ...fx.tools], tool_choice: 'required' });
  assert.equal(req.choices[0].message.reasoning_content, THOUGHT);
  assert.equal(req.choices[0].message.tool_calls[0].function.name, fx.tool_call.name, 'the model picks the tool');
  assert.deepEqual(JSON.parse(req.choices[0].message.tool_calls[0].function.arguments), fx.tool_call.arguments);
});

test('anthropic: budget_tokens, then a forced tool_use that follows its schema', T, async () => {
  const clock = { name: 'get_time', description: CLOCK.function.description, input_schema: CLOCK.function.parameters };
  const m = await ant.messages.create({ model: 'toolcall', max_tokens: 200, messages: ASK, tools: [clock],
                                        thinking: { type: 'enabled', budget_tokens: 1 },
                                        tool_choice: { type: 'tool', name: 'get_time' } });
  // the blank lines after the budget's </think> are no text block
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use'], JSON.stringify(m.content));
  assert.equal(m.content[0].thinking.trim(), 'I should');
  const use = m.content.at(-1);
  assert.equal(use.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(use.input.tz), JSON.stringify(use.input));
  assert.equal(m.stop_reason, 'tool_use');
});

test('qwen35, prompt opens <think>: the budget ends the reasoning and the answer follows the schema', T,
  async () => {
    const model = await model35();
    const r = await oai35.chat.completions.create({ model, messages: ASK, temperature: 0, max_tokens: 200,
                                                    response_format: FORMAT, reasoning_budget: BUDGET });
    const ch = r.choices[0];
    assert.ok(ch.message.reasoning_content.length > 0, 'the model reasoned');
    assert.equal(ch.finish_reason, 'stop', JSON.stringify(ch));
    follows(ch.message.content);
    assert.ok(r.usage.completion_tokens > BUDGET, JSON.stringify(r.usage));
    const s = await fold(await oai35.chat.completions.create({ model, messages: ASK, temperature: 0, max_tokens: 200,
      response_format: FORMAT, reasoning_budget: BUDGET, stream: true }));
    assert.equal(s.reasoning, ch.message.reasoning_content);
    assert.equal(s.content, ch.message.content);
    // no budget: the block runs to max_tokens unconstrained (this model never
    // closes it); whatever ends it, no reasoning is taken for the answer
    const free = await oai35.chat.completions.create({ model, messages: ASK, temperature: 0, max_tokens: 24,
                                                       response_format: FORMAT, reasoning_budget: -1 });
    const f = free.choices[0];
    assert.ok(f.message.reasoning_content.length > 0);
    if (f.finish_reason === 'stop') follows(f.message.content);
    else {
      assert.equal(f.finish_reason, 'length');
      assert.ok(!(f.message.content ?? '').includes('<think>'), f.message.content);
    }
    // the server's --reasoning-budget applies where a request names none,
    // on the Ollama API too
    const c = await oll35.chat({ model, messages: ASK, think: true, format: SCHEMA, stream: false,
                                 options: { temperature: 0, repeat_penalty: 1, num_predict: 200 } });
    assert.equal(c.message.thinking, ch.message.reasoning_content, 'the same 8 tokens as the OpenAI request');
    assert.equal(c.done_reason, 'stop');
    follows(c.message.content);
    assert.match(c.message.content, /^\{/);
    const g = await oll35.generate({ model, prompt: ASK[0].content, think: true, format: SCHEMA, stream: false,
                                     options: { temperature: 0, num_predict: 200 } });
    assert.ok(g.thinking.length > 0);
    follows(g.response);
  });

test('qwen35: forced tool calls after a budgeted reasoning block', T, async () => {
  const model = await model35();
  const weather = fx.tools[0];
  const named = await oai35.chat.completions.create({ model, messages: ASK, temperature: 0, max_tokens: 200,
    tools: [weather, CLOCK], tool_choice: { type: 'function', function: { name: 'get_time' } } });
  const m = named.choices[0].message;
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(named.choices[0].finish_reason, 'tool_calls', JSON.stringify(named.choices[0]));
  assert.equal(m.tool_calls[0].function.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(JSON.parse(m.tool_calls[0].function.arguments).tz),
            m.tool_calls[0].function.arguments);
  const req = await oai35.chat.completions.create({ model, messages: ASK, temperature: 0, max_tokens: 200,
                                                    tools: [CLOCK], tool_choice: 'required' });
  assert.equal(req.choices[0].finish_reason, 'tool_calls');
  assert.equal(req.choices[0].message.tool_calls[0].function.name, 'get_time');
  const a = await ant35.messages.create({ model, max_tokens: 200, messages: ASK,
    tools: [{ name: 'get_time', description: CLOCK.function.description, input_schema: CLOCK.function.parameters }],
    thinking: { type: 'enabled', budget_tokens: BUDGET }, tool_choice: { type: 'any' } });
  assert.deepEqual(a.content.map((b) => b.type), ['thinking', 'tool_use'], JSON.stringify(a.content));
  assert.ok(a.content[0].thinking.length > 0);
  assert.ok(['UTC', 'CET'].includes(a.content.at(-1).input.tz), JSON.stringify(a.content.at(-1).input));
});
