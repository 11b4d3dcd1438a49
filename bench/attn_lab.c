/* Decode-attention lab: one decode step's attention over a KV cache shaped like the small
 * LLaMA's (8 layers, 4 kv heads of 3 query heads, head size 64, capacity 2048), the
 * AVX-512 kernels of src/backends/cpu/vmath_avx512.c (included whole, so its static
 * functions are reachable), one thread, the thread's CPU time; the best of 50 steps, as
 * GB/s of k and v read. MODE 0: scores and values head by head (probabilities left
 * uniform, so the softmax is not timed), 1: scores only, 2: values only, 3: a plain sum
 * over the same k and v (what streaming the bytes costs), 4: scores and values in one
 * sweep over the rows for all heads (kvmath.h), 5: that sweep over a float16 cache,
 * 6: a plain sum over the float16 cache's bytes. Not a test, not built by make:
 *   gcc -O2 -march=native -std=c11 -D_GNU_SOURCE -Isrc/backends/cpu -Isrc -Iinclude \
 *       bench/attn_lab.c -o /tmp/attn_lab -lm && /tmp/attn_lab 2000 0
 * (-DSWEEP_KEYS=N: the sweep's values block). At past 2000 the cache (33 MB) outgrows L3
 * and the step streams it from memory. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "backends/cpu/vmath_avx512.c"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A plain read of n floats (a multiple of 64). */
static float stream_sum(const float *x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(x + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

int main(int argc, char **argv) {
    int S = argc > 1 ? atoi(argv[1]) : 2000, mode = argc > 2 ? atoi(argv[2]) : 0;
    enum { L = 8, H = 4, G = 3, D = 64, CAP = 2048 };
    if (S < 1 || S > CAP || mode < 0 || mode > 6) {
        fprintf(stderr, "usage: attn_lab [PAST 1..%d] [MODE 0..6]\n", CAP);
        return 2;
    }
    size_t per = (size_t)H * CAP * D;
    float *K = aligned_alloc(64, L * per * sizeof(float)), *V = aligned_alloc(64, L * per * sizeof(float));
    uint16_t *K16 = aligned_alloc(64, L * per * 2), *V16 = aligned_alloc(64, L * per * 2);
    static float q[H * G * D], o[H * G * D], s[H * G * CAP];
    if (!K || !V || !K16 || !V16) return 1;
    for (size_t i = 0; i < L * per; i++) {
        K[i] = (float)(i * 7919 % 1000) / 1000.0f - 0.5f;
        V[i] = (float)(i * 104729 % 1000) / 1000.0f - 0.5f;
    }
    to_f16_512(K, K16, (int64_t)(L * per));
    to_f16_512(V, V16, (int64_t)(L * per));
    for (int i = 0; i < H * G * D; i++) q[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < H * G * S; i++) s[i] = 1.0f / (float)S;
    double best = 1e9;
    float sink = 0;
    for (int rep = 0; rep < 50; rep++) {
        double t0 = now_s();
        for (int l = 0; l < L; l++) {
            if (mode == 3) {
                sink += stream_sum(K + l * per, (size_t)S * H * D) + stream_sum(V + l * per, (size_t)S * H * D);
                continue;
            }
            if (mode == 6) {   /* the same bytes as S * H * D / 2 floats */
                sink += stream_sum((const float *)(K16 + l * per), (size_t)S * H * D / 2) +
                        stream_sum((const float *)(V16 + l * per), (size_t)S * H * D / 2);
                continue;
            }
            if (mode == 4 || mode == 5) {
                int half = mode == 5;
                const void *k = half ? (const void *)(K16 + l * per) : (const void *)(K + l * per);
                const void *v = half ? (const void *)(V16 + l * per) : (const void *)(V + l * per);
                sweep_scores(H, G, S, D, q, D, k, H * D, half, s, S);
                for (int i = 0; i < H * G * S; i++) s[i] = 1.0f / (float)S;
                sweep_values(H, G, S, D, s, S, v, H * D, half, o, D);
                continue;
            }
            for (int h = 0; h < H; h++) {
                /* the cache's (S, H, D) layout (runtime/passes/kv_append.c): rows of all heads */
                const float *k = K + l * per + (size_t)h * D, *v = V + l * per + (size_t)h * D;
                if (mode != 2) scores_direct(G, S, D, q + h * G * D, D, k, H * D, s, S);
                if (mode == 0) for (int i = 0; i < G * S; i++) s[i] = 1.0f / (float)S;
                if (mode != 1) attn_values(G, S, D, s, S, v, H * D, o + h * G * D, D);
            }
        }
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    double el = mode >= 5 ? 2.0 : 4.0;
    double bytes = (mode == 1 || mode == 2 ? 1.0 : 2.0) * L * H * S * D * el;
    printf("past %d mode %d: %.3f ms, %.1f GB/s of %.1f MB (%g)\n", S, mode, best * 1e3,
           bytes / best / 1e9, bytes / 1e6, (double)(sink + o[5]) * 0);
    free(K);
    free(V);
    free(K16);
    free(V16);
    return 0;
}
