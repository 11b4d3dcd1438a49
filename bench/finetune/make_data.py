#!/usr/bin/python3
"""The fixed synthetic batch of the fine-tuning check, as the two dataset formats the C side
reads (src/train/dataset.h): data/batch.jsonl and data/batch_npy/ (input_ids, attention_mask,
token_type_ids padded to the longest example, labels). Four examples of lengths 7, 5, 6 and 4
(so padding and the attention mask matter), two token types, three labels, token ids from a
fixed seed in [1, 1000) (the tiny BERT's vocabulary). Deterministic: rerunning rewrites the
same bytes.  /usr/bin/python3 bench/finetune/make_data.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np

LENGTHS = [7, 5, 6, 4]
LABELS = [2, 0, 1, 2]
VOCAB = 1000


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")
    rng = np.random.default_rng(20240601)
    examples = []
    for n, label in zip(LENGTHS, LABELS):
        ids = rng.integers(1, VOCAB, size=n).tolist()
        split = int(rng.integers(2, n))          # segment B from here on
        types = [0] * split + [1] * (n - split)
        examples.append({"input_ids": ids, "attention_mask": [1] * n, "token_type_ids": types,
                         "label": label})
    os.makedirs(os.path.join(out, "batch_npy"), exist_ok=True)
    with open(os.path.join(out, "batch.jsonl"), "w") as f:
        for e in examples:
            f.write(json.dumps(e) + "\n")
    t = max(LENGTHS)
    pad = lambda key, fill: np.array([e[key] + [fill] * (t - len(e[key])) for e in examples],
                                     dtype=np.int64)
    np.save(os.path.join(out, "batch_npy", "input_ids.npy"), pad("input_ids", 0))
    np.save(os.path.join(out, "batch_npy", "attention_mask.npy"), pad("attention_mask", 0))
    np.save(os.path.join(out, "batch_npy", "token_type_ids.npy"), pad("token_type_ids", 0))
    np.save(os.path.join(out, "batch_npy", "labels.npy"), np.array(LABELS, dtype=np.int64))


if __name__ == "__main__":
    main()
