// Regenerates random.jsonl: small random templates (whitespace control around tags and
// text, expressions mixing operators, filters, tests and methods, statements with loops,
// namespaces, macros and break) rendered by @huggingface/jinja, for tests/test_chat_template.c.
// Deterministic (fixed seeds). Not run by `make test`. From the repository root:
//   NODE_PATH=$REF/node_modules node tests/data/templates/gen_random.mjs tests/data/templates
//   xz -9 -f tests/data/templates/random.jsonl
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), 'x.js'));
const { Template } = require('@huggingface/jinja');

let seed = 1;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const pick = (a) => a[rnd(a.length)];
const lines = [];
function add(family, k, template, vars) {
  let r;
  try { r = { rendered: new Template(template).render(vars) }; } catch (e) { r = { error: String(e.message) }; }
  lines.push(JSON.stringify({ id: `${family}-${k}`, template, vars, ...r }));
}

// Whitespace: trim_blocks, lstrip_blocks, -, comments, generation tags, CR and Unicode spaces.
seed = 12345;
const frags = ['\n', '\r\n', '\r', ' ', '\t', '  ', 'a', 'b ', '\u2028', '\u00a0', '{% if true %}', '{% endif %}',
  '{%- if true %}', '{% endif -%}', '{%- if x -%}', '{{ "v" }}', '{{- "w" }}', '{{ "y" -}}', '{{- "z" -}}', '{# c #}',
  '{#- c -#}', '{% set q = 1 %}', '{%- set q = 2 -%}', '{% for i in [1,2] %}', '{% endfor %}', '{% generation %}',
  '{%- endgeneration -%}', '{% endgeneration %}', '-}', '%}\n', '}\n', '#}'];
for (let k = 0; k < 3000; k++) {
  let t = '';
  const len = 1 + rnd(12);
  for (let i = 0; i < len; i++) t += pick(frags);
  add('ws', k, t, { x: true });
}

// Expressions.
seed = 777;
const atoms = ['1', '0', '-2', '3.5', '2.0', "'abc'", "''", "'A b'", 'true', 'false', 'none', 'x', 'y', 'l', 'd', 's', 'u',
  '[1, 2, 3]', "{'k': 1}", '(1, 2)', "'é'"];
const binops = ['+', '-', '*', '/', '//', '%', '**', '~', '==', '!=', '<', '>', '<=', '>=', 'in', 'not in', 'and', 'or'];
const filters = ['length', 'upper', 'lower', 'first', 'last', 'join', "join(',')", 'list', 'tojson', 'string', 'int', 'float',
  'abs', 'trim', 'title', 'capitalize', 'reverse', 'sort', 'unique', 'items', "default('D')", 'count', 'round', 'select',
  "map('upper')", "replace('a','b')", 'indent', 'safe', 'e', 'wordcount', 'sum', 'min', 'max', 'dictsort', 'bool', 'keys', 'values'];
const tests = ['defined', 'undefined', 'none', 'string', 'number', 'integer', 'float', 'mapping', 'iterable', 'sequence',
  'boolean', 'true', 'false', 'odd', 'even', 'lower', 'upper', 'callable'];
const methods = ['.upper()', '.lower()', '.strip()', ".split(',')", '.split()', ".startswith('a')", ".endswith('c')", '.title()',
  ".replace('b','X')", '.items()', '.keys()', '.values()', ".get('k')", '[0]', '[-1]', '[1:]', '[::-1]', '.length', '.k'];
function expr(d) {
  const r = rnd(d > 2 ? 3 : 8);
  if (r === 0 || r >= 6) return pick(atoms);
  if (r === 1) return `(${expr(d + 1)} ${pick(binops)} ${expr(d + 1)})`;
  if (r === 2) return `(${expr(d + 1)} | ${pick(filters)})`;
  if (r === 3) return `(${expr(d + 1)} is ${rnd(2) ? 'not ' : ''}${pick(tests)})`;
  if (r === 4) return `${pick(atoms)}${pick(methods)}`;
  return `(${expr(d + 1)} if ${expr(d + 1)} else ${expr(d + 1)})`;
}
const evars = { x: 5, y: 2.5, l: ['b', 'a', 'c'], d: { k: 'v', a: 2 }, s: 'a,b,c' };
for (let k = 0; k < 6000; k++) add('expr', k, `{{ ${expr(0)} }}`, evars);

