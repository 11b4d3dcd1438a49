/* tpl.h — internals of the chat-template (Jinja) engine: arena, values, AST, and the
 * entry points shared by lexer.c, parser.c, interp.c, filters.c and json.c.
 * Not public API: include/transmuter.h has the tm_chat_template_* calls (template.c). */
#ifndef TM_TEMPLATE_TPL_H
#define TM_TEMPLATE_TPL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../include/transmuter.h"

/* Limits that keep a hostile template from exhausting the machine. A render that passes
 * one stops with an error naming the limit (see README "Chat templates"). */
#define TPL_MAX_SOURCE ((size_t)4 << 20)   /* template source bytes */
#define TPL_MAX_DEPTH 256                   /* nesting of expressions, blocks and calls */
#define TPL_MAX_MEMORY ((size_t)256 << 20)  /* bytes of values one render may allocate */
#define TPL_MAX_OUTPUT ((size_t)32 << 20)   /* bytes of rendered text */
#define TPL_MAX_STEPS 20000000L             /* evaluated nodes and loop iterations */

/* ---- Arena: everything a parse or a render allocates, freed at once ------------------ */

typedef struct tpl_chunk tpl_chunk;
typedef struct tpl_arena {
    tpl_chunk *head;
    size_t used, limit;            /* bytes taken from malloc, and the cap */
} tpl_arena;

/* ---- Failure: every error longjmps to the entry point (arena-owned state leaks nothing) */

typedef struct tpl_fail {
    jmp_buf jump;
    tm_status code;
    int line;                      /* template line of the error, 0 if none */
    int col;                       /* its column (syntax errors), 0 if none */
    int last_line;                 /* the line being evaluated (render errors without one) */
    char message[900];
} tpl_fail;

void tpl_arena_init(tpl_arena *a, size_t limit);
void tpl_arena_free(tpl_arena *a);
/* Zeroed memory, or a longjmp through f when the arena's limit is passed. */
void *tpl_alloc(tpl_arena *a, tpl_fail *f, size_t size);
_Noreturn void tpl_raise(tpl_fail *f, tm_status code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- Values --------------------------------------------------------------------------- */

typedef enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_NS, TV_FUNC
} tv_type;

typedef struct tstr { size_t n; char p[]; } tstr;   /* UTF-8 bytes, NUL after p[n-1] */
typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tfunc tfunc;

typedef struct tv {
    int t;
    union { int64_t i; double f; const tstr *s; tlist *l; tdict *d; tfunc *fn; } u;
} tv;

struct tlist { size_t n, cap; tv *v; int tuple; };
typedef struct tkv { const tstr *k; tv v; } tkv;
struct tdict { size_t n, cap; tkv *kv; };

typedef struct tpl_node tpl_node;
typedef struct tpl_scope tpl_scope;

/* A callable: a builtin (a global, or a method bound to `self`), a macro, or the caller()
 * of a call block. */
enum { FN_BUILTIN, FN_MACRO, FN_CALLER };
struct tfunc {
    int kind;
    int id;                        /* builtin id (filters.c) */
    tv self;                       /* bound object of a method */
    const tpl_node *node;          /* macro or call block */
    tpl_scope *closure;            /* where the macro was defined */
    const char *name;
};

static inline tv tv_undef(void) { tv v = {TV_UNDEF, {0}}; return v; }
static inline tv tv_none(void) { tv v = {TV_NONE, {0}}; return v; }
static inline tv tv_bool(int b) { tv v = {TV_BOOL, {.i = b != 0}}; return v; }
static inline tv tv_int(int64_t i) { tv v = {TV_INT, {.i = i}}; return v; }
static inline tv tv_float(double f) { tv v = {TV_FLOAT, {.f = f}}; return v; }
static inline tv tv_strv(const tstr *s) { tv v = {TV_STR, {.s = s}}; return v; }
static inline tv tv_listv(tlist *l) { tv v = {TV_LIST, {.l = l}}; return v; }
static inline tv tv_dictv(tdict *d) { tv v = {TV_DICT, {.d = d}}; return v; }

/* ---- Growable byte buffer (arena backed) ---------------------------------------------- */

typedef struct tbuf { char *p; size_t n, cap; size_t limit; } tbuf;

/* The allocation context shared by values: the render's arena and failure. */
typedef struct tctx { tpl_arena *arena; tpl_fail *fail; int line; } tctx;

