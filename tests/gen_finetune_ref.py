#!/usr/bin/python3
"""PyTorch reference numbers for the fine-tuning test of tests/test_finetune.c (which runs
`transmuter finetune` without torch). Writes, under tests/data/finetune/:
  train.jsonl          6 examples (lengths 3 to 9, two token types, labels 0..2), so that a
                       batch of 4 leaves a partial batch of 2 and shuffled epochs give
                       batches of several shapes (several value-and-gradient plans)
  torch/               bench/finetune/torch_ref.py on tests/data/tiny/bert-seqcls: 6 AdamW
                       steps (lr 1e-3, betas 0.9/0.999, eps 1e-6, weight decay 0.01, batch 4,
                       shuffled with seed 3): loss.npy, lr.npy, the step-0 gradients
                       grads/0000/NAME.npy, final_logits.npy (the trained model on the first
                       batch), config.json
  model_fp16.onnx      the same export in float16 (../shared/tools/quantize_variants.py fp16),
                       for the half-precision path (compute in f32, saved back as float16)
Deterministic: rerunning rewrites the same numbers. Needs python3-torch, python3-onnx and
python3-numpy; run it only to regenerate the data:
    /usr/bin/python3 tests/gen_finetune_ref.py
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "finetune")
MODEL = os.path.join(REPO, "tests", "data", "tiny", "bert-seqcls", "model.onnx")
HYPER = ["--steps", "6", "--batch-size", "4", "--shuffle", "--seed", "3", "--lr", "1e-3",
         "--beta1", "0.9", "--beta2", "0.999", "--eps", "1e-6", "--weight-decay", "0.01"]


def write_data(path):
    rng = np.random.default_rng(8)
    with open(path, "w") as f:
        for n, label in zip([9, 3, 6, 8, 4, 7], [1, 0, 2, 2, 1, 0]):
            split = int(rng.integers(1, n))
            e = {"input_ids": [int(v) for v in rng.integers(1, 1000, size=n)],
                 "token_type_ids": [0] * split + [1] * (n - split), "label": label}
            f.write(json.dumps(e) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    data = os.path.join(OUT, "train.jsonl")
    write_data(data)
    full = os.path.join(OUT, "torch_full")
    subprocess.run([sys.executable, os.path.join(REPO, "bench", "finetune", "torch_ref.py"),
                    "--model", MODEL, "--data", data, "--out", full] + HYPER, check=True)
    ref = os.path.join(OUT, "torch")
    shutil.rmtree(ref, ignore_errors=True)
    os.makedirs(os.path.join(ref, "grads"))
    for f in ("loss.npy", "lr.npy", "final_logits.npy", "config.json"):
        shutil.copy(os.path.join(full, f), ref)
    shutil.copytree(os.path.join(full, "grads", "0000"), os.path.join(ref, "grads", "0000"))
    shutil.rmtree(full)
    subprocess.run([sys.executable, os.path.join(REPO, "..", "shared", "tools", "quantize_variants.py"),
                    "fp16", MODEL, os.path.join(OUT, "model_fp16.onnx")], check=True)


if __name__ == "__main__":
    main()
