/* inspect_report.c: the tables `kiln inspect` prints, built from a read
 * trace: per method its calls' time percentiles; then the breakdown, nested
 * method > backend (its partitions) > op or node, each row's share of its
 * parent, and the roofline of each row against the machine's peaks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "devtools/devtools.h"
#include "inspect_trace.h"

const char *insp_kind_name(int kind) {
    static const char *const names[] = {"method",   "partition", "op",         "node",
                                        "executor", "rest",      "delegate op"};
    return kind >= 0 && kind <= ROW_DELEGATE_OP ? names[kind] : "?";
}

void insp_json_str(FILE *f, const char *s, int html) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || (html && (*p == '<' || *p == '>' || *p == '&')))
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* ---- roofline ---------------------------------------------------------------------- */

double insp_unit_peak(const char *unit, const insp_peaks *pk) {
    if (!pk || !pk->have) return 0;
    /* the quantized matmul kernels multiply int8 (" x q8 dot", " x q8K dot") */
    return unit && strstr(unit, " x q8") ? pk->r->i8_gops : pk->r->f32_gflops;
}

int insp_row_roof(const insp_row *row, const insp_peaks *pk, insp_roof *o) {
    memset(o, 0, sizeof *o);
    if (!row->has_cost || !(row->total > 0)) return 0;
    double ns = row->total * 1e6;
    o->gflops = row->flops / ns;
    o->gbps = row->bytes / ns;
    o->intensity = row->bytes > 0 ? row->flops / row->bytes : INFINITY;
    if (!pk || !pk->have || (row->flops <= 0 && row->bytes <= 0)) return 1;
    /* a row of several units: the rate at which its flops would run at each
     * unit's peak (per node: flops / peak) */
    o->peak_gflops =
        row->flops > 0 && row->peak_ns > 0 ? row->flops / row->peak_ns : pk->r->f32_gflops;
    double bw = pk->r->mem_read_gbps, ridge = o->peak_gflops / bw;
    o->memory_bound = o->intensity < ridge;
    o->pct = 100 * (o->memory_bound ? o->gbps / bw : o->gflops / o->peak_gflops);
    return 2;
}

/* ---- statistics ---------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* nearest rank */
static double pct_rank(const uint64_t *v, int64_t n, double p) {
    int64_t k = (int64_t)ceil(p * (double)n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return insp_ms(v[k]);
}

/* Sorts v and fills the row's percentiles, mean, min, max, total. */
static void stats(uint64_t *v, int64_t n, insp_row *r) {
    r->calls = n;
    if (!n) return;
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)v[i];
    r->p10 = pct_rank(v, n, 0.10);
    r->p50 = pct_rank(v, n, 0.50);
    r->p90 = pct_rank(v, n, 0.90);
    r->min = insp_ms(v[0]);
    r->max = insp_ms(v[n - 1]);
    r->total = sum / 1e6;
    r->avg = r->total / (double)n;
}

/* ---- building ------------------------------------------------------------------------ */

typedef struct leaf {
    int16_t method, backend;
    int32_t a, b;     /* key: op + unit, or node name */
    int32_t op, unit; /* -2: mixed */
    int64_t n, first; /* its node durations: dur[first .. first + n) */
    int64_t next;     /* the next leaf of its group, -1 */
    double flops, bytes, peak_ns;
} leaf;

typedef struct subop { /* a delegate's ops of one type under one leaf */
    int32_t type;
    int64_t n, next; /* ops; the leaf's next, -1 */
    uint64_t ns, cycles;
} subop;

typedef struct group { /* one method's partitions on one backend */
    int64_t n, first;  /* its partition durations: pdur[first .. first + n) */
    uint64_t part_ns, node_ns, host_ns, delegate_ns;
    double flops, bytes, peak_ns;
    int fallback;
    int64_t first_leaf; /* -1: none */
} group;

static void row_init(insp_row *r, int depth, int kind, const char *name) {
    memset(r, 0, sizeof *r);
    r->depth = depth;
    r->kind = kind;
    r->name = name;
    r->method = r->backend = r->fallback = -1;
    r->p10 = r->p50 = r->p90 = r->avg = r->min = r->max = NAN;
}

static insp_row *add_row(insp_report *r, int64_t *cap) {
    if (r->n_rows == *cap) {
        int64_t c = *cap ? 2 * *cap : 64;
        insp_row *p = realloc(r->rows, sizeof *p * (size_t)c);
        if (!p) return NULL;
        r->rows = p;
        *cap = c;
    }
    return &r->rows[r->n_rows++];
}

