/* check.c: `kiln compile --check`. Runs sample calls of the program just
 * written on its own backends and on ref (the same file opened with every
 * node on ref) and reports, per partition (a maximal run of consecutive nodes
 * of one method on one backend, as the trace derives them), how far the
 * backend is from ref and how much faster it is. The calls, each node's
 * own error and time come from the debugging engine (devtools/debugger.h,
 * which `kiln debug` reports on too); this file sums them per partition,
 * logs one line each, and fails the compile or moves failing partitions.
 *
 * Accuracy is each node's OWN error: while the ref session runs, every node
 * of a checked partition is also run alone on its compiled backend, given
 * exactly ref's inputs (kiln_program_exec_node, as `kiln debug` does), and
 * its output is compared with ref's (cosine similarity and relative error
 * max|a - r| / max|r|, in double). Error carried in from earlier partitions
 * does not count against a partition, so the node named is the one that
 * computes wrongly. A partition's error is its worst node's (lowest cosine)
 * over all the sample calls. Partitions already on ref are not checked.
 *
 * A delegate's nodes run alone through its exec_alone (QNN lowers each into
 * a graph of its own, the same lowering as the partition's), so they are
 * judged the same way, at the cosine the delegate asks for its precision
 * (kiln_backend.check_cos: QNN's fp16 graphs closer than its int8 ones).
 * What leaves a delegate's partition is also shown: the program as
 * compiled runs in lockstep with ref, each with its own history, and its
 * partition outputs are compared with ref's, error carried in included. A
 * delegate without exec_alone is judged by that alone.
 *
 * --check=fallback moves each failing node (not its whole partition) to the
 * next backend in the list that supports it, else to ref; the kv_stores an
 * attention reads move together (a delegate's graph writes all of an
 * attention's cache rows or none). The caller partitions and prepares
 * again, which for QNN builds its context anew.
 *
 * Speed: every node is timed through the node observer (from the end of its
 * phase-0 call to its phase-1 call; the own-error runs are outside it); a
 * delegate's partition, from the event before it to its first output. The
 * program as compiled runs the sample calls once to warm up, then up to
 * CHECK_REPS times (fewer past CHECK_BUDGET_MS); the median per call is
 * reported. Ref runs them once, in the accuracy pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "compiler/check.h"
#include "devtools/debugger.h"
#include "runtime/introspect.h"

#define CHECK_REPS 5         /* timed runs of the program as compiled */
#define CHECK_BUDGET_MS 2000 /* ... unless they take longer than this */

typedef struct {
    int method, first, last; /* nodes first..last of the method */
    int backend;             /* index into the module's backend list */
    int checked;             /* not on ref */
    int delegate;            /* on a backend that runs whole partitions */
    int by_carried;          /* a delegate without exec_alone: judged by what leaves it */
    double need;             /* the cosine it must reach */
    int worst;               /* the node with the lowest cosine, -1 = none compared */
    double cos, rel;         /* the worst node's own error (by_carried: what leaves it) */
    int left;                /* a delegate: the output leaving it with the lowest cosine */
    double left_cos, left_rel;
    double acc;    /* this run's time, ms */
    double ref_ms; /* per call on ref */
    double *be_ms; /* per timed run: per call on the backend */
    int failed;
} part;

typedef struct {
    const kiln_compile_options *o;
    kiln_debugger *dbg;     /* the program as compiled and on ref */
    const kiln_module *mod; /* the program's module */
    int *node_base;         /* per method: index of its node 0 in part_of */
    int *part_of;           /* per node of every method: its partition */
    double *node_cos;       /* per node: its lowest own cosine (NaN: a failure; 2: none) */
    part *parts;
    int n_parts;
    double *be_ms;         /* n_parts x CHECK_REPS */
    int pre;               /* the prefill method */
    int calls[2];          /* this run's calls of prefill and decode */
    kiln_debug_side timed; /* the side whose node times count */
    double last_ms;        /* the timed side's last event */
    int done, total;       /* progress */
} checker;

/* ---- the sample calls --------------------------------------------------------------------- */

static part *part_at(checker *c, int method, int node) {
    return &c->parts[c->part_of[c->node_base[method] + node]];
}

