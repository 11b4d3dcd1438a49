#!/usr/bin/env python3
"""Coefficients of the vector GELU (src/backends/cpu/vmath_avx512.c), refitted here.

erfc(z) = t exp(P(t) - z^2) with t = 1 / (1 + a z) holds for a smooth P on t in (0, 1]
(Numerical Recipes' form, there with a = 1/2 and degree 9). The kernel works in base 2:
erfc(z) / 2 = t 2^(Q(t) - s^2) with s = |x| c (c = sqrt(log2 e / 2), so that s^2 is
z^2 log2 e for z = |x| / sqrt 2), t = 1 / (1 + a' s), and Q = P log2 e - 1 (the -1
halves it); its 2^w is 2^floor(w) (scalef) times 2^f for f = w - floor(w) in [0, 1).
Q is fitted minimax (Lawson's iteration: reweighted least squares) over z in [0, 10],
beyond which erfc(z) / 2 is below the smallest normal float (the kernel flushes it to
zero), and 2^f minimax in its relative error. Every constant is a float in the kernel,
so the fit takes c and a' as floats and rounds the coefficients one at a time, highest
power first, refitting the rest after each: rounded all at once, Q's coefficients (of
alternating sign, some near 3) gave erfc a bias of +2.5e-7 on average, 4 ulp, and the
tiny Whisper int8 encoder's activations landed on the other side of a quantization tie
from ONNX Runtime's. Prints C initialisers. Needs python3-numpy.
"""
import math

import numpy as np


def f32(v):
    return float(np.float32(v))


def lawson(v, f, weight, iters=200):
    """Coefficients (highest power first) minimising max |(V c - f) / weight|."""
    w = np.ones_like(f) / len(f)
    for _ in range(iters):
        sw = np.sqrt(w) / weight
        c, *_ = np.linalg.lstsq(v * sw[:, None], f * sw, rcond=None)
        e = np.abs((v @ c - f) / weight)
        w = w * e
        w /= w.sum()
    return c, e.max()


def rounded_fit(v, f, weight):
    """lawson, with the coefficients made floats one at a time (highest first)."""
    fixed = []
    for i in range(v.shape[1]):
        rest = f - (v[:, :i] @ np.array(fixed) if fixed else 0.0)
        c, _ = lawson(v[:, i:], rest, weight)
        fixed.append(f32(c[0]))
    c = np.array(fixed)
    return c, np.abs((v @ c - f) / weight).max()


def erfc_fit(degree, a, n=4000):
    log2e = 1.0 / math.log(2.0)
    c_s, a_s = f32(math.sqrt(log2e / 2.0)), f32(a / math.sqrt(log2e))
    lo = 1.0 / (1.0 + a_s * 10.0 * math.sqrt(log2e))
    t = lo + (1.0 - lo) * 0.5 * (1.0 + np.cos(np.pi * (np.arange(n) + 0.5) / n))
    s = (1.0 / t - 1.0) / a_s
    x = s / c_s   # the |x| whose s this is
    q = np.array([math.log2(math.erfc(xx / math.sqrt(2.0)) / (2.0 * tt)) + ss * ss
                  for xx, tt, ss in zip(x, t, s)])
    c, err = rounded_fit(np.vander(t, degree + 1), q, np.full_like(q, log2e))
    return err, c, c_s, a_s


def main():
    degree, exp_degree = 9, 6
    err, c, c_s, a_s = min((erfc_fit(degree, a) for a in np.arange(0.30, 0.52, 0.05)),
                           key=lambda r: r[0])
    print(f"/* erfc / 2 = t 2^(Q(t) - s^2): degree {degree}, max relative error {err:.2g} */")
    print("s = |x| * %.9ef; t = 1 / (1 + %.9ef s)" % (c_s, a_s))
    print("Q = {%s}" % ", ".join("%.9ef" % v for v in c))
    n = 4000
    f = 0.5 + 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    y = 2.0 ** f
    c, err = rounded_fit(np.vander(f, exp_degree + 1), y, y)
    print(f"/* 2^f on [0, 1]: degree {exp_degree}, max relative error {err:.2g} */")
    print("exp2 = {%s}" % ", ".join("%.9ef" % v for v in c))
    print("log2 sqrt(2 pi) = %.9ef" % math.log2(math.sqrt(2.0 * math.pi)))


if __name__ == "__main__":
    main()
