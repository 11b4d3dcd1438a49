#!/bin/sh
# The vision tasks against transformers.js 4.3.2 (tests/data/pipelines, copied from the
# project's shared references): every call of vit-cls and convnext-cls (image-classification),
# clip-zeroshot (zero-shot-image-classification), detr-det (object-detection) and dpt-depth
# (depth-estimation) replayed through `transmuter pipeline TASK REPO --call` (labels exact,
# scores, boxes and depths within 1e-4, the uint8 depth image within one on at most 0.1% of
# its pixels, its scaling exact on transformers.js's own depths); image-feature-extraction's
# logits against the recorded classifications; the image processors'
# pixel_values (`transmuter image-features`) against transformers.js's, bit for bit (their
# sha256, shapes and sizes in vision.pixel_values.json: the arrays themselves are 2-4 MB each),
# and those of a ViTImageProcessor with resample 1 (lanczos, tests/data/lanczos/processor.txt);
# decoding (channels as sharp reports them; EXIF orientation; 16-bit, gray + alpha and
# palette PNGs written here); the CLI's positional and batch forms; and errors (truncated PNG
# and JPEG, an empty file, a zero-width PNG, a missing file, another format, an unknown
# processor type, two images for object-detection, a repo without a processor); a 4000 x 3000
# JPEG classified within 400 MB. Prints the largest differences seen. Usage: tests/vision.sh TRANSMUTER
TM=${1:-build/transmuter}
exec /usr/bin/python3 - "$TM" tests/data/pipelines <<'PY'
import hashlib, json, os, shutil, struct, subprocess, sys, tempfile, zlib
import numpy as np
tm, data = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix='tm-vision-')
sys.path.insert(0, 'tests')
from media_checks import Checks
checks = Checks(tm)
ok, note, diff, run_json = checks.ok, checks.note, checks.diff, checks.run_json

