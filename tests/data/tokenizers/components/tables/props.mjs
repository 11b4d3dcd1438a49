import { createRequire } from 'module';
const require = createRequire('/tmp/tokref2/node_modules/x');
const tk = require('tokenizers');
const props = process.argv.slice(2);
for (const p of props) {
  const re = p.startsWith('\\') ? p : `\\p{${p}}`;
  const t = tk.Tokenizer.fromString(JSON.stringify({version:'1.0',truncation:null,padding:null,added_tokens:[],normalizer:null,pre_tokenizer:{type:'Split',pattern:{Regex:re},behavior:'Removed',invert:false},post_processor:null,decoder:null,model:{type:'WordLevel',vocab:{'[UNK]':0},unk_token:'[UNK]'}})).getPreTokenizer();
  const yes = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    if (t.preTokenizeString(String.fromCodePoint(cp)).length === 0) yes.push(cp);
  }
  console.log(p + '\t' + yes.join(','));
}
