/* interp.c — evaluates a parsed template: statements write to an output buffer,
 * expressions give values; scopes, loops (with `loop`), macros and call blocks, set and
 * namespaces, operators. Not the filters, tests and methods (filters.c). */
#include "tpl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_EVAL_DEPTH (TPL_MAX_DEPTH * 4)

struct tpl_interp {
    tctx c;
    long steps;
    int depth;
    tpl_scope *global;
    tdict *globals;
};

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

tctx *tpl_interp_ctx(tpl_interp *I) { return &I->c; }

static void step(tpl_interp *I, int line) {
    I->c.fail->last_line = line;   /* for errors raised where no line is at hand */
    if (++I->steps > TPL_MAX_STEPS) {
        I->c.line = line;
        tpl_raise(I->c.fail, TM_ERR_RUNTIME, line, "template ran more than %ld steps",
                  (long)TPL_MAX_STEPS);
    }
}

static void enter(tpl_interp *I, int line) {
    if (++I->depth > MAX_EVAL_DEPTH)
        tpl_raise(I->c.fail, TM_ERR_RUNTIME, line,
                  "template nested or recursed more than %d levels deep", MAX_EVAL_DEPTH);
}

/* ---- Scopes ------------------------------------------------------------------------------ */

static tpl_scope *scope_new(tpl_interp *I, tpl_scope *parent) {
    tpl_scope *s = tpl_alloc(I->c.arena, I->c.fail, sizeof *s);
    s->parent = parent;
    return s;
}

void tpl_scope_set(tpl_interp *I, tpl_scope *s, const tstr *name, tv v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->vars[i].k->n == name->n && memcmp(s->vars[i].k->p, name->p, name->n) == 0) {
            s->vars[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        tkv *nv = tpl_alloc(I->c.arena, I->c.fail, cap * sizeof *nv);
        if (s->n)
            memcpy(nv, s->vars, s->n * sizeof *nv);
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n].k = name;
    s->vars[s->n].v = v;
    s->n++;
}

static tv *scope_find(tpl_scope *s, const char *name, size_t n) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->vars[i].k->n == n && memcmp(s->vars[i].k->p, name, n) == 0)
                return &s->vars[i].v;
    return NULL;
}

static tv lookup(tpl_interp *I, tpl_scope *s, const tstr *name) {
    tv *v = scope_find(s, name->p, name->n);
    if (v)
        return *v;
    v = tdict_get(I->globals, name->p, name->n);
    if (v)
        return *v;
    int id = tpl_global_id(name->p);
    if (id < 0)
        return tv_undef();
    tfunc *fn = tpl_alloc(I->c.arena, I->c.fail, sizeof *fn);
    fn->kind = FN_BUILTIN;
    fn->id = id;
    fn->name = name->p;
    tv r = {TV_FUNC, {.fn = fn}};
    return r;
}

/* ---- Operators --------------------------------------------------------------------------- */

static int numeric(const tv *v) { return v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL; }
static double as_double(const tv *v) { return v->t == TV_FLOAT ? v->u.f : (double)v->u.i; }

_Noreturn static void bad_operands(tpl_interp *I, const char *op, const tv *a, const tv *b) {
    tctx_raise(&I->c, "unsupported operand types for %s: %s and %s", op, tv_type_name(a),
               tv_type_name(b));
}

static tv repeat(tpl_interp *I, const tv *seq, int64_t times) {
    if (times < 0)
        times = 0;
    if (seq->t == TV_STR) {
        if (seq->u.s->n && (uint64_t)times > TPL_MAX_OUTPUT / seq->u.s->n)
            tctx_raise(&I->c, "string repetition too large");
        tbuf b = {0};
        for (int64_t i = 0; i < times; i++)
            tbuf_put(&I->c, &b, seq->u.s->p, seq->u.s->n);
        return tv_strv(tbuf_str(&I->c, &b));
    }
    if (seq->u.l->n && (uint64_t)times > (TPL_MAX_OUTPUT / 16) / seq->u.l->n)
        tctx_raise(&I->c, "list repetition too large");
    tlist *l = tlist_new(&I->c, seq->u.l->n * (size_t)times);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq->u.l->n; j++)
            tlist_push(&I->c, l, seq->u.l->v[j]);
    return tv_listv(l);
}