void tbuf_put(tctx *c, tbuf *b, const char *s, size_t n);
static inline void tbuf_puts(tctx *c, tbuf *b, const char *s);
void tbuf_putc(tctx *c, tbuf *b, char ch);
void tbuf_printf(tctx *c, tbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const tstr *tbuf_str(tctx *c, const tbuf *b);

const tstr *tstr_new(tctx *c, const char *p, size_t n);
static inline const tstr *tstr_cstr(tctx *c, const char *p);
tlist *tlist_new(tctx *c, size_t cap);
void tlist_push(tctx *c, tlist *l, tv v);
tdict *tdict_new(tctx *c, size_t cap);
tv *tdict_get(const tdict *d, const char *k, size_t n);
void tdict_set(tctx *c, tdict *d, const tstr *k, tv v);
tv tv_str(tctx *c, const char *p, size_t n);
_Noreturn void tctx_raise(tctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *tv_type_name(const tv *v);
int tv_truthy(const tv *v);
int tv_equal(const tv *a, const tv *b);
/* Total order used by sort/min/max/dictsort; raises on types that do not compare. */
int tv_compare(tctx *c, const tv *a, const tv *b, int case_sensitive);
/* Appends the printed form ({{ v }}): strings raw, none/undefined "", true/false,
 * floats as @huggingface/jinja prints them, lists and dicts as JSON. */
void tv_print(tctx *c, tbuf *b, const tv *v);
const tstr *tv_to_str(tctx *c, const tv *v);
/* JavaScript's Number#toString of a double (shortest round trip). */
void tpl_js_number(char *out, size_t cap, double f);
size_t tpl_utf8_len(const char *s, size_t n);   /* code points */
/* Byte length of the UTF-8 sequence that starts at s[0] (1 for invalid bytes). */
size_t tpl_utf8_step(const char *s, size_t n);
uint32_t tpl_utf8_decode(const char *s, size_t n, size_t *len);
size_t tpl_utf8_encode(uint32_t cp, char *out);
/* JavaScript's \s: ASCII and Unicode spaces; returns the sequence length or 0. */
size_t tpl_space_at(const char *s, size_t n);
size_t tpl_space_before(const char *s, size_t n);

/* ---- JSON (json.c) -------------------------------------------------------------------- */

/* Parses JSON text into a value (ints stay ints, objects keep their key order). Raises
 * through c with the byte offset on malformed input. `what` names the input. */
tv tpl_json_parse(tctx *c, const char *s, size_t n, const char *what);
typedef struct tpl_json_opts {
    int indent;                    /* <= 0: one line */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep; /* NULL: ", " (or "," with indent) and ": " */
    int for_tojson;         /* tojson: 1; printing a list: 0 ("undefined") */
} tpl_json_opts;
void tpl_json_write(tctx *c, tbuf *b, const tv *v, const tpl_json_opts *o, int depth);
/* Python's repr() of a value ({'a': [1, 2.5, None, True]}), for `string` of a dict. */
void tpl_py_repr(tctx *c, tbuf *b, const tv *v, int depth);

/* ---- Lexer / parser (lexer.c, parser.c) ------------------------------------------------ */

enum {
    TK_EOF, TK_TEXT, TK_COMMENT, TK_OPEN_STMT, TK_CLOSE_STMT, TK_OPEN_EXPR, TK_CLOSE_EXPR,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP
};
typedef struct tpl_token {
    int type, line, col;
    const char *p; size_t n;       /* text, name, operator or decoded string */
    int64_t i; double f;
} tpl_token;

/* Tokens of a template (after @huggingface/jinja's preprocessing: one trailing newline
 * dropped, lstrip_blocks, trim_blocks, generation tags removed). */
tpl_token *tpl_lex(tpl_arena *a, tpl_fail *f, const char *src, size_t n, size_t *count);

enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_NAME, N_STR, N_INT, N_FLOAT, N_BOOL, N_NONE, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_INDEX,
    N_SLICE, N_CALL, N_FILTER, N_TEST, N_BINOP, N_AND, N_OR, N_NOT, N_NEG, N_POS, N_COND,
    N_KWARG, N_STAR, N_STARSTAR, N_PARAM
};
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE,
       OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };

struct tpl_node {
    int kind, line, op, negate;
    tpl_node *a, *b, *c, *d;
    tpl_node **list; int n;        /* body, arguments, elements, keys */
    tpl_node **list2; int n2;      /* else body, values, macro body */
    const tstr *s;                 /* name or string */
    int64_t i; double f;
};

typedef struct tpl_program { tpl_node **body; int n; } tpl_program;
tpl_program tpl_parse(tpl_arena *a, tpl_fail *f, const tpl_token *toks, size_t count);

/* ---- Interpreter (interp.c) and builtins (filters.c) ----------------------------------- */

typedef struct tpl_interp tpl_interp;
struct tpl_scope {
    tpl_scope *parent;
    tkv *vars; size_t n, cap;
    int call_block;                /* a call block's scope: holds `caller` */
};

/* Renders prog with the variables of globals (a dict) into out. */
void tpl_render(tctx *c, const tpl_program *prog, tdict *globals, tbuf *out);

tv tpl_eval(tpl_interp *I, const tpl_node *e, tpl_scope *s);
void tpl_scope_set(tpl_interp *I, tpl_scope *s, const tstr *name, tv v);
tv tpl_call(tpl_interp *I, tv fn, int argc, tv *argv, tdict *kwargs, tpl_scope *s);
tctx *tpl_interp_ctx(tpl_interp *I);

/* Builtins: lookup by name (NULL id -1), invocation. */
int tpl_global_id(const char *name);
int tpl_method_id(int type, const char *name);
tv tpl_builtin_call(tpl_interp *I, tfunc *fn, int argc, tv *argv, tdict *kwargs);
/* Applies filter `name` to v with evaluated arguments. */
tv tpl_filter(tpl_interp *I, const char *name, tv v, int argc, tv *argv, tdict *kw,
              tpl_scope *s);
int tpl_test(tpl_interp *I, const char *name, tv v, int argc, tv *argv);
/* The value of key `name` of a dict/namespace/loop, a method of a string/list/dict, an
 * item of a list/string by index; undefined when there is none. */
tv tpl_getattr(tpl_interp *I, tv obj, const char *name, size_t n);

static inline void tbuf_puts(tctx *c, tbuf *b, const char *s) {
    tbuf_put(c, b, s, strlen(s));
}
static inline const tstr *tstr_cstr(tctx *c, const char *p) {
    return tstr_new(c, p, strlen(p));
}

#endif
