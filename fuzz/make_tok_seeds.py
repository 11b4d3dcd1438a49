#!/usr/bin/env python3
"""Writes the seeds of fuzz_tokenizer_load: small tokenizer.json files (a few KB each) made
from the real tokenizers of tests/data/tokenizers (vocabulary and merges cut to the first
ids, a few added tokens) and, for every normalizer / pre-tokenizer / decoder configuration of
tests/data/tokenizers/components, a tiny WordLevel tokenizer that uses it. Deterministic.
Not a fuzzer; fuzz/run.sh calls it. Usage: make_tok_seeds.py OUT_DIR"""
import json, lzma, os, sys

DATA = "tests/data/tokenizers"


def load(name):
    p = os.path.join(DATA, name, "tokenizer.json")
    if os.path.exists(p + ".xz"):
        return json.loads(lzma.open(p + ".xz").read())
    return json.load(open(p))


def shrink(tok, keep=300):
    m = tok["model"]
    if isinstance(m.get("vocab"), dict):
        m["vocab"] = {k: v for k, v in m["vocab"].items() if v < keep}
        if "merges" in m:
            merges = []
            for mg in m["merges"]:
                a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
                if a in m["vocab"] and b in m["vocab"] and a + b in m["vocab"]:
                    merges.append(mg)
            m["merges"] = merges[:200]
    elif isinstance(m.get("vocab"), list):
        m["vocab"] = m["vocab"][:keep]
        if m.get("unk_id") is not None and m["unk_id"] >= keep:
            m["unk_id"] = 0
    added = tok.get("added_tokens") or []
    small = [a for a in added if a["id"] < keep][:8]
    extra = [a for a in added if a["id"] >= keep][:4]
    for i, a in enumerate(extra):
        a["id"] = keep + i
    tok["added_tokens"] = small + extra
    return tok


def word_level(**parts):
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4, "▁hello": 5, ",": 6,
             "!": 7, "a": 8, "Ġ": 9, "1": 10, "2": 11}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 1, "content": "[CLS]", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True},
                            {"id": 2, "content": "[SEP]", "single_word": False, "lstrip": True,
                             "rstrip": True, "normalized": False, "special": True}],
           "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    tok.update(parts)
    return tok


def main(out):
    os.makedirs(out, exist_ok=True)
    n = 0
    def write(name, obj):
        nonlocal n
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        n += 1
    for name in sorted(os.listdir(DATA)):
        if os.path.exists(os.path.join(DATA, name, "tokenizer.json.xz")):
            write("real-" + name, shrink(load(name)))
    comp = os.path.join(DATA, "components")
    for slot, file in (("normalizer", "normalizers.json"), ("pre_tokenizer", "pretokenizers.json"),
                       ("decoder", "decoders.json")):
        p = os.path.join(comp, file)
        if not os.path.exists(p):
            continue
        seen = set()
        for i, c in enumerate(json.load(open(p))):
            key = json.dumps(c["config"], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            write("%s-%03d" % (slot, i), word_level(**{slot: c["config"]}))
    write("post-template", word_level(post_processor={
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                           "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}}))
    write("post-bert", word_level(post_processor={"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]}))
    write("post-roberta", word_level(post_processor={"type": "RobertaProcessing", "sep": ["[SEP]", 2],
                                                     "cls": ["[CLS]", 1], "trim_offsets": True, "add_prefix_space": True}))
    print("%d seeds in %s" % (n, out))


main(sys.argv[1] if len(sys.argv) > 1 else "build-fuzz/seeds/tokenizer_load")