/* Keeps comparison q of node `index` when it is worse than (*worst, *cos,
 * *rel): the lowest cosine, among equal ones the largest relative error; NaN
 * (the shapes differ or a value is not finite, which fails any threshold)
 * is the worst. Returns q's cosine, or 2 when q was not compared. */
static double keep_worst(const kiln_debug_cmp *q, int index, int *worst, double *cos, double *rel) {
    if (!q->valid) return 2;
    double c = q->mismatch ? NAN : q->v.cos, r = q->mismatch ? NAN : q->v.rel;
    if (*worst < 0 || (!isnan(*cos) && (isnan(c) || c < *cos || (c == *cos && r > *rel)))) {
        *worst = index;
        *cos = c;
        *rel = r;
    }
    return c;
}

/* Every node's time; on ref, a checked node's own error (and what leaves a
 * delegate). */
static kiln_status on_node(void *user, const kiln_debug_node *e) {
    checker *c = user;
    part *pt = part_at(c, e->method, e->index);
    if (e->side == c->timed) {
        double now = kiln_now_ms();
        pt->acc += pt->delegate && e->side == KILN_DEBUG_BACKEND ? now - c->last_ms : e->ms;
        c->last_ms = now;
    }
    if (e->side != KILN_DEBUG_REFERENCE || !pt->checked) return KILN_OK;
    if (pt->delegate) keep_worst(&e->carried, e->index, &pt->left, &pt->left_cos, &pt->left_rel);
    if (pt->by_carried) {
        keep_worst(&e->carried, e->index, &pt->worst, &pt->cos, &pt->rel);
        return KILN_OK;
    }
    if (e->own_status)
        return kiln_error(e->own_status, "node '%s' alone on its backend: %s", e->node->name,
                          e->own_error);
    double cos = keep_worst(&e->own, e->index, &pt->worst, &pt->cos, &pt->rel);
    double *nc = &c->node_cos[c->node_base[e->method] + e->index];
    if (!isnan(*nc) && (isnan(cos) || cos < *nc)) *nc = cos;
    return KILN_OK;
}

static kiln_status on_call(void *user, kiln_debug_side side, int method) {
    checker *c = user;
    const kiln_compile_options *o = c->o;
    c->last_ms = kiln_now_ms();
    if (side != c->timed) return KILN_OK; /* the program beside ref: not a call of this run */
    c->calls[method == c->pre ? 0 : 1]++;
    c->done++;
    if (o->progress &&
        o->progress(o->progress_user, "check", (uint64_t)c->done, (uint64_t)c->total))
        return kiln_error(KILN_ERR_CANCELLED, "check: cancelled");
    return KILN_OK;
}

/* The sample calls, from an empty cache: on ref (timed) with each checked
 * node's own error, and the program as compiled beside it when a delegate
 * is checked; or on the program as compiled, timed, alone. */
static kiln_status run_calls(checker *c, unsigned run) {
    kiln_debug_hooks h = {run, on_node, on_call, c};
    c->timed = run & KILN_DEBUG_RUN_REFERENCE ? KILN_DEBUG_REFERENCE : KILN_DEBUG_BACKEND;
    c->last_ms = kiln_now_ms();
    c->calls[0] = c->calls[1] = 0;
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].acc = 0;
    return kiln_debugger_run_samples(c->dbg, &h);
}

/* The time per call of the run just made. */
static double per_call(const checker *c, const part *p) {
    int calls = c->calls[p->method == c->pre ? 0 : 1];
    return calls ? p->acc / calls : 0;
}

/* ---- partitions --------------------------------------------------------------------------- */

