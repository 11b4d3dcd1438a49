// Regenerates the component references of tests/test_tok_components.c from Hugging Face's
// Rust `tokenizers` 0.23.2 (its Node binding). Not run by `make test`; the outputs are stored.
//   mkdir /tmp/tokref && cd /tmp/tokref && npm init -y && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/tokref/node_modules node gen.mjs [--no-sweeps]
// Writes normalizers.json, pretokenizers.json, decoders.json, errors.json and sweeps.txt.
import { createRequire } from 'module';
import fs from 'fs';
import { spawnSync } from 'child_process';
import path from 'path';
const require = createRequire(path.join(process.env.NODE_PATH || '/tmp/tokref2/node_modules', 'x'));
const tk = require('tokenizers');
const here = path.dirname(new URL(import.meta.url).pathname);
const charsmap = fs.readFileSync(path.join(here, 'charsmap.b64'), 'utf8').trim();

function tokenizer(normalizer, pre_tokenizer, decoder) {
    const j = {
        version: '1.0', truncation: null, padding: null, added_tokens: [],
        normalizer, pre_tokenizer, post_processor: null, decoder,
        model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' },
    };
    return tk.Tokenizer.fromString(JSON.stringify(j));
}

// ---------------------------------------------------------------- inputs
const texts = [
    '', ' ', '   ', 'a', 'Hello World', '  leading and trailing  ', 'Hello  world   again',
    'H\u00e9llo w\u00f6rld', 'He\u0301llo wo\u0308rld', 'A\u030a \u00c5 \u212b',
    '\ufb01 ligature \u2460 x\u00b2 \u00bd \u2126', '\u4e2d\u6587\u5b57\u7b26 and \u65e5\u672c\u8a9e\u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca \ud55c\uad6d\uc5b4',
    '\u{20000}\u{2A6A5} astral CJK \u{2B740}\u{2F800}', 'emoji \u{1F44D}\u{1F3FD} \u{1F468}\u200d\u{1F469}\u200d\u{1F467} \u{1F970}',
    'zero\u200dwidth\u200bspace\u200cnon\ufeffbom', 'tab\tnew\nline\r\ncrlf\rcr', 'ctrl\u0001\u0007\u007f\u0085\u008fx',
    '\ufffd\u0000nul', '\u0130stanbul \u03a3\u0391\u03a3 \u1e9e stra\u00dfe', 'nbsp\u00a0thin\u2009ideo\u3000end',
    'price: $1,234.56 + 7\u00bd% (approx.)', "don't I'm we're they've she'll he'd It's", "ABC\u2019s 'S 'LL '\u017f",
    'a__b--c', '\u0661\u0662\u0663 Arabic-Indic \u0663\u0664', '\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940 \u0e44\u0e17\u0e22',
    '\u{1F642}\u0301', 'x\u0345y', '\u01c5 \u01c8 \u01cb', '\u{1D400}\u{1D401}\u{1D402} math', 'lone \u0300 mark',
    '\u2581already\u2581meta \u2581', 'a  b   c', 'line\u2028sep\u2029para', '...!!!???', 'new\n\n\nlines  \n  ',
    'Mixed123numbers4567and89', '\u00bf\u00a1Qu\u00e9? \u00abguillemets\u00bb \u201cquotes\u201d', 'x\u0000y\u0000',
    'HELLO \u00c9COLE \u0130I', '\u1100\u1161\u11a8 \uac00', '\u0915\u094d\u0937 \u0e01\u0e33', 'a\u0301\u0302\u0303b',
    '\u00a0\u00a0lead nbsp', 'trail\u3000\u3000', '<0x41> \u2581\u2581', '\u2163 \u3250 \u33a1',
    'The quick brown fox jumps over the lazy dog. \u00c0 la carte! 42 \u00d7 7 = 294; \u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u{1F30D}',
    // a run of 120 combining marks of mixed classes (canonical reordering of a long run)
    'a' + Array.from({ length: 120 }, (_, i) => ['\u0301', '\u0316', '\u0327', '\u05b0', '\u093c', '\u0345', '\u0308', '\u1dff', '\u0334'][(i * 7 + (i >> 2)) % 9]).join('') + 'e\u0301 x',
];