static tv arith(tpl_interp *I, int op, const tv *a, const tv *b) {
    static const char *names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (!numeric(a) || !numeric(b))
        bad_operands(I, names[op], a, b);
    int ints = a->t != TV_FLOAT && b->t != TV_FLOAT;
    if (ints) {
        int64_t x = a->u.i, y = b->u.i, r;
        switch (op) {
        case OP_ADD: if (!__builtin_add_overflow(x, y, &r)) return tv_int(r); break;
        case OP_SUB: if (!__builtin_sub_overflow(x, y, &r)) return tv_int(r); break;
        case OP_MUL: if (!__builtin_mul_overflow(x, y, &r)) return tv_int(r); break;
        case OP_DIV:
            if (y == 0) tctx_raise(&I->c, "division by zero");
            return tv_float((double)x / (double)y);
        case OP_FLOORDIV: case OP_MOD: {
            if (y == 0) tctx_raise(&I->c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {   /* Python floors toward -infinity */
                q--;
                m += y;
            }
            return tv_int(op == OP_FLOORDIV ? q : m);
        }
        case OP_POW: {
            if (y < 0) {
                if (x == 0) tctx_raise(&I->c, "0 cannot be raised to a negative power");
                return tv_float(pow((double)x, (double)y));
            }
            int64_t base = x, acc = 1;
            int overflow = 0;
            for (int64_t e = y; e > 0 && !overflow; e >>= 1) {
                if (e & 1) overflow |= __builtin_mul_overflow(acc, base, &acc);
                if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
            }
            if (!overflow) return tv_int(acc);
            break;
        }
        }
        tctx_raise(&I->c, "integer overflow in %s", names[op]);
    }
    double x = as_double(a), y = as_double(b);
    switch (op) {
    case OP_ADD: return tv_float(x + y);
    case OP_SUB: return tv_float(x - y);
    case OP_MUL: return tv_float(x * y);
    case OP_DIV:
        if (y == 0) tctx_raise(&I->c, "division by zero");
        return tv_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) tctx_raise(&I->c, "float floor division by zero");
        return tv_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) tctx_raise(&I->c, "float modulo by zero");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0)))
            m += y;
        return tv_float(m);
    }
    default: {
        if (x == 0 && y < 0) tctx_raise(&I->c, "0.0 cannot be raised to a negative power");
        double r = pow(x, y);
        if (!isfinite(r)) tctx_raise(&I->c, "exponentiation result is not a finite real number");
        return tv_float(r);
    }
    }
}

static int contains(tpl_interp *I, const tv *item, const tv *seq) {
    switch (seq->t) {
    case TV_UNDEF:
        return 0;
    case TV_STR:
        if (item->t != TV_STR)
            tctx_raise(&I->c, "'in <string>' requires a string on the left, not %s",
                       tv_type_name(item));
        return item->u.s->n == 0 ||
               memmem(seq->u.s->p, seq->u.s->n, item->u.s->p, item->u.s->n) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < seq->u.l->n; i++)
            if (tv_equal(item, &seq->u.l->v[i]))
                return 1;
        return 0;
    case TV_DICT: case TV_NS:
        return item->t == TV_STR && tdict_get(seq->u.d, item->u.s->p, item->u.s->n) != NULL;
    default:
        tctx_raise(&I->c, "argument of type %s is not iterable", tv_type_name(seq));
    }
}

