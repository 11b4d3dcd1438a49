// texts.mjs — deterministic generator of test and benchmark texts for the tokenizers:
// random Unicode from many scripts, mixed scripts, whitespace runs (tabs, CRLF, NBSP,
// ideographic space), emoji and ZWJ sequences, combining marks, digit runs, punctuation,
// code, and the tokenizer's own added/special tokens embedded at random places.
// Used by check.mjs (10,000 texts per tokenizer) and bench.mjs (the ~20 MB corpus).
// Not a test by itself; the same seed always gives the same texts.

// mulberry32: small, fast, good enough for test data; never Math.random.
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const r = {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (arr) => arr[Math.floor(next() * arr.length)],
    chance: (p) => next() < p,
  };
  return r;
}

// [first, last] code point ranges of letters per script
const SCRIPTS = {
  latin: [[0x61, 0x7a], [0x41, 0x5a]],
  latin1: [[0xe0, 0xff], [0xc0, 0xde]],
  latinext: [[0x100, 0x17f], [0x1e00, 0x1eff]],
  greek: [[0x3b1, 0x3c9], [0x391, 0x3a9]],
  cyrillic: [[0x430, 0x44f], [0x410, 0x42f]],
  armenian: [[0x561, 0x586]],
  hebrew: [[0x5d0, 0x5ea]],
  arabic: [[0x627, 0x64a]],
  devanagari: [[0x915, 0x939], [0x93e, 0x94d]],
  bengali: [[0x995, 0x9b9]],
  tamil: [[0xb95, 0xbb9]],
  thai: [[0xe01, 0xe2e], [0xe31, 0xe3a]],
  georgian: [[0x10d0, 0x10fa]],
  hangul: [[0xac00, 0xd7a3]],
  hiragana: [[0x3041, 0x3096]],
  katakana: [[0x30a1, 0x30fa]],
  cjk: [[0x4e00, 0x9fff]],
  cjkext: [[0x20000, 0x2a6df], [0x3400, 0x4dbf]],
  ethiopic: [[0x1200, 0x1248]],
  math: [[0x1d400, 0x1d433], [0x2200, 0x22ff]],
};
const SCRIPT_NAMES = Object.keys(SCRIPTS);
const COMBINING = [[0x300, 0x36f], [0x1ab0, 0x1abe], [0x20d0, 0x20f0]];
const EMOJI = ['😀', '👍', '🎉', '🚀', '❤️', '👨‍👩‍👧‍👦', '🏳️‍🌈', '👩🏽‍💻', '🇫🇷', '🇯🇵', '✌🏿', '🧑‍🤝‍🧑',
  '☕', '⭐', '1️⃣', '#️⃣', '😂', '🤖', '🐍', '🦀'];
const SPACES = [' ', ' ', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', '\u00a0', '\u2003', '\u3000',
  '\u200b', ' \t ', '\r', '\u2028', '\u00a0\u00a0', '        '];
const PUNCT = ['.', ',', '!', '?', ';', ':', '-', '--', '...', '(', ')', '[', ']', '{', '}', '"', "'",
  '`', '/', '\\', '@', '#', '$', '%', '^', '&', '*', '+', '=', '<', '>', '|', '~', '_', '«', '»',
  '“', '”', '‘', '’', '—', '–', '…', '¿', '¡', '。', '、', '！', '？', '「', '」', '·', '§', '€',
  '£', '¥', '©', '®', '™', '°', '±', '×', '÷'];
const DIGITS = ['0123456789', '٠١٢٣٤٥٦٧٨٩', '０１２３４５６７８９', '०१२३४५६७८९', '①②③', '¼½¾', '²³'];
const WORDS = ['the', 'of', 'and', 'to', 'in', 'is', 'that', 'for', 'it', 'was', 'on', 'are', 'with',
  'Hello', 'World', 'tokenizer', 'transformers', "don't", "it's", "we'll", "I'm", "they've", "can't",
  'naïve', 'café', 'résumé', 'Straße', 'İstanbul', 'ǅemal', 'ﬁnance', 'ÅNGSTRÖM', 'Ωmega', 'ﬀ',
  'http://example.com/a?b=c&d=1', 'user@mail.org', 'C++', 'x86_64', 'e.g.', 'U.S.A.', 'O(n^2)',
  'function', 'return', 'self.x', '__init__', 'i++', '!=', '===', '->', '=>', '::', '#include'];