// ---------------------------------------------------------------- normalizers
const normalizerConfigs = [
    ['bert_default', { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true }],
    ['bert_cased', { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: false }],
    ['bert_strip_only', { type: 'BertNormalizer', clean_text: false, handle_chinese_chars: false, strip_accents: true, lowercase: false }],
    ['bert_lower_keep_accents', { type: 'BertNormalizer', clean_text: false, handle_chinese_chars: false, strip_accents: false, lowercase: true }],
    ['nfc', { type: 'NFC' }], ['nfd', { type: 'NFD' }], ['nfkc', { type: 'NFKC' }], ['nfkd', { type: 'NFKD' }],
    ['lowercase', { type: 'Lowercase' }],
    ['strip_both', { type: 'Strip', strip_left: true, strip_right: true }],
    ['strip_left', { type: 'Strip', strip_left: true, strip_right: false }],
    ['strip_right', { type: 'Strip', strip_left: false, strip_right: true }],
    ['strip_accents', { type: 'StripAccents' }],
    ['nfd_strip_accents', { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }] }],
    ['replace_string', { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }],
    ['replace_string_long', { type: 'Replace', pattern: { String: 'll' }, content: 'L' }],
    ['replace_string_del', { type: 'Replace', pattern: { String: 'o' }, content: '' }],
    ['replace_regex', { type: 'Replace', pattern: { Regex: ' {2,}' }, content: '\u2581' }],
    ['replace_regex_class', { type: 'Replace', pattern: { Regex: '[\\p{P}]+' }, content: '<p>' }],
    ['replace_regex_empty_match', { type: 'Replace', pattern: { Regex: 'x*' }, content: '-' }],
    ['prepend', { type: 'Prepend', prepend: '\u2581' }],
    ['prepend_long', { type: 'Prepend', prepend: '>>' }],
    ['llama_seq', { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' }, { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] }],
    ['byte_level', { type: 'ByteLevel' }],
    ['nmt', { type: 'Nmt' }],
    ['precompiled', { type: 'Precompiled', precompiled_charsmap: charsmap }],
    ['marian_seq', { type: 'Sequence', normalizers: [{ type: 'Precompiled', precompiled_charsmap: charsmap },
        { type: 'Strip', strip_left: false, strip_right: true }, { type: 'Replace', pattern: { Regex: ' {2,}' }, content: '\u2581' }] }],
    ['empty_seq', { type: 'Sequence', normalizers: [] }],
    ['clip_norm', { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }, { type: 'Lowercase' }] }],
    ['albert_norm', { type: 'Sequence', normalizers: [{ type: 'Replace', pattern: { String: '``' }, content: '"' },
        { type: 'Replace', pattern: { String: "''" }, content: '"' }, { type: 'NFKD' }, { type: 'StripAccents' }, { type: 'Lowercase' },
        { type: 'Precompiled', precompiled_charsmap: charsmap }] }],
];
const charSplit = { type: 'Split', pattern: { Regex: '(?m).' }, behavior: 'Isolated', invert: false };

async function normalizerCases(config) {
    const t = tokenizer(config, charSplit, null);
    const out = [];
    for (const input of texts) {
        const normalized = t.getNormalizer().normalizeString(input);
        const enc = await t.encode(input, null, { addSpecialTokens: false });
        const offsets = enc.getOffsets();
        if (offsets.length !== [...normalized].length) throw new Error(`char count ${config.type} ${input}`);
        out.push({ input, normalized, offsets });
    }
    return out;
}