static tv binop(tpl_interp *I, int op, tv a, tv b) {
    switch (op) {
    case OP_EQ: return tv_bool(tv_equal(&a, &b));
    case OP_NE: return tv_bool(!tv_equal(&a, &b));
    case OP_IN: return tv_bool(contains(I, &a, &b));
    case OP_NOTIN: return tv_bool(!contains(I, &a, &b));
    case OP_LT: case OP_GT: case OP_LE: case OP_GE: {
        int ok = (numeric(&a) && numeric(&b)) || (a.t == TV_STR && b.t == TV_STR) ||
                 (a.t == TV_LIST && b.t == TV_LIST);
        if (!ok) {
            static const char *names[] = {"<", ">", "<=", ">="};
            bad_operands(I, names[op - OP_LT], &a, &b);
        }
        int r = tv_compare(&I->c, &a, &b, 1);
        if ((numeric(&a) && (a.t == TV_FLOAT && isnan(a.u.f))) ||
            (numeric(&b) && (b.t == TV_FLOAT && isnan(b.u.f))))
            return tv_bool(0);
        return tv_bool(op == OP_LT ? r < 0 : op == OP_GT ? r > 0 : op == OP_LE ? r <= 0 : r >= 0);
    }
    case OP_CONCAT: {
        tbuf buf = {0};
        tv_print(&I->c, &buf, &a);
        tv_print(&I->c, &buf, &b);
        return tv_strv(tbuf_str(&I->c, &buf));
    }
    case OP_ADD:
        if (a.t == TV_LIST && b.t == TV_LIST) {
            tlist *l = tlist_new(&I->c, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++) tlist_push(&I->c, l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) tlist_push(&I->c, l, b.u.l->v[i]);
            return tv_listv(l);
        }
        if ((a.t == TV_STR || b.t == TV_STR) && a.t > TV_NONE && b.t > TV_NONE &&
            a.t < TV_LIST && b.t < TV_LIST) {
            /* as @huggingface/jinja: a string plus a number or boolean prints it (a list or
             * dict would print as "[object Map]" there; Python refuses: so do we) */
            tbuf buf = {0};
            tv_print(&I->c, &buf, &a);
            tv_print(&I->c, &buf, &b);
            return tv_strv(tbuf_str(&I->c, &buf));
        }
        return arith(I, op, &a, &b);
    case OP_MUL:
        if ((a.t == TV_STR || a.t == TV_LIST) && (b.t == TV_INT || b.t == TV_BOOL))
            return repeat(I, &a, b.u.i);
        if ((b.t == TV_STR || b.t == TV_LIST) && (a.t == TV_INT || a.t == TV_BOOL))
            return repeat(I, &b, a.u.i);
        return arith(I, op, &a, &b);
    default:
        return arith(I, op, &a, &b);
    }
}

/* ---- Subscripts ---------------------------------------------------------------------------- */

static int64_t slice_index(tpl_interp *I, const tpl_node *e, tpl_scope *s, int64_t dflt,
                           int *given) {
    *given = 0;
    if (!e)
        return dflt;
    tv v = tpl_eval(I, e, s);
    if (v.t == TV_NONE || v.t == TV_UNDEF)
        return dflt;
    if (v.t != TV_INT && v.t != TV_BOOL)
        tctx_raise(&I->c, "slice indices must be integers or none, not %s", tv_type_name(&v));
    *given = 1;
    return v.u.i;
}

/* Python's slice.indices(): start, stop and step clamped to a sequence of length n. */
static void slice_bounds(tpl_interp *I, const tpl_node *e, tpl_scope *s, int64_t n,
                         int64_t *start, int64_t *stop, int64_t *stepv) {
    int given;
    int64_t st = slice_index(I, e->d, s, 1, &given);
    if (st == 0)
        tctx_raise(&I->c, "slice step cannot be zero");
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? n - 1 : n;
    int64_t a = slice_index(I, e->b, s, st < 0 ? hi : lo, &given);
    if (given) {
        if (a < 0) { a += n; if (a < lo) a = lo; }
        else if (a > hi) a = hi;
    }
    int64_t b = slice_index(I, e->c, s, st < 0 ? lo : hi, &given);
    if (given) {
        if (b < 0) { b += n; if (b < lo) b = lo; }
        else if (b > hi) b = hi;
    }
    *start = a;
    *stop = b;
    *stepv = st;
}

static tv eval_slice(tpl_interp *I, const tpl_node *e, tpl_scope *s) {
    tv obj = tpl_eval(I, e->a, s);
    int64_t a, b, st;
    if (obj.t == TV_LIST) {
        slice_bounds(I, e, s, (int64_t)obj.u.l->n, &a, &b, &st);
        tlist *l = tlist_new(&I->c, 0);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
            tlist_push(&I->c, l, obj.u.l->v[i]);
        l->tuple = obj.u.l->tuple;
        return tv_listv(l);
    }
    if (obj.t == TV_STR) {
        /* slices count characters, not bytes */
        const tstr *str = obj.u.s;
        size_t count = tpl_utf8_len(str->p, str->n);
        size_t *offs = tpl_alloc(I->c.arena, I->c.fail, (count + 1) * sizeof(size_t));
        size_t k = 0;
        for (size_t i = 0; i < str->n; i += tpl_utf8_step(str->p + i, str->n - i))
            offs[k++] = i;
        offs[count] = str->n;
        slice_bounds(I, e, s, (int64_t)count, &a, &b, &st);
        tbuf out = {0};
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
            tbuf_put(&I->c, &out, str->p + offs[i], offs[i + 1] - offs[i]);
        return tv_strv(tbuf_str(&I->c, &out));
    }
    if (obj.t == TV_UNDEF)
        return obj;
    tctx_raise(&I->c, "cannot slice %s", tv_type_name(&obj));
}