/* qsort has no context argument; the report is built on one thread */
static const insp_trace *g_sort_t;
static const leaf *g_sort_leaves;
static const uint64_t *g_sort_tot;

static int cmp_leaf(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    uint64_t tx = g_sort_tot[x], ty = g_sort_tot[y];
    if (tx != ty) return tx > ty ? -1 : 1;
    const leaf *lx = &g_sort_leaves[x], *ly = &g_sort_leaves[y];
    int c = strcmp(g_sort_t->str[lx->a], g_sort_t->str[ly->a]);
    if (c) return c;
    return (lx->b >= 0 ? strcmp(g_sort_t->str[lx->b], g_sort_t->str[ly->b]) : 0);
}

void insp_report_free(insp_report *r) {
    if (!r) return;
    free(r->rows);
    free(r->methods);
    memset(r, 0, sizeof *r);
}

static kiln_status nomem(void) {
    return kiln_error(KILN_ERR_NOMEM, "out of memory building the report");
}

/* open-addressing map from a leaf key to its index */
static uint64_t leaf_hash(int m, int b, int32_t x, int32_t y) {
    uint64_t h = ((uint64_t)(uint16_t)m << 48) ^ ((uint64_t)(uint16_t)b << 32) ^ (uint32_t)x;
    h = h * 0x9e3779b97f4a7c15ull ^ (uint32_t)y;
    return h * 0xbf58476d1ce4e5b9ull;
}

/* What the build works on: the groups with their partition durations, the
 * leaves (one per op + unit, or per node name, of a group) with their node
 * durations, and the scratch of ordering them. */
typedef struct {
    const insp_trace *t;
    const insp_peaks *pk;
    insp_report *r;
    int nb;         /* backends */
    group *groups;  /* [method * nb + backend] */
    uint64_t *pdur; /* partition durations, contiguous per group */
    leaf *leaves;
    int64_t n_leaves, cap_leaves;
    int64_t *map, map_cap;               /* leaf key -> index (-1: free) */
    int64_t *node_leaf;                  /* per node: its leaf, -1 */
    uint64_t *dur;                       /* node durations, contiguous per leaf */
    uint64_t *leaf_tot;                  /* per leaf: its total */
    int64_t *order;                      /* one group's leaves, most time first */
    struct subop *subs;                  /* a delegate's ops per leaf and op type */
    int64_t n_subs, cap_subs, *leaf_sub; /* leaf_sub[leaf]: its first, -1 */
    int *gorder;                         /* one method's backends, most time first */
    int64_t cap_rows;
} builder;

static insp_row *push_row(builder *b) {
    return add_row(b->r, &b->cap_rows);
}

/* Partitions: counts per group, then their durations contiguous per group. */
static void build_partitions(builder *b) {
    const insp_trace *t = b->t;
    int64_t n_groups = (int64_t)t->n_methods * b->nb, acc = 0;
    for (int64_t k = 0; k < t->n_parts; k++) {
        const insp_part *p = &t->parts[k];
        group *g = &b->groups[p->method * b->nb + p->backend];
        g->n++;
        g->part_ns += p->t1 - p->t0;
        g->host_ns += p->host_ns;
        g->delegate_ns += p->delegate_ns;
        g->fallback = p->fallback;
    }
    for (int64_t i = 0; i < n_groups; i++) {
        b->groups[i].first = acc;
        acc += b->groups[i].n;
        b->groups[i].n = 0;
    }
    for (int64_t k = 0; k < t->n_parts; k++) {
        const insp_part *p = &t->parts[k];
        group *g = &b->groups[p->method * b->nb + p->backend];
        b->pdur[g->first + g->n++] = p->t1 - p->t0;
    }
}

/* Methods: the calls' statistics of each method called; mdur is scratch
 * for n_calls durations. */
