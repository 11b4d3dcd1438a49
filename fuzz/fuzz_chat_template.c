/* libFuzzer target: the chat-template engine (tm_chat_template_create / _render) on
 * arbitrary template bytes, rendered against a fixed conversation with tools, documents
 * and special tokens. Input after a "\n\x00\n" separator replaces the variables (JSON), so
 * the JSON reader is fuzzed too. Asserts: an error carries a message and leaves no output;
 * a render returns text within the output limit. Not the tokenizer (fuzz_tokenizer*). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"

static const char CHAT_MESSAGES[] =
    "[{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 <|im_end|> {{ x }}\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nHello\", \"tool_calls\":"
    "  [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\":"
    "  {\"a\": 1, \"b\": [1.5, null, true], \"c\": \"s\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}, {\"type\": \"image\"}]}]";

static const char CHAT_VARS[] =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}},"
    " \"required\": [\"a\"]}}}], \"documents\": [{\"title\": \"t\", \"text\": \"x\"}],"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    size_t src_len = size;
    char *vars = NULL;
    const uint8_t *sep = memmem(data, size, "\n\0\n", 3);
    if (sep) {
        src_len = (size_t)(sep - data);
        size_t n = size - src_len - 3;
        vars = malloc(n + 1);
        if (!vars) abort();
        memcpy(vars, sep + 3, n);
        vars[n] = 0;
    }
    tm_chat_template *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_chat_template_create(src, src_len, &t, &err) != TM_OK) {
        if (t || !err.message[0]) abort();
        free(vars);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    memset(&err, 0, sizeof err);
    /* add_generation_prompt from the length: both values, one render per input */
    tm_status st = tm_chat_template_render(t, CHAT_MESSAGES, vars ? vars : CHAT_VARS, (int)(size & 1), &out, &len, &err);
    if (st != TM_OK) {
        if (out || !err.message[0]) abort();
    } else {
        if (!out || len > ((size_t)32 << 20) || out[len] != 0) abort();
        free(out);
    }
    tm_chat_template_free(t);
    free(vars);
    return 0;
}
