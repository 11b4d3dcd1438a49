#!/bin/sh
# Replays every call of tests/data/pipelines/<repo>.cases.jsonl, the encoder tasks' and
# the generation tasks' (gpt2-gen, llama-chat fp32 and q4, t5-text2text), through
# `transmuter pipeline TASK REPO --call LINE` and compares the JSON with what
# transformers.js returned: labels, words, strings (generated texts and chat messages),
# token ids and indices exactly; scores and embeddings within 1e-4 (the q8 export's too:
# its int8 products give ONNX Runtime's values to 1e-7 here); an `error` line must be an
# error with the same message, except where ONNX Runtime's own failure was recorded
# (OWN_ERRORS: we refuse the input first, with our message).
# Then the command's other forms (positional inputs, embed, classify, generation, --help,
# errors), unless REPOs are named. Usage: tests/pipelines.sh TRANSMUTER [REPO...]
TM=${1:-build/transmuter}
shift
DATA=tests/data/pipelines
[ $# -gt 0 ] && export TM_PIPELINE_REPOS_GIVEN=1
REPOS=${*:-"minilm-embed bert-sentiment bert-multilabel bert-nli bert-ner bert-mlm distilbert-qa gpt2-gen llama-chat t5-text2text"}
exec /usr/bin/python3 - "$TM" "$DATA" $REPOS <<'PY'
import json, os, subprocess, sys
tm, data, repos = sys.argv[1], sys.argv[2], sys.argv[3:]
repos_given = os.environ.get('TM_PIPELINE_REPOS_GIVEN') == '1'
EXACT = {'token', 'index', 'dims'}
# Lines whose recorded error is ONNX Runtime's inside the model (an empty gpt2 prompt fails
# in a Reshape): ours, raised before running, must hold this text instead.
OWN_ERRORS = {('gpt2-gen', 22): 'the prompt is empty'}

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
# repo.cases.jsonl: transformers.js's outputs from ../shared/pipelines; repo.batches.jsonl
# (where present): more of them, made by tests/gen/embed_batch_refs.mjs; repo.pairs.jsonl:
# text-classification on sentence pairs, made by tests/gen/pair_refs.mjs.
def case_lines(repo):
    for suffix in ('cases', 'batches', 'pairs'):
        name = f'{data}/{repo}.{suffix}.jsonl'
        if suffix == 'cases' or os.path.exists(name):
            for n, line in enumerate(open(name, encoding='utf-8'), 1):
                yield suffix, n, line

for repo in repos:
    for suffix, n, line in case_lines(repo):
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
            own = OWN_ERRORS.get((repo, n)) if suffix == 'cases' else None
            if not isinstance(got, dict) or set(got) != {'error'}:
                problem = f'expected the error {case["error"]!r}, got {r.stdout[:200]}'
            elif own is not None and own not in got['error']:
                problem = f'error {got["error"]!r} does not say {own!r}'
            elif own is None and got['error'] != case['error']:
                problem = f'error {got["error"]!r} != {case["error"]!r}'
            else:
                problem = None if r.returncode != 0 else 'an error with exit status 0'
        elif isinstance(got, dict) and set(got) == {'error'}:
            problem = f'error: {got["error"]}'
        else:
            problem = diff(case['output'], got, tol)
        if problem:
            failed += 1
            print(f'FAIL {repo}.{suffix}.jsonl:{n} ({case["task"]}, {dtype}): {problem}')
        else:
            passed += 1
# The command's other forms: positional inputs, the shortcuts, --help, usage and errors.
def cli(name, args, rc, want=None, json_out=False):
    global passed, failed
    r = subprocess.run([tm] + args, capture_output=True, text=True)
    ok = r.returncode == rc
    if ok and want is not None:
        ok = diff(want, json.loads(r.stdout), 1e-4) is None if json_out else want in r.stdout + r.stderr
    if ok:
        passed += 1
    else:
        failed += 1
        print(f'FAIL cli: {name}: exit {r.returncode}, {(r.stdout + r.stderr)[:300]!r}')

def case_output(repo, n):
    with open(f'{data}/{repo}.cases.jsonl', encoding='utf-8') as f:
        return json.loads(f.readlines()[n - 1])['output']

def case_output_inputs(repo, n):
    with open(f'{data}/{repo}.cases.jsonl', encoding='utf-8') as f:
        return json.loads(f.readlines()[n - 1])['inputs']

S, E, Q = f'{data}/bert-sentiment', f'{data}/minilm-embed', f'{data}/distilbert-qa'
EIFFEL = ('The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named '
          'after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.')
if not repos_given:
    cli('classify --json', ['classify', S, 'Hello world!', '--json'], 0, case_output('bert-sentiment', 1), True)
    N = f'{data}/bert-nli'
    for name, call, want in [
        ('pair without text', '{"inputs":[{"text_pair":"b"}]}', 'texts.text must be a string'),
        ('pair of a number', '{"inputs":[[{"text":"a","text_pair":3}]]}', 'texts[0].text_pair must be a string'),
        ('pair with an unknown key', '{"inputs":[{"text":"a","pair":"b"}]}', "unknown key 'pair'"),
        ('bad function_to_apply', '{"inputs":["a"],"options":{"function_to_apply":"exp"}}', 'function_to_apply'),
    ]:
        cli('text-classification: ' + name, ['pipeline', 'text-classification', N, '--call', call], 1, want)
    cli('classify readable', ['classify', S, 'Hello world!'], 0, 'label: NEGATIVE  score: 0.84577')
    cli('classify --top-k null', ['classify', S, 'I absolutely loved this movie, the acting was superb!',
                                  '--top-k', 'null', '--json'], 0, case_output('bert-sentiment', 16), True)
    cli('pipeline positional batch', ['pipeline', 'text-classification', S, 'Hello world!',
        'A much longer sentence that needs padding in a batch of several inputs.', 'Short.', '--json'], 0,
        case_output('bert-sentiment', 15), True)
    cli('embed (modules.json: mean + Normalize)', ['embed', E, 'Hello world!', '--json'], 0,
        None)
    r = subprocess.run([tm, 'embed', E, 'Hello world!', '--json'], capture_output=True, text=True)
    got, want = json.loads(r.stdout), case_output('minilm-embed', 1)
    if got['dims'] == want['dims'] and max(abs(a - b) for a, b in zip(got['data'], want['data'])) <= 1e-4:
        passed += 1
    else:
        failed += 1
        print('FAIL cli: embed is not mean pooling + normalize')
    cli('embed --dtype q8', ['embed', E, 'Hello world!', '--dtype', 'q8'], 0, '# tensor [1, 32]')
    cli('question-answering positional', ['pipeline', 'question-answering', Q, 'Who designed the tower?', EIFFEL,
        '--json'], 0, case_output('distilbert-qa', 2), True)
    G, T5 = f'{data}/gpt2-gen', f'{data}/t5-text2text'
    cli('text-generation positional', ['pipeline', 'text-generation', G, 'Hello, my name is', '--load',
        '{"model_file_name":"decoder_model_merged"}', '--options', '{"max_new_tokens":5}', '--json'], 0,
        case_output('gpt2-gen', 19), True)
    cli('text-generation readable', ['pipeline', 'text-generation', G, 'Hello, my name is', '--load',
        '{"model_file_name":"decoder_model_merged"}', '--options', '{"max_new_tokens":5}'], 0,
        'generated_text: Hello, my name isspeakWorld cyanHolyWorld')
    cli('summarization positional', ['pipeline', 'summarization', T5,
        case_output_inputs('t5-text2text', 16)[0], '--options', '{"max_new_tokens":20}', '--json'], 0,
        case_output('t5-text2text', 16), True)
    # A list of 20 prompts of 1 to 12 words (greedy and seeded sampling) is generated as
    # a batch (tm_batch, 16 rows: the last 4 join as the first end): each text as the
    # prompt alone gives it (llama-chat has position_ids, so the batch is padded).
    L = f'{data}/llama-chat'
    words = 'the quick brown fox jumps over a lazy dog while seven small cats watch it'.split()
    prompts = [' '.join(words[i % 5:(i % 5) + 1 + (i * 7) % 12]) for i in range(20)]
    for opts in ({'max_new_tokens': 9}, {'max_new_tokens': 7, 'do_sample': True, 'seed': 5, 'top_k': 10}):
        o = json.dumps(opts)
        r = subprocess.run([tm, 'pipeline', 'text-generation', L, '--call',
                            json.dumps({'inputs': [prompts], 'options': opts})], capture_output=True, text=True)
        batch = json.loads(r.stdout) if r.returncode == 0 else None
        alone = []
        for text in prompts:
            a = subprocess.run([tm, 'pipeline', 'text-generation', L, '--call',
                                json.dumps({'inputs': [text], 'options': opts})], capture_output=True, text=True)
            alone.append(json.loads(a.stdout) if a.returncode == 0 else None)
        if batch is not None and batch == alone:
            passed += 1
        else:
            failed += 1
            print(f'FAIL cli: a batch of 20 prompts {o}: not each prompt\'s own result: {r.stderr[:200]}')
    cli('text-generation without a decoder', ['pipeline', 'text-generation', S, 'x'], 1,
        'text-generation needs a decoder with a KV cache')
    cli('an error as JSON', ['pipeline', 'fill-mask', f'{data}/bert-mlm', 'no mask', '--json'], 1,
        {'error': 'Mask token ([MASK]) not found in text.'}, True)
    cli('an error on stderr', ['classify', S, 'x', '--dtype', 'q4'], 1, 'onnx/model_q4.onnx')
    cli('unknown task', ['pipeline', 'translate', S, 'x'], 1, "unknown task 'translate'")
    cli('--call without inputs', ['pipeline', 'fill-mask', S, '--call', '{}'], 1, 'not a JSON object with')
    for cmd in ('pipeline', 'embed', 'classify'):
        cli(f'{cmd} --help', [cmd, '--help'], 0, 'usage: transmuter ' + cmd)
        cli(f'{cmd} without arguments', [cmd], 2, 'usage: transmuter ' + cmd)
    cli('an unknown flag', ['classify', S, 'x', '--frobnicate'], 2, 'unknown option --frobnicate')
print(f'{passed} passed, {failed} failed')
PY