// ---------------------------------------------------------------- pre-tokenizers
const gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const cl100k = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const qwen = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Llama-3 / o200k-style with possessive quantifiers and case classes
const o200k = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });
const behaviors = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];
const pretokConfigs = [
    ['bert', { type: 'BertPreTokenizer' }],
    ['whitespace', { type: 'Whitespace' }],
    ['whitespace_split', { type: 'WhitespaceSplit' }],
    ['byte_level', { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }],
    ['byte_level_noprefix', { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }],
    ['byte_level_noregex', { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }],
    ['byte_level_legacy', { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true }],
    ['metaspace_always', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }],
    ['metaspace_first', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true }],
    ['metaspace_never', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'never', split: true }],
    ['metaspace_nosplit', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false }],
    ['metaspace_legacy', { type: 'Metaspace', replacement: '\u2581', add_prefix_space: true }],
    ['metaspace_legacy_false', { type: 'Metaspace', replacement: '_', add_prefix_space: false, prepend_scheme: 'never' }],
    ['punctuation', { type: 'Punctuation', behavior: 'Isolated' }],
    ['punctuation_default', { type: 'Punctuation' }],
    ['punctuation_removed', { type: 'Punctuation', behavior: 'Removed' }],
    ['digits', { type: 'Digits', individual_digits: false }],
    ['digits_individual', { type: 'Digits', individual_digits: true }],
    ['unicode_scripts', { type: 'UnicodeScripts' }],
    ['char_delimiter', { type: 'CharDelimiterSplit', delimiter: ' ' }],
    ['char_delimiter_astral', { type: 'CharDelimiterSplit', delimiter: '\u2581' }],
    ['fixed_length', { type: 'FixedLength', length: 3 }],
    ['fixed_length_default', { type: 'FixedLength' }],
    ['split_cl100k', split({ Regex: cl100k }, 'Removed', true)],
    ['split_qwen', split({ Regex: qwen }, 'Isolated', false)],
    ['split_o200k', split({ Regex: o200k }, 'Isolated', false)],
    ['split_gpt2', split({ Regex: gpt2 }, 'Isolated', false)],
    ['split_empty_regex', split({ Regex: '' }, 'Isolated', false)],
    ['split_empty_matches', split({ Regex: 'a*' }, 'Isolated', false)],
    ['split_lookbehind', split({ Regex: '(?<=l)l|$|^' }, 'Isolated', false)],
    ['split_hex_h', split({ Regex: '\\h+' }, 'Isolated', false)],
    ['split_word', split({ Regex: '\\w+' }, 'Isolated', false)],
    ['split_digit_space', split({ Regex: '\\d|\\s' }, 'Isolated', false)],
    // BLOOM's: a class nested in a class (their union in Oniguruma)
    ['split_bloom', split({ Regex: ' ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+' }, 'Isolated', false)],
    ['split_posix_nested', split({ Regex: '[[:alpha:][0-9]]+|[a-c&&b]' }, 'Isolated', false)],
    ['split_ruby_options', split({ Regex: '(?m:a.b)|\\u00e9+|\\H\\h' }, 'Isolated', false)],
    ['split_empty_string', split({ String: '' }, 'Isolated', false)],
    // CLIP's and Falcon's pre-tokenizers, T5's
    ['clip_seq', { type: 'Sequence', pretokenizers: [split({ Regex: "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, 'Removed', true),
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] }],
    ['falcon_seq', { type: 'Sequence', pretokenizers: [{ type: 'Punctuation', behavior: 'Contiguous' },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }, { type: 'Digits', individual_digits: false },
        split({ Regex: '[0-9][0-9][0-9]' }, 'Isolated', false)] }],
    ['t5_seq', { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }] }],
    ['gpt3_seq', { type: 'Sequence', pretokenizers: [split({ Regex: cl100k }, 'Removed', true),
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] }],
    ['seq_ws_digits', { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Digits', individual_digits: true }] }],
];
// one property each, for the whole-Unicode sweeps of the Oniguruma translation
for (const prop of ['L', 'N', 'P', 'S', 'M', 'Lu', 'Ll', 'Han', 'Latin', 'Cyrillic', 'Arabic', 'Common'])
    pretokConfigs.push([`prop_${prop}`, split({ Regex: `\\p{${prop}}` }, 'Removed', false)]);
for (const b of behaviors) {
    for (const inv of [false, true]) {
        pretokConfigs.push([`split_str_${b}_${inv}`, split({ String: ' ' }, b, inv)]);
        pretokConfigs.push([`split_str2_${b}_${inv}`, split({ String: 'l' }, b, inv)]);
        pretokConfigs.push([`split_re_${b}_${inv}`, split({ Regex: '\\s+|\\p{P}' }, b, inv)]);
    }
    pretokConfigs.push([`punctuation_${b}`, { type: 'Punctuation', behavior: b }]);
}

function pretokCases(config) {
    const t = tokenizer(null, config, null);
    return texts.map((input) => ({ input, pieces: t.getPreTokenizer().preTokenizeString(input) }));
}

// ---------------------------------------------------------------- decoders
const tokenLists = [
    [], ['a'], ['hello', '##world', '##s', 'and', 'more', '.'], ['do', 'not', "'", 's', '?', 'i', "'m", 'a', "n't", ',', '!'],
    ['\u2581Hello', '\u2581world', '\u2581', '\u2581\u2581x'], ['\u0120hello', '\u0120w\u00c3\u00b6rld', '\u010a', '\u00e6\u0139\u00a5'],
    ['<0x41>', '<0xE4>', '<0xB8>', '<0xAD>', 'x', '<0xFF>', '<0x4>', '<0x4G>', '<0xe4>', '<0xb8>', '<0xad>'],
    ['<0xE4>', '<0xB8>'], ['\u2581\u2581', '\u2581', 'a', '\u2581'], ['hello</w>', 'wor', 'ld</w>', '</w>'],
    ['<pad>', 'h', 'h', '<pad>', 'e', 'l', 'l', '<pad>', 'l', 'o', '|', '|', 'w', 'o', '<pad>', '|'],
    ['not\u0120bytes\u2603', '\u0120ok'], ['  x  ', ' ', ''], ['##', '##a', 'b##'],
];
const decoderConfigs = [
    ['wordpiece', { type: 'WordPiece', prefix: '##', cleanup: true }],
    ['wordpiece_nocleanup', { type: 'WordPiece', prefix: '##', cleanup: false }],
    ['byte_level', { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }],
    ['metaspace_always', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }],
    ['metaspace_never', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'never', split: true }],
    ['metaspace_first', { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false }],
    ['byte_fallback', { type: 'ByteFallback' }],
    ['fuse', { type: 'Fuse' }],
    ['strip', { type: 'Strip', content: ' ', start: 1, stop: 0 }],
    ['strip_both', { type: 'Strip', content: '\u2581', start: 2, stop: 1 }],
    ['replace', { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }],
    ['replace_regex', { type: 'Replace', pattern: { Regex: '#+' }, content: '' }],
    ['ctc', { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: true }],
    ['ctc_nocleanup', { type: 'CTC', pad_token: '<pad>', word_delimiter_token: '|', cleanup: false }],
    ['bpe', { type: 'BPEDecoder', suffix: '</w>' }],
    ['llama_seq', { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
        { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] }],
];

