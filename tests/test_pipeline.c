/* tm_pipeline_*: what tests/pipelines.sh (transformers.js's outputs, through the CLI) does
 * not reach: the API's argument checks and error messages, repositories the task cannot
 * use (a generation task without a decoder or an encoder), sentence-transformers' modules
 * read into "auto" pooling, the generation tasks' options and shapes (bad options, several
 * returned sequences), outputs left untouched on error, and Whisper's pieces its random
 * model never reaches (_decode_asr on hand-made sequences against transformers.js's, the
 * seek loop's step, language names). Runs on tests/data/pipelines. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../include/transmuter.h"
#include "../src/pipelines/whisper.h"
#include "check.h"

#define DATA "tests/data/pipelines/"

static int contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

/* Creating fails with code and a message holding part; *out stays untouched. */
static void create_fails(const char *task, const char *repo, const char *load, tm_status code,
                         const char *part) {
    tm_pipeline *p = (tm_pipeline *)&p;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm_pipeline_create(task, repo, load, &p, &err);
    CHECK(s == code && contains(err.message, part) && p == (tm_pipeline *)&p,
          "create(%s, %s, %s): status %d (want %d), message '%s' (want '%s')", task ? task : "NULL",
          repo ? repo : "NULL", load ? load : "NULL", s, code, err.message, part);
    if (s == TM_OK) tm_pipeline_free(p);
}

static tm_pipeline *create(const char *task, const char *repo) {
    tm_pipeline *p = NULL;
    tm_error err;
    tm_status s = tm_pipeline_create(task, repo, NULL, &p, &err);
    CHECK(s == TM_OK, "create(%s, %s): %s", task, repo, s ? err.message : "");
    return s == TM_OK ? p : NULL;
}

/* Calling fails with a message holding part; *result stays untouched. */
static void call_fails(tm_pipeline *p, const char *inputs, const char *options, const char *part) {
    if (!p) return;
    char *result = (char *)&result;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm_pipeline_call(p, inputs, options, &result, &err);
    CHECK(s != TM_OK && contains(err.message, part) && result == (char *)&result,
          "call(%s, %s): status %d, message '%s' (want '%s')", inputs, options ? options : "NULL", s,
          err.message, part);
    if (s == TM_OK) free(result);
}

