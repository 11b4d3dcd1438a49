import { createRequire } from 'module';
const require = createRequire('/tmp/tokref2/node_modules/x');
const tk = require('tokenizers');
const t = tk.Tokenizer.fromString(JSON.stringify({version:'1.0',truncation:null,padding:null,added_tokens:[],normalizer:null,pre_tokenizer:{type:'UnicodeScripts'},post_processor:null,decoder:null,model:{type:'WordLevel',vocab:{'[UNK]':0},unk_token:'[UNK]'}})).getPreTokenizer();
const S = (cp) => String.fromCodePoint(cp);
const n = (s) => t.preTokenizeString(s).length;
const cps = [];
for (let cp = 0; cp < 0x110000; cp++) if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
// Any: no split against Latin nor Common
const any = new Uint8Array(0x110000);
for (const cp of cps) if (n('a' + S(cp) + 'a') === 1 && n('0' + S(cp) + '0') === 1) any[cp] = 1;
// runs of equal script among non-Any code points
const label = new Int32Array(0x110000).fill(-1);
const reps = [];
let prev = -1;
for (const cp of cps) {
  if (any[cp]) continue;
  if (prev >= 0 && n(S(prev) + S(cp)) === 1) { label[cp] = label[prev]; prev = cp; continue; }
  let found = -1;
  for (let k = 0; k < reps.length; k++) if (n(S(reps[k]) + S(cp)) === 1) { found = k; break; }
  if (found < 0) { found = reps.length; reps.push(cp); }
  label[cp] = found;
  prev = cp;
}
// ranges [lo, hi, id+1] (0 = Any)
const out = [];
let cur = null;
for (const cp of cps) {
  const id = any[cp] ? 0 : label[cp] + 1;
  if (cur && cur[2] === id && cur[1] === cp - 1) cur[1] = cp;
  else if (cur && cur[2] === id && cur[1] === 0xd7ff && cp === 0xe000) cur[1] = cp;
  else { if (cur) out.push(cur); cur = [cp, cp, id]; }
}
out.push(cur);
console.error('scripts', reps.length, 'ranges', out.length, 'reps', reps.slice(0, 5).map(x => x.toString(16)));
console.log(JSON.stringify(out));
