#!/usr/bin/python3
"""Reference trajectories of torch.optim.SGD and torch.optim.AdamW for tests/test_optim.c.

Each case runs a few optimizer steps on random float tensors with random gradients and
stores, under tests/data/optim/CASE/: pK_traj.npy (the parameter before the first step and
after each step, shape (steps + 1, ...)), pK_grads.npy (the gradient fed at each step),
pK_STATE.npy (the optimizer's state after the last step: exp_avg, exp_avg_sq,
max_exp_avg_sq, momentum_buffer), skip.npy ((steps, params) 1 where the gradient is None),
lr.npy (the learning rate each step used). tests/data/optim/cases.txt lists each case with
its hyperparameters as key=value words, which the C test reads.
tests/data/optim/xent/CASE/ holds logits.npy, labels.npy, and torch.nn.functional.
cross_entropy's loss.npy and gradient dlogits.npy (computed in float64 from the logits).

Needs Debian's python3-torch and python3-numpy; run it only to regenerate the data:
    /usr/bin/python3 tests/gen_optim_ref.py tests/data/optim
"""
import math
import os
import sys

import numpy as np
import torch

SHAPES = [(4, 5), (7,), (2, 3, 2)]
GRAD_SCALE = [0.1, 1.0, 3.0]


def schedule_factor(kind, warmup, total):
    """The lambdas of transformers' get_{constant,linear,cosine}_schedule_with_warmup."""
    def f(k):
        if k < warmup:
            return k / max(1, warmup)
        if kind == "constant":
            return 1.0
        span = max(1, total - warmup)
        if kind == "linear":
            return max(0.0, (total - k) / span)
        progress = (k - warmup) / span
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return f


CASES = [
    dict(name="sgd_plain", kind="sgd", lr=0.1),
    dict(name="sgd_momentum", kind="sgd", lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    dict(name="sgd_nesterov", kind="sgd", lr=0.05, momentum=0.8, nesterov=1, weight_decay=0.001,
         schedule="cosine", warmup=1, total=6),
    dict(name="sgd_maximize_skip", kind="sgd", lr=0.02, momentum=0.5, maximize=1,
         skip=[(0, 1), (3, 2)]),
    dict(name="adamw_default", kind="adamw", lr=1e-2),
    dict(name="adamw_amsgrad", kind="adamw", lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6,
         weight_decay=0.1, amsgrad=1),
    dict(name="adamw_linear_clip", kind="adamw", lr=2e-2, schedule="linear", warmup=2, total=6,
         max_grad_norm=1.0, wd_param1=0.0),
    dict(name="adamw_maximize_skip", kind="adamw", lr=5e-3, maximize=1, weight_decay=0.05,
         skip=[(1, 0), (2, 0), (4, 2)]),
    dict(name="adamw_f64", kind="adamw", lr=1e-2, dtype="float64", amsgrad=1),
    dict(name="sgd_f64_clip", kind="sgd", lr=0.1, momentum=0.9, dtype="float64",
         max_grad_norm=0.5),
]
STEPS = 6


def run_case(case, out):
    torch.manual_seed(sum(map(ord, case["name"])))
    dtype = torch.float64 if case.get("dtype") == "float64" else torch.float32
    params = [torch.nn.Parameter(torch.randn(s, dtype=dtype)) for s in SHAPES]
    grads = [[(torch.randn(s, dtype=dtype) * g) for s, g in zip(SHAPES, GRAD_SCALE)]
             for _ in range(STEPS)]
    skip = np.zeros((STEPS, len(SHAPES)), dtype=np.int64)
    for step, i in case.get("skip", []):
        skip[step, i] = 1
    wd = case.get("weight_decay", 0.0 if case["kind"] == "sgd" else 1e-2)
    groups = [{"params": [params[0], params[2]]},
              {"params": [params[1]], "weight_decay": case.get("wd_param1", wd)}]
    if case["kind"] == "sgd":
        opt = torch.optim.SGD(groups, lr=case["lr"], momentum=case.get("momentum", 0.0),
                              dampening=case.get("dampening", 0.0), weight_decay=wd,
                              nesterov=bool(case.get("nesterov", 0)),
                              maximize=bool(case.get("maximize", 0)))
    else:
        opt = torch.optim.AdamW(groups, lr=case["lr"],
                                betas=(case.get("beta1", 0.9), case.get("beta2", 0.999)),
                                eps=case.get("eps", 1e-8), weight_decay=wd,
                                amsgrad=bool(case.get("amsgrad", 0)),
                                maximize=bool(case.get("maximize", 0)))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, schedule_factor(case.get("schedule", "constant"), case.get("warmup", 0),
                             case.get("total", 0)))
    traj = [[p.detach().clone()] for p in params]
    lrs = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(params):
            if not skip[step, i]:
                p.grad = grads[step][i].clone()
        if case.get("max_grad_norm"):
            torch.nn.utils.clip_grad_norm_(params, case["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        for i, p in enumerate(params):
            traj[i].append(p.detach().clone())
    os.makedirs(os.path.join(out, case["name"]), exist_ok=True)
    d = os.path.join(out, case["name"])
    for i, p in enumerate(params):
        np.save(os.path.join(d, f"p{i}_traj.npy"), torch.stack(traj[i]).numpy())
        np.save(os.path.join(d, f"p{i}_grads.npy"), torch.stack([g[i] for g in grads]).numpy())
        for key, value in opt.state[p].items():
            if key == "step":
                np.save(os.path.join(d, f"p{i}_step.npy"), np.array(int(value), dtype=np.int64))
            elif value is not None:
                np.save(os.path.join(d, f"p{i}_{key}.npy"), value.numpy())
    np.save(os.path.join(d, "skip.npy"), skip)
    np.save(os.path.join(d, "lr.npy"), np.array(lrs, dtype=np.float64))
    words = [case["name"], f"kind={case['kind']}", f"steps={STEPS}", f"weight_decay={wd!r}"]
    for key in ("lr", "momentum", "dampening", "nesterov", "beta1", "beta2", "eps", "amsgrad",
                "maximize", "schedule", "warmup", "total", "max_grad_norm", "wd_param1", "dtype"):
        if key in case:
            words.append(f"{key}={case[key]!r}".replace("'", ""))
    return " ".join(words)


def cross_entropy_cases(out):
    torch.manual_seed(99)
    cases = {
        "small": (torch.randn(4, 3), torch.tensor([2, 0, 1, 2])),
        "wide_large": (torch.randn(2, 5) * 40 + torch.tensor([0, 900.0, -900, 0, 3]),
                       torch.tensor([1, 4])),
        "f64": (torch.randn(3, 4, dtype=torch.float64), torch.tensor([3, 3, 0])),
    }
    for name, (logits, labels) in cases.items():
        d = os.path.join(out, "xent", name)
        os.makedirs(d, exist_ok=True)
        x = logits.detach().double().clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(x, labels)
        loss.backward()
        np.save(os.path.join(d, "logits.npy"), logits.numpy())
        np.save(os.path.join(d, "labels.npy"), labels.numpy().astype(np.int64))
        np.save(os.path.join(d, "loss.npy"), np.array(float(loss), dtype=np.float64))
        np.save(os.path.join(d, "dlogits.npy"), x.grad.numpy())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/optim"
    os.makedirs(out, exist_ok=True)
    cross_entropy_cases(out)
    lines = [run_case(c, out) for c in CASES]
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write(f"# made by tests/gen_optim_ref.py with torch {torch.__version__}\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