static char *call(tm_pipeline *p, const char *inputs, const char *options) {
    if (!p) return NULL;
    char *result = NULL;
    tm_error err;
    tm_status s = tm_pipeline_call(p, inputs, options, &result, &err);
    CHECK(s == TM_OK, "call(%s, %s): %s", inputs, options ? options : "NULL", s ? err.message : "");
    return s == TM_OK ? result : NULL;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* A copy of minilm-embed (links) whose modules.json says cls pooling and no Normalize. */
static int make_cls_repo(const char *dir) {
    char path[512], target[512], cwd[400];
    if (!getcwd(cwd, sizeof cwd) || mkdir(dir, 0755)) return 0;
    static const char *const links[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "onnx"};
    for (int i = 0; i < 5; i++) {
        snprintf(target, sizeof target, "%s/" DATA "minilm-embed/%s", cwd, links[i]);
        snprintf(path, sizeof path, "%s/%s", dir, links[i]);
        if (symlink(target, path)) return 0;
    }
    snprintf(path, sizeof path, "%s/modules.json", dir);
    write_file(path, "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
                     "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}]");
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    write_file(path, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}");
    return 1;
}

static void remove_cls_repo(const char *dir) {
    char path[512];
    static const char *const names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "onnx", "modules.json",
                                        "1_Pooling/config.json", "1_Pooling"};
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

static void test_creation_errors(void) {
    tm_pipeline_free(NULL);
    create_fails(NULL, DATA "bert-sentiment", NULL, TM_ERR_INVALID_ARGUMENT, "NULL argument");
    create_fails("text-classification", NULL, NULL, TM_ERR_INVALID_ARGUMENT, "NULL argument");
    create_fails("summarise", DATA "bert-sentiment", NULL, TM_ERR_UNSUPPORTED, "unknown task 'summarise'");
    create_fails("text-classification", DATA "no-such-repo", NULL, TM_ERR_NOT_FOUND, "no-such-repo");
    create_fails("text-classification", DATA "bert-sentiment", "{\"dtype\":\"q4\"}", TM_ERR_NOT_FOUND,
                 "onnx/model_q4.onnx");
    create_fails("text-classification", DATA "bert-sentiment", "{\"dtype\":\"q3\"}",
                 TM_ERR_INVALID_ARGUMENT, "unknown dtype 'q3'");
    create_fails("text-classification", DATA "bert-sentiment", "{\"model_file_name\":\"../x\"}",
                 TM_ERR_INVALID_ARGUMENT, "model_file_name");
    create_fails("text-classification", DATA "bert-sentiment", "{\"dtype\":", TM_ERR_PARSE, "load options");
    create_fails("text-classification", DATA "bert-sentiment", "{\"dtype\":8}", TM_ERR_INVALID_ARGUMENT,
                 "dtype must be a string");
    create_fails("question-answering", DATA "bert-sentiment", NULL, TM_ERR_UNSUPPORTED, "start_logits");
    create_fails("zero-shot-classification", DATA "bert-mlm", NULL, TM_ERR_UNSUPPORTED, "label2id");
    create_fails("text-classification", DATA "minilm-embed", NULL, TM_ERR_UNSUPPORTED, "'logits'");
    /* a folder without config.json, and one without a tokenizer */
    char dir[] = "/tmp/tm-pipeline-XXXXXX";
    if (mkdtemp(dir)) {
        create_fails("fill-mask", dir, NULL, TM_ERR_NOT_FOUND, "config.json");
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", dir);
        write_file(path, "{\"model_type\": \"bert\"}");
        create_fails("fill-mask", dir, NULL, TM_ERR_NOT_FOUND, "tokenizer.json");
        write_file(path, "[1, 2");
        create_fails("fill-mask", dir, NULL, TM_ERR_PARSE, "config.json");
        remove(path);
        rmdir(dir);
    }
    tm_pipeline *p = (tm_pipeline *)&p;
    CHECK(tm_pipeline_create("fill-mask", DATA "bert-mlm", NULL, &p, NULL) == TM_OK, "NULL error struct");
    tm_pipeline_free(p);
}

static void test_call_errors(void) {
    tm_pipeline *p = create("sentiment-analysis", DATA "bert-sentiment");
    CHECK(p && !strcmp(tm_pipeline_task(p), "text-classification"), "alias to its task");
    CHECK(p && !strcmp(tm_pipeline_model_file(p), "onnx/model.onnx"), "model file");
    call_fails(p, "[\"a\"", NULL, "inputs: not valid JSON");
    call_fails(p, "{}", NULL, "inputs: a JSON array");
    call_fails(p, "[[]]", NULL, "non-empty");
    call_fails(p, "[5]", NULL, "a string or an array of strings");
    call_fails(p, "[[\"a\", 5]]", NULL, "texts[1] is not a string");
    call_fails(p, "[\"a\"]", "[1]", "options: not a JSON object");
    call_fails(p, "[\"a\"]", "{\"top_k\":\"two\"}", "top_k must be an integer");
    call_fails(p, "[\"a\"]", "{\"top_k\":-3}", "top_k must be a positive integer");
    char *r = call(p, "\"Hello world!\"", "null");
    CHECK(r && !strncmp(r, "[{\"label\":\"NEGATIVE\",\"score\":0.84577", 36), "one string as inputs: %s", r);
    free(r);
    tm_pipeline_free(p);

    p = create("token-classification", DATA "bert-ner");
    call_fails(p, "[\"a\"]", "{\"aggregation_strategy\":\"first\"}",
               "Invalid aggregation_strategy: \"first\". Must be one of \"none\" or \"simple\".");
    call_fails(p, "[\"a\"]", "{\"ignore_labels\":\"O\"}", "ignore_labels must be an array");
    tm_pipeline_free(p);

    p = create("fill-mask", DATA "bert-mlm");
    call_fails(p, "[[\"a [MASK]\", \"no mask\"]]", NULL, "Mask token ([MASK]) not found in text.");
    tm_pipeline_free(p);

    p = create("zero-shot-classification", DATA "bert-nli");
    call_fails(p, "[\"a text\"]", NULL, "[texts, candidate_labels]");
    call_fails(p, "[\"a text\", []]", NULL, "non-empty");
    tm_pipeline_free(p);

    p = create("question-answering", DATA "distilbert-qa");
    call_fails(p, "[[\"q1\", \"q2\"], [\"c1\"]]", NULL, "same length");
    call_fails(p, "[\"q\", [\"c1\"]]", NULL, "must also be a string");
    r = call(p, "[\"What is my name?\", \"My name is Clara.\"]", "{\"top_k\":null}");
    CHECK(r && !strcmp(r, "[]"), "top_k null gives no answer, as transformers.js: %s", r);
    free(r);
    tm_pipeline_free(p);

    p = create("feature-extraction", DATA "minilm-embed");
    call_fails(p, "[\"a\"]", "{\"pooling\":\"median\"}", "Pooling method 'median' not supported.");
    call_fails(p, "[\"a\"]", "{\"normalize\":1}", "normalize must be true or false");
    tm_pipeline_free(p);

    /* fill-mask on a classifier: the logits are not (batch, tokens, vocabulary) */
    p = create("fill-mask", DATA "bert-sentiment");
    call_fails(p, "[\"a [MASK]\"]", NULL, "logits are not (batch, tokens, vocabulary)");
    tm_pipeline_free(p);
}

static void test_pooling(void) {
    tm_pipeline *p = create("feature-extraction", DATA "minilm-embed");
    const char *texts = "[[\"Hello world!\", \"A longer sentence, padded in the batch.\"]]";
    char *a = call(p, texts, "{\"pooling\":\"auto\"}");
    char *b = call(p, texts, "{\"pooling\":\"mean\",\"normalize\":true}");
    CHECK(a && b && !strcmp(a, b), "auto pooling is the repo's mean + Normalize");
    free(a);
    free(b);
    a = call(p, texts, "{\"pooling\":\"auto\",\"normalize\":false}");
    b = call(p, texts, "{\"pooling\":\"mean\"}");
    CHECK(a && b && !strcmp(a, b), "normalize given overrides the Normalize module");
    free(a);
    free(b);
    a = call(p, texts, "{\"pooling\":\"max\"}");
    CHECK(a && contains(a, "\"dims\":[2,32]"), "max pooling: %s", a ? a : "");
    free(a);
    tm_pipeline_free(p);

    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/tm-pipeline-cls-%d", (int)getpid());
    if (make_cls_repo(dir)) {
        p = create("embeddings", dir);
        a = call(p, texts, "{\"pooling\":\"auto\"}");
        b = call(p, texts, "{\"pooling\":\"cls\",\"normalize\":false}");
        CHECK(a && b && !strcmp(a, b), "auto pooling reads 1_Pooling/config.json (cls, no Normalize)");
        free(a);
        free(b);
        tm_pipeline_free(p);
    } else {
        CHECK(0, "could not make %s", dir);
    }
    remove_cls_repo(dir);
}

static int count(const char *s, const char *part) {
    int n = 0;
    for (; s && (s = strstr(s, part)); s += strlen(part)) n++;
    return n;
}

static void test_generation(void) {
    /* repos without the decoder (or encoder) a generation task needs */
    create_fails("text-generation", DATA "bert-sentiment", NULL, TM_ERR_UNSUPPORTED,
                 "text-generation needs a decoder with a KV cache");
    create_fails("text-generation", DATA "gpt2-gen", NULL, TM_ERR_NOT_FOUND, "onnx/model.onnx");
    create_fails("text2text-generation", DATA "gpt2-gen", NULL, TM_ERR_NOT_FOUND, "onnx/encoder_model.onnx");
    create_fails("summarization", DATA "llama-chat", NULL, TM_ERR_NOT_FOUND, "onnx/encoder_model.onnx");
    create_fails("translation", DATA "t5-text2text", "{\"dtype\":\"q4\"}", TM_ERR_NOT_FOUND,
                 "onnx/encoder_model_q4.onnx");

    tm_pipeline *p = NULL;
    tm_error err;
    tm_status s = tm_pipeline_create("text-generation", DATA "gpt2-gen",
                                     "{\"model_file_name\":\"decoder_model_merged\"}", &p, &err);
    CHECK(s == TM_OK, "text-generation on gpt2-gen: %s", s ? err.message : "");
    if (s == TM_OK) {
        CHECK(!strcmp(tm_pipeline_model_file(p), "onnx/decoder_model_merged.onnx"), "gpt2 model file");
        call_fails(p, "[\"Hi\"]", "{\"max_new_tokens\":\"five\"}",
                   "text-generation options: key 'max_new_tokens' has a value of the wrong type");
        call_fails(p, "[\"Hi\"]", "{\"max_new_tokens\":-2}", "key 'max_new_tokens'");
        call_fails(p, "[\"Hi\"]", "{\"eos_token_id\":[1,\"x\"]}", "key 'eos_token_id'");
        call_fails(p, "[\"Hi\"]", "{\"do_sample\":true,\"temperature\":0}", "temperature");
        call_fails(p, "[\"Hi\"]", "{\"num_return_sequences\":2}", "num_return_sequences");
        call_fails(p, "[\"Hi\"]", "{\"return_full_text\":\"no\"}", "return_full_text must be true or false");
        call_fails(p, "[5]", NULL, "Input must be a string, an array of strings, a Chat, or an array of Chats");
        call_fails(p, "[[{\"role\":\"user\"}]]", NULL, "Input must be a string");
        call_fails(p, "[[\"a\", 5]]", NULL, "inputs[1] is not a string");
        call_fails(p, "[\"\"]", NULL, "the prompt is empty");
        call_fails(p, "[[{\"role\":\"user\",\"content\":\"Hi\"}]]", NULL, "chat_template is not set");
        call_fails(p, "[[{\"role\":\"user\",\"content\":\"Hi\"}]]", "{\"chat_template\":7}",
                   "option chat_template must be a string");
        /* a template given as the option, its variables from tokenizer_encode_kwargs and tools */
        char *a = call(p, "[[{\"role\":\"user\",\"content\":\"Hi\"}]]",
                       "{\"max_new_tokens\":3,\"chat_template\":\"{{ greeting }}{% for m in messages %}{{ m.content }}"
                       "{% endfor %}{% if tools is none %}!{% endif %}{% if add_generation_prompt %}?{% endif %}\","
                       "\"tokenizer_encode_kwargs\":{\"greeting\":\"Well, \"}}");
        char *b = call(p, "[\"Well, Hi!?\"]", "{\"max_new_tokens\":3,\"return_full_text\":false}");
        CHECK(a && b && contains(a, "\"role\":\"assistant\",\"content\":") &&
              contains(a, strstr(b, ":\"") + 1), "a chat through the option's template: %s, %s", a ? a : "",
              b ? b : "");
        free(a);
        free(b);
        a = call(p, "[[{\"role\":\"user\",\"content\":\"Hi\"}]]",
                 "{\"max_new_tokens\":3,\"chat_template\":\"{{ messages[0].content }}{% if tools %}{{ tools[0] }}"
                 "{% endif %}{% if add_generation_prompt %}?{% endif %}\",\"tools\":[\"T\"],"
                 "\"add_generation_prompt\":false}");
        b = call(p, "[\"HiT\"]", "{\"max_new_tokens\":3,\"return_full_text\":false}");
        CHECK(a && b && contains(a, strstr(b, ":\"") + 1), "tools and add_generation_prompt false: %s, %s",
              a ? a : "", b ? b : "");
        free(a);
        free(b);
        /* beams: num_return_sequences items for the one input, the best first */
        char *r = call(p, "\"Hello, my name is\"", "{\"max_new_tokens\":4,\"num_beams\":3,"
                       "\"num_return_sequences\":2,\"return_full_text\":false}");
        CHECK(r && r[0] == '[' && r[1] == '{' && count(r, "\"generated_text\"") == 2 &&
              !contains(r, "Hello, my name is"), "two beams' texts without the prompt: %s", r ? r : "");
        free(r);
        /* a call after failed ones is as the first */
        r = call(p, "\"Hello, my name is\"", "{\"max_new_tokens\":5}");
        CHECK(r && !strcmp(r, "[{\"generated_text\":\"Hello, my name isspeakWorld cyanHolyWorld\"}]"),
              "greedy after errors: %s", r ? r : "");
        free(r);
        tm_pipeline_free(p);
    }

    p = create("translation", DATA "t5-text2text");
    if (p) {
        CHECK(!strcmp(tm_pipeline_model_file(p), "onnx/decoder_model_merged.onnx"), "t5 model file");
        call_fails(p, "[5]", NULL, "texts must be a string or an array of strings");
        call_fails(p, "[\"a\"]", "{\"num_beams\":\"2\"}", "translation options: key 'num_beams'");
        /* one flat list: two sequences of each of two inputs */
        char *r = call(p, "[[\"The house is wonderful.\", \"How old are you?\"]]",
                       "{\"max_new_tokens\":3,\"num_beams\":2,\"num_return_sequences\":2}");
        CHECK(r && r[0] == '[' && r[1] == '{' && count(r, "\"translation_text\"") == 4, "t5 beams: %s",
              r ? r : "");
        free(r);
        tm_pipeline_free(p);
    }
}

/* dir: links to src's tokenizer files and onnx/, and config.json and generation_config.json
 * as given (NULL: a link to src's). */
static int make_generation_repo(const char *dir, const char *src, const char *config, const char *generation) {
    char path[512], target[512], cwd[400];
    if (!getcwd(cwd, sizeof cwd) || mkdir(dir, 0755)) return 0;
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "onnx", "config.json", "generation_config.json"};
    const char *texts[] = {NULL, NULL, NULL, NULL, config, generation};
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(target, sizeof target, "%s/" DATA "%s/%s", cwd, src, names[i]);
        if (texts[i]) write_file(path, texts[i]);
        else if (symlink(target, path)) return 0;
    }
    return 1;
}

