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
    static const char *const names[] = {"method", "partition", "op", "node", "executor", "rest"};
    return kind >= 0 && kind <= ROW_REST ? names[kind] : "?";
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

typedef struct group { /* one method's partitions on one backend */
    int64_t n, first;  /* its partition durations: pdur[first .. first + n) */
    uint64_t part_ns, node_ns;
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

kiln_status insp_report_build(const insp_trace *t, const insp_peaks *pk, int by, int top,
                              insp_report *r) {
    memset(r, 0, sizeof *r);
    r->t = t;
    r->by = by;
    r->top = top;
    r->peaks = pk;
    kiln_status st = KILN_OK;
    int nm = t->n_methods, nb = t->n_backends;
    int64_t cap_rows = 0, n_leaves = 0, cap_leaves = 0, map_cap = 1024;
    leaf *leaves = NULL;
    int64_t *node_leaf = NULL, *map = NULL, *order = NULL;
    uint64_t *dur = NULL, *leaf_tot = NULL;
    int *gorder = malloc(sizeof *gorder * (size_t)(nb + 1));
    group *groups = calloc((size_t)nm * (size_t)(nb ? nb : 1), sizeof *groups);
    r->methods = calloc(nm ? (size_t)nm : 1, sizeof *r->methods);
    uint64_t *mdur = malloc(sizeof *mdur * (size_t)(t->n_calls + 1));
    uint64_t *pdur = malloc(sizeof *pdur * (size_t)(t->n_parts + 1));
    node_leaf = malloc(sizeof *node_leaf * (size_t)(t->n_nodes + 1));
    dur = malloc(sizeof *dur * (size_t)(t->n_nodes + 1));
    map = malloc(sizeof *map * (size_t)map_cap);
    if (!groups || !r->methods || !mdur || !pdur || !node_leaf || !dur || !map || !gorder) {
        st = nomem();
        goto done;
    }
    for (int64_t i = 0; i < map_cap; i++)
        map[i] = -1;
    for (int64_t i = 0; i < (int64_t)nm * nb; i++)
        groups[i].first_leaf = -1;

    /* partitions: counts per group, then their durations contiguous per group */
    for (int64_t k = 0; k < t->n_parts; k++) {
        const insp_part *p = &t->parts[k];
        group *g = &groups[p->method * nb + p->backend];
        g->n++;
        g->part_ns += p->t1 - p->t0;
        g->fallback = p->fallback;
    }
    int64_t acc_p = 0;
    for (int64_t i = 0; i < (int64_t)nm * nb; i++) {
        groups[i].first = acc_p;
        acc_p += groups[i].n;
        groups[i].n = 0;
    }
    for (int64_t k = 0; k < t->n_parts; k++) {
        const insp_part *p = &t->parts[k];
        group *g = &groups[p->method * nb + p->backend];
        pdur[g->first + g->n++] = p->t1 - p->t0;
    }

    /* methods */
    for (int64_t c = 0; c < t->n_calls; c++)
        r->all_ms += insp_ms(t->calls[c].t1 - t->calls[c].t0);
    for (int m = 0; m < nm; m++) {
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

    /* nodes: into groups and leaves */
    for (int64_t i = 0; i < t->n_nodes; i++) {
        const insp_node *n = &t->nodes[i];
        uint64_t d = n->t1 - n->t0;
        double peak = insp_unit_peak(t->str[n->unit], pk);
        double pns = peak > 0 ? n->flops / peak : 0;
        group *g = &groups[n->method * nb + n->backend];
        g->node_ns += d;
        g->flops += n->flops;
        g->bytes += n->bytes;
        g->peak_ns += pns;
        if (n->fallback) {
            r->fallback_ms += insp_ms(d);
            r->fallback_nodes++;
            const char *op = t->str[n->op];
            size_t have = strlen(r->fallback_ops), ol = strlen(op);
            int found = 0;
            for (const char *p = r->fallback_ops; (p = strstr(p, op)); p += ol)
                if ((p == r->fallback_ops || p[-1] == ' ') && (p[ol] == ',' || p[ol] == 0))
                    found = 1;
            if (!found && have + ol + 3 < sizeof r->fallback_ops)
                snprintf(r->fallback_ops + have, sizeof r->fallback_ops - have, "%s%s",
                         have ? ", " : "", op);
        }
        node_leaf[i] = -1;
        if (by != BY_OP && by != BY_NODE) continue;
        int32_t a = by == BY_OP ? n->op : n->name, b = by == BY_OP ? n->unit : -1;
        if (2 * (n_leaves + 1) > map_cap) { /* grow the map */
            int64_t *nm2 = malloc(sizeof *nm2 * (size_t)(2 * map_cap));
            if (!nm2) {
                st = nomem();
                goto done;
            }
            map_cap *= 2;
            for (int64_t k = 0; k < map_cap; k++)
                nm2[k] = -1;
            for (int64_t k = 0; k < n_leaves; k++) {
                const leaf *l = &leaves[k];
                uint64_t h = leaf_hash(l->method, l->backend, l->a, l->b) & (uint64_t)(map_cap - 1);
                while (nm2[h] >= 0)
                    h = (h + 1) & (uint64_t)(map_cap - 1);
                nm2[h] = k;
            }
            free(map);
            map = nm2;
        }
        uint64_t h = leaf_hash(n->method, n->backend, a, b) & (uint64_t)(map_cap - 1);
        int64_t li = -1;
        for (; map[h] >= 0; h = (h + 1) & (uint64_t)(map_cap - 1)) {
            const leaf *l = &leaves[map[h]];
            if (l->method == n->method && l->backend == n->backend && l->a == a && l->b == b) {
                li = map[h];
                break;
            }
        }
        if (li < 0) {
            if (n_leaves == cap_leaves) {
                int64_t c = cap_leaves ? 2 * cap_leaves : 256;
                leaf *p = realloc(leaves, sizeof *p * (size_t)c);
                if (!p) {
                    st = nomem();
                    goto done;
                }
                leaves = p;
                cap_leaves = c;
            }
            li = n_leaves++;
            leaves[li] =
                (leaf){n->method, n->backend, a, b, n->op, n->unit, 0, 0, g->first_leaf, 0, 0, 0};
            map[h] = li;
            g->first_leaf = li;
        }
        leaf *l = &leaves[li];
        if (l->op != n->op) l->op = -2;
        if (l->unit != n->unit) l->unit = -2;
        l->n++;
        l->flops += n->flops;
        l->bytes += n->bytes;
        l->peak_ns += pns;
        node_leaf[i] = li;
    }
    /* durations of each leaf, contiguous */
    if (n_leaves) {
        if (!(leaf_tot = calloc((size_t)n_leaves, sizeof *leaf_tot)) ||
            !(order = malloc(sizeof *order * (size_t)n_leaves))) {
            st = nomem();
            goto done;
        }
        int64_t acc = 0;
        for (int64_t k = 0; k < n_leaves; k++) {
            leaves[k].first = acc;
            acc += leaves[k].n;
            leaves[k].n = 0;
        }
        for (int64_t i = 0; i < t->n_nodes; i++) {
            leaf *l = &leaves[node_leaf[i]];
            uint64_t d = t->nodes[i].t1 - t->nodes[i].t0;
            dur[l->first + l->n++] = d;
            leaf_tot[node_leaf[i]] += d;
        }
    }

    /* rows */
    for (int mi = 0; mi < r->n_methods; mi++) {
        const insp_method_stat *s = &r->methods[mi];
        int m = s->method;
        insp_row *row = add_row(r, &cap_rows);
        if (!row) {
            st = nomem();
            goto done;
        }
        row_init(row, 0, ROW_METHOD, t->methods[m]);
        row->method = m;
        row->calls = s->calls;
        row->p10 = s->p10, row->p50 = s->p50, row->p90 = s->p90;
        row->avg = s->avg, row->min = s->min, row->max = s->max, row->total = s->total;
        row->pct = r->all_ms > 0 ? 100 * s->total / r->all_ms : 0;
        row->has_cost = 1;
        for (int b = 0; b < nb; b++) {
            const group *g = &groups[m * nb + b];
            row->flops += g->flops;
            row->bytes += g->bytes;
            row->peak_ns += g->peak_ns;
        }
        r->methods[mi].flops = row->flops;
        r->methods[mi].bytes = row->bytes;
        if (by == BY_METHOD) continue;

        /* this method's backends, most time first */
        int ng = 0;
        for (int b = 0; b < nb; b++)
            if (groups[m * nb + b].n) gorder[ng++] = b;
        for (int i = 1; i < ng; i++) /* insertion sort: a few backends */
            for (int j = i; j > 0 && groups[m * nb + gorder[j]].part_ns >
                                         groups[m * nb + gorder[j - 1]].part_ns;
                 j--) {
                int x = gorder[j];
                gorder[j] = gorder[j - 1];
                gorder[j - 1] = x;
            }
        double parts_ms = 0;
        for (int gi = 0; gi < ng; gi++) {
            int b = gorder[gi];
            const group *g = &groups[m * nb + b];
            row = add_row(r, &cap_rows);
            if (!row) {
                st = nomem();
                goto done;
            }
            row_init(row, 1, ROW_PARTITION, t->backends[b]);
            row->method = m;
            row->backend = b;
            row->fallback = g->fallback;
            stats(pdur + g->first, g->n, row);
            row->has_cost = 1;
            row->flops = g->flops;
            row->bytes = g->bytes;
            row->peak_ns = g->peak_ns;
            row->pct = s->total > 0 ? 100 * row->total / s->total : 0;
            parts_ms += row->total;
            if (by == BY_BACKEND) continue;
            double group_ms = row->total;
            int64_t nl = 0;
            for (int64_t k = g->first_leaf; k >= 0; k = leaves[k].next)
                order[nl++] = k;
            g_sort_t = t;
            g_sort_leaves = leaves;
            g_sort_tot = leaf_tot;
            if (nl > 1) qsort(order, (size_t)nl, sizeof *order, cmp_leaf);
            insp_row rest;
            row_init(&rest, 2, ROW_REST, "(other rows)");
            rest.method = m;
            rest.backend = b;
            rest.fallback = g->fallback;
            rest.has_cost = 1;
            rest.total = 0;
            for (int64_t k = 0; k < nl; k++) {
                const leaf *l = &leaves[order[k]];
                if (top > 0 && k >= top) { /* the rest in one row, so shares still add up */
                    rest.calls += l->n;
                    rest.total += insp_ms(leaf_tot[order[k]]);
                    rest.flops += l->flops;
                    rest.bytes += l->bytes;
                    rest.peak_ns += l->peak_ns;
                    continue;
                }
                if (!(row = add_row(r, &cap_rows))) {
                    st = nomem();
                    goto done;
                }
                row_init(row, 2, by == BY_OP ? ROW_OP : ROW_NODE, t->str[l->a]);
                row->method = m;
                row->backend = b;
                row->fallback = g->fallback;
                row->op = l->op >= 0 ? t->str[l->op] : "(mixed)";
                row->unit = l->unit >= 0 ? t->str[l->unit] : "(mixed)";
                stats(dur + l->first, l->n, row);
                row->has_cost = 1;
                row->flops = l->flops;
                row->bytes = l->bytes;
                row->peak_ns = l->peak_ns;
                row->pct = group_ms > 0 ? 100 * row->total / group_ms : 0;
            }
            if (rest.calls) {
                rest.pct = group_ms > 0 ? 100 * rest.total / group_ms : 0;
                rest.avg = rest.total / (double)rest.calls;
                if (!(row = add_row(r, &cap_rows))) {
                    st = nomem();
                    goto done;
                }
                *row = rest;
            }
            if (!(row = add_row(r, &cap_rows))) {
                st = nomem();
                goto done;
            }
            row_init(row, 2, ROW_EXECUTOR, "(between nodes)");
            row->method = m;
            row->backend = b;
            row->total = group_ms - (double)g->node_ns / 1e6;
            if (row->total < 0) row->total = 0;
            row->pct = group_ms > 0 ? 100 * row->total / group_ms : 0;
        }
        if (!(row = add_row(r, &cap_rows))) {
            st = nomem();
            goto done;
        }
        row_init(row, 1, ROW_EXECUTOR, "(executor)");
        row->method = m;
        row->total = s->total - parts_ms;
        if (row->total < 0) row->total = 0;
        row->pct = s->total > 0 ? 100 * row->total / s->total : 0;
    }

done:
    free(groups);
    free(mdur);
    free(pdur);
    free(node_leaf);
    free(dur);
    free(map);
    free(leaves);
    free(leaf_tot);
    free(order);
    free(gorder);
    if (st) insp_report_free(r);
    return st;
}
