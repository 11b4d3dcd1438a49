import { createRequire } from 'module';
const require = createRequire('/tmp/tokref2/node_modules/x');
const tk = require('tokenizers');
function tok(normalizer, pre_tokenizer) {
  return tk.Tokenizer.fromString(JSON.stringify({version:'1.0',truncation:null,padding:null,added_tokens:[],normalizer,pre_tokenizer,post_processor:null,decoder:null,model:{type:'WordLevel',vocab:{'[UNK]':0},unk_token:'[UNK]'}}));
}
const clean = tok({type:'BertNormalizer',clean_text:true,handle_chinese_chars:false,strip_accents:false,lowercase:false}).getNormalizer();
const strip = tok({type:'BertNormalizer',clean_text:false,handle_chinese_chars:false,strip_accents:true,lowercase:false}).getNormalizer();
const nfd = tok({type:'NFD'}).getNormalizer();
const comb = tok({type:'StripAccents'}).getNormalizer();
const lower = tok({type:'Lowercase'}).getNormalizer();
const ws = tok(null,{type:'Whitespace'}).getPreTokenizer();
const punc = tok(null,{type:'Punctuation'}).getPreTokenizer();
const dig = tok(null,{type:'Digits',individual_digits:false}).getPreTokenizer();
const wss = tok(null,{type:'WhitespaceSplit'}).getPreTokenizer();
const out = [];
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  const cl = clean.normalizeString('a' + c + 'b');
  const other = cl === 'ab' ? 1 : cl === 'a b' ? 2 : 0;
  const mn = nfd.normalizeString(c) === c ? (strip.normalizeString(c) === '' ? 1 : 0) : 9;
  const cm = comb.normalizeString(c) === '' ? 1 : 0;
  const lo = lower.normalizeString(c);
  const w = ws.preTokenizeString('a' + c + 'a').length;
  const p = punc.preTokenizeString('a' + c + 'a').length;
  const d = dig.preTokenizeString('a' + c + 'a').length;
  const s = wss.preTokenizeString('a' + c + 'a').length;
  out.push([cp.toString(16), other, mn, cm, [...lo].map(x => x.codePointAt(0).toString(16)).join(','), w, p, d, s].join(' '));
}
process.stdout.write(out.join('\n') + '\n');