// Statements over messages.
seed = 4242;
const sexprs = ['m.role', 'm.content', 'm.content | trim', 'loop.index', 'loop.index0', 'loop.first', 'loop.last', 'loop.length',
  'loop.revindex', 'ns.c', 'ns.s', 'x', 'i', 'messages | length', "m.content.split(' ')[0]", "m.get('role')",
  'm.tool_calls | default([]) | length', "messages | map(attribute='role') | join(',')",
  "messages | selectattr('role', 'equalto', 'user') | list | length", 'm.content[:3]', 'm.content[::-1]', 'k', 'v',
  "(m.role ~ '!')", "m['content'] | upper", 'm.content | tojson', 'messages[-1].role', "messages[0]['content'] | length",
  'm | tojson', "m.content.startswith('H')", "'x' in m.content", "m.role if m.role != 'user' else 'U'",
  "m.content | replace(' ', '_')"];
const conds = ['loop.first', 'loop.last', "m.role == 'user'", "m.role == 'assistant'", 'ns.c > 1', 'i is even', 'm.content',
  'not loop.first', 'x is defined', 'm.tool_calls is defined'];
function block(d) {
  const parts = [];
  const n = 1 + rnd(3);
  for (let k = 0; k < n; k++) {
    const r = rnd(d > 1 ? 4 : 9);
    const ws = pick(['', '-']), ws2 = pick(['', '-']), nl = pick(['', '\n', '\n  ', ' ']);
    if (r < 2) parts.push(`${nl}{{${ws} ${pick(sexprs)} ${ws2}}}`);
    else if (r === 2) parts.push(`${nl}{%${ws} set ns.c = ns.c + 1 ${ws2}%}`);
    else if (r === 3) parts.push(`${nl}text${rnd(9)} `);
    else if (r === 4) parts.push(`${nl}{%${ws} if ${pick(conds)} ${ws2}%}${block(d + 1)}{% else %}${block(d + 1)}{% endif %}`);
    else if (r === 5) parts.push(`${nl}{%${ws} for m in messages ${rnd(2) ? "if m.role != 'system' " : ''}${ws2}%}${block(d + 1)}{% endfor %}`);
    else if (r === 6) parts.push(`${nl}{% for i in range(${rnd(4)}) %}${block(d + 1)}{% if i == 1 %}{% break %}{% endif %}{% endfor %}`);
    else if (r === 7) parts.push(`${nl}{% set x = ${pick(sexprs)} %}{% set ns.s = ns.s ~ x %}`);
    else parts.push(`${nl}{% for k, v in {'a': 1, 'b': ${rnd(5)}}.items() %}${block(d + 1)}{% endfor %}`);
  }
  return parts.join('');
}
const svars = {
  messages: [{ role: 'system', content: 'Be nice.' }, { role: 'user', content: 'Hello there' },
    { role: 'assistant', content: ' Hi! ', tool_calls: [{ function: { name: 'f', arguments: { a: 1 } } }] },
    { role: 'user', content: 'Bye' }],
  add_generation_prompt: true,
};
for (let k = 0; k < 4000; k++) {
  const t = "{%- set ns = namespace(c=0, s='') -%}{% macro mm(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}" + block(0) +
    '{{ mm(ns.c) }}{{ ns.s }}';
  add('stmt', k, t, svars);
}
fs.writeFileSync(path.join(process.argv[2] || '.', 'random.jsonl'), lines.join('\n') + '\n');
console.log(JSON.stringify({ cases: lines.length }));
