/* Guided self-scheduling for the quantized kernels' slices (qgemm.c, nbits.c): threads
 * claim pieces of [0, total) from one atomic counter, large at first and smaller as the
 * work runs out, so that a thread the OS holds back (a busy machine) takes the others
 * little time to wait for at the end. Not the pool (pool.h), which starts the slices. */
#ifndef TM_BACKENDS_CPU_CLAIM_H
#define TM_BACKENDS_CPU_CLAIM_H

#include <stdatomic.h>
#include <stdint.h>

/* The first unit of the next piece (its end in *end), or total when none is left. A
 * piece is a 1/(2 nth) share of what remains, at least min_piece units. */
static inline int64_t tm__claim(_Atomic int64_t *next, int64_t total, int nth, int64_t min_piece,
                                int64_t *end) {
    int64_t begin = atomic_load_explicit(next, memory_order_relaxed);
    for (;;) {
        if (begin >= total) return total;
        int64_t piece = (total - begin) / (2 * (int64_t)(nth > 0 ? nth : 1));
        if (piece < min_piece) piece = min_piece;
        int64_t stop = total - begin < piece ? total : begin + piece;
        if (atomic_compare_exchange_weak_explicit(next, &begin, stop, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *end = stop;
            return begin;
        }
    }
}

#endif
