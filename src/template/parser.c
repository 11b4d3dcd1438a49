/* parser.c — tokens to an AST (tpl_node trees) by recursive descent, with Jinja's
 * statements and its expression precedence (ternary, or, and, not, comparisons and
 * membership, + - ~, * / // %, **, unary sign, then postfix, filters and tests).
 * Not evaluation (interp.c); every syntax error names the template line. */
#include "tpl.h"

#include <stdio.h>
#include <string.h>

typedef struct parser {
    tpl_arena *a;
    tpl_fail *f;
    const tpl_token *t;
    size_t n, pos;
    int depth;
    tctx c;
} parser;

static const tpl_token *cur(parser *P) { return &P->t[P->pos < P->n ? P->pos : P->n - 1]; }
static const tpl_token *peek(parser *P, size_t k) {
    return &P->t[P->pos + k < P->n ? P->pos + k : P->n - 1];
}

static const char *token_desc(const tpl_token *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "text";
    case TK_OPEN_STMT: return "'{%'";
    case TK_CLOSE_STMT: return "'%}'";
    case TK_OPEN_EXPR: return "'{{'";
    case TK_CLOSE_EXPR: return "'}}'";
    case TK_STRING: return "a string";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return buf;
    }
}

_Noreturn static void syntax(parser *P, const char *what) {
    char buf[64];
    const tpl_token *t = cur(P);
    P->f->col = t->col;
    tpl_raise(P->f, TM_ERR_INVALID_ARGUMENT, t->line, "syntax error: %s, got %s", what,
              token_desc(t, buf, sizeof buf));
}

static int is_op(const tpl_token *t, const char *op) {
    size_t n = strlen(op);
    return t->type == TK_OP && t->n == n && memcmp(t->p, op, n) == 0;
}
static int is_name(const tpl_token *t, const char *name) {
    size_t n = strlen(name);
    return t->type == TK_NAME && t->n == n && memcmp(t->p, name, n) == 0;
}
static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char what[32];
        snprintf(what, sizeof what, "expected '%s'", op);
        syntax(P, what);
    }
    P->pos++;
}
static void expect_type(parser *P, int type, const char *what) {
    if (cur(P)->type != type)
        syntax(P, what);
    P->pos++;
}

