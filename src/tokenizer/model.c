/* Picks the model loader from tokenizer.json's "model" object: by "type", or, for files
 * written before models carried one, by their fields (as Rust's untagged fallback: BPE,
 * then WordPiece, then WordLevel, then Unigram). */
#include <string.h>
#include "tok.h"

tm_status tm__model_load(const tm_json *cfg, const char *path, tm_tok_model **out, tm_error *err) {
    if (!cfg || cfg->type != TM_JSON_OBJECT)
        return tm__tok_fail(err, path, NULL, "expected a model object");
    const char *type = tm_json_get_string(cfg, "type");
    const tm_json *vocab = tm_json_get(cfg, "vocab");
    if (!type) {
        if (tm_json_get(cfg, "merges")) type = "BPE";
        else if (vocab && vocab->type == TM_JSON_ARRAY) type = "Unigram";
        else if (tm_json_get(cfg, "continuing_subword_prefix") || tm_json_get(cfg, "max_input_chars_per_word"))
            type = "WordPiece";
        else if (vocab) type = "WordLevel";
        else return tm__tok_fail(err, path, NULL, "a model without a type or a vocabulary");
    }
    if (!strcmp(type, "BPE")) return tm__model_bpe_load(cfg, path, out, err);
    if (!strcmp(type, "WordPiece")) return tm__model_wordpiece_load(cfg, path, out, err);
    if (!strcmp(type, "WordLevel")) return tm__model_wordlevel_load(cfg, path, out, err);
    if (!strcmp(type, "Unigram")) return tm__model_unigram_load(cfg, path, out, err);
    return tm__fail_at(err, TM_ERR_UNSUPPORTED, path, type, NULL,
                       "tokenizer.json: %s: unknown model type \"%s\"", path, type);
}
