#!/usr/bin/env python3
"""Coefficients of the vector GELU (src/backends/cpu/vmath_avx512.c), refitted here.

erfc(z) = t exp(P(t) - z^2) with t = 1 / (1 + a z) holds for a smooth P on t in (0, 1]
(Numerical Recipes' form, there with a = 1/2 and degree 9). Fitted minimax in P, which
is the relative error of erfc, by Lawson's iteration (reweighted least squares) over
z in [0, 10]: beyond it erfc(z) / 2 is below the smallest normal float, and the kernel
flushes it to zero. The constant term carries -ln 2, so that the kernel gets erfc / 2.
exp(r) on [-ln 2 / 2, ln 2 / 2] is fitted the same way, minimax in the relative error.
Prints C initialisers. Needs python3-numpy.
"""
import math

import numpy as np


def lawson(v, f, weight, iters=300):
    """Coefficients (highest power first) minimising max |(V c - f) / weight|."""
    w = np.ones_like(f) / len(f)
    for _ in range(iters):
        sw = np.sqrt(w) / weight
        c, *_ = np.linalg.lstsq(v * sw[:, None], f * sw, rcond=None)
        e = np.abs((v @ c - f) / weight)
        w = w * e
        w /= w.sum()
    return c, e.max()


def erfc_fit(degree, a, z_max=10.0, n=4000):
    lo = 1.0 / (1.0 + a * z_max)
    t = lo + (1.0 - lo) * 0.5 * (1.0 + np.cos(np.pi * (np.arange(n) + 0.5) / n))
    z = (1.0 / t - 1.0) / a
    f = np.array([math.log(math.erfc(zz) / tt) + zz * zz for zz, tt in zip(z, t)])
    return lawson(np.vander(t, degree + 1), f, np.ones_like(f))


def main():
    degree = 8
    best = min((erfc_fit(degree, a) + (a,) for a in np.arange(0.30, 0.60, 0.005)),
               key=lambda r: r[1])
    c, err, a = best
    c[-1] -= math.log(2.0)
    print(f"/* erfc: t = 1 / (1 + {a:.3f} z), degree {degree}, max error {err:.2g} */")
    print("static const float erfc_a = %.3ff;" % a)
    print("static const float erfc_c[%d] = {%s};" % (degree + 1, ", ".join("%.9ef" % v for v in c)))
    n = 4000
    r = (math.log(2.0) / 2) * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    y = np.exp(r)
    c, err = lawson(np.vander(r, 6), y, y)
    print(f"/* exp: degree 5, max relative error {err:.2g} */")
    print("static const float exp_c[6] = {%s};" % ", ".join("%.9ef" % v for v in c))


if __name__ == "__main__":
    main()
