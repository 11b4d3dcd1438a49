// tests/serve.sh's check of `transmuter serve` with the official openai npm client (installed
// in bench/.serve by .ci/run): embeddings (the client asks for base64 and decodes it), chat
// completions whole and streamed, logprobs, and an unknown model's error. Prints one JSON line for
// tests/serve_checks.py to compare with the library. Usage: node serve_openai.mjs PORT
import { createRequire } from "node:module";
import { resolve } from "node:path";

const require = createRequire(resolve("bench/.serve/package.json"));
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: `http://127.0.0.1:${process.argv[2]}/v1`, apiKey: "unused", maxRetries: 0 });
const messages = [{ role: "user", content: "Hi" }];

const emb = await client.embeddings.create({
    model: "minilm-embed", input: ["hello world", "The quick brown fox jumps over the lazy dog."] });
const chat = await client.chat.completions.create({ model: "llama-chat", messages, max_tokens: 8, temperature: 0 });
let streamed = "";
const stream = await client.chat.completions.create({
    model: "llama-chat", messages, max_tokens: 8, temperature: 0, stream: true });
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
const lp = await client.chat.completions.create({
    model: "llama-chat", messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
let notFound = null;
try {
    await client.chat.completions.create({ model: "nope", messages });
} catch (e) {
    notFound = e instanceof OpenAI.NotFoundError ? e.status : String(e);
}
console.log(JSON.stringify({
    embeddings: emb.data.map((d) => Array.from(d.embedding)),
    chat: chat.choices[0].message.content,
    stream: streamed,
    not_found: notFound,
    logprobs: lp.choices[0].logprobs.content.map((x) => [x.token, x.logprob, x.top_logprobs.length]),
}));