static void build_methods(builder *b, uint64_t *mdur) {
    const insp_trace *t = b->t;
    insp_report *r = b->r;
    for (int64_t c = 0; c < t->n_calls; c++)
        r->all_ms += insp_ms(t->calls[c].t1 - t->calls[c].t0);
    for (int m = 0; m < t->n_methods; m++) {
        insp_method_stat *s = &r->methods[r->n_methods];
        memset(s, 0, sizeof *s);
        s->method = m;
        s->tokens = -1;
        int64_t n = 0;
        for (int64_t c = 0; c < t->n_calls; c++) {
            const insp_call *k = &t->calls[c];
            if (k->method != m) continue;
            mdur[n++] = k->t1 - k->t0;
            s->failed += !k->ok;
            if (k->tokens >= 0) s->tokens = (s->tokens < 0 ? 0 : s->tokens) + k->tokens;
        }
        if (!n) continue;
        insp_row tmp;
        row_init(&tmp, 0, ROW_METHOD, NULL);
        stats(mdur, n, &tmp);
        s->calls = n;
        s->p10 = tmp.p10, s->p50 = tmp.p50, s->p90 = tmp.p90;
        s->avg = tmp.avg, s->min = tmp.min, s->max = tmp.max, s->total = tmp.total;
        r->n_methods++;
    }
}

/* A fallback node: its time, and its op in "a, b, c" once. */
static void note_fallback(insp_report *r, const char *op, uint64_t d) {
    r->fallback_ms += insp_ms(d);
    r->fallback_nodes++;
    size_t have = strlen(r->fallback_ops), ol = strlen(op);
    int found = 0;
    for (const char *p = r->fallback_ops; (p = strstr(p, op)); p += ol)
        if ((p == r->fallback_ops || p[-1] == ' ') && (p[ol] == ',' || p[ol] == 0)) found = 1;
    if (!found && have + ol + 3 < sizeof r->fallback_ops)
        snprintf(r->fallback_ops + have, sizeof r->fallback_ops - have, "%s%s", have ? ", " : "",
                 op);
}

/* Doubles the leaf map, rehashing the leaves there are. */
static kiln_status grow_map(builder *b) {
    int64_t cap = 2 * b->map_cap;
    int64_t *map = malloc(sizeof *map * (size_t)cap);
    if (!map) return nomem();
    for (int64_t k = 0; k < cap; k++)
        map[k] = -1;
    for (int64_t k = 0; k < b->n_leaves; k++) {
        const leaf *l = &b->leaves[k];
        uint64_t h = leaf_hash(l->method, l->backend, l->a, l->b) & (uint64_t)(cap - 1);
        while (map[h] >= 0)
            h = (h + 1) & (uint64_t)(cap - 1);
        map[h] = k;
    }
    free(b->map);
    b->map = map;
    b->map_cap = cap;
    return KILN_OK;
}

/* The leaf of node n under key (a, b) in group g, made when new; -1 when
 * out of memory. */
static int64_t leaf_of(builder *bd, const insp_node *n, int32_t a, int32_t b, group *g) {
    if (2 * (bd->n_leaves + 1) > bd->map_cap && grow_map(bd)) return -1;
    uint64_t mask = (uint64_t)(bd->map_cap - 1), h = leaf_hash(n->method, n->backend, a, b) & mask;
    for (; bd->map[h] >= 0; h = (h + 1) & mask) {
        const leaf *l = &bd->leaves[bd->map[h]];
        if (l->method == n->method && l->backend == n->backend && l->a == a && l->b == b)
            return bd->map[h];
    }
    if (bd->n_leaves == bd->cap_leaves) {
        int64_t c = bd->cap_leaves ? 2 * bd->cap_leaves : 256;
        leaf *p = realloc(bd->leaves, sizeof *p * (size_t)c);
        if (!p) return -1;
        bd->leaves = p;
        bd->cap_leaves = c;
    }
    int64_t li = bd->n_leaves++;
    bd->leaves[li] =
        (leaf){n->method, n->backend, a, b, n->op, n->unit, 0, 0, g->first_leaf, 0, 0, 0};
    bd->map[h] = li;
    g->first_leaf = li;
    return li;
}

/* Nodes: into groups and (by op or node) leaves. */
static kiln_status build_nodes(builder *b) {
    const insp_trace *t = b->t;
    int by = b->r->by;
    for (int64_t i = 0; i < t->n_nodes; i++) {
        const insp_node *n = &t->nodes[i];
        uint64_t d = n->t1 - n->t0;
        double peak = insp_unit_peak(t->str[n->unit], b->pk);
        double pns = peak > 0 ? n->flops / peak : 0;
        group *g = &b->groups[n->method * b->nb + n->backend];
        g->node_ns += d;
        g->flops += n->flops;
        g->bytes += n->bytes;
        g->peak_ns += pns;
        if (n->fallback) note_fallback(b->r, t->str[n->op], d);
        b->node_leaf[i] = -1;
        if (by != BY_OP && by != BY_NODE) continue;
        int64_t li = leaf_of(b, n, by == BY_OP ? n->op : n->name, by == BY_OP ? n->unit : -1, g);
        if (li < 0) return nomem();
        leaf *l = &b->leaves[li];
        if (l->op != n->op) l->op = -2;
        if (l->unit != n->unit) l->unit = -2;
        l->n++;
        l->flops += n->flops;
        l->bytes += n->bytes;
        l->peak_ns += pns;
        b->node_leaf[i] = li;
    }
    return KILN_OK;
}