static kiln_status find_parts(checker *c, double threshold, int *n_delegate) {
    const kiln_module *m = c->mod;
    *n_delegate = 0;
    int n_nodes = 0, ref = -1;
    for (int b = 0; b < m->n_backends; b++)
        if (!strcmp(m->backends[b], "ref")) ref = b;
    if (!(c->node_base = kiln_calloc((size_t)m->n_methods + 1, sizeof *c->node_base)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        c->node_base[k] = n_nodes;
        n_nodes += m->methods[k].n_nodes;
    }
    if (!(c->part_of = kiln_calloc((size_t)n_nodes + 1, sizeof *c->part_of)) ||
        !(c->parts = kiln_calloc((size_t)n_nodes + 1, sizeof *c->parts)) ||
        !(c->node_cos = kiln_calloc((size_t)n_nodes + 1, sizeof *c->node_cos)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_nodes; i++)
        c->node_cos[i] = 2;
    for (int k = 0; k < m->n_methods; k++) { /* the program's own partitions */
        const kiln_graph *g = &m->methods[k];
        for (int j = 0; j < g->n_parts; j++) {
            const kiln_partition *gp = &g->parts[j];
            part *p = &c->parts[c->n_parts++];
            p->method = k;
            p->first = gp->first;
            p->last = gp->first + gp->n_nodes - 1;
            p->backend = gp->backend;
            const kiln_backend *be = kiln_backend_find(m->backends[gp->backend]);
            p->delegate = be && !be->exec;
            p->by_carried = p->delegate && !be->exec_alone;
            p->checked = p->backend != ref;
            p->need = threshold;
            if (p->delegate && !c->o->check_threshold && be->check_cos) p->need = be->check_cos(m);
            *n_delegate += p->delegate;
            p->worst = p->left = -1;
            p->cos = p->rel = p->left_cos = p->left_rel = NAN;
            for (int i = p->first; i <= p->last; i++)
                c->part_of[c->node_base[k] + i] = c->n_parts - 1;
        }
    }
    if (!(c->be_ms = kiln_calloc((size_t)c->n_parts * CHECK_REPS + 1, sizeof *c->be_ms)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].be_ms = &c->be_ms[(size_t)k * CHECK_REPS];
    return KILN_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the check ---------------------------------------------------------------------------- */

static void log_line(const kiln_compile_options *o, const char *line) {
    if (o->log) o->log(o->log_user, line);
}

/* One line per partition. */
static void report(const checker *c, const part *p, int reps, int fallback) {
    const kiln_module *m = c->mod;
    const kiln_graph *g = &m->methods[p->method];
    char line[768], head[200];
    snprintf(head, sizeof head, "check: %s #%d %s, nodes %d..%d (%d)", g->name,
             (int)(p - c->parts) - c->part_of[c->node_base[p->method]], m->backends[p->backend],
             p->first, p->last, p->last - p->first + 1);
    if (!p->checked) {
        snprintf(line, sizeof line, "%s: ref, not checked (%.3f ms)", head, p->ref_ms);
        log_line(c->o, line);
        return;
    }
    double med[CHECK_REPS];
    memcpy(med, p->be_ms, (size_t)reps * sizeof *med);
    qsort(med, (size_t)reps, sizeof *med, cmp_double);
    double be_ms = reps ? med[reps / 2] : 0;
    char err[400], left[200] = "";
    if (p->delegate && !p->by_carried && p->left >= 0)
        snprintf(left, sizeof left,
                 "; what leaves it (error carried in included): worst %s cos "
                 "%.6f rel %.2e",
                 g->nodes[p->left].name, p->left_cos, p->left_rel);
    if (p->worst < 0)
        snprintf(err, sizeof err, "no output compared");
    else
        snprintf(err, sizeof err, "%sworst %s cos %.6f rel %.2e%s",
                 p->by_carried ? "what leaves it (error carried in included): " : "",
                 g->nodes[p->worst].name, p->cos, p->rel, left);
    char need[48] = "";
    if (p->delegate) snprintf(need, sizeof need, " (passes at cos >= %g)", p->need);
    char ratio[32] = "n/a";
    if (be_ms > 0) /* an emulated delegate may be thousands of times slower than ref */
        snprintf(ratio, sizeof ratio, p->ref_ms / be_ms < 0.1 ? "x%.2g" : "x%.2f",
                 p->ref_ms / be_ms);
    snprintf(line, sizeof line, "%s: %s; %s %.3f ms, ref %.3f ms, speed %s: %s%s", head, err,
             m->backends[p->backend], be_ms, p->ref_ms, ratio,
             !p->failed ? "ok"
             : fallback ? "FAILED, its failing nodes moved"
                        : "FAILED",
             need);
    log_line(c->o, line);
}

/* The backend after node n's in the module's list that supports it, else
 * ref (added to the list when missing). */
static kiln_status next_backend(kiln_module *m, const kiln_graph *g, const kiln_node *n, int *out) {
    for (int b = n->backend + 1; b < m->n_backends; b++) {
        const kiln_backend *be = kiln_backend_find(m->backends[b]);
        if (be && be->supports && be->supports(m, g, n)) {
            *out = b;
            return KILN_OK;
        }
    }
    return kiln_module_add_backend(m, "ref", out);
}

/* Whether node i of partition p fails: its lowest own cosine is below the
 * bar (NaN fails; 2, never compared, does not), or p is judged whole. */
static int node_fails(const checker *c, const part *p, int i) {
    double cos = c->node_cos[c->node_base[p->method] + i];
    return p->by_carried || isnan(cos) || (cos <= 1 && !(cos >= p->need));
}

/* The node of p writing value v when it is a kv_store, else -1. */
static int kv_store_of(const kiln_graph *g, const part *p, int32_t v) {
    for (int j = p->first; j <= p->last; j++)
        if (g->nodes[j].op == KILN_OP_KV_STORE && g->nodes[j].out == v) return j;
    return -1;
}

/* --check=fallback: each failing node of a failed partition (every node of
 * one judged by what leaves it) to its next backend, in `m`; the kv_stores
 * an attention reads go together. Then the methods are partitioned again. */
static kiln_status fall_back(checker *c, kiln_module *m, int *moved) {
    kiln_status st = KILN_OK;
    char line[512];
    for (int k = 0; k < c->n_parts; k++) {
        const part *p = &c->parts[k];
        if (!p->failed) continue;
        kiln_graph *g = &m->methods[p->method];
        int n = p->last - p->first + 1;
        char *move = kiln_calloc((size_t)n, 1); /* 1: fails, 2: goes with one that does */
        if (!move) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int i = p->first; i <= p->last; i++)
            move[i - p->first] = (char)node_fails(c, p, i);
        for (int a = p->first; a <= p->last; a++) {
            const kiln_node *at = &g->nodes[a];
            if (at->op != KILN_OP_ATTENTION || at->n_in < 3) continue;
            int kk = kv_store_of(g, p, at->in[1]), kv = kv_store_of(g, p, at->in[2]);
            if (kk < 0 || kv < 0 || !(move[kk - p->first] || move[kv - p->first])) continue;
            if (!move[kk - p->first]) move[kk - p->first] = 2;
            if (!move[kv - p->first]) move[kv - p->first] = 2;
        }
        const char *from = c->mod->backends[p->backend];
        for (int i = p->first; i <= p->last && !st; i++) {
            if (!move[i - p->first]) continue;
            int to;
            if ((st = next_backend(m, g, &g->nodes[i], &to))) break;
            g->nodes[i].backend = to;
            double cos = c->node_cos[c->node_base[p->method] + i];
            char why[96];
            if (move[i - p->first] == 2)
                snprintf(why, sizeof why, " (with the other kv_store of its attention)");
            else if (p->by_carried)
                snprintf(why, sizeof why, " (its partition failed)");
            else
                snprintf(why, sizeof why, ": own cosine %.6f", cos);
            snprintf(line, sizeof line, "check: moved %s node %d %s from %s to %s%s", g->name, i,
                     g->nodes[i].name, from, m->backends[to], why);
            log_line(c->o, line);
        }
        kiln_free(move);
        if (st) return st;
    }
    for (int k = 0; k < m->n_methods; k++) /* runs of one backend merge, others split */
        if ((st = kiln_graph_partition(&m->methods[k]))) return st;
    *moved = 1;
    return KILN_OK;
}

static kiln_status run_check(checker *c, const char *path, kiln_module *m, int *moved) {
    const kiln_compile_options *o = c->o;
    double threshold = o->check_threshold > 0 ? o->check_threshold : KILN_CHECK_DEFAULT_COS;
    kiln_debugger_options dopt;
    memset(&dopt, 0, sizeof dopt);
    dopt.label[KILN_DEBUG_BACKEND] = "on the program";
    dopt.label[KILN_DEBUG_REFERENCE] = "on ref";
    kiln_status st = kiln_debugger_open(path, &dopt, &c->dbg);
    if (st) return kiln_error_wrap(st, "check: opening the program");
    c->mod = kiln_program_module(kiln_debugger_program(c->dbg, KILN_DEBUG_BACKEND));
    if (c->mod->n_methods != m->n_methods) /* the same module, read back */
        return kiln_error(KILN_ERR_FORMAT, "check: the program read back has other methods");
    for (int k = 0; k < m->n_methods; k++)
        if (c->mod->methods[k].n_nodes != m->methods[k].n_nodes)
            return kiln_error(KILN_ERR_FORMAT, "check: the program read back has other nodes");
    int n_pre, n_dec;
    if ((st = kiln_debugger_samples(c->dbg, &n_pre, &n_dec))) return kiln_error_wrap(st, "check");
    int n_delegate;
    if ((st = find_parts(c, threshold, &n_delegate))) return st;
    c->pre = kiln_llm_prefill_method(kiln_debugger_llm(c->dbg));
    c->total = (1 + n_dec) * (2 + CHECK_REPS);
    char line[512];
    snprintf(line, sizeof line,
             "check: a prefill of %d %s at position 0, then %d decodes, on the "
             "program and on ref; a partition passes when each node's own output has cosine >= "
             "%g against ref%s",
             n_pre,
             kiln_debugger_samples_from_text(c->dbg)
                 ? "tokens of the calibration text past those it measured"
                 : "random tokens",
             n_dec, threshold,
             n_delegate ? " (a delegate's nodes: the cosine its line shows)" : "");
    log_line(o, line);

    /* ref: accuracy, and its times */
    unsigned acc = KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN | KILN_DEBUG_OWN_OFF_REF;
    if (n_delegate) acc |= KILN_DEBUG_RUN_BACKEND;
    if ((st = run_calls(c, acc))) return kiln_error_wrap(st, "check");
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].ref_ms = per_call(c, &c->parts[k]);
    /* the program as compiled: a warm-up, then timed runs */
    int reps = 0;
    double spent = 0;
    for (int r = -1; r < CHECK_REPS && (r < 1 || spent < CHECK_BUDGET_MS); r++) {
        double t0 = kiln_now_ms();
        if ((st = run_calls(c, KILN_DEBUG_RUN_BACKEND))) return kiln_error_wrap(st, "check");
        if (r < 0) continue;
        spent += kiln_now_ms() - t0;
        for (int k = 0; k < c->n_parts; k++)
            c->parts[k].be_ms[reps] = per_call(c, &c->parts[k]);
        reps++;
    }
    if (o->progress && c->done < c->total)
        o->progress(o->progress_user, "check", (uint64_t)c->total, (uint64_t)c->total);

    /* verdicts */
    const part *first_bad = NULL;
    int n_bad = 0;
    for (int k = 0; k < c->n_parts; k++) {
        part *p = &c->parts[k];
        p->failed = p->checked && p->worst >= 0 && !(p->cos >= p->need);
        if (p->failed && !n_bad++) first_bad = p;
    }
    for (int k = 0; k < c->n_parts; k++)
        report(c, &c->parts[k], reps, o->check == 2);
    if (!n_bad) return KILN_OK;
    if (o->check != 2) {
        const part *p = first_bad;
        const kiln_graph *g = &c->mod->methods[p->method];
        char more[64] = "";
        if (n_bad > 1)
            snprintf(more, sizeof more, " (and %d more partition%s)", n_bad - 1,
                     n_bad > 2 ? "s" : "");
        return kiln_error(KILN_ERR_BACKEND,
                          "check: method '%s' partition #%d (%s, nodes %d..%d): node '%s'%s has "
                          "cosine %.6f against ref, below %g%s; --check=fallback moves the "
                          "failing nodes to the next backend",
                          g->name, (int)(p - c->parts) - c->part_of[c->node_base[p->method]],
                          c->mod->backends[p->backend], p->first, p->last, g->nodes[p->worst].name,
                          p->by_carried ? ", leaving the delegate's partition," : "", p->cos,
                          p->need, more);
    }
    return fall_back(c, m, moved);
}

kiln_status kiln_check_partitions(const char *path, kiln_module *m, const kiln_compile_options *o,
                                  int *moved) {
    checker c;
    memset(&c, 0, sizeof c);
    c.o = o;
    *moved = 0;
    kiln_status st = run_check(&c, path, m, moved);
    kiln_debugger_close(c.dbg);
    kiln_free(c.be_ms);
    kiln_free(c.parts);
    kiln_free(c.part_of);
    kiln_free(c.node_cos);
    kiln_free(c.node_base);
    return st;
}