static void remove_generation_repo(const char *dir) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "onnx", "config.json", "generation_config.json"};
    char path[512];
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

/* config.json's prefix, and task_specific_params[task].prefix before it, go before each
 * text; a malformed generation_config.json is named at creation. */
static void test_generation_repos(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/tm-pipeline-t5-%d", (int)getpid());
    if (make_generation_repo(dir, "t5-text2text",
                             "{\"model_type\": \"t5\", \"decoder_start_token_id\": 0, \"eos_token_id\": 1, "
                             "\"pad_token_id\": 0, \"prefix\": \"summarize: \", \"task_specific_params\": "
                             "{\"translation\": {\"prefix\": \"translate English to German: \"}}}", NULL)) {
        const char *options = "{\"max_new_tokens\":6}";
        tm_pipeline *plain = create("text2text-generation", DATA "t5-text2text");
        tm_pipeline *summarize = create("summarization", dir), *translate = create("translation", dir);
        char *want_s = call(plain, "\"summarize: The house is wonderful.\"", options);
        char *want_t = call(plain, "\"translate English to German: summarize: The house is wonderful.\"", options);
        char *got_s = call(summarize, "\"The house is wonderful.\"", options);
        char *got_t = call(translate, "\"The house is wonderful.\"", options);
        CHECK(want_s && got_s && !strcmp(want_s + strlen("[{\"generated_text\""), got_s + strlen("[{\"summary_text\"")),
              "config.json's prefix: %s, want %s", got_s ? got_s : "", want_s ? want_s : "");
        CHECK(want_t && got_t && !strcmp(want_t + strlen("[{\"generated_text\""), got_t + strlen("[{\"translation_text\"")),
              "the task's prefix, then config.json's: %s, want %s", got_t ? got_t : "", want_t ? want_t : "");
        free(want_s);
        free(want_t);
        free(got_s);
        free(got_t);
        tm_pipeline_free(plain);
        tm_pipeline_free(summarize);
        tm_pipeline_free(translate);
    } else {
        CHECK(0, "could not make %s", dir);
    }
    remove_generation_repo(dir);

    snprintf(dir, sizeof dir, "/tmp/tm-pipeline-gpt2-%d", (int)getpid());
    if (make_generation_repo(dir, "gpt2-gen", NULL, "{\"max_new_tokens\": \"many\"}"))
        create_fails("text-generation", dir, "{\"model_file_name\":\"decoder_model_merged\"}", TM_ERR_PARSE,
                     "generation_config.json: key 'max_new_tokens'");
    else
        CHECK(0, "could not make %s", dir);
    remove_generation_repo(dir);
}