static tv eval_index(tpl_interp *I, tv obj, tv idx) {
    if (idx.t == TV_STR)
        return tpl_getattr(I, obj, idx.u.s->p, idx.u.s->n);
    if (idx.t == TV_INT || idx.t == TV_BOOL) {
        int64_t i = idx.u.i;
        if (obj.t == TV_LIST) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            return i >= 0 && i < n ? obj.u.l->v[i] : tv_undef();
        }
        if (obj.t == TV_STR) {
            const tstr *str = obj.u.s;
            int64_t n = (int64_t)tpl_utf8_len(str->p, str->n);
            if (i < 0) i += n;
            if (i < 0 || i >= n)
                return tv_undef();
            size_t off = 0;
            for (int64_t k = 0; k < i; k++)
                off += tpl_utf8_step(str->p + off, str->n - off);
            return tv_str(&I->c, str->p + off, tpl_utf8_step(str->p + off, str->n - off));
        }
        if (obj.t == TV_DICT || obj.t == TV_UNDEF || obj.t == TV_NONE)
            return tv_undef();
    }
    if (obj.t == TV_UNDEF)
        return obj;
    tctx_raise(&I->c, "cannot index %s with %s", tv_type_name(&obj), tv_type_name(&idx));
}

/* ---- Calls ------------------------------------------------------------------------------- */

typedef struct argv_t { tv *v; int n, cap; tdict *kw; } argv_t;

static void arg_push(tpl_interp *I, argv_t *a, tv v) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        tv *nv = tpl_alloc(I->c.arena, I->c.fail, (size_t)cap * sizeof(tv));
        if (a->n)
            memcpy(nv, a->v, (size_t)a->n * sizeof(tv));
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = v;
}

static argv_t eval_args(tpl_interp *I, tpl_node **args, int n, tpl_scope *s) {
    argv_t a = {0};
    for (int i = 0; i < n; i++) {
        const tpl_node *arg = args[i];
        if (arg->kind == N_KWARG || arg->kind == N_STARSTAR) {
            if (!a.kw)
                a.kw = tdict_new(&I->c, 0);
            tv v = tpl_eval(I, arg->a, s);
            if (arg->kind == N_KWARG) {
                tdict_set(&I->c, a.kw, arg->s, v);
                continue;
            }
            if (v.t != TV_DICT)
                tctx_raise(&I->c, "argument after ** must be a mapping, not %s", tv_type_name(&v));
            for (size_t k = 0; k < v.u.d->n; k++)
                tdict_set(&I->c, a.kw, v.u.d->kv[k].k, v.u.d->kv[k].v);
        } else if (arg->kind == N_STAR) {
            tv v = tpl_eval(I, arg->a, s);
            if (v.t != TV_LIST)
                tctx_raise(&I->c, "argument after * must be a list, not %s", tv_type_name(&v));
            for (size_t k = 0; k < v.u.l->n; k++)
                arg_push(I, &a, v.u.l->v[k]);
        } else {
            arg_push(I, &a, tpl_eval(I, arg, s));
        }
    }
    return a;
}

static int exec_block(tpl_interp *I, tpl_node **body, int n, tpl_scope *s, tbuf *out);

