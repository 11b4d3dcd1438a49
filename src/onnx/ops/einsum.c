/* Einsum: parses the equation (implicit output, ellipsis, repeated labels), takes
 * diagonals, sums labels out early, contracts operands left to right as batched matmuls
 * (transpose, reshape, MATMUL) and permutes to the output. No cost-based ordering. */
#include <ctype.h>
#include "elementwise.h"

#define LETTERS 52                 /* labels 0..51: a-z, A-Z; ellipsis dims from 52 */
#define MAX_LABELS (LETTERS + TM_MAX_RANK)
#define MAX_OPERANDS 16

typedef struct {
    tm_val v;
    int n;
    int lab[TM_MAX_RANK];
} operand;

typedef struct {
    int n_in;
    int n_term[MAX_OPERANDS];      /* labels per input term, ellipsis as -1 */
    int term[MAX_OPERANDS][TM_MAX_RANK + 1];
    int has_out;
    int n_out;
    int out[TM_MAX_RANK + 1];
} equation;

static int letter_label(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -2;
}

/* One term ("ab...c") into labels; -1 marks the ellipsis. Returns the count or -1. */
static int parse_term(const char *s, size_t len, int *labels) {
    int n = 0, ellipsis = 0;
    for (size_t i = 0; i < len; i++) {
        if (isspace((unsigned char)s[i])) continue;
        if (s[i] == '.') {
            if (ellipsis || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.') return -1;
            ellipsis = 1;
            i += 2;
            if (n > TM_MAX_RANK) return -1;
            labels[n++] = -1;
            continue;
        }
        int l = letter_label(s[i]);
        if (l < 0 || n > TM_MAX_RANK) return -1;
        labels[n++] = l;
    }
    return n;
}

static int parse_equation(const char *eq, equation *e) {
    memset(e, 0, sizeof *e);
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    const char *p = eq;
    while (1) {
        const char *comma = memchr(p, ',', lhs_len - (size_t)(p - eq));
        size_t len = comma ? (size_t)(comma - p) : lhs_len - (size_t)(p - eq);
        if (e->n_in == MAX_OPERANDS) return -1;
        int n = parse_term(p, len, e->term[e->n_in]);
        if (n < 0) return -1;
        e->n_term[e->n_in++] = n;
        if (!comma) break;
        p = comma + 1;
    }
    if (arrow) {
        e->has_out = 1;
        e->n_out = parse_term(arrow + 2, strlen(arrow + 2), e->out);
        if (e->n_out < 0) return -1;
    }
    return 0;
}

/* The ellipsis labels of an operand with k ellipsis dims, right-aligned among the
 * equation's `ell` of them. */
static int ellipsis_label(int ell, int k, int i) { return LETTERS + (ell - k) + i; }

/* Builds operand i's label list from its term; fails on a rank mismatch. */
static int bind_operand(tm_lower *L, const equation *e, int i, int ell, operand *op) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, op->v), letters = 0, has_ell = 0;
    for (int j = 0; j < e->n_term[i]; j++) {
        if (e->term[i][j] < 0) has_ell = 1;
        else letters++;
    }
    int k = r - letters;
    if ((!has_ell && k != 0) || k < 0) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d has rank %d but its equation term names %d "
                 "dims", i, r, letters);
        return -1;
    }
    op->n = 0;
    for (int j = 0; j < e->n_term[i]; j++) {
        if (e->term[i][j] >= 0) {
            op->lab[op->n++] = e->term[i][j];
            continue;
        }
        for (int q = 0; q < k; q++) op->lab[op->n++] = ellipsis_label(ell, k, q);
    }
    return 0;
}

/* The output labels: explicit, or implicit (ellipsis dims, then letters used exactly
 * once, in ASCII order as numpy does). */
static int output_labels(tm_lower *L, const equation *e, int ell, int *out) {
    int n = 0;
    if (e->has_out) {
        int seen[MAX_LABELS] = {0};
        for (int j = 0; j < e->n_out; j++) {
            if (e->out[j] < 0) {
                for (int q = 0; q < ell; q++) out[n++] = LETTERS + q;
                continue;
            }
            if (seen[e->out[j]]++) {
                tm_lfail(L, TM_ERR_SHAPE, "attribute equation repeats an output label");
                return -1;
            }
            out[n++] = e->out[j];
        }
        return n;
    }
    int count[LETTERS] = {0};
    for (int i = 0; i < e->n_in; i++)
        for (int j = 0; j < e->n_term[i]; j++)
            if (e->term[i][j] >= 0) count[e->term[i][j]]++;
    for (int q = 0; q < ell; q++) out[n++] = LETTERS + q;
    for (int l = 26; l < LETTERS; l++)  /* 'A'..'Z' sort before 'a'..'z' */
        if (count[l] == 1) out[n++] = l;
    for (int l = 0; l < 26; l++)
        if (count[l] == 1) out[n++] = l;
    return n;
}

static int find_label(const operand *op, int l) {
    for (int i = 0; i < op->n; i++)
        if (op->lab[i] == l) return i;
    return -1;
}