def depth_diff(case, got):
    """depth-estimation: our inline tensor and image against the case's .npy files."""
    want = case['output']
    if not isinstance(got, dict) or set(got) != {'predicted_depth', 'depth'}:
        return f'not a {{predicted_depth, depth}} object: {json.dumps(got)[:120]}'
    pd, im = got['predicted_depth'], got['depth']
    ref = np.load(f'{data}/{want["predicted_depth"]["npy"]}')
    if pd.get('_type') != 'Tensor' or pd.get('dims') != want['predicted_depth']['dims']:
        return f'predicted_depth dims {pd.get("dims")} != {want["predicted_depth"]["dims"]}'
    d = float(np.max(np.abs(np.array(pd['data'], dtype=np.float64).reshape(ref.shape) - ref)))
    note('dpt-depth predicted_depth', d)
    if d > 1e-4: return f'predicted_depth: max |diff| {d:.3g}'
    w = want['depth']
    if (im.get('_type'), im.get('width'), im.get('height'), im.get('channels')) != ('RawImage', w['width'], w['height'], w['channels']):
        return f'depth image header {json.dumps({k: v for k, v in im.items() if k != "data"})}'
    ref = np.load(f'{data}/{w["npy"]}').reshape(-1).astype(np.int64)
    mine = np.array(im['data'], dtype=np.int64)
    if mine.shape != ref.shape: return f'depth: {mine.size} pixels != {ref.size}'
    # The uint8 image truncates depth * 255: where our predicted_depth is 1e-5 off ONNX
    # Runtime's, a pixel at an integer boundary moves by one; the scaling itself is checked
    # exactly below, on transformers.js's own predicted_depth.
    n, far = int(np.sum(mine != ref)), int(np.max(np.abs(mine - ref)))
    note('dpt-depth depth image: pixels off by one', n)
    pd_ref = np.load(f'{data}/{want["predicted_depth"]["npy"]}').astype(np.float32)
    lo, hi = float(pd_ref.min()), float(pd_ref.max())
    v = (pd_ref.astype(np.float64) - lo).astype(np.float32)
    v = (v.astype(np.float64) / (hi - lo)).astype(np.float32)
    v = (v.astype(np.float64) * 255).astype(np.float32)
    if not np.array_equal(np.trunc(v).astype(np.int64).reshape(-1), ref):
        return 'the scaling to uint8 does not reproduce transformers.js on its own predicted_depth'
    return None if far <= 1 and n <= max(2, ref.size // 1000) else f'depth: {n} pixels differ (max {far})'

# ---- transformers.js's calls -------------------------------------------------------------
repos = ('vit-cls', 'convnext-cls', 'clip-zeroshot', 'detr-det', 'dpt-depth')
cases = {}
for repo in repos:
    for n, line in enumerate(open(f'{data}/{repo}.cases.jsonl', encoding='utf-8'), 1):
        case = json.loads(line)
        cases[(repo, n)] = case
        inputs = [f'{data}/{case["input"]}'] + ([case['candidate_labels']] if 'candidate_labels' in case else [])
        call = json.dumps({'inputs': inputs, 'options': case.get('options') or {}})
        r, got = run_json(['pipeline', case['task'], f'{data}/{repo}', '--call', call])
        if got is None:
            ok(f'{repo}.cases.jsonl:{n} ({case["id"]})', f'no JSON (exit {r.returncode}): {r.stderr.strip()[:200]}')
        elif case['task'] == 'depth-estimation':
            ok(f'{repo}.cases.jsonl:{n} ({case["id"]})', depth_diff(case, got))
        else:
            ok(f'{repo}.cases.jsonl:{n} ({case["id"]})', diff(case['output'], got, f'{repo} scores/boxes'))

# ---- image processors: pixel_values bit for bit ----------------------------------------------
refs = json.load(open(f'{data}/vision.pixel_values.json'))
media = {os.path.splitext(f)[0]: f for f in os.listdir(f'{data}/media') if f.endswith(('.png', '.jpg'))}
for repo, images in refs.items():
    for image, ref in images.items():
        name = f'{repo} pixel_values of {image}'
        out = f'{tmp}/{repo}-{image}'
        r = subprocess.run([tm, 'image-features', f'{data}/media/{media[image]}', '--processor', f'{data}/{repo}',
                            '--out', out], capture_output=True, text=True)
        if r.returncode != 0:
            ok(name, r.stderr.strip()[:200]); continue
        got = np.load(f'{out}/pixel_values.npy')
        if list(got.shape) != ref['shape'] or got.dtype != np.float32:
            ok(name, f'{got.dtype}{got.shape} != float32{tuple(ref["shape"])}'); continue
        same = hashlib.sha256(got.astype('<f4').tobytes()).hexdigest() == ref['sha256']
        note('pixel_values arrays not bit-equal', 0 if same else 1)
        ok(name, None if same else f'differs (min {got.min()} vs {ref["min"]}, max {got.max()} vs {ref["max"]})')
        sizes = dict(line.split(' ', 1) for line in r.stdout.strip().split('\n'))
        want = f'{ref["original_sizes"][0][0]} {ref["original_sizes"][0][1]}'
        ok(f'{name}: original size', None if sizes.get('original', '').startswith(want + ' ') else sizes.get('original'))
        reshaped = [l for l in r.stdout.split('\n') if ' reshaped ' in l]
        want = '%d %d' % tuple(ref['reshaped_input_sizes'][0])
        ok(f'{name}: reshaped size', None if reshaped and reshaped[0].endswith(' ' + want) else r.stdout)
        if repo == 'detr-det':
            mask = np.load(f'{out}/pixel_mask.npy') if os.path.exists(f'{out}/pixel_mask.npy') else None
            ok('detr-det pixel_mask: int64 ones (1, 64, 64)', None if mask is not None and mask.dtype == np.int64
               and mask.shape == (1, 64, 64) and np.all(mask == 1) else 'missing or wrong')

# ---- resample 1 (lanczos, sharp's resize): a ViTImageProcessor's pixel_values bit for bit ----
for line in open('tests/data/lanczos/processor.txt'):
    image, shape, digest = line.split()[:3]
    name = f'lanczos pixel_values of {image}'
    out = f'{tmp}/lanczos-{image}'
    r = subprocess.run([tm, 'image-features', f'{data}/media/{image}', '--processor', 'tests/data/lanczos/vit-lanczos',
                        '--out', out], capture_output=True, text=True)
    if r.returncode != 0:
        ok(name, r.stderr.strip()[:200]); continue
    got = np.load(f'{out}/pixel_values.npy')
    same = 'x'.join(map(str, got.shape)) == shape and hashlib.sha256(got.astype('<f4').tobytes()).hexdigest() == digest
    ok(name, None if same else f'differs: {got.dtype}{got.shape}, min {got.min()}, max {got.max()}')

# ---- decoding --------------------------------------------------------------------------------
def decode(path):
    out = f'{tmp}/decoded-{os.path.basename(path)}'
    r = subprocess.run([tm, 'image-features', path, '--out', out], capture_output=True, text=True)
    return np.load(f'{out}/image.npy') if r.returncode == 0 else r.stderr.strip()

for case in {c['input']: c for c in cases.values()}.values():
    got = decode(f'{data}/{case["input"]}')
    i = case['image']
    ok(f'decoding {case["input"]}: {i["width"]}x{i["height"]}, {i["channels"]} channel(s) as sharp gives',
       got if isinstance(got, str) else None if got.shape == (i['height'], i['width'], i['channels'])
       else f'{got.shape}')

def png(path, w, h, color_type, depth, rows, extra=b'', palette=None):
    def chunk(kind, body):
        return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)
    raw = b''.join(b'\0' + r for r in rows)
    body = chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, color_type, 0, 0, 0)) + extra
    if palette: body += chunk(b'PLTE', palette)
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + body + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))