/* ---- Whisper's pieces that its random model never reaches ---- */

/* _decode_asr on hand-made sequences against transformers.js's
 * (whisper-asr.decode_asr.jsonl, made by tests/gen/whisper_refs.mjs). */
static void test_whisper_decode_asr(tm_pipeline *p) {
    uint8_t *text = NULL;
    size_t size = 0;
    CHECK(read_all(DATA "whisper-asr.decode_asr.jsonl", &text, &size), "read whisper-asr.decode_asr.jsonl");
    int n_cases = 0;
    for (char *line = (char *)text, *end; p && text && line < (char *)text + size; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) end = (char *)text + size;
        tm_json *c = tm_json_parse(line, (size_t)(end - line));
        const tm_json *chunks = tm_json_get(c, "chunks");
        const char *name = tm_json_get_string(c, "name"), *want = tm_json_get_string(c, "output");
        if (!chunks || !name || !want) {
            tm_json_free(c);
            continue;
        }
        tm__asr_chunk in[8] = {{0}};
        for (int k = 0; k < chunks->n && k < 8; k++) {
            const tm_json *tokens = tm_json_get(&chunks->items[k], "tokens"), *stride = tm_json_get(&chunks->items[k], "stride");
            in[k].tokens = malloc(((size_t)tokens->n + 1) * sizeof *in[k].tokens);
            for (int t = 0; t < tokens->n; t++) in[k].tokens[t] = (int32_t)tokens->items[t].number;
            in[k].n = (size_t)tokens->n;
            for (int j = 0; j < 3; j++) in[k].stride[j] = stride->items[j].number;
        }
        tm__buf out = {0};
        tm_error err = {0};
        int timestamps = tm_json_get(c, "return_timestamps")->number != 0;
        tm_status s = tm__whisper_decode_asr(p, in, (size_t)chunks->n, timestamps, 0, 0.02, 50364, &out, &err);
        CHECK(s == TM_OK && out.s && !strcmp(out.s, want), "_decode_asr, %s: %s (want %s)", name,
              s ? err.message : out.s, want);
        n_cases++;
        free(out.s);
        for (int k = 0; k < 8; k++) free(in[k].tokens);
        tm_json_free(c);
    }
    CHECK(n_cases >= 14, "whisper-asr.decode_asr.jsonl: %d cases", n_cases);
    free(text);
    /* force_full_sequences: a last segment without its closing timestamp is an error */
    int32_t open_end[] = {50374, 1001, 1002};
    tm__asr_chunk one = {open_end, 3, {5, 0, 0}};
    tm__buf out = {0};
    tm_error err = {0};
    tm_status s = p ? tm__whisper_decode_asr(p, &one, 1, 1, 1, 0.02, 50364, &out, &err) : TM_ERR_INVALID_ARGUMENT;
    CHECK(s == TM_ERR_INVALID_ARGUMENT && contains(err.message, "did not predict an ending timestamp"),
          "force_full_sequences without a closing timestamp: %s", err.message);
    free(out.s);
}

