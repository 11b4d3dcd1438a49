import { createRequire } from 'module';
import fs from 'fs';
const require = createRequire('/tmp/tokref2/node_modules/x');
const tk = require('tokenizers');
const n = tk.Tokenizer.fromString(JSON.stringify({version:'1.0',truncation:null,padding:null,added_tokens:[],normalizer:{type:'NFD'},pre_tokenizer:null,post_processor:null,decoder:null,model:{type:'WordLevel',vocab:{'[UNK]':0},unk_token:'[UNK]'}})).getNormalizer();
for (const l of fs.readFileSync('/tmp/w/ccc.txt','utf8').trim().split('\n')) {
  const [h, k] = l.split(' ');
  const c = String.fromCodePoint(parseInt(h, 16));
  const out = n.normalizeString('a' + c + '\u0334');
  const reordered = out.startsWith('a\u0334');
  if (!reordered && +k > 1) console.log(h, k);
}