// The Rust code panics (aborting the process) on some inputs, so each decode runs in a child.
function decoderCases(config) {
    const out = [];
    for (const tokens of tokenLists) {
        const r = spawnSync(process.execPath, [new URL(import.meta.url).pathname, '--decode-one',
            JSON.stringify(config), JSON.stringify(tokens)], { encoding: 'utf8', env: process.env });
        if (r.status === 0) out.push({ tokens, output: JSON.parse(r.stdout) });
        else out.push({ tokens, panic: true });
    }
    return out;
}

// ---------------------------------------------------------------- errors
const errorConfigs = [
    ['normalizer', { type: 'Bogus' }],
    ['normalizer', { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'Bogus' }] }],
    ['normalizer', { type: 'Replace', pattern: { Regex: '([' }, content: '' }],
    ['normalizer', { type: 'Precompiled', precompiled_charsmap: '@@not base64@@' }],
    ['normalizer', { type: 'Precompiled', precompiled_charsmap: 'AAAA' }],
    ['normalizer', { type: 'Strip', strip_left: 'yes', strip_right: true }],
    ['pre_tokenizer', { type: 'Bogus' }],
    ['pre_tokenizer', { type: 'Split', pattern: { Regex: '(?<=a+)b' }, behavior: 'Isolated', invert: false }],
    ['pre_tokenizer', { type: 'Split', pattern: { Regex: '[' }, behavior: 'Isolated', invert: false }],
    ['pre_tokenizer', { type: 'Split', pattern: { String: 'x' }, behavior: 'Sideways', invert: false }],
    ['pre_tokenizer', { type: 'Metaspace', replacement: '\u2581', add_prefix_space: false, prepend_scheme: 'always' }],
    ['pre_tokenizer', { type: 'Metaspace', replacement: 'ab', prepend_scheme: 'always' }],
    ['pre_tokenizer', { type: 'Sequence', pretokenizers: [{ type: 'Whitespace' }, { type: 'Nope' }] }],
    ['decoder', { type: 'Bogus' }],
    ['decoder', { type: 'Strip', content: 'xy', start: 1, stop: 0 }],
    ['decoder', { type: 'Sequence', decoders: [{ type: 'Fuse' }, 42] }],
];
function errorCases() {
    return errorConfigs.map(([slot, config]) => {
        const r = spawnSync(process.execPath, [new URL(import.meta.url).pathname, '--load-one', slot,
            JSON.stringify(config)], { encoding: 'utf8', env: process.env });
        if (r.status === 0) return { slot, config, rust_error: r.stdout || null };
        return { slot, config, rust_error: 'panic' };
    });
}

