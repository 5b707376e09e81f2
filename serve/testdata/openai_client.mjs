// The official OpenAI Node library against infer serve: it completes,
// streams, lists models, and gets its errors as exceptions of the right
// class. Run by TestOpenAINodeClient: node openai_client.mjs URL BUSY_URL.
import OpenAI from "openai";
import assert from "node:assert/strict";

const [url, busyURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "sekret", maxRetries: 0, timeout: 120000 });
const ask = { model: "tiny", messages: [{ role: "user", content: "Hello from Node" }], max_tokens: 8, temperature: 0 };

// Completes.
const r = await client.chat.completions.create(ask);
assert.equal(r.object, "chat.completion");
assert.match(r.id, /^chatcmpl-/);
assert.equal(r.model, "tiny");
assert.equal(r.choices.length, 1);
assert.equal(r.choices[0].message.role, "assistant");
assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

const c = await client.completions.create({ model: "tiny", prompt: "The quick brown fox", max_tokens: 5, temperature: 0, stop: ["\n\n"] });
assert.equal(c.object, "text_completion");
assert.equal(typeof c.choices[0].text, "string");

// Streams: the same greedy request gives the same text, role first, usage last.
const stream = await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } });
let text = "", role = null, usage = null, chunks = 0, finish = null;
for await (const chunk of stream) {
  chunks++;
  assert.equal(chunk.object, "chat.completion.chunk");
  if (chunk.usage) usage = chunk.usage;
  const ch = chunk.choices[0];
  if (!ch) continue;
  if (role === null) role = ch.delta.role;
  text += ch.delta.content ?? "";
  if (ch.finish_reason) finish = ch.finish_reason;
}
assert.equal(role, "assistant");
assert.equal(text, r.choices[0].message.content);
assert.equal(finish, r.choices[0].finish_reason);
assert.equal(usage.completion_tokens, r.usage.completion_tokens);
assert.ok(chunks >= 3);

const cs = await client.completions.create({ model: "tiny", prompt: "The quick brown fox", max_tokens: 5, temperature: 0, stream: true });
let ctext = "";
for await (const chunk of cs) ctext += chunk.choices[0]?.text ?? "";
assert.equal(ctext, c.choices[0].text);

// Models.
const models = [];
for await (const m of client.models.list()) models.push(m.id);
assert.deepEqual(models, ["tiny"]);

// Errors, each of its class.
async function expectError(cls, fn, what) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `${what}: got ${e.constructor.name} (${e.status}): ${e.message}`);
    assert.ok(e instanceof OpenAI.APIError, what);
    return e;
  }
  assert.fail(`${what}: no error`);
}
let e = await expectError(OpenAI.BadRequestError, () => client.chat.completions.create({ ...ask, max_tokens: -1 }), "max_tokens -1");
assert.equal(e.status, 400);
assert.equal(e.param, "max_tokens");
e = await expectError(OpenAI.BadRequestError, () => client.chat.completions.create({ ...ask, messages: [] }), "no messages");
assert.equal(e.param, "messages");
e = await expectError(OpenAI.BadRequestError, () => client.completions.create({ model: "tiny", prompt: "lorem ipsum ".repeat(400) }), "prompt over the context");
assert.equal(e.code, "context_length_exceeded");
await expectError(OpenAI.BadRequestError, () => client.chat.completions.create({ ...ask, stream: true, temperature: 5 }), "streamed, temperature 5");
await expectError(OpenAI.NotFoundError, () => client.chat.completions.create({ ...ask, model: "gpt-4o" }), "unknown model");
const wrongKey = new OpenAI({ baseURL: url + "/v1", apiKey: "wrong", maxRetries: 0 });
await expectError(OpenAI.AuthenticationError, () => wrongKey.chat.completions.create(ask), "wrong key");
const busy = new OpenAI({ baseURL: busyURL + "/v1", apiKey: "none", maxRetries: 0 });
e = await expectError(OpenAI.RateLimitError, () => busy.completions.create({ model: "tiny", prompt: "x", max_tokens: 2 }), "queue full");
assert.equal(e.headers.get("retry-after"), "1");

console.log(JSON.stringify({ ok: true, text, ctext }));