# 16-bit RGB: the high byte of each sample (libvips's 16 -> 8-bit step)
v16 = np.arange(4 * 3 * 3, dtype=np.uint16).reshape(3, 4, 3) * 1800 + 77
png(f'{tmp}/rgb16.png', 4, 3, 2, 16, [r.astype('>u2').tobytes() for r in v16])
got = decode(f'{tmp}/rgb16.png')
ok('16-bit PNG: high bytes', got if isinstance(got, str) else None if got.shape == (3, 4, 3) and
   np.array_equal(got, (v16 >> 8).astype(np.uint8)) else f'{got.reshape(-1)[:6]}')
# gray + alpha keeps two channels; the processors drop the alpha
ga = np.array([[[10, 255], [200, 0]], [[30, 128], [250, 7]]], dtype=np.uint8)
png(f'{tmp}/ga.png', 2, 2, 4, 8, [r.tobytes() for r in ga])
got = decode(f'{tmp}/ga.png')
ok('gray + alpha PNG: two channels', got if isinstance(got, str) else None if np.array_equal(got, ga) else f'{got}')
# a palette with transparency expands to RGBA
png(f'{tmp}/pal.png', 2, 1, 3, 8, [bytes([1, 0])], palette=bytes([9, 8, 7, 250, 251, 252]))
got = decode(f'{tmp}/pal.png')
ok('palette PNG: RGB', got if isinstance(got, str) else None if got.tolist() == [[[250, 251, 252], [9, 8, 7]]] else f'{got.tolist()}')
# EXIF orientation 6 (rotate 90 degrees clockwise) in a JPEG, and 3 in a PNG's eXIf
def exif(orientation):
    return b'II*\0' + struct.pack('<IH', 8, 1) + struct.pack('<HHII', 0x0112, 3, 1, orientation) + b'\0\0\0\0'
jpg = open(f'{data}/media/rgb_480x640.jpg', 'rb').read()
app1 = b'Exif\0\0' + exif(6)
open(f'{tmp}/rot6.jpg', 'wb').write(jpg[:2] + b'\xff\xe1' + struct.pack('>H', len(app1) + 2) + app1 + jpg[2:])
plain, turned = decode(f'{data}/media/rgb_480x640.jpg'), decode(f'{tmp}/rot6.jpg')
ok('JPEG EXIF orientation 6: turned clockwise', turned if isinstance(turned, str) else
   None if np.array_equal(turned, np.rot90(plain, k=-1)) else f'{turned.shape}')
