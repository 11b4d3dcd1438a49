// common.mjs — shared by check.mjs and bench.mjs: resolves the npm packages installed in
// bench/.tok (make tokenizer-check / bench-tokenizers install them), unpacks the test
// tokenizers (tests/data/tokenizers/*/*.xz) into a build folder, and lists them. Not a
// test or a benchmark by itself.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const DATA = path.join(ROOT, 'tests/data/tokenizers');
const req = createRequire(path.join(ROOT, 'bench/.tok/package.json'));

export function requirePkg(name) {
  try {
    return req(name);
  } catch (e) {
    console.error(`cannot load ${name} from bench/.tok (run: make ${name === 'tokenizers' ? 'tokenizer-check' : 'bench-tokenizers'}): ${e.message}`);
    process.exit(2);
  }
}

export async function importPkg(name) {
  return import(req.resolve(name));
}

export function version(name) {
  return JSON.parse(fs.readFileSync(path.join(ROOT, 'bench/.tok/node_modules', name, 'package.json'), 'utf8')).version;
}

// The tokenizer folders of tests/data/tokenizers, unpacked into build/<sub>/<name>.
export function unpackAll(build, sub, only) {
  const out = [];
  for (const name of fs.readdirSync(DATA).sort()) {
    const src = path.join(DATA, name);
    if (!fs.existsSync(path.join(src, 'tokenizer.json.xz')) && !fs.existsSync(path.join(src, 'tokenizer.json'))) continue;
    if (only && !only.includes(name)) continue;
    const dst = path.join(build, sub, name);
    fs.mkdirSync(dst, { recursive: true });
    for (const f of ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']) {
      const to = path.join(dst, f);
      if (fs.existsSync(path.join(src, f + '.xz'))) {
        if (!fs.existsSync(to) || fs.statSync(to).mtimeMs < fs.statSync(path.join(src, f + '.xz')).mtimeMs)
          fs.writeFileSync(to, execFileSync('xz', ['-dc', path.join(src, f + '.xz')], { maxBuffer: 1 << 30 }));
      } else if (fs.existsSync(path.join(src, f))) {
        fs.copyFileSync(path.join(src, f), to);
      }
    }
    out.push({ name, dir: dst, json: path.join(dst, 'tokenizer.json') });
  }
  return out;
}

export function readJSON(p, dflt) {
  return fs.existsSync(p) ? JSON.parse(fs.readFileSync(p, 'utf8')) : dflt;
}

// A stable 32-bit seed from a name.
export function seedOf(name, base) {
  let h = base >>> 0;
  for (const c of name) h = Math.imul(h ^ c.codePointAt(0), 16777619) >>> 0;
  return h;
}