/* Binds a macro's (or a call block's) parameters in scope m, then renders its body. */
static tv call_macro(tpl_interp *I, tfunc *fn, int argc, tv *argv, tdict *kw, tv caller) {
    const tpl_node *node = fn->node;
    tpl_scope *m = scope_new(I, fn->closure);
    tpl_node **params = node->list;
    int np = node->n;
    for (int i = 0; i < np; i++) {
        tv v = tv_undef();
        int have = 0;
        if (i < argc) {
            v = argv[i];
            have = 1;
        } else if (kw) {
            tv *k = tdict_get(kw, params[i]->s->p, params[i]->s->n);
            if (k) {
                v = *k;
                have = 1;
            }
        }
        tpl_scope_set(I, m, params[i]->s, v);
        (void)have;
    }
    /* defaults see the parameters bound before them */
    for (int i = 0; i < np; i++) {
        if (i < argc || !params[i]->a)
            continue;
        if (kw && tdict_get(kw, params[i]->s->p, params[i]->s->n))
            continue;
        tpl_scope_set(I, m, params[i]->s, tpl_eval(I, params[i]->a, m));
    }
    tlist *varargs = tlist_new(&I->c, 0);
    for (int i = np; i < argc; i++)
        tlist_push(&I->c, varargs, argv[i]);
    tdict *kwargs = tdict_new(&I->c, 0);
    for (size_t k = 0; kw && k < kw->n; k++) {
        int known = 0;
        for (int i = 0; i < np; i++)
            known |= params[i]->s->n == kw->kv[k].k->n &&
                     memcmp(params[i]->s->p, kw->kv[k].k->p, kw->kv[k].k->n) == 0;
        if (!known)
            tdict_set(&I->c, kwargs, kw->kv[k].k, kw->kv[k].v);
    }
    tpl_scope_set(I, m, tstr_cstr(&I->c, "varargs"), tv_listv(varargs));
    tpl_scope_set(I, m, tstr_cstr(&I->c, "kwargs"), tv_dictv(kwargs));
    if (caller.t == TV_FUNC)
        tpl_scope_set(I, m, tstr_cstr(&I->c, "caller"), caller);
    tbuf out = {0};
    out.limit = TPL_MAX_OUTPUT;
    int saved_line = I->c.line;
    if (exec_block(I, node->list2, node->n2, m, &out) != FLOW_NORMAL)
        tpl_raise(I->c.fail, TM_ERR_INVALID_ARGUMENT, node->line,
                  "break or continue outside a loop");
    I->c.line = saved_line;
    return tv_strv(tbuf_str(&I->c, &out));
}

tv tpl_call(tpl_interp *I, tv fnv, int argc, tv *argv, tdict *kw, tpl_scope *s) {
    if (fnv.t != TV_FUNC)
        tctx_raise(&I->c, "%s is not callable", fnv.t == TV_UNDEF ? "an undefined value"
                                                                  : tv_type_name(&fnv));
    tfunc *fn = fnv.u.fn;
    if (fn->kind == FN_BUILTIN)
        return tpl_builtin_call(I, fn, argc, argv, kw);
    enter(I, I->c.line);
    tv r = call_macro(I, fn, argc, argv, kw, tv_undef());
    I->depth--;
    return r;
}

/* ---- Expressions ------------------------------------------------------------------------- */

static tv filter_chain(tpl_interp *I, const tpl_node *f, tv operand, tpl_scope *s) {
    if (f->kind != N_FILTER)
        return operand;
    tv v = filter_chain(I, f->a, operand, s);
    argv_t a = eval_args(I, f->list, f->n, s);
    I->c.line = f->line;
    return tpl_filter(I, f->s->p, v, a.n, a.v, a.kw, s);
}

