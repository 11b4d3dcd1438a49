#!/usr/bin/env node
// The transformers.js side of `make bench-serve`: a minimal Node HTTP server answering
// POST /v1/embeddings ({"input": a string or strings}) with transformers.js's
// feature-extraction pipeline (mean pooling, normalized, as the bench repository's
// sentence-transformers modules say), in OpenAI's response shape. Each request is one
// pipeline call as it comes: no batching across requests (what a plain Node server does);
// onnxruntime-node runs the calls on its own threads.
// Usage: node serve_tjs.mjs REPO_DIR PORT [THREADS]
import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(here, '.tjs', 'x.js'));
const { pipeline, env } = require('@huggingface/transformers');

const [repoDir, port, threads = '2'] = process.argv.slice(2);
const repo = path.resolve(repoDir);
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(repo) + path.sep;
env.useFSCache = false;
env.useBrowserCache = false;
const extractor = await pipeline('feature-extraction', path.basename(repo), {
  dtype: 'fp32',
  session_options: { intraOpNumThreads: +threads, interOpNumThreads: 1, executionMode: 'sequential' },
});

function answer(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/v1/embeddings') return answer(res, 404, { error: { message: 'no route' } });
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    try {
      const { input } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const out = await extractor(input, { pooling: 'mean', normalize: true });
      const rows = out.tolist();
      answer(res, 200, {
        object: 'list', model: path.basename(repo),
        data: rows.map((embedding, index) => ({ object: 'embedding', index, embedding })),
      });
    } catch (e) {
      answer(res, 400, { error: { message: String(e) } });
    }
  });
});
server.keepAliveTimeout = 60000;
server.listen(+port, '127.0.0.1', () => console.error(`listening on http://127.0.0.1:${server.address().port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