/* Replaces a repeated label by its diagonal, until every label is distinct. */
static int take_diagonals(tm_lower *L, operand *op) {
    tm_ctx *c = tm_lctx(L);
    for (int p = 0; p < op->n; p++) {
        for (int q = p + 1; q < op->n; q++) {
            if (op->lab[p] != op->lab[q]) continue;
            const int64_t *dims = tm_vdims(c, op->v);
            int64_t size = dims[p];
            if (dims[q] != size) {
                tm_lfail(L, TM_ERR_SHAPE, "a repeated equation label has sizes %lld and %lld",
                         (long long)size, (long long)dims[q]);
                return -1;
            }
            int64_t perm[TM_MAX_RANK], shape[TM_MAX_RANK];
            int lab[TM_MAX_RANK], k = 0;
            for (int d = 0; d < op->n; d++) {
                if (d == p || d == q) continue;
                perm[k] = d;
                shape[k] = dims[d];
                lab[k++] = op->lab[d];
            }
            int label = op->lab[p];
            perm[k] = p;
            perm[k + 1] = q;
            tm_val t = tm_transpose(c, op->v, perm);
            shape[k] = size * size;
            t = tm_reshape(c, t, k + 1, shape);
            int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK], cn[TM_MAX_RANK];
            for (int d = 0; d < k; d++) {
                st[d] = 0;
                sp[d] = 1;
                cn[d] = shape[d];
            }
            st[k] = 0;
            sp[k] = size + 1;
            cn[k] = size;
            op->v = tm_slice(c, t, st, sp, cn);
            lab[k] = label;
            op->n = k + 1;
            memcpy(op->lab, lab, sizeof lab);
            if (!tm_ctx_ok(c)) return -1;
            p = -1;  /* labels moved: scan again */
            break;
        }
    }
    return 0;
}

/* Sums out the labels of op for which keep[label] is 0. */
static void sum_unkept(tm_ctx *c, operand *op, const int *keep) {
    int64_t axes[TM_MAX_RANK];
    int n = 0, k = 0;
    for (int d = 0; d < op->n; d++) {
        if (keep[op->lab[d]]) op->lab[k++] = op->lab[d];
        else axes[n++] = d;
    }
    if (!n) return;
    op->v = tm_reduce(c, TM_P_REDUCE_SUM, op->v, axes, n, 0);
    op->n = k;
}

static int64_t label_dim(tm_ctx *c, const operand *op, int l) {
    int d = find_label(op, l);
    return d < 0 ? 1 : tm_vdims(c, op->v)[d];
}

/* A (batch, free_a, contracted) x B (batch, contracted, free_b) as one batched matmul.
 * keep: labels needed after this product. */
static int contract(tm_lower *L, operand *a, operand *b, const int *keep, operand *out) {
    tm_ctx *c = tm_lctx(L);
    int batch[TM_MAX_RANK], fa[TM_MAX_RANK], fb[TM_MAX_RANK], ct[TM_MAX_RANK];
    int nb = 0, na = 0, nfb = 0, nc = 0;
    for (int d = 0; d < a->n; d++) {
        int l = a->lab[d];
        if (find_label(b, l) < 0) fa[na++] = l;
        else if (keep[l]) batch[nb++] = l;
        else ct[nc++] = l;
    }
    for (int d = 0; d < b->n; d++)
        if (find_label(a, b->lab[d]) < 0) fb[nfb++] = b->lab[d];
    if (nb + 2 > TM_MAX_RANK || nb + na + nfb > TM_MAX_RANK) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "an einsum intermediate exceeds rank %d", TM_MAX_RANK);
        return -1;
    }
    int64_t pa[TM_MAX_RANK], pb[TM_MAX_RANK], sa[TM_MAX_RANK], sb[TM_MAX_RANK];
    int64_t m = 1, n = 1, k = 1, ea[TM_MAX_RANK], eb[TM_MAX_RANK];
    int ka = 0, kb = 0;
    for (int i = 0; i < nb; i++) {
        pa[ka++] = find_label(a, batch[i]);
        pb[kb++] = find_label(b, batch[i]);
    }
    for (int i = 0; i < na; i++) pa[ka++] = find_label(a, fa[i]);
    for (int i = 0; i < nc; i++) {
        pa[ka++] = find_label(a, ct[i]);
        pb[kb++] = find_label(b, ct[i]);
    }
    for (int i = 0; i < nfb; i++) pb[kb++] = find_label(b, fb[i]);
    tm_val va = tm_transpose(c, a->v, pa), vb = tm_transpose(c, b->v, pb);
    /* A contracted label of size 1 on one side broadcasts: expand it first. */
    for (int i = 0; i < ka; i++) ea[i] = tm_vdims(c, a->v)[pa[i]];
    for (int i = 0; i < kb; i++) eb[i] = tm_vdims(c, b->v)[pb[i]];
    for (int i = 0; i < nc; i++) {
        int64_t size = ea[nb + na + i] > eb[nb + i] ? ea[nb + na + i] : eb[nb + i];
        ea[nb + na + i] = eb[nb + i] = size;
    }
    va = tm_expand(c, va, ka, ea);
    vb = tm_expand(c, vb, kb, eb);
    for (int i = 0; i < nb; i++) {
        sa[i] = ea[i];
        sb[i] = eb[i];
    }
    for (int i = 0; i < na; i++) m *= ea[nb + i];
    for (int i = 0; i < nc; i++) k *= ea[nb + na + i];
    for (int i = 0; i < nfb; i++) n *= eb[nb + nc + i];
    sa[nb] = m;
    sa[nb + 1] = k;
    sb[nb] = k;
    sb[nb + 1] = n;
    tm_val y = tm_matmul(c, tm_reshape(c, va, nb + 2, sa), tm_reshape(c, vb, nb + 2, sb));
    if (y == TM_NONE) return -1;
    int64_t shape[TM_MAX_RANK];
    out->n = 0;
    for (int i = 0; i < nb; i++) {
        shape[out->n] = tm_vdims(c, y)[i];
        out->lab[out->n++] = batch[i];
    }
    for (int i = 0; i < na; i++) {
        shape[out->n] = label_dim(c, a, fa[i]);
        out->lab[out->n++] = fa[i];
    }
    for (int i = 0; i < nfb; i++) {
        shape[out->n] = label_dim(c, b, fb[i]);
        out->lab[out->n++] = fb[i];
    }
    out->v = tm_reshape(c, y, out->n, shape);
    return tm_ctx_ok(c) ? 0 : -1;
}