static tv eval_inner(tpl_interp *I, const tpl_node *e, tpl_scope *s) {
    switch (e->kind) {
    case N_NAME: return lookup(I, s, e->s);
    case N_STR: return tv_strv(e->s);
    case N_INT: return tv_int(e->i);
    case N_FLOAT: return tv_float(e->f);
    case N_BOOL: return tv_bool((int)e->i);
    case N_NONE: return tv_none();
    case N_LIST: case N_TUPLE: {
        tlist *l = tlist_new(&I->c, (size_t)e->n);
        for (int i = 0; i < e->n; i++)
            tlist_push(&I->c, l, tpl_eval(I, e->list[i], s));
        l->tuple = e->kind == N_TUPLE;
        return tv_listv(l);
    }
    case N_DICT: {
        tdict *d = tdict_new(&I->c, (size_t)e->n);
        for (int i = 0; i < e->n; i++) {
            tv k = tpl_eval(I, e->list[i], s);
            if (k.t != TV_STR)
                tctx_raise(&I->c, "dict keys must be strings, not %s", tv_type_name(&k));
            tdict_set(&I->c, d, k.u.s, tpl_eval(I, e->list2[i], s));
        }
        return tv_dictv(d);
    }
    case N_ATTR: {
        tv obj = tpl_eval(I, e->a, s);
        I->c.line = e->line;
        return tpl_getattr(I, obj, e->s->p, e->s->n);
    }
    case N_INDEX: {
        tv obj = tpl_eval(I, e->a, s);
        tv idx = tpl_eval(I, e->b, s);
        I->c.line = e->line;
        return eval_index(I, obj, idx);
    }
    case N_SLICE: return eval_slice(I, e, s);
    case N_CALL: {
        tv fn = tpl_eval(I, e->a, s);
        argv_t a = eval_args(I, e->list, e->n, s);
        I->c.line = e->line;
        return tpl_call(I, fn, a.n, a.v, a.kw, s);
    }
    case N_FILTER: {
        tv v = tpl_eval(I, e->a, s);
        argv_t a = eval_args(I, e->list, e->n, s);
        I->c.line = e->line;
        return tpl_filter(I, e->s->p, v, a.n, a.v, a.kw, s);
    }
    case N_TEST: {
        tv v = tpl_eval(I, e->a, s);
        argv_t a = eval_args(I, e->list, e->n, s);
        I->c.line = e->line;
        int r = tpl_test(I, e->s->p, v, a.n, a.v);
        return tv_bool(e->negate ? !r : r);
    }
    case N_BINOP: {
        tv a = tpl_eval(I, e->a, s);
        tv b = tpl_eval(I, e->b, s);
        I->c.line = e->line;
        return binop(I, e->op, a, b);
    }
    case N_AND: {
        tv a = tpl_eval(I, e->a, s);
        return tv_truthy(&a) ? tpl_eval(I, e->b, s) : a;
    }
    case N_OR: {
        tv a = tpl_eval(I, e->a, s);
        return tv_truthy(&a) ? a : tpl_eval(I, e->b, s);
    }
    case N_NOT: {
        tv a = tpl_eval(I, e->a, s);
        return tv_bool(!tv_truthy(&a));
    }
    case N_NEG: case N_POS: {
        tv a = tpl_eval(I, e->a, s);
        I->c.line = e->line;
        if (a.t == TV_FLOAT)
            return tv_float(e->kind == N_NEG ? -a.u.f : a.u.f);
        if (a.t == TV_INT || a.t == TV_BOOL) {
            if (e->kind == N_POS)
                return tv_int(a.u.i);
            if (a.u.i == INT64_MIN)
                tctx_raise(&I->c, "integer overflow in unary -");
            return tv_int(-a.u.i);
        }
        tctx_raise(&I->c, "bad operand type for unary %s: %s", e->kind == N_NEG ? "-" : "+",
                   tv_type_name(&a));
    }
    case N_COND: {
        tv c = tpl_eval(I, e->a, s);
        if (tv_truthy(&c))
            return tpl_eval(I, e->b, s);
        return e->c ? tpl_eval(I, e->c, s) : tv_undef();
    }
    default:
        tctx_raise(&I->c, "this expression cannot be evaluated here");
    }
}

tv tpl_eval(tpl_interp *I, const tpl_node *e, tpl_scope *s) {
    enter(I, e->line);
    step(I, e->line);
    I->c.line = e->line;
    tv v = eval_inner(I, e, s);
    I->depth--;
    return v;
}

/* ---- Statements -------------------------------------------------------------------------- */

static void assign(tpl_interp *I, const tpl_node *target, tv v, tpl_scope *s) {
    if (target->kind == N_NAME) {
        tpl_scope_set(I, s, target->s, v);
        return;
    }
    if (target->kind == N_TUPLE) {
        if (v.t != TV_LIST)
            tctx_raise(&I->c, "cannot unpack %s", tv_type_name(&v));
        if (v.u.l->n != (size_t)target->n)
            tctx_raise(&I->c, "too %s values to unpack (expected %d, got %zu)",
                       v.u.l->n < (size_t)target->n ? "few" : "many", target->n, v.u.l->n);
        for (int i = 0; i < target->n; i++)
            tpl_scope_set(I, s, target->list[i]->s, v.u.l->v[i]);
        return;
    }
    /* ns.attr = value */
    tv obj = lookup(I, s, target->a->s);
    if (obj.t != TV_NS)
        tctx_raise(&I->c, "cannot assign attribute on non-namespace object (%s)",
                   tv_type_name(&obj));
    tdict_set(&I->c, obj.u.d, target->s, v);
}

