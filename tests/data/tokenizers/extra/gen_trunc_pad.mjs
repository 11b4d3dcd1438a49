// Reference encodings with truncation, padding, overflowing parts, offsets and word ids
// from Hugging Face's Rust tokenizers (npm tokenizers@0.23.2), for tests/test_tokenizer.c.
// Usage (from a folder with node_modules/tokenizers): node gen_trunc_pad.mjs DATA_DIR > trunc_pad.jsonl
// DATA_DIR holds <name>/tokenizer.json (the unpacked test tokenizers).
import { createRequire } from 'module';
const { Tokenizer } = createRequire(process.cwd() + '/')('tokenizers');
const dir = process.argv[2];
const texts = [
  ['Hello, world! This is a longer sentence to truncate.', null],
  ['The quick brown fox jumps over the lazy dog', 'A pair sentence here'],
  ['naïve café — 日本語 テキスト 👋🏽 done', 'short'],
  ['  spaces   around  ', null],
];
const configs = [
  { trunc: { maxLength: 8, strategy: 'LongestFirst', stride: 0, direction: 'right' } },
  { trunc: { maxLength: 10, strategy: 'LongestFirst', stride: 2, direction: 'right' } },
  { trunc: { maxLength: 16, strategy: 'OnlyFirst', stride: 1, direction: 'left' } },
  { pad: { maxLength: 24, direction: 'right', padToMultipleOf: undefined } },
  { pad: { maxLength: 20, direction: 'left', padToMultipleOf: 8 } },
  { trunc: { maxLength: 14, strategy: 'LongestFirst', stride: 2, direction: 'right' },
    pad: { maxLength: 14, direction: 'right' } },
];
function dump(e) {
  return { ids: e.getIds(), tokens: e.getTokens(), type_ids: e.getTypeIds(),
           attention_mask: e.getAttentionMask(), special_tokens_mask: e.getSpecialTokensMask(),
           word_ids: e.getWordIds().map(w => w ?? -1), offsets: e.getOffsets(),
           overflowing: e.getOverflowing().map(dump) };
}
for (const name of ['all-minilm-l6-v2', 'roberta-base', 'qwen3', 'llama2']) {
  for (let c = 0; c < configs.length; c++) {
    const tok = Tokenizer.fromFile(`${dir}/${name}/tokenizer.json`);
    tok.disableTruncation(); tok.disablePadding();
    const cfg = configs[c];
    if (cfg.trunc) tok.setTruncation(cfg.trunc.maxLength, { strategy: cfg.trunc.strategy, stride: cfg.trunc.stride, direction: cfg.trunc.direction });
    if (cfg.pad) {
      const padTok = name === 'qwen3' ? '<|endoftext|>' : name === 'llama2' ? '<unk>' : name === 'roberta-base' ? '<pad>' : '[PAD]';
      tok.setPadding({ maxLength: cfg.pad.maxLength, direction: cfg.pad.direction, padToMultipleOf: cfg.pad.padToMultipleOf, padToken: padTok, padId: tok.tokenToId(padTok) });
    }
    for (const [text, pair] of texts) {
      for (const add of [true, false]) {
        let e;
        try { e = pair ? await tok.encode(text, pair, { addSpecialTokens: add }) : await tok.encode(text, null, { addSpecialTokens: add }); }
        catch (err) { console.log(JSON.stringify({ name, config: c, text, pair, add, error: String(err) })); continue; }
        console.log(JSON.stringify({ name, config: c, text, pair, add, ...dump(e) }));
      }
    }
  }
}