// ---------------------------------------------------------------- whole-range sweeps
// Every code point (surrogates excluded) through one component with a template ("{c}" is the
// code point); the per-block FNV-1a hash of the serialized outputs is stored.
const BLOCK = 4096;
function fnv(h, str) {
    const b = Buffer.from(str, 'utf8');
    for (let i = 0; i < b.length; i++) { h ^= b[i]; h = Math.imul(h, 16777619) >>> 0; }
    return h;
}
const sweeps = [
    ['normalizer', 'bert_default', '{c}'], ['normalizer', 'bert_cased', '{c}'], ['normalizer', 'bert_strip_only', '{c}'],
    ['normalizer', 'bert_lower_keep_accents', '{c}'], ['normalizer', 'nfc', '{c}'], ['normalizer', 'nfd', '{c}'],
    ['normalizer', 'nfkc', '{c}'], ['normalizer', 'nfkd', '{c}'], ['normalizer', 'lowercase', '{c}'],
    ['normalizer', 'strip_both', '{c}a{c}'], ['normalizer', 'strip_accents', '{c}'], ['normalizer', 'nmt', '{c}'],
    ['normalizer', 'precompiled', '{c}'], ['normalizer', 'precompiled', 'a{c}'],
    ['pre_tokenizer', 'bert', 'a{c}a'], ['pre_tokenizer', 'whitespace', 'a{c}a'], ['pre_tokenizer', 'whitespace', '.{c}.'],
    ['pre_tokenizer', 'whitespace_split', 'a{c}a'], ['pre_tokenizer', 'punctuation', 'a{c}a'],
    ['pre_tokenizer', 'digits', 'a{c}a'], ['pre_tokenizer', 'byte_level', 'a{c}a'], ['pre_tokenizer', 'byte_level', '1{c}1'],
    ['pre_tokenizer', 'split_cl100k', 'a{c}a'], ['pre_tokenizer', 'split_cl100k', "1{c}'{c}"], ['pre_tokenizer', 'split_cl100k', " {c}\n"],
    ['pre_tokenizer', 'split_qwen', '1{c}1'], ['pre_tokenizer', 'split_o200k', 'a{c}A'], ['pre_tokenizer', 'split_o200k', 'A{c}a'],
    ['pre_tokenizer', 'split_word', 'a{c}a'], ['pre_tokenizer', 'split_digit_space', 'a{c}a'],
    ['pre_tokenizer', 'unicode_scripts', 'a{c}a'], ['pre_tokenizer', 'unicode_scripts', '0{c}0'],
    ['pre_tokenizer', 'unicode_scripts', '\u3042{c}\u3042'], ['pre_tokenizer', 'unicode_scripts', '{c}{d}'],
    ['decoder', 'byte_level', '{c}'],
    ...['L', 'N', 'P', 'S', 'M', 'Lu', 'Ll', 'Han', 'Latin', 'Cyrillic', 'Arabic', 'Common'].map((p) => ['pre_tokenizer', `prop_${p}`, '{c}']),
];
function runSweep(slot, name, template, dump) {
    const list = slot === 'normalizer' ? normalizerConfigs : slot === 'pre_tokenizer' ? pretokConfigs : decoderConfigs;
    const config = list.find(([n]) => n === name)[1];
    const t = slot === 'normalizer' ? tokenizer(config, null, null) : slot === 'pre_tokenizer' ? tokenizer(null, config, null) : tokenizer(null, null, config);
    const comp = slot === 'normalizer' ? t.getNormalizer() : slot === 'pre_tokenizer' ? t.getPreTokenizer() : t.getDecoder();
    const hashes = [];
    for (let block = 0; block < 0x110000 / BLOCK; block++) {
        let h = 2166136261;
        for (let cp = block * BLOCK; cp < (block + 1) * BLOCK; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            const c = String.fromCodePoint(cp);
            const d = String.fromCodePoint(cp + 1 === 0xD800 ? 0xE000 : cp + 1 > 0x10FFFF ? 0x20 : cp + 1);
            const input = template.replaceAll('{c}', c).replaceAll('{d}', d);
            let s;
            if (slot === 'normalizer') s = comp.normalizeString(input);
            else if (slot === 'pre_tokenizer') s = comp.preTokenizeString(input).map(([p, [a, b]]) => `${p}\u0001${a},${b}`).join('\u0002');
            else s = comp.decode([input]);
            h = fnv(h, s + '\u0000');
            if (dump) dump.push(`${cp.toString(16)}\t${JSON.stringify(s)}`);
        }
        hashes.push(h.toString(16).padStart(8, '0'));
    }
    return hashes;
}

