/* template.c — the public chat-template API (tm_chat_template_*): parse once, render
 * many times with messages and variables given as JSON. Each render has its own arena,
 * so a template is immutable and may be shared by threads. Not the language (tpl.h). */
#include "tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

struct tm_chat_template {
    tpl_arena arena;               /* tokens, AST and literals */
    tpl_program prog;
};

static tm_status report(tm_error *err, const tpl_fail *f, const char *what) {
    char where[64] = "";
    int line = f->line < 0 ? -f->line : f->line;
    if (line > 0)
        snprintf(where, sizeof where, "chat template line %d", line);
    if (f->line < 0)   /* raise_exception(): the template's own words, unchanged */
        return tm__fail_at(err, f->code, where, "raise_exception", NULL, "%s", f->message);
    if (line > 0 && f->col > 0)
        return tm__fail_at(err, f->code, where, what, NULL, "%s, column %d: %s", where, f->col,
                           f->message);
    if (line > 0)
        return tm__fail_at(err, f->code, where, what, NULL, "%s: %s", where, f->message);
    return tm__fail_at(err, f->code, NULL, what, NULL, "%s", f->message);
}

tm_status tm_chat_template_create(const char *source, size_t len, tm_chat_template **out,
                                  tm_error *err) {
    if (!source || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_chat_template_create: NULL argument");
    tm_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory creating a chat template");
    tpl_arena_init(&t->arena, TPL_MAX_MEMORY);
    tpl_fail *f = calloc(1, sizeof *f);
    if (!f) {
        free(t);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory creating a chat template");
    }
    if (setjmp(f->jump)) {
        tm_status s = report(err, f, "parse");
        tpl_arena_free(&t->arena);
        free(t);
        free(f);
        return s;
    }
    size_t count;
    tpl_token *toks = tpl_lex(&t->arena, f, source, len, &count);
    t->prog = tpl_parse(&t->arena, f, toks, count);
    free(f);
    *out = t;
    return TM_OK;
}

void tm_chat_template_free(tm_chat_template *t) {
    if (!t)
        return;
    tpl_arena_free(&t->arena);
    free(t);
}

/* The state a render needs across its longjmp: on the heap, so nothing is clobbered. */
typedef struct render_state {
    tpl_fail fail;
    tpl_arena arena;
    tctx c;
    tbuf out;
} render_state;

static void render(render_state *r, const tm_chat_template *t, const char *messages_json,
                   const char *vars_json, int add_generation_prompt) {
    tctx *c = &r->c;
    tdict *globals = tdict_new(c, 8);
    if (messages_json) {
        tv messages = tpl_json_parse(c, messages_json, strlen(messages_json), "messages");
        if (messages.t != TV_LIST)
            tpl_raise(&r->fail, TM_ERR_INVALID_ARGUMENT, 0,
                      "messages: expected a JSON array of messages, got %s",
                      tv_type_name(&messages));
        tdict_set(c, globals, tstr_cstr(c, "messages"), messages);
    }
    tdict_set(c, globals, tstr_cstr(c, "add_generation_prompt"), tv_bool(add_generation_prompt));
    if (vars_json) {
        tv vars = tpl_json_parse(c, vars_json, strlen(vars_json), "variables");
        if (vars.t != TV_DICT)
            tpl_raise(&r->fail, TM_ERR_INVALID_ARGUMENT, 0,
                      "variables: expected a JSON object, got %s", tv_type_name(&vars));
        for (size_t i = 0; i < vars.u.d->n; i++)
            tdict_set(c, globals, vars.u.d->kv[i].k, vars.u.d->kv[i].v);
    }
    r->out.limit = TPL_MAX_OUTPUT;
    tpl_render(c, &t->prog, globals, &r->out);
}

tm_status tm_chat_template_render(const tm_chat_template *t, const char *messages_json,
                                  const char *vars_json, int add_generation_prompt,
                                  char **out, size_t *out_len, tm_error *err) {
    if (!t || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_chat_template_render: NULL argument");
    render_state *r = calloc(1, sizeof *r);
    if (!r)
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory rendering a chat template");
    tpl_arena_init(&r->arena, TPL_MAX_MEMORY);
    r->c.arena = &r->arena;
    r->c.fail = &r->fail;
    if (setjmp(r->fail.jump)) {
        if (r->fail.line == 0 && r->fail.last_line > 0)
            r->fail.line = r->fail.last_line;   /* a limit reached in the middle of a render */
        tm_status s = report(err, &r->fail, "render");
        tpl_arena_free(&r->arena);
        free(r);
        return s;
    }
    render(r, t, messages_json, vars_json, add_generation_prompt);
    char *text = malloc(r->out.n + 1);
    if (!text) {
        tpl_arena_free(&r->arena);
        free(r);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory rendering a chat template");
    }
    if (r->out.n)
        memcpy(text, r->out.p, r->out.n);
    text[r->out.n] = 0;
    *out = text;
    if (out_len)
        *out_len = r->out.n;
    tpl_arena_free(&r->arena);
    free(r);
    return TM_OK;
}
