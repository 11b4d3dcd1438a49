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

/* Contiguous shares with stealing, for kernels that stream their operand from memory
 * (the GEMVs of a decode step): thread i works through its own share [i * total / n,
 * (i + 1) * total / n) from the front, piece after piece, so that its prefetches run on
 * from one piece into the next; a thread whose share is done takes pieces off the back
 * of the others'. Under guided claiming (tm__claim) the threads' pieces alternate, and
 * each piece's prefetches past its end went to the piece another thread was reading.
 * A share is its front and back in one 64-bit word (front in the low half), on a line of
 * its own. */
typedef struct tm__share {
    _Alignas(64) _Atomic uint64_t span;
} tm__share;

#define TM__SHARES_MAX 16

static inline uint64_t tm__span(int64_t front, int64_t back) {
    return (uint64_t)front | (uint64_t)back << 32;
}

/* n (1..TM__SHARES_MAX) shares of [0, total) (total < 2^31), their bounds multiples of
 * align but the last. */
static inline void tm__shares_init(tm__share *s, int n, int64_t total, int64_t align) {
    for (int i = 0; i < n; i++) {
        int64_t a = total * i / n / align * align;
        int64_t b = i + 1 == n ? total : total * (i + 1) / n / align * align;
        atomic_store_explicit(&s[i].span, tm__span(a, b), memory_order_relaxed);
    }
}

/* The next piece [begin, *end) for share `own` of n: half of what is left of its own
 * share, from the front (at least min_piece, a multiple of align unless it ends the
 * share); when that is empty, half of what is left of another share, from the back (its
 * start a multiple of align where the share leaves room). Returns -1 when nothing is
 * left anywhere. */
static inline int64_t tm__claim_share(tm__share *s, int n, int own, int64_t min_piece,
                                      int64_t align, int64_t *end) {
    for (int t = 0; t < n; t++) {
        int j = (own + t) % n;
        uint64_t v = atomic_load_explicit(&s[j].span, memory_order_relaxed);
        for (;;) {
            int64_t front = (int64_t)(v & 0xffffffffu), back = (int64_t)(v >> 32);
            if (front >= back) break;
            int64_t piece = (back - front) / 2, begin, stop;
            if (piece < min_piece) piece = min_piece;
            if (t == 0) {
                begin = front;
                stop = (front + piece + align - 1) / align * align;
                if (stop > back) stop = back;
            } else {
                stop = back;
                begin = (back - piece) / align * align;
                if (begin < front) begin = front;
            }
            uint64_t nv = t == 0 ? tm__span(stop, back) : tm__span(front, begin);
            if (atomic_compare_exchange_weak_explicit(&s[j].span, &v, nv, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *end = stop;
                return begin;
            }
        }
    }
    return -1;
}

#endif
