#!/bin/sh
# The `transmuter chat-template` command: the shared chat.jsonl cases of qwen3 rendered and
# encoded (--ids) through the CLI, tokenizer_config.json read alone, and bad input giving a
# message and exit status 1. The library itself is tested by tests/test_chat_template.c.
# Usage: tests/chat_template.sh TRANSMUTER [BUILD_DIR]
TM=$1
BUILD=${2:-build}
pass=0; fail=0
out=$(mktemp -d)
Q=$out/qwen3
mkdir -p "$Q"
xz -dc tests/data/tokenizers/qwen3/tokenizer.json.xz > "$Q/tokenizer.json"
cp tests/data/tokenizers/qwen3/tokenizer_config.json "$Q/"

check() { # name, command output file, expected file
    if cmp -s "$2" "$3"; then pass=$((pass + 1)); else
        echo "FAIL $1:"; diff "$2" "$3" | head -10; fail=$((fail + 1)); fi
}

# every qwen3 case: the rendered text, then its ids
python3 - "$out" tests/data/tokenizers/chat/qwen3.chat.jsonl <<'PY'
import json, sys
out, path = sys.argv[1], sys.argv[2]
for line in open(path):
    c = json.loads(line)
    base = f"{out}/{c['id']}"
    json.dump(c['messages'], open(base + '.messages.json', 'w'))
    json.dump(c.get('kwargs', {}), open(base + '.vars.json', 'w'))
    open(base + '.agp', 'w').write('1' if c['add_generation_prompt'] else '0')
    open(base + '.want', 'w', newline='').write(c['rendered'])
    open(base + '.ids', 'w').write(' '.join(map(str, c['ids'])) + '\n')
PY
for m in "$out"/*.messages.json; do
    base=${m%.messages.json}
    agp=""
    [ "$(cat "$base.agp")" = 1 ] && agp=--add-generation-prompt
    "$TM" chat-template "$Q" "$m" $agp --vars "@$base.vars.json" > "$base.got" 2> "$base.err"
    check "$(basename "$base") text" "$base.got" "$base.want"
    "$TM" chat-template "$Q/tokenizer.json" "$m" $agp --vars "@$base.vars.json" --ids > "$base.gotids" 2> "$base.err"
    check "$(basename "$base") ids" "$base.gotids" "$base.ids"
done

# tokenizer_config.json alone (no tokenizer.json): rendered, no ids
mkdir -p "$out/cfg"
cp tests/data/tokenizers/phi-3-vision/tokenizer_config.json "$out/cfg/"
printf '[{"role": "user", "content": "Hi"}]' > "$out/hi.json"
"$TM" chat-template "$out/cfg" "$out/hi.json" --add-generation-prompt > "$out/phi.got" 2>&1
printf '<|user|>\nHi<|end|>\n<|assistant|>\n' > "$out/phi.want"
check "config only" "$out/phi.got" "$out/phi.want"

# a list of named templates: tool_use when tools are given, --template picks, default else
mkdir -p "$out/list"
cat > "$out/list/tokenizer_config.json" <<'JSON'
{"bos_token": {"content": "<s>", "lstrip": false}, "chat_template": [
  {"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}"},
  {"name": "tool_use", "template": "T{{ tools | length }}"},
  {"name": "rag", "template": "R{{ documents | tojson }}"}]}
JSON
"$TM" chat-template "$out/list" "$out/hi.json" > "$out/l1" 2>&1; printf 'D<s>Hi' > "$out/l1.want"
check "list default" "$out/l1" "$out/l1.want"
"$TM" chat-template "$out/list" "$out/hi.json" --vars '{"tools": [1, 2]}' > "$out/l2" 2>&1; printf 'T2' > "$out/l2.want"
check "list tool_use" "$out/l2" "$out/l2.want"
"$TM" chat-template "$out/list" "$out/hi.json" --template rag > "$out/l3" 2>&1; printf 'Rnull' > "$out/l3.want"
check "list --template" "$out/l3" "$out/l3.want"
# chat_template.jinja beside a config without one
mkdir -p "$out/jinja"
printf '{"eos_token": "</s>"}' > "$out/jinja/tokenizer_config.json"
printf '{%% for m in messages %%}{{ m.content }}{{ eos_token }}{%% endfor %%}\n' > "$out/jinja/chat_template.jinja"
"$TM" chat-template "$out/jinja" "$out/hi.json" > "$out/j1" 2>&1; printf 'Hi</s>' > "$out/j1.want"
check "chat_template.jinja" "$out/j1" "$out/j1.want"

expect() { # name, expected message fragment, command...
    name=$1; want=$2; shift 2
    "$@" > "$out/log" 2>&1
    rc=$?
    if [ $rc -ne 1 ] || ! grep -q -- "$want" "$out/log"; then
        echo "FAIL $name: exit status $rc, message:"; cat "$out/log"; fail=$((fail + 1)); return
    fi
    pass=$((pass + 1))
}
printf '[{"role": "user", "content": }]' > "$out/bad.json"
expect bad-messages "messages: invalid JSON at line 1, column 30" "$TM" chat-template "$Q" "$out/bad.json"
expect vars-not-object "--vars must be a JSON object" "$TM" chat-template "$Q" "$out/hi.json" --vars '[1]'
expect no-template "has no chat template" "$TM" chat-template tests/data/tokenizers/llama2 "$out/hi.json"
expect ids-without-tokenizer "tokenizer" "$TM" chat-template "$out/cfg" "$out/hi.json" --ids
expect no-such-template "no chat template named 'nope'" "$TM" chat-template "$out/list" "$out/hi.json" --template nope
printf '{"chat_template": "{%% if x %%}\\n{{ raise_exception(\\"no x\\") }}{%% endif %%}{{ 1 +* 2 }}"}' \
    > "$out/cfg/tokenizer_config.json"
expect syntax-error "chat template line 2, column 47: syntax error" "$TM" chat-template "$out/cfg" "$out/hi.json"
rm -rf "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
