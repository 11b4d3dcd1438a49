#!/bin/sh
# `transmuter tokenize --jsonl` on every case of the shared tokenizers (unpacked into
# $BUILD/tokenizers by build/tests/test_tokenizer_cases): each output line must equal the
# reference fields byte for byte, as JSON.stringify writes them. Usage: tokenize_cli.sh BUILD
BUILD=${1:-build}
TM=$BUILD/transmuter
"$BUILD/tests/test_tokenizer_cases" "$BUILD" > /dev/null 2>&1   # unpacks the data
pass=0; fail=0
for dir in "$BUILD"/tokenizers/*/; do
    [ -f "$dir/cases.jsonl" ] || continue
    name=$(basename "$dir")
    out=$("$TM" tokenize "$dir" --jsonl "$dir/cases.jsonl" > "$dir/cli.jsonl" 2> "$dir/cli.err"; \
          /usr/bin/python3 - "$dir/cases.jsonl" "$dir/cli.jsonl" <<'PY'
import json, sys
cases = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]
outs = open(sys.argv[2], encoding='utf-8').read().split('\n')[:-1]
ok = bad = 0
def js(v): return json.dumps(v, ensure_ascii=False, separators=(',', ':'))
for c, line in zip(cases, outs):
    o = json.loads(line)
    want = {k: c[k] for k in ('ids', 'attention_mask', 'token_type_ids', 'decoded', 'decoded_skip_special') if k in c}
    toks = c.get('rust_tokenizers', {}).get('tokens')
    good = all(js(o.get(k)) == js(v) for k, v in want.items()) and ('token_type_ids' in o) == ('token_type_ids' in c)
    good = good and (o['tokens'] == c['tokens'] or o['tokens'] == toks)
    good = good and len(o['offsets']) == len(c['ids']) and line.startswith('{"ids":' + js(c['ids']))
    if good: ok += 1
    else:
        bad += 1
        if bad <= 3: print('FAIL', c['id'], line[:200])
bad += abs(len(cases) - len(outs))
print(ok, bad)
PY
)
    echo "$out" | grep '^FAIL'
    set -- $(echo "$out" | tail -1)
    echo "$name: $1 passed, $2 failed"
    pass=$((pass + $1)); fail=$((fail + $2))
done
echo "$pass passed, $fail failed"
