#!/bin/sh
# Replays every call of tests/data/pipelines/<repo>.cases.jsonl for the encoder tasks
# through `transmuter pipeline TASK REPO --call LINE` and compares the JSON with what
# transformers.js returned: labels, words, strings, token ids and indices exactly; scores
# and embeddings within 1e-4 (the q8 export's too: its int8 products give ONNX Runtime's
# values to 1e-7 here); an `error` line must be an error with the same message.
# Usage: tests/pipelines.sh TRANSMUTER [REPO...]
TM=${1:-build/transmuter}
shift
DATA=tests/data/pipelines
REPOS=${*:-"minilm-embed bert-sentiment bert-multilabel bert-nli bert-ner bert-mlm distilbert-qa"}
exec /usr/bin/python3 - "$TM" "$DATA" $REPOS <<'PY'
import json, subprocess, sys
tm, data, repos = sys.argv[1], sys.argv[2], sys.argv[3:]
EXACT = {'token', 'index', 'dims'}

def diff(want, got, tol, path='$', key=None):
    """The first difference between the reference and our output, or None."""
    if isinstance(want, bool) or isinstance(got, bool):
        return None if want is got else f'{path}: {got!r} != {want!r}'
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if key in EXACT:
            return None if want == got else f'{path}: {got} != {want}'
        return None if abs(want - got) <= tol else f'{path}: {got} != {want} (|diff| {abs(want - got):.3g} > {tol})'
    if type(want) != type(got):
        return f'{path}: {type(got).__name__} != {type(want).__name__}: {json.dumps(got)[:120]}'
    if isinstance(want, dict):
        if set(want) != set(got):
            return f'{path}: keys {sorted(got)} != {sorted(want)}'
        for k in want:
            d = diff(want[k], got[k], tol, f'{path}.{k}', k if k != 'data' else key)
            if d: return d
        return None
    if isinstance(want, list):
        if len(want) != len(got):
            return f'{path}: {len(got)} items != {len(want)}'
        for i, (w, g) in enumerate(zip(want, got)):
            d = diff(w, g, tol, f'{path}[{i}]', key)
            if d: return d
        return None
    return None if want == got else f'{path}: {got!r} != {want!r}'

passed = failed = 0
for repo in repos:
    for n, line in enumerate(open(f'{data}/{repo}.cases.jsonl', encoding='utf-8'), 1):
        case = json.loads(line)
        dtype = (case.get('load') or {}).get('dtype', 'fp32')
        tol = 1e-4
        r = subprocess.run([tm, 'pipeline', case['task'], f'{data}/{repo}', '--call', line],
                           capture_output=True, text=True)
        try:
            got = json.loads(r.stdout)
        except ValueError:
            got = None
        if got is None:
            problem = f'no JSON output (exit {r.returncode}): {r.stderr.strip()[:200]}'
        elif 'error' in case:
            if not isinstance(got, dict) or set(got) != {'error'}:
                problem = f'expected the error {case["error"]!r}, got {r.stdout[:200]}'
            elif got['error'] != case['error']:
                problem = f'error {got["error"]!r} != {case["error"]!r}'
            else:
                problem = None if r.returncode != 0 else 'an error with exit status 0'
        elif isinstance(got, dict) and set(got) == {'error'}:
            problem = f'error: {got["error"]}'
        else:
            problem = diff(case['output'], got, tol)
        if problem:
            failed += 1
            print(f'FAIL {repo}.cases.jsonl:{n} ({case["task"]}, {dtype}): {problem}')
        else:
            passed += 1
print(f'{passed} passed, {failed} failed')
PY