// ---------------------------------------------------------------- main
const args = process.argv.slice(2);
if (args[0] === '--load-one') {
    const c = JSON.parse(args[2]);
    try {
        if (args[1] === 'normalizer') tokenizer(c, null, null);
        else if (args[1] === 'pre_tokenizer') tokenizer(null, c, null);
        else tokenizer(null, null, c);
    } catch (e) {
        process.stdout.write(String(e.message || e));
    }
    process.exit(0);
}
if (args[0] === '--decode-one') {
    const t = tokenizer(null, null, JSON.parse(args[1]));
    process.stdout.write(JSON.stringify(t.getDecoder().decode(JSON.parse(args[2]))));
    process.exit(0);
}
if (args[0] === '--dump') {
    // --dump slot name template: every code point's output, for finding a mismatch
    const dump = [];
    runSweep(args[1], args[2], args[3], dump);
    process.stdout.write(dump.join('\n') + '\n');
    process.exit(0);
}
// The charsmap is stored once (charsmap.b64); the case files name it "@charsmap.b64".
// --random OUTDIR N SEED: the case files for N random mixed-script texts instead of the fixed
// ones, written to OUTDIR (for `test_tok_components --dir OUTDIR`; not stored).
let outDir = here;
if (args[0] === '--random') {
    outDir = args[1];
    let seed = +(args[3] || 1);
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const pools = ['abcXYZ', '  \t\n\r', '0123456789', '.,;:!?\'"-_()[]{}', '\u00e9\u00c5\u00df\u0130\u03a3\u03c2',
        '\u0300\u0301\u0308\u0327\u0345\u05b0\u093c\u0e31', '\u1100\u1161\u11a8\uac00\ud7a3',
        '\u4e2d\u6587\u3042\u30ab\u30fc\u{20000}', '\u{1F600}\u{1F3FD}\u200d\u{1F468}\u{1F1EB}\u{1F1F7}',
        '\u00a0\u2009\u3000\u200b\ufeff\u2581', '\u0915\u094d\u0937\u0627\u0644\u05e9', '\ufb01\u2460\u00bd\u212b\u1e9b\u0149',
        '\u0001\u007f\u0085\ufffd\u{E0001}', "'s'S'll'\u017f"];
    texts.length = 0;
    for (let i = 0; i < +args[2]; i++) {
        let t = '';
        const n = Math.floor(rnd() * 24);
        for (let k = 0; k < n; k++) {
            const pool = [...pools[Math.floor(rnd() * pools.length)]];
            t += pool[Math.floor(rnd() * pool.length)];
        }
        texts.push(t);
    }
    args.push('--no-sweeps');
}
const write = (f, v) => fs.writeFileSync(path.join(outDir, f), JSON.stringify(v, null, 0).replaceAll(charsmap, '@charsmap.b64').replace(/\},\{"(name|input|tokens|slot)"/g, '},\n{"$1"') + '\n');
const norms = [];
for (const [name, config] of normalizerConfigs) norms.push({ name, config, cases: await normalizerCases(config) });
write('normalizers.json', norms);
write('pretokenizers.json', pretokConfigs.map(([name, config]) => ({ name, config, cases: pretokCases(config) })));
write('decoders.json', decoderConfigs.map(([name, config]) => ({ name, config, cases: decoderCases(config) })));
if (outDir === here) write('errors.json', errorCases());
if (!args.includes('--no-sweeps')) {
    const lines = [`# slot name template(JSON) then ${0x110000 / BLOCK} FNV-1a-32 block hashes (blocks of ${BLOCK} code points)`];
    for (const [slot, name, template] of sweeps) {
        lines.push([slot, name, JSON.stringify(template), ...runSweep(slot, name, template)].join(' '));
        process.stderr.write(`sweep ${slot} ${name} ${template}\n`);
    }
    fs.writeFileSync(path.join(here, 'sweeps.txt'), lines.join('\n') + '\n');
}