/* A delegate's ops, per leaf of the node event holding each, per op type. */
static kiln_status build_subops(builder *b) {
    const insp_trace *t = b->t;
    if (!t->n_ops || !b->n_leaves) return KILN_OK;
    if (!(b->leaf_sub = malloc(sizeof *b->leaf_sub * (size_t)b->n_leaves))) return nomem();
    for (int64_t k = 0; k < b->n_leaves; k++)
        b->leaf_sub[k] = -1;
    for (int64_t i = 0; i < t->n_ops; i++) {
        const insp_op *x = &t->ops[i];
        int64_t li = x->node_ev >= 0 ? b->node_leaf[x->node_ev] : -1;
        if (li < 0) continue;
        int64_t k = b->leaf_sub[li];
        while (k >= 0 && b->subs[k].type != x->type)
            k = b->subs[k].next;
        if (k < 0) {
            if (b->n_subs == b->cap_subs) {
                int64_t c = b->cap_subs ? 2 * b->cap_subs : 256;
                subop *p = realloc(b->subs, sizeof *p * (size_t)c);
                if (!p) return nomem();
                b->subs = p;
                b->cap_subs = c;
            }
            k = b->n_subs++;
            b->subs[k] = (subop){x->type, 0, b->leaf_sub[li], 0, 0};
            b->leaf_sub[li] = k;
        }
        b->subs[k].n++;
        b->subs[k].ns += x->t1 - x->t0;
        b->subs[k].cycles += x->cycles;
    }
    return KILN_OK;
}

static int cmp_subop(const void *a, const void *b) {
    const subop *x = *(const subop *const *)a, *y = *(const subop *const *)b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : x->type - y->type;
}

/* Under leaf li's row (leaf_ms): its delegate ops by type, most time first;
 * they share the leaf's time (node times are their ops' sums). */
static kiln_status subop_rows(builder *b, int64_t li, int m, int bk, double leaf_ms) {
    if (!b->leaf_sub) return KILN_OK;
    const subop *list[64];
    int n = 0;
    for (int64_t k = b->leaf_sub[li]; k >= 0 && n < 64; k = b->subs[k].next)
        list[n++] = &b->subs[k];
    if (n > 1) qsort(list, (size_t)n, sizeof *list, cmp_subop);
    for (int i = 0; i < n; i++) {
        insp_row *row = push_row(b);
        if (!row) return nomem();
        const char *type = b->t->str[list[i]->type];
        row_init(row, 3, ROW_DELEGATE_OP, *type ? type : "(untyped)");
        row->method = m;
        row->backend = bk;
        row->calls = list[i]->n;
        row->total = insp_ms(list[i]->ns);
        row->avg = row->total / (double)list[i]->n;
        row->pct = leaf_ms > 0 ? 100 * row->total / leaf_ms : 0;
    }
    return KILN_OK;
}

/* Durations of each leaf, contiguous, and their totals. */
static kiln_status leaf_durations(builder *b) {
    if (!b->n_leaves) return KILN_OK;
    if (!(b->leaf_tot = calloc((size_t)b->n_leaves, sizeof *b->leaf_tot)) ||
        !(b->order = malloc(sizeof *b->order * (size_t)b->n_leaves)))
        return nomem();
    int64_t acc = 0;
    for (int64_t k = 0; k < b->n_leaves; k++) {
        b->leaves[k].first = acc;
        acc += b->leaves[k].n;
        b->leaves[k].n = 0;
    }
    for (int64_t i = 0; i < b->t->n_nodes; i++) {
        leaf *l = &b->leaves[b->node_leaf[i]];
        uint64_t d = b->t->nodes[i].t1 - b->t->nodes[i].t0;
        b->dur[l->first + l->n++] = d;
        b->leaf_tot[b->node_leaf[i]] += d;
    }
    return KILN_OK;
}

/* The leaf rows of group g (method m, backend bk) under a partition row of
 * group_ms: at most `top`, the rest in one "(other rows)" row. */
