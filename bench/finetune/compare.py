#!/usr/bin/python3
"""Compares two fine-tuning runs in the layout of bench/finetune/README.md (loss.npy,
grads/NNNN/NAME.npy, optionally params/NAME.npy): prints each parameter's worst gradient
error over the steps, the loss curves side by side, and ends with the line
    max gradient rel err E, max loss diff D
The second folder is the reference. A gradient's error at a step is normwise,
max|a - b| / max|b| over the tensor's elements (an elementwise ratio would measure noise on
elements near zero); a parameter's error is its worst step. Exits 1 when E > --grad-tol
(1e-4, the issue's criterion) or D > --loss-tol (1e-5), or when the runs do not match up.
    /usr/bin/python3 bench/finetune/compare.py OURS_DIR TORCH_DIR
"""
import argparse
import os
import sys

import numpy as np


def rel_err(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if a.shape != b.shape:
        return float("inf")
    diff = float(np.abs(a - b).max()) if a.size else 0.0
    scale = float(np.abs(b).max()) if b.size else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def tensors(folder):
    return {f[:-4]: os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".npy")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ours")
    ap.add_argument("reference")
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    args = ap.parse_args()
    problems = []
    la = np.load(os.path.join(args.ours, "loss.npy"))
    lb = np.load(os.path.join(args.reference, "loss.npy"))
    if la.shape != lb.shape:
        problems.append(f"{la.size} losses against {lb.size}")
    steps = min(la.size, lb.size)

    worst = {}   # name -> (error, step, scale)
    for step in range(steps):
        ga = tensors(os.path.join(args.ours, "grads", "%04d" % step))
        gb = tensors(os.path.join(args.reference, "grads", "%04d" % step))
        for name in sorted(set(ga) ^ set(gb)):
            problems.append(f"step {step}: gradient '{name}' only in "
                            f"{args.ours if name in ga else args.reference}")
        for name in sorted(set(ga) & set(gb)):
            b = np.load(gb[name])
            e = rel_err(np.load(ga[name]), b)
            if name not in worst or e > worst[name][0]:
                worst[name] = (e, step, float(np.abs(b).max()) if b.size else 0.0)

    width = max([len(n) for n in worst] + [9])
    print(f"{'parameter':<{width}}  worst grad rel err  at step  max|grad|")
    for name, (e, step, scale) in worst.items():
        print(f"{name:<{width}}  {e:18.3e}  {step:7d}  {scale:.3e}")

    pa, pb = os.path.join(args.ours, "params"), os.path.join(args.reference, "params")
    if os.path.isdir(pa) and os.path.isdir(pb):
        ta, tb = tensors(pa), tensors(pb)
        errs = [rel_err(np.load(ta[n]), np.load(tb[n])) for n in sorted(set(ta) & set(tb))]
        if errs:
            print(f"final parameters: max rel err {max(errs):.3e} over {len(errs)} tensors")

    print(f"{'step':>4}  {'loss (ours)':>14}  {'loss (reference)':>16}  {'diff':>9}")
    for s in range(steps):
        print(f"{s + 1:4d}  {la[s]:14.8f}  {lb[s]:16.8f}  {abs(la[s] - lb[s]):9.2e}")
    max_grad = max((w[0] for w in worst.values()), default=float("inf"))
    max_loss = float(np.abs(la[:steps] - lb[:steps]).max()) if steps else float("inf")
    for p in problems:
        print("problem:", p)
    print(f"max gradient rel err {max_grad:.3e}, max loss diff {max_loss:.3e}")
    ok = not problems and max_grad <= args.grad_tol and max_loss <= args.loss_tol
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