rows = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
png(f'{tmp}/rot3.png', 3, 2, 2, 8, [r.tobytes() for r in rows],
    extra=struct.pack('>I', len(exif(3))) + b'eXIf' + exif(3) + struct.pack('>I', zlib.crc32(b'eXIf' + exif(3)) & 0xffffffff))
got = decode(f'{tmp}/rot3.png')
ok('PNG eXIf orientation 3: turned 180 degrees', got if isinstance(got, str) else
   None if np.array_equal(got, rows[::-1, ::-1]) else f'{got.tolist()}')
# WebP: lossless, written through libwebp's own encoder (ctypes), decodes to the same RGBA
def webp_lossless(path, rgba):
    import ctypes, ctypes.util
    name = ctypes.util.find_library('webp')
    if not name: return False
    lib = ctypes.CDLL(name)
    out = ctypes.POINTER(ctypes.c_uint8)()
    h, w = rgba.shape[:2]
    buf = np.ascontiguousarray(rgba)
    n = lib.WebPEncodeLosslessRGBA(buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), w, h, w * 4, ctypes.byref(out))
    if not n: return False
    open(path, 'wb').write(ctypes.string_at(out, n))
    lib.WebPFree(out)
    return True
rgba = decode(f'{data}/media/rgba_200x150.png')
if isinstance(rgba, str) or not webp_lossless(f'{tmp}/rgba.webp', rgba):
    checks.skipped += 1
    print('skip: no libwebp encoder reachable from Python for the WebP check')
