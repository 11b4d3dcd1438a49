// llama.cpp's side of bench/llamacpp/run.py: the same greedy generation loop as
// `transmuter generate MODEL --prompt-ids ... --max-new N --json` (prompt as token ids, one
// prefill, then one llama_decode per new token, argmax of the last logits), timed the same way,
// printing one JSON line. Built by bench/llamacpp/build.sh against the llama.cpp it builds;
// a bench tool, not part of Transmuter.
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// VmHWM, as transmuter generate reports it (tm__peak_rss_mb).
static double peak_rss_mb() {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, nullptr, 10);
    if (f) fclose(f);
    return kb / 1024.0;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int k = 1; k < n; k++)
        if (v[k] > v[best]) best = k;
    return best;
}

static void quiet_log(ggml_log_level level, const char *text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int usage() {
    fprintf(stderr, "usage: tm-llama-gen MODEL.gguf --prompt-ids 1,2,3 --max-new N [--threads N] "
                    "[--kv-f32] [--prefill-reps N] [--margins] [--verbose]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *path = argv[1];
    std::vector<llama_token> prompt;
    int max_new = 16, threads = 1, kv_f32 = 0, verbose = 0, prefill_reps = 0, margins = 0;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--prompt-ids" && v) {
            for (const char *p = v; *p;) {
                char *end;
                long t = strtol(p, &end, 10);
                if (end == p) return usage();
                prompt.push_back((llama_token)t);
                p = *end == ',' ? end + 1 : end;
            }
            i++;
        } else if (a == "--max-new" && v) {
            max_new = atoi(v), i++;
        } else if (a == "--threads" && v) {
            threads = atoi(v), i++;
        } else if (a == "--prefill-reps" && v) {
            prefill_reps = atoi(v), i++;
        } else if (a == "--margins") {
            margins = 1;
        } else if (a == "--kv-f32") {
            kv_f32 = 1;
        } else if (a == "--verbose") {
            verbose = 1;
        } else {
            return usage();
        }
    }
    if (prompt.empty() || max_new < 1 || threads < 1) return usage();
    if (!verbose) llama_log_set(quiet_log, nullptr);

    double t0 = now_ms();
    ggml_backend_load_all();
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "tm-llama-gen: cannot load %s\n", path);
        return 1;
    }
    double load_ms = now_ms() - t0;
    const llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (llama_token t : prompt)
        if (t < 0 || t >= n_vocab) {
            fprintf(stderr, "tm-llama-gen: token %d is outside the vocabulary (%d)\n", t, n_vocab);
            return 1;
        }

    t0 = now_ms();
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(prompt.size() + max_new);
    cp.n_batch = cp.n_ubatch = (uint32_t)std::max<size_t>(prompt.size(), 1);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = false;
    if (kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "tm-llama-gen: cannot make a context\n");
        return 1;
    }
    double ctx_ms = now_ms() - t0;

    // Prefill: the whole prompt in one batch; only the last position's logits are made.
    std::vector<llama_token> tokens;
    std::vector<double> step_ms, gaps;
    t0 = now_ms();
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), (int32_t)prompt.size()))) {
        fprintf(stderr, "tm-llama-gen: prefill failed\n");
        return 1;
    }
    llama_synchronize(ctx);
    double prefill_ms = now_ms() - t0;
    double start = now_ms();
    for (int k = 0; k < max_new; k++) {
        const float *logits = llama_get_logits_ith(ctx, -1);
        llama_token next = argmax(logits, n_vocab);
        if (margins) {   // how far the chosen token is ahead of the runner-up
            float second = -1e30f;
            for (int j = 0; j < n_vocab; j++)
                if (j != next && logits[j] > second) second = logits[j];
            gaps.push_back(logits[next] - second);
        }
        tokens.push_back(next);
        if (k + 1 == max_new) break;
        double s0 = now_ms();
        if (llama_decode(ctx, llama_batch_get_one(&tokens.back(), 1))) {
            fprintf(stderr, "tm-llama-gen: decode step %d failed\n", k + 1);
            return 1;
        }
        llama_synchronize(ctx);
        step_ms.push_back(now_ms() - s0);
    }
    double decode_total = now_ms() - start;
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double med = n == 0 ? 0 : n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    llama_perf_context_data perf = llama_perf_context(ctx);

    // --prefill-reps: the prompt's prefill again on an emptied cache, warm (after the loop,
    // which it does not change), as `transmuter bench` times a prefill plan.
    std::vector<double> warm;
    for (int r = 0; r < prefill_reps; r++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        double w0 = now_ms();
        if (llama_decode(ctx, llama_batch_get_one(prompt.data(), (int32_t)prompt.size()))) {
            fprintf(stderr, "tm-llama-gen: warm prefill failed\n");
            return 1;
        }
        llama_synchronize(ctx);
        warm.push_back(now_ms() - w0);
    }
    std::sort(warm.begin(), warm.end());
    double warm_med = warm.empty() ? 0 : warm.size() % 2 ? warm[warm.size() / 2]
                    : (warm[warm.size() / 2 - 1] + warm[warm.size() / 2]) / 2;

    printf("{\"prompt_tokens\": %zu, \"new_tokens\": %d, \"load_ms\": %.3f, \"context_ms\": %.3f, "
           "\"prefill_ms\": %.3f, \"decode_ms_median\": %.4f, \"decode_ms_total\": %.3f, "
           "\"tokens_per_s\": %.2f, \"peak_rss_mb\": %.1f, \"perf_prompt_ms\": %.3f, "
           "\"perf_eval_ms\": %.3f, \"perf_n_eval\": %d, \"kv\": \"%s\", \"warm_prefill_ms\": %.3f, "
           "\"decode_ms\": [",
           prompt.size(), max_new, load_ms, ctx_ms, prefill_ms, med, decode_total,
           n ? n / (decode_total / 1e3) : 0.0, peak_rss_mb(), perf.t_p_eval_ms, perf.t_eval_ms,
           perf.n_eval, kv_f32 ? "f32" : "f16", warm_med);
    for (size_t k = 0; k < n; k++) printf("%s%.4f", k ? ", " : "", step_ms[k]);
    if (margins) {
        printf("], \"margins\": [");
        for (size_t k = 0; k < gaps.size(); k++) printf("%s%.3g", k ? ", " : "", gaps[k]);
    }
    printf("], \"tokens\": [");
    for (size_t k = 0; k < tokens.size(); k++) printf("%s%d", k ? ", " : "", tokens[k]);
    printf("]}\n");
    fflush(stdout);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