static void exec_set(tpl_interp *I, const tpl_node *n, tpl_scope *s) {
    tv v;
    if (n->b) {
        v = tpl_eval(I, n->b, s);
    } else {
        tbuf out = {0};
        out.limit = TPL_MAX_OUTPUT;
        if (exec_block(I, n->list, n->n, s, &out) != FLOW_NORMAL)
            tctx_raise(&I->c, "break or continue outside a loop");
        v = tv_strv(tbuf_str(&I->c, &out));
        if (n->c)
            v = filter_chain(I, n->c, v, s);
    }
    if (n->a)   /* `do` has no target */
        assign(I, n->a, v, s);
}

typedef struct loop_keys {
    const tstr *index, *index0, *revindex, *revindex0, *first, *last, *length, *previtem,
        *nextitem;
} loop_keys;

static int exec_for(tpl_interp *I, const tpl_node *n, tpl_scope *parent, tbuf *out) {
    tpl_scope *s = scope_new(I, parent);
    tv seq = tpl_eval(I, n->b, s);
    I->c.line = n->line;
    tlist *items;
    if (seq.t == TV_LIST) {
        items = seq.u.l;
    } else if (seq.t == TV_DICT || seq.t == TV_NS) {
        items = tlist_new(&I->c, seq.u.d->n);
        for (size_t i = 0; i < seq.u.d->n; i++)
            tlist_push(&I->c, items, tv_strv(seq.u.d->kv[i].k));
    } else if (seq.t == TV_STR) {
        items = tlist_new(&I->c, 0);
        const tstr *str = seq.u.s;
        for (size_t i = 0; i < str->n;) {
            size_t k = tpl_utf8_step(str->p + i, str->n - i);
            tlist_push(&I->c, items, tv_str(&I->c, str->p + i, k));
            i += k;
        }
    } else if (seq.t == TV_UNDEF) {
        items = tlist_new(&I->c, 0);
    } else {
        tctx_raise(&I->c, "%s is not iterable", tv_type_name(&seq));
    }
    /* `for x in xs if cond`: select first, so loop.length counts the selected items */
    if (n->c) {
        tlist *kept = tlist_new(&I->c, 0);
        for (size_t i = 0; i < items->n; i++) {
            tpl_scope *t = scope_new(I, s);
            I->c.line = n->line;
            assign(I, n->a, items->v[i], t);
            tv ok = tpl_eval(I, n->c, t);
            if (tv_truthy(&ok))
                tlist_push(&I->c, kept, items->v[i]);
        }
        items = kept;
    }
    if (items->n == 0)
        return exec_block(I, n->list2, n->n2, s, out);
    tctx *c = &I->c;
    loop_keys k = {tstr_cstr(c, "index"), tstr_cstr(c, "index0"), tstr_cstr(c, "revindex"),
                   tstr_cstr(c, "revindex0"), tstr_cstr(c, "first"), tstr_cstr(c, "last"),
                   tstr_cstr(c, "length"), tstr_cstr(c, "previtem"), tstr_cstr(c, "nextitem")};
    const tstr *loop_name = tstr_cstr(c, "loop");
    /* the length when the loop starts: items the body appends are not visited (and the
     * list is read afresh each time, as an append may move it) */
    int64_t len = (int64_t)items->n;
    /* one `loop` dict per loop, updated in place: an iteration allocates nothing */
    tdict *loop = tdict_new(c, 9);
    for (int64_t i = 0; i < len; i++) {
        step(I, n->line);
        tdict_set(c, loop, k.index, tv_int(i + 1));
        tdict_set(c, loop, k.index0, tv_int(i));
        tdict_set(c, loop, k.revindex, tv_int(len - i));
        tdict_set(c, loop, k.revindex0, tv_int(len - i - 1));
        tdict_set(c, loop, k.first, tv_bool(i == 0));
        tdict_set(c, loop, k.last, tv_bool(i == len - 1));
        tdict_set(c, loop, k.length, tv_int(len));
        tdict_set(c, loop, k.previtem, i > 0 ? items->v[i - 1] : tv_undef());
        tdict_set(c, loop, k.nextitem, i + 1 < len ? items->v[i + 1] : tv_undef());
        tpl_scope_set(I, s, loop_name, tv_dictv(loop));
        I->c.line = n->line;
        assign(I, n->a, items->v[i], s);
        int flow = exec_block(I, n->list, n->n, s, out);
        if (flow == FLOW_BREAK)
            break;
    }
    return FLOW_NORMAL;
}

