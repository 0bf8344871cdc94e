// The official `openai` JS client against a live `hearth serve`.
//
// Run by tests/server_clients.rs (after `npm ci` in tests/clients):
//   node openai_js.mjs --base-url http://127.0.0.1:PORT/v1 --kind real|dummy --model-id ID
//
// `real` is the default model (SmolLM2-135M-Instruct: answers "Paris");
// `dummy` is a tiny random-weight Qwen3 where `ignore_eos` makes every
// generation end on max_tokens, so token counts are exact. Each check prints
// one line; the process exits 1 if any failed.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, '').replace(/-/g, '_')] = argv[i + 1];
  }
  for (const key of ['base_url', 'kind', 'model_id']) {
    if (!args[key]) throw new Error(`missing --${key.replace(/_/g, '-')}`);
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const client = new OpenAI({ baseURL: args.base_url, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const USER = [{ role: 'user', content: 'What is the capital of France?' }];
const dummy = args.kind === 'dummy';

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  let content = '';
  let reasoning = '';
  let usage = null;
  const finish = {};
  for (const chunk of chunks) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.index === 0) {
        content += choice.delta.content ?? '';
        reasoning += choice.delta.reasoning_content ?? '';
      }
      if (choice.finish_reason) {
        assert.equal(finish[choice.index], undefined, 'two finish chunks');
        finish[choice.index] = choice.finish_reason;
      }
    }
  }
  return { chunks, content, reasoning, finish: finish[0], usage };
}

function tokenChunks(chunks, index = 0) {
  return chunks
    .flatMap((chunk) => chunk.choices)
    .filter((c) => c.index === index && c.finish_reason === null && c.delta.role === undefined);
}

const checks = {
  async models() {
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [args.model_id]);
    assert.equal((await client.models.retrieve('default')).id, args.model_id);
  },

  async chatWhole() {
    const r = await client.chat.completions.create({
      model: 'default', messages: USER, temperature: 0, max_tokens: 12, ignore_eos: dummy,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    if (dummy) {
      assert.equal(r.usage.completion_tokens, 12);
      assert.equal(r.choices[0].finish_reason, 'length');
    } else {
      assert.match(r.choices[0].message.content, /Paris/);
      assert.equal(r.choices[0].finish_reason, 'stop');
    }
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  },

  async chatStreamUsageEqualsTokens() {
    const n = dummy ? 20 : 6;
    const s = await streamChat({
      model: args.model_id, messages: USER, temperature: 0, max_tokens: n,
      stream_options: { include_usage: true }, ignore_eos: true,
    });
    assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(s.finish, 'length');
    assert.deepEqual(s.chunks.at(-1).choices, []);
    assert.equal(s.usage.completion_tokens, n);
    assert.equal(tokenChunks(s.chunks).length, n);
    const whole = await client.chat.completions.create({
      model: args.model_id, messages: USER, temperature: 0, max_tokens: n, ignore_eos: true,
    });
    assert.equal(whole.choices[0].message.content, s.content);
  },

  async completions() {
    const prompt = 'The capital of France is';
    const r = await client.completions.create({
      model: 'default', prompt, temperature: 0, max_tokens: 6, ignore_eos: true,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.usage.completion_tokens, 6);
    if (!dummy) assert.match(r.choices[0].text, /Paris/);
    const stream = await client.completions.create({
      model: 'default', prompt, temperature: 0, max_tokens: 6, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) text += c.text;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, r.choices[0].text);
    assert.equal(usage.completion_tokens, 6);
  },

  async stopStrings() {
    if (dummy) return;
    const r = await client.completions.create({
      model: 'default', prompt: 'The capital of France is', temperature: 0, max_tokens: 8, stop: ['.'],
    });
    assert.equal(r.choices[0].text, ' Paris');
    assert.equal(r.choices[0].finish_reason, 'stop');
  },

  async logprobs() {
    const r = await client.chat.completions.create({
      model: 'default', messages: USER, temperature: 0, max_tokens: 4, logprobs: true,
      top_logprobs: 2, ignore_eos: true,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const entry of content) {
      assert.ok(entry.logprob <= 0);
      assert.equal(entry.top_logprobs.length, 2);
      assert.equal(entry.token, entry.top_logprobs[0].token);
    }
  },

  async nChoices() {
    const r = await client.chat.completions.create({
      model: 'default', messages: USER, n: 2, max_tokens: 3, seed: 1, ignore_eos: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    assert.equal(r.usage.completion_tokens, 6);
  },

  async thinking() {
    if (!dummy) return;
    const s = await streamChat({
      model: 'default', messages: USER, temperature: 0, max_tokens: 3,
      logit_bias: { 151667: 100 }, ignore_eos: true,
    });
    assert.equal(s.content, '');
    assert.equal(s.reasoning, '<think><think>');
  },

  async errors() {
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o', messages: USER }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'default', messages: USER, top_p: 3 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_p',
    );
    const context = dummy ? 4096 : 8192;
    await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'hello '.repeat(context + 500) }],
      }),
      (e) => e instanceof OpenAI.BadRequestError && e.message.includes(String(context)),
    );
  },
};

const version = JSON.parse(
  readFileSync(new URL('./node_modules/openai/package.json', import.meta.url), 'utf8'),
).version;
let failed = 0;
for (const [name, fn] of Object.entries(checks)) {
  try {
    await fn();
    console.log(`ok     ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAILED ${name}\n${e?.stack ?? e}`);
  }
}
console.log(`openai (JS) ${version}: ${Object.keys(checks).length - failed} of ${Object.keys(checks).length} checks ok`);
process.exit(failed ? 1 : 0);
