// Regenerates cases.jsonl: every template of templates.json (real chat templates of
// tokenizer_config.json files, with the data of @huggingface/jinja's end-to-end tests)
// rendered by @huggingface/jinja, once with its own data and once per conversation of
// conversations.json (the shared test conversations) and extra_conversations.json.
// Not run by `make test`. From the repository root:
//   REF=$(mktemp -d) && (cd $REF && npm init -y >/dev/null && npm install @huggingface/jinja@0.5.13)
//   xz -dkf tests/data/templates/templates.json.xz
//   NODE_PATH=$REF/node_modules node tests/data/templates/gen.mjs tests/data/templates
//   python3 tests/data/templates/gen_jinja2.py tests/data/templates   # adds Python's renders
//   xz -9 -f tests/data/templates/cases.jsonl && rm tests/data/templates/templates.json
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), 'x.js'));
const { Template } = require('@huggingface/jinja');

// strftime_now reads the clock: fix it (UTC, 2026-01-15 10:30), as the C test does with
// SOURCE_DATE_EPOCH=1768473000 and TZ=UTC.
process.env.TZ = 'UTC';
const FIXED = Date.UTC(2026, 0, 15, 10, 30);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { super(...(a.length ? a : [FIXED])); }
  static now() { return FIXED; }
};

const dir = process.argv[2] || '.';
const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
const templates = read('templates.json');
const convs = [...read('conversations.json'), ...read('extra_conversations.json')];

function render(src, vars) {
  try {
    return { rendered: new Template(src).render(vars) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

const lines = [];
let errors = 0;
for (const [name, t] of Object.entries(templates)) {
  const own = { add_generation_prompt: false, ...t.data };
  lines.push({ id: `${name}#own`, template: name, vars: own, ...render(t.chat_template, own) });
  for (const c of convs) {
    const vars = {
      messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      tools: null, documents: null, bos_token: t.data.bos_token ?? '<s>',
      eos_token: t.data.eos_token ?? '</s>', date_string: '26 Jul 2024', ...(c.kwargs || {}),
    };
    const r = render(t.chat_template, vars);
    if (r.error) errors++;
    lines.push({ id: `${name}#${c.id}`, template: name, vars, ...r });
  }
}
fs.writeFileSync(path.join(dir, 'cases.jsonl'), lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
console.log(JSON.stringify({ templates: Object.keys(templates).length, cases: lines.length, errors }));