/* keep[l] = 1 when label l is in the output or in an operand after `from`. */
static void needed_labels(const operand *ops, int n_ops, int from, const int *out, int n_out,
                          int *keep) {
    memset(keep, 0, MAX_LABELS * sizeof *keep);
    for (int i = 0; i < n_out; i++) keep[out[i]] = 1;
    for (int i = from; i < n_ops; i++)
        for (int d = 0; d < ops[i].n; d++) keep[ops[i].lab[d]] = 1;
}

static tm_status lower_einsum(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const char *text = tm_attr_s(L, "equation", NULL);
    if (!text) return tm_lfail(L, TM_ERR_SHAPE, "attribute equation is missing");
    equation e;
    if (parse_equation(text, &e))
        return tm_lfail(L, TM_ERR_SHAPE, "attribute equation='%s' cannot be parsed", text);
    if (e.n_in != tm_lnin(L))
        return tm_lfail(L, TM_ERR_SHAPE, "attribute equation='%s' names %d operands, the node "
                        "has %d inputs", text, e.n_in, tm_lnin(L));
    operand ops[MAX_OPERANDS];
    int ell = 0;
    for (int i = 0; i < e.n_in; i++) {
        ops[i].v = tm_lin(L, i);
        if (tm_ew_check(L, i, ops[i].v, TM_DTS_NUMERIC)) return c->status;
        if (i && tm_ew_same_dtype(L, 0, ops[0].v, i, ops[i].v)) return c->status;
        int letters = 0;
        for (int j = 0; j < e.n_term[i]; j++) letters += e.term[i][j] >= 0;
        int k = tm_vrank(c, ops[i].v) - letters;
        if (k > ell) ell = k;
    }
    for (int i = 0; i < e.n_in; i++)
        if (bind_operand(L, &e, i, ell, &ops[i]) || take_diagonals(L, &ops[i])) return c->status;
    int out[TM_MAX_RANK + LETTERS];
    int n_out = output_labels(L, &e, ell, out);
    if (n_out < 0) return c->status;
    if (n_out > TM_MAX_RANK) return tm_lfail(L, TM_ERR_UNSUPPORTED, "output rank %d", n_out);
    int keep[MAX_LABELS];
    /* Labels only one operand has and the output lacks are summed at once. */
    for (int i = 0; i < e.n_in; i++) {
        needed_labels(ops, e.n_in, e.n_in, out, n_out, keep);
        for (int j = 0; j < e.n_in; j++)
            for (int d = 0; j != i && d < ops[j].n; d++) keep[ops[j].lab[d]] = 1;
        sum_unkept(c, &ops[i], keep);
    }
    operand cur = ops[0];
    for (int i = 1; i < e.n_in && tm_ctx_ok(c); i++) {
        needed_labels(ops, e.n_in, i + 1, out, n_out, keep);
        operand next;
        if (contract(L, &cur, &ops[i], keep, &next)) return c->status;
        cur = next;
    }
    needed_labels(ops, 0, 0, out, n_out, keep);
    sum_unkept(c, &cur, keep);
    int64_t perm[TM_MAX_RANK];
    if (cur.n != n_out) return tm_lfail(L, TM_ERR_SHAPE, "an output label names no input dim");
    for (int i = 0; i < n_out; i++) {
        perm[i] = find_label(&cur, out[i]);
        if (perm[i] < 0) return tm_lfail(L, TM_ERR_SHAPE, "an output label names no input dim");
    }
    tm_lout(L, 0, tm_transpose(c, cur.v, perm));
    return c->status;
}

TM_REGISTER_OP("", "Einsum", 12, 27, lower_einsum);
