/* tm_generator_set_logits_fn: the public form of the generator's caller processor
 * (tm__generator_set_processor), through which a server reads each step's processed scores
 * for log-probabilities. Not the processors themselves (logits.c) nor the stepping
 * (generator.c). */
#include "generation.h"
#include "../core/status.h"

tm_status tm_generator_set_logits_fn(tm_generator *g, tm_generator_logits_fn fn, void *user, tm_error *err) {
    if (!g) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "NULL argument: g");
    /* tm_generator_logits_fn and tm__logits_fn are the same function type */
    tm__generator_set_processor(g, fn, user);
    return TM_OK;
}