static tpl_node *node(parser *P, int kind, int line) {
    tpl_node *n = tpl_alloc(P->a, P->f, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

/* A growing list of nodes, moved into the arena when done. */
typedef struct nlist { tpl_node **v; int n, cap; } nlist;
static void nl_push(parser *P, nlist *l, tpl_node *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        tpl_node **v = tpl_alloc(P->a, P->f, (size_t)cap * sizeof *v);
        if (l->n)
            memcpy(v, l->v, (size_t)l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static void enter(parser *P) {
    if (++P->depth > TPL_MAX_DEPTH)
        tpl_raise(P->f, TM_ERR_INVALID_ARGUMENT, cur(P)->line,
                  "template nested more than %d levels deep", TPL_MAX_DEPTH);
}

static tpl_node *expr(parser *P);
static tpl_node *unary(parser *P);
static tpl_node *primary(parser *P);
static tpl_node *postfix(parser *P, tpl_node *e);

static const tstr *name_of(parser *P, const tpl_token *t) {
    return tstr_new(&P->c, t->p, t->n);
}

/* ( arg, name=arg, *arg, **arg ) into n->list; `params` for macro declarations. */
static void arguments(parser *P, tpl_node *n, int params) {
    nlist l = {0};
    int keyword_seen = 0;
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        const tpl_token *t = cur(P);
        tpl_node *arg;
        if (!params && (is_op(t, "*") || is_op(t, "**"))) {
            arg = node(P, is_op(t, "*") ? N_STAR : N_STARSTAR, t->line);
            P->pos++;
            arg->a = expr(P);
        } else if (t->type == TK_NAME && is_op(peek(P, 1), "=")) {
            arg = node(P, params ? N_PARAM : N_KWARG, t->line);
            arg->s = name_of(P, t);
            P->pos += 2;
            arg->a = expr(P);
            keyword_seen = 1;
        } else if (params) {
            if (t->type != TK_NAME)
                syntax(P, "expected a parameter name");
            if (keyword_seen)
                syntax(P, "a parameter without default follows one with a default");
            arg = node(P, N_PARAM, t->line);
            arg->s = name_of(P, t);
            P->pos++;
        } else {
            if (keyword_seen)
                syntax(P, "a positional argument follows a keyword argument");
            arg = expr(P);
        }
        nl_push(P, &l, arg);
        if (is_op(cur(P), ","))
            P->pos++;
        else if (!is_op(cur(P), ")"))
            syntax(P, "expected ',' or ')' in an argument list");
    }
    P->pos++;
    n->list = l.v;
    n->n = l.n;
}

static tpl_node *subscript(parser *P, tpl_node *obj, int line) {
    tpl_node *parts[3] = {NULL, NULL, NULL};
    int k = 0, is_slice = 0;
    while (!is_op(cur(P), "]")) {
        if (is_op(cur(P), ":")) {
            if (++k > 2)
                syntax(P, "a slice takes at most three parts");
            is_slice = 1;
            P->pos++;
            continue;
        }
        if (parts[k])
            syntax(P, "expected ':' or ']'");
        parts[k] = expr(P);
    }
    P->pos++;
    if (!is_slice) {
        if (!parts[0])
            syntax(P, "expected an index");
        tpl_node *n = node(P, N_INDEX, line);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    tpl_node *n = node(P, N_SLICE, line);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static tpl_node *postfix(parser *P, tpl_node *e) {
    for (;;) {
        const tpl_token *t = cur(P);
        if (is_op(t, ".")) {
            P->pos++;
            const tpl_token *name = cur(P);
            if (name->type == TK_NAME) {
                tpl_node *n = node(P, N_ATTR, t->line);
                n->a = e;
                n->s = name_of(P, name);
                e = n;
            } else if (name->type == TK_INT) {
                tpl_node *n = node(P, N_INDEX, t->line);
                n->a = e;
                n->b = node(P, N_INT, t->line);
                n->b->i = name->i;
                e = n;
            } else {
                syntax(P, "expected a name after '.'");
            }
            P->pos++;
        } else if (is_op(t, "[")) {
            P->pos++;
            e = subscript(P, e, t->line);
        } else if (is_op(t, "(")) {
            tpl_node *n = node(P, N_CALL, t->line);
            n->a = e;
            arguments(P, n, 0);
            e = n;
        } else {
            return e;
        }
    }
}

static tpl_node *filter_tail(parser *P, tpl_node *e) {
    for (;;) {
        const tpl_token *t = cur(P);
        if (is_op(t, "|")) {
            P->pos++;
            const tpl_token *name = cur(P);
            if (name->type != TK_NAME)
                syntax(P, "expected a filter name after '|'");
            tpl_node *n = node(P, N_FILTER, name->line);
            n->a = e;
            n->s = name_of(P, name);
            P->pos++;
            if (is_op(cur(P), "("))
                arguments(P, n, 0);
            e = n;
        } else if (is_name(t, "is")) {
            P->pos++;
            tpl_node *n = node(P, N_TEST, t->line);
            if (is_name(cur(P), "not")) {
                n->negate = 1;
                P->pos++;
            }
            const tpl_token *name = cur(P);
            if (name->type != TK_NAME && !is_op(name, "==") && !is_op(name, "!=") &&
                !is_op(name, "<") && !is_op(name, ">") && !is_op(name, "<=") &&
                !is_op(name, ">="))
                syntax(P, "expected a test name after 'is'");
            n->a = e;
            n->s = name_of(P, name);
            P->pos++;
            const tpl_token *next = cur(P);
            if (is_op(next, "(")) {
                arguments(P, n, 0);
            } else if ((next->type == TK_NAME && !is_name(next, "else") &&
                        !is_name(next, "or") && !is_name(next, "and") &&
                        !is_name(next, "if") && !is_name(next, "is") &&
                        !is_name(next, "in") && !is_name(next, "not")) ||
                       next->type == TK_STRING || next->type == TK_INT ||
                       next->type == TK_FLOAT || is_op(next, "[") || is_op(next, "{") ||
                       is_op(next, "-")) {
                /* `x is divisibleby 3`, `x is sameas none`: one argument without parens */
                tpl_node *arg = is_op(next, "-") ? unary(P) : postfix(P, primary(P));
                n->list = tpl_alloc(P->a, P->f, sizeof(tpl_node *));
                n->list[0] = arg;
                n->n = 1;
            }
            e = n;
        } else {
            return e;
        }
    }
}

static tpl_node *primary(parser *P) {
    const tpl_token *t = cur(P);
    tpl_node *n;
    switch (t->type) {
    case TK_NAME:
        P->pos++;
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            n = node(P, N_BOOL, t->line);
            n->i = t->p[0] == 't' || t->p[0] == 'T';
            return n;
        }
        if (is_name(t, "none") || is_name(t, "None"))
            return node(P, N_NONE, t->line);
        n = node(P, N_NAME, t->line);
        n->s = name_of(P, t);
        return n;
    case TK_STRING: {
        /* adjacent literals join: 'a' "b" is 'ab' */
        tbuf b = {0};
        while (cur(P)->type == TK_STRING) {
            tbuf_put(&P->c, &b, cur(P)->p, cur(P)->n);
            P->pos++;
        }
        n = node(P, N_STR, t->line);
        n->s = tbuf_str(&P->c, &b);
        return n;
    }
    case TK_INT:
        P->pos++;
        n = node(P, N_INT, t->line);
        n->i = t->i;
        return n;
    case TK_FLOAT:
        P->pos++;
        n = node(P, N_FLOAT, t->line);
        n->f = t->f;
        return n;
    default:
        break;
    }
    if (is_op(t, "(")) {
        P->pos++;
        if (is_op(cur(P), ")")) {
            P->pos++;
            return node(P, N_TUPLE, t->line);
        }
        tpl_node *first = expr(P);
        if (!is_op(cur(P), ",")) {
            expect_op(P, ")");
            return first;
        }
        nlist l = {0};
        nl_push(P, &l, first);
        while (is_op(cur(P), ",")) {
            P->pos++;
            if (is_op(cur(P), ")"))
                break;
            nl_push(P, &l, expr(P));
        }
        expect_op(P, ")");
        n = node(P, N_TUPLE, t->line);
        n->list = l.v;
        n->n = l.n;
        return n;
    }
    if (is_op(t, "[")) {
        P->pos++;
        nlist l = {0};
        while (!is_op(cur(P), "]")) {
            nl_push(P, &l, expr(P));
            if (is_op(cur(P), ","))
                P->pos++;
            else if (!is_op(cur(P), "]"))
                syntax(P, "expected ',' or ']' in a list");
        }
        P->pos++;
        n = node(P, N_LIST, t->line);
        n->list = l.v;
        n->n = l.n;
        return n;
    }
    if (is_op(t, "{")) {
        P->pos++;
        nlist keys = {0}, values = {0};
        while (!is_op(cur(P), "}")) {
            nl_push(P, &keys, expr(P));
            expect_op(P, ":");
            nl_push(P, &values, expr(P));
            if (is_op(cur(P), ","))
                P->pos++;
            else if (!is_op(cur(P), "}"))
                syntax(P, "expected ',' or '}' in a dict");
        }
        P->pos++;
        n = node(P, N_DICT, t->line);
        n->list = keys.v;
        n->n = keys.n;
        n->list2 = values.v;
        n->n2 = values.n;
        return n;
    }
    syntax(P, "expected an expression");
}

/* Jinja's unary: a sign applies to what follows without its filters, which then apply to
 * the signed value: -3|abs is (-3)|abs. */
static tpl_node *signed_operand(parser *P, int with_filters) {
    const tpl_token *t = cur(P);
    tpl_node *e;
    if (is_op(t, "-") || is_op(t, "+")) {
        enter(P);
        P->pos++;
        e = node(P, is_op(t, "-") ? N_NEG : N_POS, t->line);
        e->a = signed_operand(P, 0);
        P->depth--;
    } else {
        e = postfix(P, primary(P));
    }
    return with_filters ? filter_tail(P, e) : e;
}

static tpl_node *unary(parser *P) { return signed_operand(P, 1); }

static tpl_node *binop(parser *P, int op, tpl_node *a, tpl_node *b, int line) {
    tpl_node *n = node(P, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static tpl_node *power(parser *P) {
    tpl_node *e = unary(P);
    while (is_op(cur(P), "**")) {
        int line = cur(P)->line;
        P->pos++;
        e = binop(P, OP_POW, e, unary(P), line);
    }
    return e;
}

static tpl_node *multiplicative(parser *P) {
    tpl_node *e = power(P);
    for (;;) {
        const tpl_token *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
               : is_op(t, "%") ? OP_MOD : -1;
        if (op < 0)
            return e;
        P->pos++;
        e = binop(P, op, e, power(P), t->line);
    }
}

static tpl_node *additive(parser *P) {
    tpl_node *e = multiplicative(P);
    for (;;) {
        const tpl_token *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : is_op(t, "~") ? OP_CONCAT : -1;
        if (op < 0)
            return e;
        P->pos++;
        e = binop(P, op, e, multiplicative(P), t->line);
    }
}

static tpl_node *comparison(parser *P) {
    tpl_node *e = additive(P);
    for (;;) {
        const tpl_token *t = cur(P);
        int op = -1;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in")) op = OP_NOTIN;
        if (op < 0)
            return e;
        P->pos += op == OP_NOTIN ? 2 : 1;
        e = binop(P, op, e, additive(P), t->line);
    }
}

static tpl_node *logical_not(parser *P) {
    const tpl_token *t = cur(P);
    if (is_name(t, "not")) {
        enter(P);
        P->pos++;
        tpl_node *n = node(P, N_NOT, t->line);
        n->a = logical_not(P);
        P->depth--;
        return n;
    }
    return comparison(P);
}

static tpl_node *logical_and(parser *P) {
    tpl_node *e = logical_not(P);
    while (is_name(cur(P), "and")) {
        tpl_node *n = node(P, N_AND, cur(P)->line);
        P->pos++;
        n->a = e;
        n->b = logical_not(P);
        e = n;
    }
    return e;
}

static tpl_node *logical_or(parser *P) {
    tpl_node *e = logical_and(P);
    while (is_name(cur(P), "or")) {
        tpl_node *n = node(P, N_OR, cur(P)->line);
        P->pos++;
        n->a = e;
        n->b = logical_and(P);
        e = n;
    }
    return e;
}

static tpl_node *expr(parser *P) {
    enter(P);
    tpl_node *e = logical_or(P);
    if (is_name(cur(P), "if")) {
        tpl_node *n = node(P, N_COND, cur(P)->line);
        P->pos++;
        n->b = e;
        n->a = logical_or(P);
        if (is_name(cur(P), "else")) {
            P->pos++;
            n->c = expr(P);
        }
        e = n;
    }
    P->depth--;
    return e;
}

/* a, b, c as a tuple; one expression as itself. */
static tpl_node *expr_sequence(parser *P, int primaries_only) {
    int line = cur(P)->line;
    tpl_node *first = primaries_only ? primary(P) : expr(P);
    if (!is_op(cur(P), ","))
        return first;
    nlist l = {0};
    nl_push(P, &l, first);
    while (is_op(cur(P), ",")) {
        P->pos++;
        nl_push(P, &l, primaries_only ? primary(P) : expr(P));
    }
    tpl_node *n = node(P, N_TUPLE, line);
    n->list = l.v;
    n->n = l.n;
    return n;
}

/* ---- Statements ------------------------------------------------------------------------ */

static tpl_node *statement(parser *P);

static int at_tag(parser *P, const char *const *names) {
    if (cur(P)->type != TK_OPEN_STMT)
        return 0;
    for (int i = 0; names[i]; i++)
        if (is_name(peek(P, 1), names[i]))
            return 1;
    return 0;
}

/* Statements up to one of the tags `ends` (left unconsumed). */
static void body(parser *P, const char *const *ends, const char *opener, int line,
                 tpl_node ***out, int *count) {
    nlist l = {0};
    enter(P);
    while (!at_tag(P, ends)) {
        if (cur(P)->type == TK_EOF)
            tpl_raise(P->f, TM_ERR_INVALID_ARGUMENT, cur(P)->line,
                      "syntax error: unexpected end of template, missing {%% %s %%} for the "
                      "'%s' on line %d", ends[0], opener, line);
        tpl_node *s = statement(P);
        if (s)
            nl_push(P, &l, s);
    }
    P->depth--;
    *out = l.v;
    *count = l.n;
}

static void end_tag(parser *P, const char *name) {
    expect_type(P, TK_OPEN_STMT, "expected '{%'");
    if (!is_name(cur(P), name)) {
        char what[48];
        snprintf(what, sizeof what, "expected '%s'", name);
        syntax(P, what);
    }
    P->pos++;
    expect_type(P, TK_CLOSE_STMT, "expected '%}'");
}

static tpl_node *if_statement(parser *P, int line) {
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    tpl_node *n = node(P, N_IF, line);
    n->a = expr(P);
    expect_type(P, TK_CLOSE_STMT, "expected '%}' after the if condition");
    body(P, ends, "if", line, &n->list, &n->n);
    if (is_name(peek(P, 1), "elif")) {
        int eline = cur(P)->line;
        P->pos += 2;
        n->list2 = tpl_alloc(P->a, P->f, sizeof(tpl_node *));
        n->list2[0] = if_statement(P, eline);   /* consumes the endif */
        n->n2 = 1;
        return n;
    }
    if (is_name(peek(P, 1), "else")) {
        P->pos += 2;
        expect_type(P, TK_CLOSE_STMT, "expected '%}' after else");
        body(P, endif, "if", line, &n->list2, &n->n2);
    }
    end_tag(P, "endif");
    return n;
}

static tpl_node *for_statement(parser *P, int line) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    tpl_node *n = node(P, N_FOR, line);
    n->a = expr_sequence(P, 1);
    if (n->a->kind != N_NAME && n->a->kind != N_TUPLE)
        syntax(P, "expected loop variable names");
    for (int i = 0; n->a->kind == N_TUPLE && i < n->a->n; i++)
        if (n->a->list[i]->kind != N_NAME)
            syntax(P, "expected loop variable names");
    if (!is_name(cur(P), "in"))
        syntax(P, "expected 'in' after the loop variable");
    P->pos++;
    n->b = logical_or(P);
    if (is_name(cur(P), "if")) {
        P->pos++;
        n->c = expr(P);
    }
    if (is_name(cur(P), "recursive"))
        tpl_raise(P->f, TM_ERR_UNSUPPORTED, cur(P)->line, "recursive loops are not supported");
    expect_type(P, TK_CLOSE_STMT, "expected '%}' after the for loop header");
    body(P, ends, "for", line, &n->list, &n->n);
    if (is_name(peek(P, 1), "else")) {
        P->pos += 2;
        expect_type(P, TK_CLOSE_STMT, "expected '%}' after else");
        body(P, endfor, "for", line, &n->list2, &n->n2);
    }
    end_tag(P, "endfor");
    return n;
}

static tpl_node *set_statement(parser *P, int line) {
    static const char *const endset[] = {"endset", NULL};
    tpl_node *n = node(P, N_SET, line);
    /* targets: names, or one namespace attribute (no filters: `set x | upper` is a block) */
    nlist l = {0};
    for (;;) {
        nl_push(P, &l, postfix(P, primary(P)));
        if (!is_op(cur(P), ","))
            break;
        P->pos++;
    }
    if (l.n == 1) {
        n->a = l.v[0];
    } else {
        n->a = node(P, N_TUPLE, line);
        n->a->list = l.v;
        n->a->n = l.n;
    }
    tpl_node *target = n->a;
    int ok = target->kind == N_NAME || (target->kind == N_ATTR && target->a->kind == N_NAME);
    if (target->kind == N_TUPLE) {
        ok = 1;
        for (int i = 0; i < target->n; i++)
            ok &= target->list[i]->kind == N_NAME;
    }
    if (!ok)
        tpl_raise(P->f, TM_ERR_INVALID_ARGUMENT, line,
                  "syntax error: can only assign to a name, names, or a namespace attribute");
    if (is_op(cur(P), "=")) {
        P->pos++;
        n->b = expr_sequence(P, 0);
        expect_type(P, TK_CLOSE_STMT, "expected '%}' after the set statement");
        return n;
    }
    if (is_op(cur(P), "|")) {   /* {% set x | upper %}...{% endset %} */
        tpl_node *f = filter_tail(P, node(P, N_NONE, line));
        n->c = f;
    }
    expect_type(P, TK_CLOSE_STMT, "expected '=' or '%}' in the set statement");
    body(P, endset, "set", line, &n->list, &n->n);
    end_tag(P, "endset");
    return n;
}

static tpl_node *macro_statement(parser *P, int line) {
    static const char *const endmacro[] = {"endmacro", NULL};
    tpl_node *n = node(P, N_MACRO, line);
    if (cur(P)->type != TK_NAME)
        syntax(P, "expected a macro name");
    n->s = name_of(P, cur(P));
    P->pos++;
    if (is_op(cur(P), "("))
        arguments(P, n, 1);
    expect_type(P, TK_CLOSE_STMT, "expected '%}' after the macro signature");
    body(P, endmacro, "macro", line, &n->list2, &n->n2);
    end_tag(P, "endmacro");
    return n;
}

static tpl_node *call_statement(parser *P, int line) {
    static const char *const endcall[] = {"endcall", NULL};
    tpl_node *n = node(P, N_CALLBLOCK, line);
    if (is_op(cur(P), "("))
        arguments(P, n, 1);   /* the caller's parameters */
    n->a = postfix(P, primary(P));
    if (n->a->kind != N_CALL)
        syntax(P, "expected a macro call after 'call'");
    expect_type(P, TK_CLOSE_STMT, "expected '%}' after the call");
    body(P, endcall, "call", line, &n->list2, &n->n2);
    end_tag(P, "endcall");
    return n;
}

static tpl_node *filter_statement(parser *P, int line) {
    static const char *const endfilter[] = {"endfilter", NULL};
    tpl_node *n = node(P, N_FILTERBLOCK, line);
    /* the filter chain is parsed as a filter expression on an empty operand */
    P->pos--;
    tpl_token *fake = (tpl_token *)cur(P);   /* the 'filter' name acts as the first '|' */
    tpl_token saved = *fake;
    fake->type = TK_OP;
    fake->p = "|";
    fake->n = 1;
    n->a = filter_tail(P, node(P, N_NONE, line));
    *fake = saved;
    expect_type(P, TK_CLOSE_STMT, "expected '%}' after the filter");
    body(P, endfilter, "filter", line, &n->list2, &n->n2);
    end_tag(P, "endfilter");
    return n;
}

static tpl_node *statement(parser *P) {
    const tpl_token *t = cur(P);
    tpl_node *n;
    switch (t->type) {
    case TK_TEXT:
        P->pos++;
        n = node(P, N_TEXT, t->line);
        n->s = tstr_new(&P->c, t->p, t->n);
        return n;
    case TK_COMMENT:
        P->pos++;
        return NULL;
    case TK_OPEN_EXPR:
        P->pos++;
        n = node(P, N_OUTPUT, t->line);
        n->a = expr_sequence(P, 0);
        expect_type(P, TK_CLOSE_EXPR, "expected '}}'");
        return n;
    case TK_OPEN_STMT:
        break;
    default:
        syntax(P, "expected text, '{{' or '{%'");
    }
    P->pos++;
    const tpl_token *name = cur(P);
    int line = name->line;
    if (name->type != TK_NAME)
        syntax(P, "expected a statement name after '{%'");
    P->pos++;
    if (is_name(name, "if")) return if_statement(P, line);
    if (is_name(name, "for")) return for_statement(P, line);
    if (is_name(name, "set")) return set_statement(P, line);
    if (is_name(name, "macro")) return macro_statement(P, line);
    if (is_name(name, "call")) return call_statement(P, line);
    if (is_name(name, "filter")) return filter_statement(P, line);
    if (is_name(name, "break") || is_name(name, "continue")) {
        n = node(P, is_name(name, "break") ? N_BREAK : N_CONTINUE, line);
        expect_type(P, TK_CLOSE_STMT, "expected '%}'");
        return n;
    }
    if (is_name(name, "do")) {   /* {% do list.append(x) %}: an expression for its effect */
        n = node(P, N_SET, line);
        n->b = expr(P);
        expect_type(P, TK_CLOSE_STMT, "expected '%}'");
        return n;
    }
    tpl_raise(P->f, TM_ERR_INVALID_ARGUMENT, line, "syntax error: unknown statement '%.*s'",
              (int)(name->n > 40 ? 40 : name->n), name->p);
}

tpl_program tpl_parse(tpl_arena *a, tpl_fail *f, const tpl_token *toks, size_t count) {
    parser P = {a, f, toks, count, 0, 0, {a, f, 0}};
    nlist l = {0};
    while (cur(&P)->type != TK_EOF) {
        const tpl_token *t = cur(&P);
        if (t->type == TK_OPEN_STMT && peek(&P, 1)->type == TK_NAME) {
            static const char *const closers[] = {"endif", "endfor", "endset", "endmacro",
                "endcall", "endfilter", "elif", "else", NULL};
            for (int i = 0; closers[i]; i++)
                if (is_name(peek(&P, 1), closers[i]))
                    tpl_raise(f, TM_ERR_INVALID_ARGUMENT, peek(&P, 1)->line,
                              "syntax error: unexpected {%% %s %%} with no open block",
                              closers[i]);
        }
        tpl_node *s = statement(&P);
        if (s)
            nl_push(&P, &l, s);
    }
    tpl_program prog = {l.v, l.n};
    return prog;
}