const CODE = ['def f(x):\n    return x * 2\n', 'for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}',
  'if x == None:\n        pass', '<div class="a">text</div>', '{"key": [1, 2.5, null, true]}',
  'SELECT * FROM t WHERE id = 42;', '    \n    \n', 'a  =  b\t\t# comment'];
const CONTROLS = ['\u0000', '\u0001', '\u0007', '\u001b', '\u007f', '\u0085', '\ufeff', '\ufffd',
  '\u200d', '\u200c', '\u2060', '\ufe0f', '\u00ad', '\u061c', '\u202e'];

const cp = (c) => String.fromCodePoint(c);

function letter(r, script) {
  const ranges = SCRIPTS[script];
  const [a, b] = r.pick(ranges);
  return cp(a + r.int(b - a + 1));
}

function word(r, script) {
  const n = 1 + r.int(r.chance(0.2) ? 20 : 8);
  let s = '';
  for (let i = 0; i < n; i++) {
    s += letter(r, script);
    if (r.chance(0.04)) {
      const [a, b] = r.pick(COMBINING);
      s += cp(a + r.int(b - a + 1));
    }
  }
  return s;
}

function digits(r) {
  const set = [...r.pick(DIGITS)];
  let s = '';
  const n = 1 + r.int(r.chance(0.3) ? 25 : 6);
  for (let i = 0; i < n; i++) s += r.pick(set);
  if (r.chance(0.2)) s += r.pick(['.', ',', ':', '/']) + digits(r);
  return s;
}

// One piece of text: a word of some script, an English word, digits, punctuation, emoji,
// code, a control character or an added token.
function piece(r, specials, script) {
  const k = r.next();
  if (k < 0.35) return word(r, r.chance(0.7) ? script : r.pick(SCRIPT_NAMES));
  if (k < 0.55) return r.pick(WORDS);
  if (k < 0.63) return digits(r);
  if (k < 0.73) return r.pick(PUNCT).repeat(r.chance(0.1) ? 1 + r.int(5) : 1);
  if (k < 0.79) return r.pick(EMOJI);
  if (k < 0.81) return r.pick(CODE);
  if (k < 0.83) return r.pick(CONTROLS);
  if (k < 0.86) {
    const [a, b] = r.pick(COMBINING);   // a lone combining mark
    return cp(a + r.int(b - a + 1));
  }
  if (specials.length && k < 0.93) return r.pick(specials);
  return word(r, 'latin');
}

// A text of about `target` characters (0 gives the empty string).
export function text(r, specials, target) {
  let s = '';
  const script = r.pick(SCRIPT_NAMES);
  if (r.chance(0.1)) s += r.pick(SPACES);
  while (s.length < target) {
    s += piece(r, specials, script);
    // no separator sometimes: words glued to punctuation, added tokens inside words
    if (!r.chance(0.2)) s += r.chance(0.85) ? ' ' : r.pick(SPACES);
  }
  if (r.chance(0.5)) s = s.trimEnd();
  if (r.chance(0.05)) s += r.pick(SPACES);
  return s;
}

// The added tokens of a tokenizer.json (special or not), weighted to the first ones and
// with the well-known specials of any family (which may or may not be in this vocabulary).
export function specialsOf(tokJSON) {
  const added = (tokJSON.added_tokens ?? []).map((a) => a.content);
  const few = added.slice(0, 40);
  for (let i = 40; i < added.length; i += Math.ceil(added.length / 40)) few.push(added[i]);
  return [...few, '<s>', '</s>', '[CLS]', '[SEP]', '<|endoftext|>', '<unk>', '<pad>', '<mask>',
    '<|im_start|>', '[MASK]'];
}

// n cases {text, pair?}: lengths mostly short, some long, some empty; a pair in a quarter.
export function cases(seed, specials, n) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = r.chance(0.02) ? 0 : r.chance(0.1) ? 200 + r.int(1800) : 1 + r.int(120);
    const c = { text: text(r, specials, len) };
    if (r.chance(0.25)) c.pair = text(r, specials, 1 + r.int(80));
    out.push(c);
  }
  return out;
}