static kiln_status leaf_rows(builder *b, int m, int bk, const group *g, double group_ms) {
    const insp_trace *t = b->t;
    int by = b->r->by, top = b->r->top;
    int64_t nl = 0;
    for (int64_t k = g->first_leaf; k >= 0; k = b->leaves[k].next)
        b->order[nl++] = k;
    g_sort_t = t;
    g_sort_leaves = b->leaves;
    g_sort_tot = b->leaf_tot;
    if (nl > 1) qsort(b->order, (size_t)nl, sizeof *b->order, cmp_leaf);
    insp_row rest, *row;
    row_init(&rest, 2, ROW_REST, "(other rows)");
    rest.method = m;
    rest.backend = bk;
    rest.fallback = g->fallback;
    rest.has_cost = 1;
    rest.total = 0;
    for (int64_t k = 0; k < nl; k++) {
        const leaf *l = &b->leaves[b->order[k]];
        if (top > 0 && k >= top) { /* the rest in one row, so shares still add up */
            rest.calls += l->n;
            rest.total += insp_ms(b->leaf_tot[b->order[k]]);
            rest.flops += l->flops;
            rest.bytes += l->bytes;
            rest.peak_ns += l->peak_ns;
            continue;
        }
        if (!(row = push_row(b))) return nomem();
        row_init(row, 2, by == BY_OP ? ROW_OP : ROW_NODE, t->str[l->a]);
        row->method = m;
        row->backend = bk;
        row->fallback = g->fallback;
        row->op = l->op >= 0 ? t->str[l->op] : "(mixed)";
        row->unit = l->unit >= 0 ? t->str[l->unit] : "(mixed)";
        stats(b->dur + l->first, l->n, row);
        row->has_cost = 1;
        row->flops = l->flops;
        row->bytes = l->bytes;
        row->peak_ns = l->peak_ns;
        row->pct = group_ms > 0 ? 100 * row->total / group_ms : 0;
        kiln_status st = subop_rows(b, b->order[k], m, bk, row->total);
        if (st) return st;
    }
    if (rest.calls) {
        rest.pct = group_ms > 0 ? 100 * rest.total / group_ms : 0;
        rest.avg = rest.total / (double)rest.calls;
        if (!(row = push_row(b))) return nomem();
        *row = rest;
    }
    return KILN_OK;
}

/* The rows of method s's partitions on backend bk: the partition row, its
 * leaves and its "(between nodes)" row; *parts_ms grows by its time. */
static kiln_status group_rows(builder *b, const insp_method_stat *s, int bk, double *parts_ms) {
    int m = s->method;
    const group *g = &b->groups[m * b->nb + bk];
    insp_row *row = push_row(b);
    if (!row) return nomem();
    row_init(row, 1, ROW_PARTITION, b->t->backends[bk]);
    row->method = m;
    row->backend = bk;
    row->fallback = g->fallback;
    stats(b->pdur + g->first, g->n, row);
    row->has_cost = 1;
    row->flops = g->flops;
    row->bytes = g->bytes;
    row->peak_ns = g->peak_ns;
    row->pct = s->total > 0 ? 100 * row->total / s->total : 0;
    *parts_ms += row->total;
    if (b->r->by == BY_BACKEND) return KILN_OK;
    double group_ms = row->total;
    kiln_status st = leaf_rows(b, m, bk, g, group_ms);
    if (st) return st;
    /* A delegate's host work (binding, copies, cache writes) is its own row;
     * the rest of a partition without node events is the accelerator's; in
     * a profiled delegate's, whose node times apportion its own execute
     * time, what lies outside its ops (QNN's input and output ops, the call
     * around them, reading the profile). */
    if (g->host_ns) {
        if (!(row = push_row(b))) return nomem();
        row_init(row, 2, ROW_EXECUTOR, "(host: bind, copy, cache)");
        row->method = m;
        row->backend = bk;
        row->total = insp_ms(g->host_ns);
        row->pct = group_ms > 0 ? 100 * row->total / group_ms : 0;
    }
    if (!(row = push_row(b))) return nomem();
    row_init(row, 2, ROW_EXECUTOR,
             g->delegate_ns              ? "(in the delegate, outside its ops)"
             : g->node_ns || !g->host_ns ? "(between nodes)"
                                         : "(in the delegate)");
    row->method = m;
    row->backend = bk;
    row->total = group_ms - (double)g->node_ns / 1e6 - insp_ms(g->host_ns);
    if (row->total < 0) row->total = 0;
    row->pct = group_ms > 0 ? 100 * row->total / group_ms : 0;
    return KILN_OK;
}

