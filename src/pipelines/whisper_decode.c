/* WhisperTokenizer._decode_asr of transformers.js 4.3 (without word timestamps): the token
 * sequences of a clip's chunks, with their strides, read as one state machine that skips
 * special tokens, splits the text at timestamp pairs and joins overlapping chunks where
 * their tokens agree longest. Not the generation of those sequences (whisper.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "whisper.h"
#include "../core/status.h"

/* A growing list of ids, and a list of those. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

typedef struct id_lists {
    ids *v;
    size_t n, cap;
} id_lists;

static int ids_push(ids *a, int32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static int ids_append(ids *a, const int32_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids_push(a, x[i])) return -1;
    return 0;
}

/* Moves *a to the end of the list (*a is left empty). */
static int lists_push(id_lists *l, ids *a) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        ids *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = *a;
    *a = (ids){0};
    return 0;
}

static void lists_clear(id_lists *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].v);
    l->n = 0;
}

/* findLongestCommonSequence: each next sequence slid along the joined one so far; the
 * offset with the best matches / overlap + overlap / 10000 (more than one match) splits
 * both at the middle of the overlap. */
static int longest_common(const id_lists *l, ids *out) {
    if (l->n == 0) return 0;
    const int32_t *left = l->v[0].v;
    size_t left_n = l->v[0].n;
    for (size_t i = 1; i < l->n; i++) {
        const int32_t *right = l->v[i].v;
        size_t right_n = l->v[i].n;
        double best = 0.0;
        size_t at[4] = {left_n, left_n, 0, 0};
        for (size_t j = 1; j < left_n + right_n; j++) {
            size_t left_start = left_n > j ? left_n - j : 0;
            size_t left_stop = left_n + right_n - j < left_n ? left_n + right_n - j : left_n;
            size_t right_start = j > left_n ? j - left_n : 0;
            size_t right_stop = j < right_n ? j : right_n;
            size_t matches = 0;
            for (size_t k = 0; k < left_stop - left_start; k++) matches += left[left_start + k] == right[right_start + k];
            double matching = (double)matches / (double)j + (double)j / 10000.0;
            if (matches > 1 && matching > best) {
                best = matching;
                at[0] = left_start, at[1] = left_stop, at[2] = right_start, at[3] = right_stop;
            }
        }
        size_t left_mid = (at[0] + at[1]) / 2, right_mid = (at[2] + at[3]) / 2;
        if (ids_append(out, left, left_mid)) return -1;
        left = right + right_mid;
        left_n = right_n - right_mid;
    }
    return ids_append(out, left, left_n);
}

/* Math.round(x * 100) / 100 (ties up, as JavaScript's Math.round; never -0). */
static double round2(double x) {
    double y = x * 100, r = floor(y);
    if (y - r >= 0.5) r += 1;
    return r / 100 + 0.0;
}

typedef struct asr_chunk_out {
    double start, end;   /* NAN: null */
    char *text;
} asr_chunk_out;

/* The machine's state between tokens. */
typedef struct asr_state {
    const tm_pipeline *p;
    int timestamps;
    id_lists previous;
    ids current;
    asr_chunk_out chunk;
    asr_chunk_out *chunks;
    size_t n_chunks, cap_chunks;
    const char *last_language;
} asr_state;

static void new_chunk(asr_state *st) { st->chunk = (asr_chunk_out){NAN, NAN, NULL}; }

/* The previous sequences (current appended when `with_current`) joined and decoded into
 * the chunk, which is then closed; the context starts over. */
static tm_status close_chunk(asr_state *st, int with_current, tm_error *err) {
    if (with_current && lists_push(&st->previous, &st->current)) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    ids joined = {0};
    if (longest_common(&st->previous, &joined)) {
        free(joined.v);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    int64_t *wide = malloc((joined.n + 1) * sizeof *wide);
    tm_status s = wide ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; !s && i < joined.n; i++) wide[i] = joined.v[i];
    if (!s) s = tm__decode(st->p, wide, joined.n, 0, &st->chunk.text, err);
    free(wide);
    free(joined.v);
    if (!s && st->n_chunks == st->cap_chunks) {
        size_t cap = st->cap_chunks ? 2 * st->cap_chunks : 4;
        asr_chunk_out *c = realloc(st->chunks, cap * sizeof *c);
        if (!c) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        else st->chunks = c, st->cap_chunks = cap;
    }
    if (s) return s;
    st->chunks[st->n_chunks++] = st->chunk;
    new_chunk(st);
    lists_clear(&st->previous);
    st->current.n = 0;
    return TM_OK;
}

/* A special token: a language token (<|fr|>) is noted; without timestamps, a change of
 * language closes the chunk. Others are skipped. */