static void define_macro(tpl_interp *I, const tpl_node *n, tpl_scope *s) {
    tfunc *fn = tpl_alloc(I->c.arena, I->c.fail, sizeof *fn);
    fn->kind = FN_MACRO;
    fn->node = n;
    fn->closure = s;
    fn->name = n->s->p;
    tv v = {TV_FUNC, {.fn = fn}};
    tpl_scope_set(I, s, n->s, v);
}

static void exec_call_block(tpl_interp *I, const tpl_node *n, tpl_scope *s, tbuf *out) {
    tfunc *caller = tpl_alloc(I->c.arena, I->c.fail, sizeof *caller);
    caller->kind = FN_CALLER;
    caller->node = n;   /* its parameters are n->list, its body n->list2 */
    caller->closure = s;
    caller->name = "caller";
    tv callerv = {TV_FUNC, {.fn = caller}};
    const tpl_node *call = n->a;
    tv fnv = tpl_eval(I, call->a, s);
    argv_t a = eval_args(I, call->list, call->n, s);
    I->c.line = n->line;
    if (fnv.t != TV_FUNC || fnv.u.fn->kind == FN_BUILTIN)
        tctx_raise(&I->c, "a call block needs a macro, not %s", tv_type_name(&fnv));
    enter(I, n->line);
    tv r = call_macro(I, fnv.u.fn, a.n, a.v, a.kw, callerv);
    I->depth--;
    tv_print(&I->c, out, &r);
}

static int exec_stmt(tpl_interp *I, const tpl_node *n, tpl_scope *s, tbuf *out) {
    step(I, n->line);
    I->c.line = n->line;
    switch (n->kind) {
    case N_TEXT:
        tbuf_put(&I->c, out, n->s->p, n->s->n);
        return FLOW_NORMAL;
    case N_OUTPUT: {
        tv v = tpl_eval(I, n->a, s);
        tv_print(&I->c, out, &v);
        return FLOW_NORMAL;
    }
    case N_IF: {
        tv c = tpl_eval(I, n->a, s);
        if (tv_truthy(&c))
            return exec_block(I, n->list, n->n, s, out);
        return exec_block(I, n->list2, n->n2, s, out);
    }
    case N_FOR: return exec_for(I, n, s, out);
    case N_SET: exec_set(I, n, s); return FLOW_NORMAL;
    case N_MACRO: define_macro(I, n, s); return FLOW_NORMAL;
    case N_CALLBLOCK: exec_call_block(I, n, s, out); return FLOW_NORMAL;
    case N_FILTERBLOCK: {
        tbuf body = {0};
        body.limit = TPL_MAX_OUTPUT;
        int flow = exec_block(I, n->list2, n->n2, s, &body);
        tv v = filter_chain(I, n->a, tv_strv(tbuf_str(&I->c, &body)), s);
        tv_print(&I->c, out, &v);
        return flow;
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default:
        tctx_raise(&I->c, "unknown statement");
    }
}

static int exec_block(tpl_interp *I, tpl_node **body, int n, tpl_scope *s, tbuf *out) {
    enter(I, n ? body[0]->line : I->c.line);
    int flow = FLOW_NORMAL;
    for (int i = 0; i < n && flow == FLOW_NORMAL; i++)
        flow = exec_stmt(I, body[i], s, out);
    I->depth--;
    return flow;
}

void tpl_render(tctx *c, const tpl_program *prog, tdict *globals, tbuf *out) {
    tpl_interp I;
    memset(&I, 0, sizeof I);
    I.c = *c;
    I.globals = globals;
    I.global = scope_new(&I, NULL);
    if (exec_block(&I, prog->body, prog->n, I.global, out) != FLOW_NORMAL)
        tctx_raise(&I.c, "break or continue outside a loop");
}