/* The seek loop's step on hand-made passes (timestamps from 100, a 3000-frame segment). */
static void test_whisper_seek(void) {
    struct { int32_t gen[8]; size_t n; int64_t offset; size_t keep; const char *what; } cases[] = {
        {{100, 5, 6}, 3, 3000, 3, "no pair: the whole segment"},
        {{100, 5, 150, 151, 7}, 5, 100, 3, "a pair then text: up to the pair's first time, the rest dropped"},
        {{100, 5, 150, 151, 7, 160}, 6, 3000, 6, "ending on a single timestamp: the whole segment"},
        {{100, 5, 120, 121, 6, 140, 141, 8}, 8, 80, 6, "two pairs: the last one"},
        {{100, 100, 5}, 3, 3000, 3, "a pair at 0.00 (no move): the whole segment"},
        {{5, 6}, 2, 3000, 2, "text only"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t keep = 0;
        int64_t offset = tm__whisper_seek_offset(cases[k].gen, cases[k].n, 100, 3000, &keep);
        CHECK(offset == cases[k].offset && keep == cases[k].keep, "seek, %s: offset %lld keep %zu (want %lld, %zu)",
              cases[k].what, (long long)offset, keep, (long long)cases[k].offset, cases[k].keep);
    }
}

/* The languages transformers.js accepts, and the C API's errors for Whisper's options. */
static void test_whisper(void) {
    const char *forms[][2] = {{"French", "fr"}, {"<|de|>", "de"}, {"castilian", "es"}, {"EN", "en"},
                              {"haitian creole", "ht"}, {"haw", "haw"}, {"<|haw|>", NULL}, {"xx", NULL}, {"", NULL}};
    for (size_t k = 0; k < sizeof forms / sizeof *forms; k++) {
        const char *code = tm__whisper_language_code(forms[k][0]);
        CHECK(forms[k][1] ? code && !strcmp(code, forms[k][1]) : !code, "language '%s' -> %s", forms[k][0],
              code ? code : "NULL");
    }
    CHECK(!strcmp(tm__whisper_language_name("ja"), "japanese") && !tm__whisper_language_name("english"),
          "language names by code");
    test_whisper_seek();
    tm_pipeline *p = create("automatic-speech-recognition", DATA "whisper-asr");
    CHECK(p && !strcmp(tm_pipeline_model_file(p), "onnx/decoder_model_merged.onnx"), "Whisper loads its decoder");
    test_whisper_decode_asr(p);
    const char *clip = "[\"" DATA "media/speech_en_16k.wav\"]";
    call_fails(p, clip, "{\"language\": \"klingon\"}", "Language \"klingon\" is not supported");
    call_fails(p, clip, "{\"task\": \"summarize\"}", "task \"summarize\"");
    call_fails(p, clip, "{\"return_timestamps\": \"word\"}", "return_timestamps \"word\"");
    call_fails(p, clip, "{\"chunk_length_s\": 10, \"stride_length_s\": 5}", "more than twice stride_length_s");
    call_fails(p, clip, "{\"max_new_tokens\": 0}", "max_new_tokens must be 1 or more");
    call_fails(p, "[3]", NULL, "a path to a sound file");
    char *out = call(p, "[[\"" DATA "media/silence_16k.wav\", \"" DATA "media/noise_16k.wav\"]]",
                     "{\"max_new_tokens\": 2, \"return_timestamps\": true}");
    CHECK(out && out[0] == '[' && contains(out, "\"chunks\":[{\"timestamp\":["), "a batch with timestamps: %s",
          out ? out : "");
    free(out);
    /* beam search runs (transformers.js 4.3 has none: its num_beams is greedy, so no reference) */
    out = call(p, clip, "{\"num_beams\": 2, \"max_new_tokens\": 4}");
    CHECK(out && contains(out, "{\"text\":"), "num_beams 2: %s", out ? out : "");
    free(out);
    tm_pipeline_free(p);
}

int main(void) {
    test_whisper();
    test_creation_errors();
    test_generation_repos();
    test_generation();
    test_call_errors();
    test_pooling();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