static tm_status special_token(asr_state *st, int32_t token, tm_error *err) {
    int64_t id = token;
    char *text = NULL;
    tm_status s = tm__decode(st->p, &id, 1, 0, &text, err);
    if (s) return s;
    size_t n = strlen(text);
    if (n >= 4) {
        text[n - 2] = '\0';
        const char *language = tm__whisper_language_name(text + 2);
        if (language && st->last_language && strcmp(language, st->last_language) && !st->timestamps)
            s = close_chunk(st, 1, err);
        if (language) st->last_language = language;
    }
    free(text);
    return s;
}

static void free_state(asr_state *st) {
    lists_clear(&st->previous);
    free(st->previous.v);
    free(st->current.v);
    free(st->chunk.text);
    for (size_t i = 0; i < st->n_chunks; i++) free(st->chunks[i].text);
    free(st->chunks);
}

static void put_chunks(const asr_state *st, tm__buf *out) {
    tm__put(out, "{\"text\":\"");
    for (size_t i = 0; i < st->n_chunks; i++) {
        /* the texts joined: each written as a JSON string without its quotes */
        tm__buf one = {0};
        tm__put_string(&one, st->chunks[i].text);
        if (one.oom || one.n < 2) out->oom = 1;
        else tm__put_len(out, one.s + 1, one.n - 2);
        free(one.s);
    }
    tm__put(out, "\"");
    if (st->timestamps) {
        tm__put(out, ",\"chunks\":[");
        for (size_t i = 0; i < st->n_chunks; i++) {
            tm__put(out, i ? ",{\"timestamp\":[" : "{\"timestamp\":[");
            tm__put_number(out, st->chunks[i].start);
            tm__put(out, ",");
            tm__put_number(out, st->chunks[i].end);
            tm__put(out, "],\"text\":");
            tm__put_string(out, st->chunks[i].text);
            tm__put(out, "}");
        }
        tm__put(out, "]");
    }
    tm__put(out, "}");
}

tm_status tm__whisper_decode_asr(const tm_pipeline *p, const tm__asr_chunk *chunks, size_t n,
                                 int return_timestamps, int force_full, double time_precision,
                                 int32_t timestamp_begin, tm__buf *out, tm_error *err) {
    asr_state st = {.p = p, .timestamps = return_timestamps};
    new_chunk(&st);
    const int64_t timestamp_end = (int64_t)timestamp_begin + 1500;   /* <|30.00|> */
    double time_offset = 0.0;
    int skip = 0;
    tm_status s = TM_OK;
    for (size_t c = 0; !s && c < n; c++) {
        const int32_t *tokens = chunks[c].tokens;
        double chunk_len = chunks[c].stride[0], stride_left = chunks[c].stride[1], stride_right = chunks[c].stride[2];
        int64_t last_timestamp = -1;   /* none */
        double first_timestamp = timestamp_begin;
        time_offset -= stride_left;
        double right_stride_start = chunk_len - stride_right;
        if (stride_left != 0) first_timestamp = stride_left / time_precision + timestamp_begin;
        /* the last timestamps, those inside the right stride, are resolved by the next chunk */
        for (size_t i = chunks[c].n; stride_right != 0 && i-- > 0;) {
            if (tokens[i] < timestamp_begin) continue;
            if (last_timestamp >= 0 && (tokens[i] - timestamp_begin) * time_precision < right_stride_start) break;
            last_timestamp = tokens[i];
        }
        st.current.n = 0;
        for (size_t i = 0; !s && i < chunks[c].n; i++) {
            int32_t token = tokens[i];
            if (tm__is_special_id(p, token)) {
                s = special_token(&st, token, err);
            } else if (token >= timestamp_begin && token <= timestamp_end) {
                double time = round2((token - timestamp_begin) * time_precision + time_offset);
                if (last_timestamp >= 0 && token >= last_timestamp) skip = 1;
                else if (skip || (st.previous.n > 0 && token < first_timestamp)) skip = 0;
                else if (isnan(st.chunk.start)) st.chunk.start = time;
                else if (time != st.chunk.start) {   /* an equal one is the model repeating a start */
                    st.chunk.end = time;
                    s = close_chunk(&st, 1, err);
                }
            } else if (ids_push(&st.current, token)) {
                s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            }
        }
        time_offset += chunk_len - stride_right;
        int all_empty = 1;
        for (size_t k = 0; k < st.previous.n; k++) all_empty &= st.previous.v[k].n == 0;
        if (s) break;
        if (st.current.n > 0) {
            if (lists_push(&st.previous, &st.current)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        } else if (all_empty) {
            free(st.chunk.text);
            new_chunk(&st);
            lists_clear(&st.previous);
        }
    }
    if (!s && st.previous.n > 0) {
        if (force_full && return_timestamps)
            s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Whisper did not predict an ending timestamp, which can "
                         "happen if audio is cut off in the middle of a word (force_full_sequences)");
        else s = close_chunk(&st, 0, err);
    }
    if (!s) put_chunks(&st, out);
    free_state(&st);
    return s;
}
