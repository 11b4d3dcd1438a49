#!/bin/sh
# hf:// sources against a fake Hub on 127.0.0.1 (tests/fake_hub.py: the Hub's endpoints,
# headers, LFS redirects to a "CDN" on another port, ETags), no internet needed: first
# download, cache reuse without requests, revision pinning, external data, resume, corrupt
# transfers, retries and timeouts, offline fallback, 401/404 messages, huggingface_hub's
# cache layout both ways, concurrent downloads, the progress bar, and that a downloaded
# model gives exactly the outputs of the local file. Prints "N passed, N failed" last.
# Usage: tests/hub.sh [TRANSMUTER]
TM=${1:-build/transmuter}
case $TM in /*) ;; *) TM=$(pwd)/$TM ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/data/tiny
work=$(mktemp -d)
pass=0; fail=0; skip=0
HUB_PID=""

for v in HF_HOME HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_TOKEN HUGGING_FACE_HUB_TOKEN \
         HF_TOKEN_PATH HF_HUB_OFFLINE TRANSFORMERS_OFFLINE XDG_CACHE_HOME HF_ENDPOINT \
         HF_HUB_DISABLE_IMPLICIT_TOKEN HF_HUB_ETAG_TIMEOUT HF_HUB_DOWNLOAD_TIMEOUT \
         TM_HUB_REF_TTL HF_HUB_DISABLE_PROGRESS_BARS; do
    unset $v
done

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
# Under ASan/UBSan a report may come with any exit status: look for it too.
sanitized() { ! grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$1"; }
check() { # name, command...: passes when the command succeeds
    name=$1; shift
    if "$@" > "$work/check.log" 2>&1 && sanitized "$work/check.log"; then ok
    else bad "$name"; sed 's/^/    /' "$work/check.log" | head -20; fi
}

start_hub() {
    state=$work/state
    rm -rf "$state"; mkdir -p "$state"
    python3 "$HERE/fake_hub.py" serve "$state" "$DATA" > "$work/server.log" 2>&1 &
    HUB_PID=$!
    i=0
    while [ ! -f "$state/ports" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    read HUB_PORT CDN_PORT < "$state/ports"
    export HF_ENDPOINT=http://127.0.0.1:$HUB_PORT
}
stop_hub() {
    [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null
    HUB_PID=""
}
trap 'stop_hub; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

admin() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1]).read()' "$HF_ENDPOINT/_admin/$1"; }
requests() { wc -l < "$state/requests.log" | tr -d ' '; }
cdn_gets() { grep -c "^cdn GET /cdn/$1" "$state/requests.log"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
commit_of() { python3 -c 'import hashlib, sys; print(hashlib.sha1(sys.argv[1].encode()).hexdigest())' "$1"; }
fresh_home() { export HF_HOME=$work/home-$1; rm -rf "$HF_HOME"; }
repo_dir() { echo "$HF_HOME/hub/models--tm-test--$1"; }

BERT=$DATA/bert/model.onnx
BERT_IN=$DATA/bert/model.cases/default/inputs
SEQCLS=$DATA/bert-seqcls/model.onnx
EXT=$DATA/bert-external-data/model.onnx
EXT_IN=$DATA/bert-external-data/model.cases/default/inputs
C1=$(commit_of "tiny-bert commit 1")
C2=$(commit_of "tiny-bert commit 2")
BERT_SHA=$(sha "$BERT")
SEQCLS_SHA=$(sha "$SEQCLS")
EXT_SHA=$(sha "$EXT")
EXT_DATA_SHA=$(sha "$DATA/bert-external-data/model.onnx_data")

# Reference outputs of the local files.
"$TM" run "$BERT" --inputs "$BERT_IN" --out "$work/ref-bert" > /dev/null
"$TM" run "$SEQCLS" --inputs "$BERT_IN" --out "$work/ref-seqcls" > /dev/null
"$TM" run "$EXT" --inputs "$EXT_IN" --out "$work/ref-ext" > /dev/null
same_outputs() { "$TM" compare "$1" "$2" --rtol 0 --atol 0; }
run_hf() { # source, inputs, out dir
    rm -rf "$3"; "$TM" run "$1" --inputs "$2" --out "$3"
}
expect_fail() { # name, message fragment, command...
    name=$1; want=$2; shift 2
    "$@" > "$work/fail.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then bad "$name: exit status 0"; return; fi
    if [ $rc -ge 124 ] || ! sanitized "$work/fail.log"; then bad "$name: crashed ($rc)"; cat "$work/fail.log"; return; fi
    if grep -q -- "$want" "$work/fail.log"; then ok; else bad "$name: message lacks '$want':"; cat "$work/fail.log"; fi
}
same_count() { [ "$1" = "$(requests)" ]; }

start_hub

# ---- First download, then the cache -------------------------------------------------------
fresh_home first
R=$(repo_dir tiny-bert)
check "first download" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "downloaded model = local file" same_outputs "$work/o" "$work/ref-bert"
check "one CDN transfer" [ "$(cdn_gets "$BERT_SHA")" = 1 ]
check "refs/main holds the commit, no newline" [ "$(cat "$R/refs/main")" = "$C1" -a "$(wc -c < "$R/refs/main")" = 40 ]
check "snapshot is a relative link to the blob" [ "$(readlink "$R/snapshots/$C1/onnx/model.onnx")" = "../../../blobs/$BERT_SHA" ]
check "blob named by its sha256" [ "$(sha "$R/blobs/$BERT_SHA")" = "$BERT_SHA" ]
check "no .incomplete left" [ -z "$(ls "$R/blobs" | grep incomplete)" ]
check "lock in .locks like huggingface_hub" [ -f "$HF_HOME/hub/.locks/models--tm-test--tiny-bert/$BERT_SHA.lock" ]
check "huggingface_hub's rules find the file" python3 "$HERE/fake_hub.py" check-cache "$HF_HOME/hub" tm-test/tiny-bert main onnx/model.onnx
n=$(requests)
check "second run from the cache" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "second run made no request" same_count "$n"
check "info from the cache" "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx
check "pinned commit from the cache" run_hf "hf://tm-test/tiny-bert/onnx/model.onnx@$C1" "$BERT_IN" "$work/o"
check "pinned commit made no request" same_count "$n"
check "HfFileSystem form OWNER/REPO@REV/PATH" "$TM" info "hf://tm-test/tiny-bert@$C1/onnx/model.onnx"
check "... no request either" same_count "$n"

# ---- Revisions ---------------------------------------------------------------------------
check "tag v1" run_hf hf://tm-test/tiny-bert/onnx/model.onnx@v1 "$BERT_IN" "$work/o"
check "tag: one HEAD, no transfer" [ "$(requests)" = $((n + 1)) -a "$(cdn_gets "$BERT_SHA")" = 1 ]
check "refs/v1 recorded" [ "$(cat "$R/refs/v1")" = "$C1" ]
admin push   # main moves to a second commit with another model.onnx
n=$(requests)
check "fresh ref: main still from the cache" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "... without a request" same_count "$n"
touch -d '2 hours ago' "$R/refs/main"
check "stale ref: main checked and updated" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "new main = the new model" same_outputs "$work/o" "$work/ref-seqcls"
check "refs/main moved to the new commit" [ "$(cat "$R/refs/main")" = "$C2" ]
check "both snapshots kept" [ -L "$R/snapshots/$C1/onnx/model.onnx" -a -L "$R/snapshots/$C2/onnx/model.onnx" ]
n=$(requests)
check "old commit pinned" run_hf "hf://tm-test/tiny-bert/onnx/model.onnx@$C1" "$BERT_IN" "$work/o"
check "old commit = the old model" same_outputs "$work/o" "$work/ref-bert"
check "... from the cache" same_count "$n"
TM_HUB_REF_TTL=0 "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx > /dev/null
check "TM_HUB_REF_TTL=0 asks every time, downloads nothing new" [ "$(requests)" = $((n + 1)) ]

# ---- External data -----------------------------------------------------------------------
n=$(requests)
check "external data" run_hf hf://tm-test/tiny-bert-external/onnx/model.onnx "$EXT_IN" "$work/o"
check "external data model = local file" same_outputs "$work/o" "$work/ref-ext"
check "fetched the model and model.onnx_data" [ "$(cdn_gets "$EXT_SHA")" = 1 -a "$(cdn_gets "$EXT_DATA_SHA")" = 1 ]
check "and nothing else" [ "$(tail -n +$((n + 1)) "$state/requests.log" | grep -c .)" = 4 ]
check "external data asked at the model's commit" grep -q "HEAD /tm-test/tiny-bert-external/resolve/$(commit_of "ext commit 1")/onnx/model.onnx_data" "$state/requests.log"
n=$(requests)
check "several external files, one nested" run_hf hf://tm-test/split-external/onnx/model.onnx "$EXT_IN" "$work/o"
check "split model = local file" same_outputs "$work/o" "$work/ref-ext"
S=$(repo_dir split-external)/snapshots/$(commit_of "split commit 1")
check "nested link one level deeper" sh -c "readlink '$S/onnx/weights/extra.bin' | grep -q '^\.\./\.\./\.\./\.\./blobs/'"
check "model.onnx.data fetched" [ -L "$S/onnx/model.onnx.data" ]
check "decoy never fetched" sh -c "! grep -q decoy '$state/requests.log'"
check "cached external data: no request" sh -c "n=\$(wc -l < '$state/requests.log'); '$TM' info hf://tm-test/split-external/onnx/model.onnx > /dev/null && [ \$n = \$(wc -l < '$state/requests.log') ]"

# ---- Interrupted and corrupted transfers -------------------------------------------------
fresh_home resume
admin "fault?kind=drop&count=1"
check "download resumes after a cut connection" run_hf hf://tm-test/tiny-bert-external/onnx/model.onnx "$EXT_IN" "$work/o"
check "... with a Range request" grep -q "^cdn GET /cdn/.* range=bytes=[1-9][0-9]*-" "$state/requests.log"
check "... and the right bytes" same_outputs "$work/o" "$work/ref-ext"
fresh_home resume2
R=$(repo_dir tiny-bert)
mkdir -p "$R/blobs"
head -c 1000 "$SEQCLS" > "$R/blobs/$SEQCLS_SHA.incomplete"
check "a previous process's .incomplete is resumed" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "... from byte 1000" grep -q "^cdn GET /cdn/$SEQCLS_SHA.* range=bytes=1000-" "$state/requests.log"
check "... and verified" same_outputs "$work/o" "$work/ref-seqcls"
fresh_home corrupt
R=$(repo_dir tiny-bert)
admin "fault?kind=corrupt&count=2"
expect_fail "corrupted transfer rejected" "corrupted" "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx
check "nothing kept of it" [ ! -e "$R/blobs/$SEQCLS_SHA" -a ! -e "$R/blobs/$SEQCLS_SHA.incomplete" -a ! -e "$R/snapshots/$C2/onnx/model.onnx" ]
admin "fault?kind=corrupt&count=1"
n=$(cdn_gets "$SEQCLS_SHA")
check "one corrupted transfer is retried" run_hf hf://tm-test/tiny-bert/onnx/model.onnx "$BERT_IN" "$work/o"
check "... from the start, and verified" [ "$(cdn_gets "$SEQCLS_SHA")" = $((n + 2)) ]
check "... right bytes" same_outputs "$work/o" "$work/ref-seqcls"

# ---- Retries and timeouts ----------------------------------------------------------------
fresh_home retry
admin "fault?kind=error503&count=2"
check "503s are retried" "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx
fresh_home stall
admin "fault?kind=stall_body&count=1&arg=3"
check "a stalled body times out and resumes" env HF_HUB_DOWNLOAD_TIMEOUT=1 "$TM" run hf://tm-test/tiny-bert/onnx/model.onnx --inputs "$BERT_IN" --out "$work/o"
check "... right bytes" same_outputs "$work/o" "$work/ref-seqcls"
fresh_home stall2
admin "fault?kind=stall_head&count=4&arg=2"
expect_fail "a Hub that does not answer" "did not answer in time" env HF_HUB_ETAG_TIMEOUT=1 "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx
admin clear

# ---- Access and missing things -------------------------------------------------------------
fresh_home auth
expect_fail "401 says how to give a token" "HF_TOKEN=hf_... or run \`huggingface-cli login\`" "$TM" info hf://tm-test/private/onnx/model.onnx
expect_fail "gated repo says so" "is gated" "$TM" info hf://tm-test/gated/onnx/model.onnx
expect_fail "a refused token says so" "token sent" env HF_TOKEN=hf_wrong "$TM" info hf://tm-test/private/onnx/model.onnx
check "HF_TOKEN opens a private repo" env HF_TOKEN=hf_test_secret "$TM" info hf://tm-test/private/onnx/model.onnx
check "the token went to the Hub" grep -q "^hub HEAD /tm-test/private/.* auth=yes" "$state/requests.log"
check "but never to the CDN" sh -c "! grep -q '^cdn .* auth=yes' '$state/requests.log'"
fresh_home auth2
mkdir -p "$HF_HOME"; printf 'hf_test_secret\n' > "$HF_HOME/token"
check "the token file of huggingface-cli login" "$TM" info hf://tm-test/gated/onnx/model.onnx
expect_fail "missing file lists the .onnx files" "no file 'onnx/modle.onnx' in tm-test/tiny-bert at revision 'main'; its .onnx files are: onnx/model.onnx, onnx/model_fp16.onnx, onnx/model_q4.onnx, onnx/model_quantized.onnx" "$TM" info hf://tm-test/tiny-bert/onnx/modle.onnx
expect_fail "missing revision" "revision 'nope' not found" "$TM" info hf://tm-test/tiny-bert/onnx/model.onnx@nope
expect_fail "missing repo" "repository tm-test/nothing not found" env HF_TOKEN=hf_test_secret "$TM" info hf://tm-test/nothing/model.onnx
expect_fail "bad source" "expected hf://OWNER/REPO/PATH" "$TM" info hf://just-a-name
check "renamed repo: relative redirect followed" "$TM" info hf://tm-test/old-name/onnx/model.onnx

# ---- ls --------------------------------------------------------------------------------------
export HF_HOME=$work/home-first
"$TM" ls hf://tm-test/tiny-bert > "$work/ls" 2>&1
check "ls lists every page" grep -q "onnx/model_quantized.onnx .* int8" "$work/ls"
check "ls variants" sh -c "grep -q 'model_fp16.onnx .* fp16' '$work/ls' && grep -q 'model_q4.onnx .* q4' '$work/ls' && grep -q 'onnx/model.onnx .* fp32' '$work/ls'"
check "ls shows only .onnx files" sh -c "! grep -q config.json '$work/ls'"
"$TM" ls hf://tm-test/tiny-bert-external@main > "$work/ls" 2>&1
check "ls shows external data" grep -q "+ onnx/model.onnx_data .* external data" "$work/ls"
HF_HUB_OFFLINE=1 "$TM" ls hf://tm-test/tiny-bert > "$work/ls" 2>&1
check "ls offline lists the cache" grep -q "from the cache" "$work/ls"

# ---- A pipeline on a Hub repository: only the files its task needs ------------------------
fresh_home pipeline
SENT=$HERE/data/pipelines/bert-sentiment
"$TM" classify "$SENT" "Hello world!" "Short." --json > "$work/pipe-local.json" 2>&1
check "a pipeline on hf://OWNER/REPO" sh -c "'$TM' classify hf://tm-test/bert-sentiment 'Hello world!' 'Short.' --json > '$work/pipe-hub.json'"
check "... gives the local folder's result" cmp "$work/pipe-hub.json" "$work/pipe-local.json"
check "... fetched no file its task does not need" sh -c "! grep -q 'model_fp16' '$state/requests.log'"
check "... and works @revision, from the cache" sh -c "HF_HUB_OFFLINE=1 '$TM' classify hf://tm-test/bert-sentiment@main 'Hello world!' 'Short.' --json | cmp - '$work/pipe-local.json'"
expect_fail "a missing dtype file names it" "onnx/model_q4.onnx" "$TM" classify hf://tm-test/bert-sentiment "x" --dtype q4
CLIP=$HERE/data/pipelines/media/speech_fr_8k.wav
"$TM" pipeline audio-classification "$HERE/data/pipelines/audio-cls" "$CLIP" --json > "$work/audio-local.json" 2>&1
check "an audio pipeline on hf:// (preprocessor_config.json, no tokenizer)" sh -c "'$TM' pipeline audio-classification hf://tm-test/audio-cls '$CLIP' --json > '$work/audio-hub.json'"
check "... gives the local folder's result" cmp "$work/audio-hub.json" "$work/audio-local.json"

# ---- Concurrent downloads ------------------------------------------------------------------
fresh_home concurrent
admin "fault?kind=slow&count=2&arg=1"
n=$(cdn_gets "$EXT_DATA_SHA")
( run_hf hf://tm-test/tiny-bert-external/onnx/model.onnx "$EXT_IN" "$work/c1" > "$work/c1.log" 2>&1; echo $? > "$work/c1.rc" ) &
( run_hf hf://tm-test/tiny-bert-external/onnx/model.onnx "$EXT_IN" "$work/c2" > "$work/c2.log" 2>&1; echo $? > "$work/c2.rc" ) &
wait_n=0
while { [ ! -f "$work/c1.rc" ] || [ ! -f "$work/c2.rc" ]; } && [ $wait_n -lt 600 ]; do sleep 0.1; wait_n=$((wait_n + 1)); done
check "two processes at once both succeed" [ "$(cat "$work/c1.rc")" = 0 -a "$(cat "$work/c2.rc")" = 0 ]
check "... with one transfer per file" [ "$(cdn_gets "$EXT_DATA_SHA")" = $((n + 1)) ]
check "... and right bytes" sh -c "'$TM' compare '$work/c1' '$work/ref-ext' --rtol 0 --atol 0 && '$TM' compare '$work/c2' '$work/ref-ext' --rtol 0 --atol 0"

# ---- Progress bar (script(1) gives it a terminal; it needs a stdin, even /dev/null) -----------
fresh_home progress
script -qec "'$TM' info hf://tm-test/tiny-bert/onnx/model_fp16.onnx" /dev/null < /dev/null > "$work/tty.log" 2>&1
check "progress bar on a terminal" grep -q "model_fp16.onnx 100%.*in" "$work/tty.log"
fresh_home progress2
script -qec "'$TM' info hf://tm-test/tiny-bert/onnx/model_fp16.onnx --quiet" /dev/null < /dev/null > "$work/tty.log" 2>&1
check "--quiet: no bar" sh -c "grep -q 'model: hf://' '$work/tty.log' && ! grep -q '100%' '$work/tty.log'"
"$TM" info hf://tm-test/tiny-bert/onnx/model_q4.onnx > "$work/pipe.log" 2>&1
check "not a terminal: no bar" sh -c "! grep -q '%' '$work/pipe.log'"

# ---- huggingface_hub's cache, made by hand ----------------------------------------------
export HF_HUB_CACHE=$work/pycache
P=$HF_HUB_CACHE/models--tm-test--tiny-bert-external
PC=0123456789abcdef0123456789abcdef01234567
mkdir -p "$P/blobs" "$P/refs" "$P/snapshots/$PC/onnx"
cp "$EXT" "$P/blobs/$EXT_SHA"
cp "$DATA/bert-external-data/model.onnx_data" "$P/blobs/$EXT_DATA_SHA"
printf '%s' "$PC" > "$P/refs/main"
ln -s "../../../blobs/$EXT_SHA" "$P/snapshots/$PC/onnx/model.onnx"
ln -s "../../../blobs/$EXT_DATA_SHA" "$P/snapshots/$PC/onnx/model.onnx_data"
n=$(requests)
check "a huggingface_hub cache is used as is" run_hf hf://tm-test/tiny-bert-external/onnx/model.onnx "$EXT_IN" "$work/o"
check "... without any request" same_count "$n"
check "... right outputs" same_outputs "$work/o" "$work/ref-ext"
check "the snapshot path loads directly too" "$TM" run "$P/snapshots/$PC/onnx/model.onnx" --inputs "$EXT_IN" --out "$work/o"
unset HF_HUB_CACHE

# ---- Offline ---------------------------------------------------------------------------------
export HF_HOME=$work/home-first
n=$(requests)
check "HF_HUB_OFFLINE=1 uses the cache" env HF_HUB_OFFLINE=1 TM_HUB_REF_TTL=0 "$TM" run hf://tm-test/tiny-bert/onnx/model.onnx --inputs "$BERT_IN" --out "$work/o"
check "... without a request" same_count "$n"
expect_fail "offline and not cached says so" "offline (HF_HUB_OFFLINE is set)" env HF_HUB_OFFLINE=1 "$TM" info hf://tm-test/tiny-bert/onnx/model_fp16.onnx
stop_hub
check "Hub gone: falls back to the cached snapshot" env TM_HUB_REF_TTL=0 "$TM" run hf://tm-test/tiny-bert/onnx/model.onnx --inputs "$BERT_IN" --out "$work/o"
check "... of that revision" same_outputs "$work/o" "$work/ref-seqcls"
check "Hub gone, offline too: external data" env HF_HUB_OFFLINE=1 "$TM" run hf://tm-test/tiny-bert-external/onnx/model.onnx --inputs "$EXT_IN" --out "$work/o"
expect_fail "Hub gone and not cached says so" "cannot reach the Hub" "$TM" info hf://tm-test/tiny-bert/onnx/model_q4.onnx@v1

# ---- A full disk -------------------------------------------------------------------------------
start_hub
mkdir -p "$work/small"
if unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$work/small'" 2>/dev/null; then
    expect_fail "a full disk says so" "space" unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$work/small' && HF_HOME='$work/small' exec '$TM' info hf://tm-test/tiny-bert/onnx/model.onnx"
else
    echo "skip: a full disk (no user namespaces to mount a small tmpfs)"; skip=$((skip + 1))
fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