else:
    got = decode(f'{tmp}/rgba.webp')
    # lossless WebP may change the colour of fully transparent pixels: compare where alpha > 0
    seen = rgba[..., 3] > 0
    good = not isinstance(got, str) and got.shape == rgba.shape and np.array_equal(got[seen], rgba[seen])
    ok('lossless WebP (RGBA) decodes to its source pixels', got if isinstance(got, str) else None if good else f'{got.shape}')
    webp = open(f'{tmp}/rgba.webp', 'rb').read()
    open(f'{tmp}/cut.webp', 'wb').write(webp[:len(webp) // 2])
    got = decode(f'{tmp}/cut.webp')
    ok('truncated WebP: an error naming it', None if isinstance(got, str) and f'{tmp}/cut.webp: corrupt or truncated WebP' in got else f'{got}')

# ---- the CLI's forms -------------------------------------------------------------------------
V, C, D, P = (f'{data}/{r}' for r in ('vit-cls', 'clip-zeroshot', 'detr-det', 'dpt-depth'))
img = lambda name: f'{data}/media/{name}'
r, got = run_json(['pipeline', 'image-classification', V, img('rgb_224x224.png'), '--json'])
ok('image-classification positional (top_k 5 by default)', diff(cases[('vit-cls', 11)]['output'][:5], got, 'vit-cls scores/boxes'))
r, got = run_json(['pipeline', 'image-classification', V, img('rgb_640x480.jpg'), img('rgb_37x211.png'),
                   '--options', '{"top_k":3}', '--json'])
ok('image-classification batch of two', diff([cases[('vit-cls', 1)]['output'], cases[('vit-cls', 4)]['output']], got, 'vit-cls scores/boxes'))
r, got = run_json(['pipeline', 'image-classification', V, img('rgb_640x480.jpg'), '--options', '{"top_k":null}', '--json'])
ok('image-classification top_k null: all 10 labels', None if got and len(got) == 10 else r.stdout[:200])
labels = cases[('clip-zeroshot', 1)]['candidate_labels']
r, got = run_json(['pipeline', 'zero-shot-image-classification', C, img('rgb_640x480.jpg')] + labels + ['--json'])
ok('zero-shot-image-classification positional IMAGE LABEL...', diff(cases[('clip-zeroshot', 1)]['output'], got, 'clip-zeroshot scores'))
r = subprocess.run([tm, 'pipeline', 'object-detection', D, img('rgb_37x211.png'), '--options', '{"threshold":0.9}'],
                   capture_output=True, text=True)
ok('object-detection readable: one line per box', None if r.returncode == 0 and 'box: {xmin: ' in r.stdout else r.stdout[:200] + r.stderr[:200])
r = subprocess.run([tm, 'pipeline', 'depth-estimation', P, img('rgb_37x211.png')], capture_output=True, text=True)
ok('depth-estimation readable', None if r.returncode == 0 and '# tensor [211, 37]' in r.stdout and '# image 37x211, 1 channel(s)' in r.stdout
   else r.stdout[:200] + r.stderr[:200])

# image-feature-extraction (no recorded call): vit-cls's logits, whose softmax must give the
# recorded image-classification scores; a batch stacks the images' rows
r, got = run_json(['pipeline', 'image-feature-extraction', V, img('rgb_640x480.jpg'), img('rgb_37x211.png'), '--json'])
if got is None or got.get('dims') != [2, 10]:
    ok('image-feature-extraction: logits (2, 10) for two images', r.stdout[:200] + r.stderr[:200])
else:
    id2label = json.load(open(f'{V}/config.json'))['id2label']
    problem = None
    for row, n in ((0, 1), (1, 4)):
        x = np.array(got['data'][row * 10:(row + 1) * 10], dtype=np.float64)
        e = np.exp(x - x.max()); sm = e / e.sum()
        top = [{'label': id2label[str(i)], 'score': float(sm[i])} for i in np.argsort(-sm, kind='stable')[:3]]
        problem = problem or diff(cases[('vit-cls', n)]['output'], top, 'vit-cls scores/boxes')
    ok('image-feature-extraction: softmax of its logits gives the recorded classification', problem)
# ---- errors ----------------------------------------------------------------------------------
def expect_error(name, args, want):
    r = subprocess.run([tm] + args, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode == 0: ok(name, 'exit status 0')
    elif r.returncode >= 124 or r.returncode < 0: ok(name, f'crashed (exit {r.returncode})')
    else: ok(name, None if want in text else f'message {text.strip()[:200]!r} lacks {want!r}')

pngdata = open(img('rgb_224x224.png'), 'rb').read()
open(f'{tmp}/cut.png', 'wb').write(pngdata[:len(pngdata) // 2])
open(f'{tmp}/header.png', 'wb').write(pngdata[:20])
open(f'{tmp}/cut.jpg', 'wb').write(jpg[:len(jpg) // 2])
open(f'{tmp}/empty.png', 'wb').write(b'')
open(f'{tmp}/image.gif', 'wb').write(b'GIF89a\x01\x00\x01\x00\x00\x00\x00;')
png(f'{tmp}/zero.png', 0, 4, 2, 8, [])
for task, repo in (('image-classification', V), ('object-detection', D), ('depth-estimation', P)):
    expect_error(f'{task}: truncated PNG', ['pipeline', task, repo, f'{tmp}/cut.png'], f'{tmp}/cut.png: corrupt or truncated PNG')
    expect_error(f'{task}: truncated JPEG', ['pipeline', task, repo, f'{tmp}/cut.jpg'], f'{tmp}/cut.jpg: corrupt or truncated JPEG')
    expect_error(f'{task}: missing file', ['pipeline', task, repo, f'{tmp}/nothing.png'], f"cannot open image '{tmp}/nothing.png'")
expect_error('a PNG cut inside its header', ['pipeline', 'image-classification', V, f'{tmp}/header.png'], f'{tmp}/header.png: corrupt or truncated PNG')
expect_error('an empty file', ['pipeline', 'image-classification', V, f'{tmp}/empty.png'], f'{tmp}/empty.png: empty file')
expect_error('a zero-width PNG', ['pipeline', 'image-classification', V, f'{tmp}/zero.png'], f'{tmp}/zero.png: corrupt or truncated PNG')
expect_error('a GIF', ['pipeline', 'image-classification', V, f'{tmp}/image.gif'], f'{tmp}/image.gif: not a PNG, JPEG or WebP image')
expect_error('zero-shot-image-classification truncated JPEG', ['pipeline', 'zero-shot-image-classification', C, f'{tmp}/cut.jpg', 'a', 'b'],
             'corrupt or truncated JPEG')
expect_error('object-detection with two images', ['pipeline', 'object-detection', D, img('rgb_37x211.png'), img('rgb_211x37.png')],
             'object-detection takes one image per call')
expect_error('image-classification without preprocessor_config.json', ['pipeline', 'image-classification', f'{data}/bert-sentiment',
             img('rgb_37x211.png')], 'no preprocessor_config.json')
expect_error('an image task given a number', ['pipeline', 'image-classification', V, '--call', '{"inputs":[3]}'], 'a path to a PNG')
expect_error('zero-shot-image-classification without labels', ['pipeline', 'zero-shot-image-classification', C, '--call',
             json.dumps({'inputs': [img('rgb_37x211.png')]})], 'takes [images, candidate_labels]')
def repo_with(name, change):
    path = f'{tmp}/{name}'
    shutil.copytree(V, path)
    cfg = json.load(open(f'{path}/preprocessor_config.json'))
    cfg.update(change)
    json.dump(cfg, open(f'{path}/preprocessor_config.json', 'w'))
    return path
expect_error('image-feature-extraction pool without pooler_output', ['pipeline', 'image-feature-extraction', V, img('rgb_37x211.png'),
             '--options', '{"pool":true}'], "no pooled output")
expect_error('an unknown image processor', ['pipeline', 'image-classification', repo_with('sam', {'image_processor_type': 'SamImageProcessor'}),
             img('rgb_37x211.png')], "image processor 'SamImageProcessor' is not supported")
expect_error('image-features: unknown processor', ['image-features', img('rgb_37x211.png'), '--processor', f'{tmp}/sam', '--out', tmp],
             "'SamImageProcessor' is not supported")

# A photo of the size users meet (4000 x 3000 JPEG, made here with ImageMagick when it is
# installed): classified, with the decoded image, the resize and the model within 400 MB.
if shutil.which('convert') and os.path.exists('/usr/bin/time'):
    big = f'{tmp}/big_4000x3000.jpg'
    subprocess.run(['convert', '-size', '4000x3000', 'gradient:red-blue', '-quality', '85', big], check=True)
    r = subprocess.run(['/usr/bin/time', '-f', 'peak %M', tm, 'pipeline', 'image-classification', V, big, '--json'],
                       capture_output=True, text=True)
    peak = [l for l in r.stderr.splitlines() if l.startswith('peak ')]
    kb = int(peak[-1].split()[1]) if peak else 0
    try:
        labels = json.loads(r.stdout)
    except ValueError:
        labels = None
    ok('a 4000 x 3000 JPEG: classified within 400 MB',
       None if r.returncode == 0 and isinstance(labels, list) and len(labels) == 5 and 0 < kb < 400 * 1024
       else f'exit {r.returncode}, {kb // 1024} MB, {r.stderr.strip()[:120]}')
    print(f'a 4000 x 3000 JPEG: peak RSS {kb // 1024} MB')
else:
    print('skip: a 4000 x 3000 JPEG needs ImageMagick (convert) and /usr/bin/time')

# Truncated at many points and with header bytes flipped: every file decodes or fails with a
# message naming it (never a crash).
def robust(name, blob, suffix):
    bad = []
    cuts = sorted(set([1, 2, 3, 7, 8, 16, 33, 64, 100] + list(range(0, len(blob), max(1, len(blob) // 24)))))
    variants = [blob[:c] for c in cuts if c < len(blob)]
    for i in range(min(64, len(blob))):
        variants.append(blob[:i] + bytes([blob[i] ^ 0xff]) + blob[i + 1:])
    for k, v in enumerate(variants):
        path = f'{tmp}/robust-{k}{suffix}'
        open(path, 'wb').write(v)
        r = subprocess.run([tm, 'image-features', path, '--out', f'{tmp}/robust'], capture_output=True, text=True)
        if r.returncode != 0 and (r.returncode not in (1, 2) or path not in r.stderr):
            bad.append(f'variant {k}: exit {r.returncode} {r.stderr.strip()[:80]}')
    ok(f'{name}: {len(variants)} cut or byte-flipped copies decode or fail naming the file', '; '.join(bad[:3]) or None)
robust('PNG', pngdata, '.png')
robust('JPEG', jpg, '.jpg')
if os.path.exists(f'{tmp}/rgba.webp'):
    robust('WebP', webp, '.webp')

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(checks.summary())
PY
