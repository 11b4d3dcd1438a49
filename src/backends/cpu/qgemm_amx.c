/* The AMX micro-kernel of tm_qgemm: 16 rows of uint8 A against one packed panel of 64
 * int8 columns in four 16x16 int32 accumulator tiles. TDPBUSD multiplies unsigned bytes of
 * A by signed bytes of B four at a time and adds them into int32 without saturating, as
 * vpdpbusd does, so the sums are the VNNI kernel's bit for bit. The packed panel is
 * already the layout a B tile wants (a group of 4 rows of k per 4 bytes of a column), so
 * a B tile is 16 groups of a 16-column slice, loaded with the panel's row stride.
 *
 * Depth runs in steps of 64 bytes (one A tile); the rest of k (under 64) is added with
 * VNNI vectors, and row counts under 16 go to the VNNI kernel: the results are the same.
 * The epilogue (zero points, scale, bias) is the VNNI kernel's, per row from the stored
 * tiles. Compiled with -mamx-tile -mamx-int8 (Makefile); used when CPUID reports AMX-INT8
 * and Linux grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM). */
#include <string.h>
#include "qgemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VNNI__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "qgemm_epilogue_avx512.h"

#define ROWS 16
#define STEP 64                       /* bytes of k per A tile */
#define PANEL_ROW (TM_QGEMM_NR * TM_QGEMM_KQ)   /* bytes of one group of 4 rows in a panel */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Tiles 0-3: the accumulators of columns 0-15, ..., 48-63; 4: A; 5: B. */
typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void begin(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = ROWS;
    }
    /* The intrinsic's asm names only the first 8 bytes as its operand: make every store
     * to cfg happen first. */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

static void end(void) { _tile_release(); }

/* The VNNI kernel, for row counts under 16 (and the tail's broadcasts below). */
static const tm__qgemm_arch *vnni;

/* Four bytes of a row from byte p of it on, as a broadcast lane; only the row's own
 * bytes are read (the packed panel holds zeros past k). */
static inline __m512i quad_at(const uint8_t *row, int64_t p, int64_t k) {
    if (k - p >= TM_QGEMM_KQ) {
        int32_t v;
        memcpy(&v, row + p, sizeof v);
        return _mm512_set1_epi32(v);
    }
    __mmask16 m = (__mmask16)((1u << (k - p)) - 1);
    return _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(m, row + p));
}

static void tile(int64_t k, const uint8_t *a, int64_t lda, int mr, const int8_t *panel, int nr,
                 const tm__qgemm_epilogue *e) {
    if (mr < ROWS) {
        /* The VNNI kernel's rows, its tile height at a time (its epilogue reads e's
         * per-row pointers from the tile's first row: move them along). */
        for (int r0 = 0; r0 < mr; r0 += vnni->mr) {
            int rows = mr - r0 < vnni->mr ? mr - r0 : vnni->mr;
            tm__qgemm_epilogue er = *e;
            er.za += r0;
            if (er.rowsum) er.rowsum += r0;
            if (er.c_int) er.c_int += r0 * e->ldc;
            if (er.c_float) er.c_float += r0 * e->ldc;
            vnni->tile(k, a + r0 * lda, lda, rows, panel, nr, &er);
        }
        return;
    }
    int64_t steps = k / STEP;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < steps; s++) {
        const int8_t *b = panel + s * (STEP / TM_QGEMM_KQ) * PANEL_ROW;
        _tile_loadd(4, a + s * STEP, lda);
        _tile_loadd(5, b, PANEL_ROW);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(5, b + 64, PANEL_ROW);
        _tile_dpbusd(1, 4, 5);
        _tile_loadd(5, b + 128, PANEL_ROW);
        _tile_dpbusd(2, 4, 5);
        _tile_loadd(5, b + 192, PANEL_ROW);
        _tile_dpbusd(3, 4, 5);
    }
    int32_t acc[ROWS][TM_QGEMM_NR] __attribute__((aligned(64)));
    _tile_stored(0, &acc[0][0], sizeof acc[0]);
    _tile_stored(1, &acc[0][16], sizeof acc[0]);
    _tile_stored(2, &acc[0][32], sizeof acc[0]);
    _tile_stored(3, &acc[0][48], sizeof acc[0]);
    __asm__ volatile("" ::: "memory");   /* the stores above are asm the compiler cannot see into */
    int64_t p0 = steps * STEP;
    for (int r = 0; r < ROWS; r++) {
        __m512i v[4];
        for (int t = 0; t < 4; t++) v[t] = _mm512_load_si512(&acc[r][16 * t]);
        const uint8_t *row = a + r * lda;
        for (int64_t p = p0; p < k; p += TM_QGEMM_KQ) {
            const int8_t *b = panel + (p / TM_QGEMM_KQ) * PANEL_ROW;
            __m512i av = quad_at(row, p, k);
            for (int t = 0; t < 4; t++)
                v[t] = _mm512_dpbusd_epi32(v[t], av, _mm512_loadu_si512(b + 64 * t));
        }
        for (int t = 0; t < 4; t++)
            if (16 * t < nr) tm__qgemm_epilogue16(v[t], r, t, nr, e);
    }
}

static const tm__qgemm_arch amx = {"amx", ROWS, tile, begin, end, 1};
static int granted;

static void ask(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return;
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) return;   /* AMX-TILE, AMX-INT8 */
    vnni = tm__qgemm_arch_avx512();
    if (!vnni) return;
    granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

const tm__qgemm_arch *tm__qgemm_arch_amx(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ask);
    return granted ? &amx : 0;
}

#else

const tm__qgemm_arch *tm__qgemm_arch_amx(void) { return 0; }

#endif