/* The rows of method mi: its row, then (unless by method) its backends,
 * most time first, and its "(executor)" row. */
static kiln_status method_rows(builder *b, int mi) {
    insp_method_stat *s = &b->r->methods[mi];
    int m = s->method, nb = b->nb;
    insp_row *row = push_row(b);
    if (!row) return nomem();
    row_init(row, 0, ROW_METHOD, b->t->methods[m]);
    row->method = m;
    row->calls = s->calls;
    row->p10 = s->p10, row->p50 = s->p50, row->p90 = s->p90;
    row->avg = s->avg, row->min = s->min, row->max = s->max, row->total = s->total;
    row->pct = b->r->all_ms > 0 ? 100 * s->total / b->r->all_ms : 0;
    row->has_cost = 1;
    for (int k = 0; k < nb; k++) {
        const group *g = &b->groups[m * nb + k];
        row->flops += g->flops;
        row->bytes += g->bytes;
        row->peak_ns += g->peak_ns;
    }
    s->flops = row->flops;
    s->bytes = row->bytes;
    if (b->r->by == BY_METHOD) return KILN_OK;

    const group *gm = &b->groups[m * nb];
    int ng = 0;
    for (int k = 0; k < nb; k++)
        if (gm[k].n) b->gorder[ng++] = k;
    for (int i = 1; i < ng; i++) /* insertion sort: a few backends */
        for (int j = i; j > 0 && gm[b->gorder[j]].part_ns > gm[b->gorder[j - 1]].part_ns; j--) {
            int x = b->gorder[j];
            b->gorder[j] = b->gorder[j - 1];
            b->gorder[j - 1] = x;
        }
    double parts_ms = 0;
    for (int gi = 0; gi < ng; gi++) {
        kiln_status st = group_rows(b, s, b->gorder[gi], &parts_ms);
        if (st) return st;
    }
    if (!(row = push_row(b))) return nomem();
    row_init(row, 1, ROW_EXECUTOR, "(executor)");
    row->method = m;
    row->total = s->total - parts_ms;
    if (row->total < 0) row->total = 0;
    row->pct = s->total > 0 ? 100 * row->total / s->total : 0;
    return KILN_OK;
}

kiln_status insp_report_build(const insp_trace *t, const insp_peaks *pk, int by, int top,
                              insp_report *r) {
    memset(r, 0, sizeof *r);
    r->t = t;
    r->by = by;
    r->top = top;
    r->peaks = pk;
    kiln_status st = KILN_OK;
    int nm = t->n_methods, nb = t->n_backends;
    builder b = {.t = t, .pk = pk, .r = r, .nb = nb, .map_cap = 1024};
    b.gorder = malloc(sizeof *b.gorder * (size_t)(nb + 1));
    b.groups = calloc((size_t)nm * (size_t)(nb ? nb : 1), sizeof *b.groups);
    r->methods = calloc(nm ? (size_t)nm : 1, sizeof *r->methods);
    uint64_t *mdur = malloc(sizeof *mdur * (size_t)(t->n_calls + 1));
    b.pdur = malloc(sizeof *b.pdur * (size_t)(t->n_parts + 1));
    b.node_leaf = malloc(sizeof *b.node_leaf * (size_t)(t->n_nodes + 1));
    b.dur = malloc(sizeof *b.dur * (size_t)(t->n_nodes + 1));
    b.map = malloc(sizeof *b.map * (size_t)b.map_cap);
    if (!b.groups || !r->methods || !mdur || !b.pdur || !b.node_leaf || !b.dur || !b.map ||
        !b.gorder) {
        st = nomem();
        goto done;
    }
    for (int64_t i = 0; i < b.map_cap; i++)
        b.map[i] = -1;
    for (int64_t i = 0; i < (int64_t)nm * nb; i++)
        b.groups[i].first_leaf = -1;

    build_partitions(&b);
    build_methods(&b, mdur);
    if ((st = build_nodes(&b)) || (st = leaf_durations(&b)) || (st = build_subops(&b))) goto done;
    for (int mi = 0; mi < r->n_methods && !st; mi++)
        st = method_rows(&b, mi);

done:
    free(b.groups);
    free(mdur);
    free(b.pdur);
    free(b.node_leaf);
    free(b.dur);
    free(b.map);
    free(b.leaves);
    free(b.leaf_tot);
    free(b.order);
    free(b.subs);
    free(b.leaf_sub);
    free(b.gorder);
    if (st) insp_report_free(r);
    return st;
}
