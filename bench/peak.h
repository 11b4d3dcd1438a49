/* The single-core f32 FMA peak, shared by bench/probe.c and bench/gemm_lab.c: twelve
 * independent chains of vector FMAs in inline assembly (C would let the compiler merge
 * identical chains, as it once did here, and report twelve times a latency-bound
 * chain). The widest vectors the compiler targets: zmm with AVX-512, else ymm. */
#ifndef TM_BENCH_PEAK_H
#define TM_BENCH_PEAK_H

#include <time.h>

static double tm_bench_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__) && defined(__AVX512F__)
#define TM_BENCH_REG "zmm"
#define TM_BENCH_FLOATS 16
#elif defined(__x86_64__) && defined(__FMA__)
#define TM_BENCH_REG "ymm"
#define TM_BENCH_FLOATS 8
#endif

static const char *tm_bench_fma_vector(void) {
#ifdef TM_BENCH_REG
    return TM_BENCH_REG;
#else
    return "none";
#endif
}

#define TM_BENCH_FMA(acc) "vfmadd231ps %%" TM_BENCH_REG "12, %%" TM_BENCH_REG "13, %%" \
    TM_BENCH_REG #acc "\n\t"
#define TM_BENCH_ZERO(r) "vxorps %%" TM_BENCH_REG #r ", %%" TM_BENCH_REG #r ", %%" \
    TM_BENCH_REG #r "\n\t"

/* GFLOP/s (2 per lane per FMA), best of five runs of about 0.1 s; 0 without FMA. */
static double tm_bench_fma_peak(void) {
#ifdef TM_BENCH_REG
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        long iters = 10000000;
        double t0 = tm_bench_now_s();
        __asm__ volatile(
            TM_BENCH_ZERO(0) TM_BENCH_ZERO(1) TM_BENCH_ZERO(2) TM_BENCH_ZERO(3)
            TM_BENCH_ZERO(4) TM_BENCH_ZERO(5) TM_BENCH_ZERO(6) TM_BENCH_ZERO(7)
            TM_BENCH_ZERO(8) TM_BENCH_ZERO(9) TM_BENCH_ZERO(10) TM_BENCH_ZERO(11)
            TM_BENCH_ZERO(12) TM_BENCH_ZERO(13)
            "1:\n\t"
            TM_BENCH_FMA(0) TM_BENCH_FMA(1) TM_BENCH_FMA(2) TM_BENCH_FMA(3)
            TM_BENCH_FMA(4) TM_BENCH_FMA(5) TM_BENCH_FMA(6) TM_BENCH_FMA(7)
            TM_BENCH_FMA(8) TM_BENCH_FMA(9) TM_BENCH_FMA(10) TM_BENCH_FMA(11)
            "dec %0\n\t"
            "jnz 1b\n\t"
            : "+r"(iters)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
              "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");
        double dt = tm_bench_now_s() - t0;
        double gflops = 2.0 * TM_BENCH_FLOATS * 12 * 1e7 / dt * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
#else
    return 0.0;
#endif
}

#endif
