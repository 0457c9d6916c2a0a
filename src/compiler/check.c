/* check.c: `kiln compile --check`. Runs sample calls of the program just
 * written on its own backends and on ref (the same file opened with every
 * node on ref) and reports, per partition (a maximal run of consecutive nodes
 * of one method on one backend, as the trace derives them), how far the
 * backend is from ref and how much faster it is.
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
 * Speed: every node is timed through the node observer (from the end of its
 * phase-0 call to its phase-1 call; the own-error runs are outside it). The
 * program as compiled runs the sample calls once to warm up, then up to
 * CHECK_REPS times (fewer past CHECK_BUDGET_MS); the median per call is
 * reported. Ref runs them once, in the accuracy pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/check.h"
#include "devtools/compare.h"
#include "devtools/random.h"
#include "runtime/runtime.h"

#define CHECK_PREFILL 8      /* tokens of the sample prefill (at most the method's) */
#define CHECK_DECODES 3      /* decode calls after it */
#define CHECK_REPS 5         /* timed runs of the program as compiled */
#define CHECK_BUDGET_MS 2000 /* ... unless they take longer than this */

typedef struct {
    int method, first, last; /* nodes first..last of the method */
    int backend;             /* index into the module's backend list */
    int checked;             /* not on ref */
    int worst;               /* the node with the lowest cosine, -1 = none compared */
    double cos, rel;         /* the worst node's own error */
    double acc;              /* this run's time, ms */
    double ref_ms;           /* per call on ref */
    double *be_ms;           /* per timed run: per call on the backend */
    int failed;
} part;

typedef struct {
    const kiln_compile_options *o;
    kiln_program *be, *rf; /* as compiled; every node on ref */
    kiln_session *be_s, *rf_s;
    const kiln_module *mod; /* be's module */
    int *node_base;         /* per method: index of its node 0 in part_of */
    int *part_of;           /* per node of every method: its partition */
    part *parts;
    int n_parts;
    double *be_ms; /* n_parts x CHECK_REPS */
    /* own error */
    void *own, *scratch;
    uint64_t scratch_bytes;
    kiln_tensor own_t; /* the own output's dtype and shape */
    int own_ok;
    double t0;
    int calls[2]; /* this run's calls of prefill and decode */
    /* the language model */
    int pre, dec, pre_tok, pre_pos, pre_all, dec_tok, dec_pos;
    int64_t vocab, n_tok, n_dec;
    int32_t tokens[CHECK_PREFILL + CHECK_DECODES];
    kiln_status failed; /* set by an observer that stopped a call */
    char failed_msg[600];
    int done, total; /* progress */
} checker;

/* ---- comparing ---------------------------------------------------------------------------- */

/* a against the reference r, n elements from `first`: cosine and relative
 * error; NaN when the shapes differ or a value is not finite (which fails
 * any threshold). */
static void compare(const kiln_tensor *a, const void *a_data, const kiln_tensor *r,
                    const void *r_data, uint64_t first, uint64_t n, double *cos, double *rel) {
    *cos = *rel = NAN;
    if (a->dtype != r->dtype || a->ndim != r->ndim ||
        memcmp(a->ne, r->ne, (size_t)a->ndim * sizeof *a->ne))
        return;
    kiln_cmp c;
    kiln_compare_values(a->dtype, a_data, r->dtype, r_data, first, n, &c);
    *cos = c.cos;
    *rel = c.rel;
}

/* ---- the observers ------------------------------------------------------------------------ */

static part *part_at(checker *c, int method, int node) {
    return &c->parts[c->part_of[c->node_base[method] + node]];
}

/* Stops the call; its message is kept past the executor's own. */
static int stop(checker *c, kiln_status st) {
    c->failed = st;
    snprintf(c->failed_msg, sizeof c->failed_msg, "%s", kiln_last_error());
    return 1;
}

/* The program as compiled: time every node. */
static int observe_backend(void *user, int method, int i, const kiln_tensor *const *in,
                           const kiln_tensor *out, int phase) {
    checker *c = user;
    (void)in, (void)out;
    double now = kiln_now_ms();
    if (phase == 0)
        c->t0 = now;
    else
        part_at(c, method, i)->acc += now - c->t0;
    return 0;
}

/* Ref: before a node of a checked partition, run it alone on its compiled
 * backend with ref's inputs; after it, time it and compare. */
static int observe_reference(void *user, int method, int i, const kiln_tensor *const *in,
                             const kiln_tensor *out, int phase) {
    checker *c = user;
    part *pt = part_at(c, method, i);
    const kiln_node *n = &c->mod->methods[method].nodes[i];
    int kv = n->op == KILN_OP_KV_STORE && out->ndim == 2;
    if (phase == 1) {
        pt->acc += kiln_now_ms() - c->t0;
        if (!c->own_ok) return 0;
        /* a kv_store: the rows it wrote (pos .. pos + T); else all of it */
        uint64_t first = 0, count = kiln_shape_elems(out->ndim, out->ne);
        if (kv) {
            int64_t pos = *(const int32_t *)in[2]->data, T = in[1]->ne[0];
            first = (uint64_t)pos * (uint64_t)out->ne[1];
            count = (uint64_t)T * (uint64_t)out->ne[1];
        }
        double cos, rel;
        compare(&c->own_t, c->own, out, out->data, first, count, &cos, &rel);
        /* the lowest cosine; among equal ones the largest relative error */
        if (pt->worst < 0 || (!isnan(pt->cos) &&
                              (isnan(cos) || cos < pt->cos || (cos == pt->cos && rel > pt->rel)))) {
            pt->worst = i;
            pt->cos = cos;
            pt->rel = rel;
        }
        return 0;
    }
    c->own_ok = 0;
    if (pt->checked && (kv || c->mod->methods[method].values[n->out].kind == KILN_VAL_ACT)) {
        kiln_tensor o = *out; /* a kv_store writes into a copy of ref's cache there */
        o.data = c->own;
        kiln_status st = kiln_program_exec_node(c->be, method, i, in, &o, c->scratch, c->scratch_bytes);
        if (st) return stop(c, kiln_error_wrap(st, "node '%s' alone on its backend", n->name));
        c->own_t = o;
        c->own_ok = 1;
    }
    c->t0 = kiln_now_ms();
    return 0;
}

/* ---- the sample calls --------------------------------------------------------------------- */

/* prefill (tokens [P], pos [1], all_logits [1]) and decode (tokens [1],
 * pos [1]), as src/models/llama.c builds them; the sample tokens. */
static kiln_status find_llm(checker *c) {
    const kiln_program *p = c->be;
    int64_t ctx;
    kiln_tensor_info t;
    if (kiln_program_meta_int(p, "llm.vocab_size", &c->vocab) || c->vocab < 1 ||
        kiln_program_meta_int(p, "llm.context_length", &ctx) || ctx < 1 ||
        kiln_program_find_method(p, "prefill", &c->pre) ||
        kiln_program_find_method(p, "decode", &c->dec) ||
        (c->pre_tok = kiln_method_input_index(p, c->pre, "tokens")) < 0 ||
        (c->pre_pos = kiln_method_input_index(p, c->pre, "pos")) < 0 ||
        (c->pre_all = kiln_method_input_index(p, c->pre, "all_logits")) < 0 ||
        (c->dec_tok = kiln_method_input_index(p, c->dec, "tokens")) < 0 ||
        (c->dec_pos = kiln_method_input_index(p, c->dec, "pos")) < 0 ||
        kiln_method_input_info(p, c->pre, c->pre_tok, &t) || t.ndim != 1 || t.shape[0] < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "check: the program has no prefill and decode methods to run");
    c->n_tok = t.shape[0] < CHECK_PREFILL ? t.shape[0] : CHECK_PREFILL;
    if (c->n_tok > ctx) c->n_tok = ctx;
    c->n_dec = ctx - c->n_tok < CHECK_DECODES ? ctx - c->n_tok : CHECK_DECODES;
    for (int64_t q = 0; q < c->n_tok + c->n_dec; q++)
        c->tokens[q] = kiln_token_at(0x6b696c6eULL, q, c->vocab);
    return KILN_OK;
}

static kiln_status progress(checker *c) {
    c->done++;
    const kiln_compile_options *o = c->o;
    if (o->progress &&
        o->progress(o->progress_user, "check", (uint64_t)c->done, (uint64_t)c->total))
        return kiln_error(KILN_ERR_CANCELLED, "check: cancelled");
    return KILN_OK;
}

static kiln_status execute(checker *c, kiln_session *s, int method, int which) {
    c->failed = KILN_OK;
    kiln_status st = kiln_session_execute(s, method);
    if (c->failed) /* an observer's own error, not the stop it caused */
        return kiln_error(c->failed, "%s", c->failed_msg);
    if (st) return st;
    c->calls[which]++;
    return progress(c);
}

/* The sample calls on one session, from an empty cache: a prefill of n_tok
 * tokens at position 0, then n_dec decodes after them. */
static kiln_status run_calls(checker *c, kiln_session *s) {
    int64_t one = 1;
    int32_t pos = 0, all = 0;
    kiln_status st = kiln_session_reset(s);
    c->calls[0] = c->calls[1] = 0;
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].acc = 0;
    if (!st) st = kiln_session_set_input(s, c->pre, c->pre_tok, c->tokens, KILN_I32, 1, &c->n_tok);
    if (!st) st = kiln_session_set_input(s, c->pre, c->pre_pos, &pos, KILN_I32, 1, &one);
    if (!st) st = kiln_session_set_input(s, c->pre, c->pre_all, &all, KILN_I32, 1, &one);
    if (!st) st = execute(c, s, c->pre, 0);
    for (int64_t k = 0; k < c->n_dec && !st; k++) {
        pos = (int32_t)(c->n_tok + k);
        st = kiln_session_set_input(s, c->dec, c->dec_tok, &c->tokens[pos], KILN_I32, 1, &one);
        if (!st) st = kiln_session_set_input(s, c->dec, c->dec_pos, &pos, KILN_I32, 1, &one);
        if (!st) st = execute(c, s, c->dec, 1);
    }
    return st;
}

/* The time per call of the run just made. */
static double per_call(const checker *c, const part *p) {
    int calls = c->calls[p->method == c->pre ? 0 : 1];
    return calls ? p->acc / calls : 0;
}

/* ---- partitions --------------------------------------------------------------------------- */

static kiln_status find_parts(checker *c) {
    const kiln_module *m = c->mod;
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
        !(c->parts = kiln_calloc((size_t)n_nodes + 1, sizeof *c->parts)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            if (!i || g->nodes[i].backend != g->nodes[i - 1].backend) {
                part *p = &c->parts[c->n_parts++];
                p->method = k;
                p->first = i;
                p->backend = g->nodes[i].backend;
                p->checked = p->backend != ref;
                p->worst = -1;
                p->cos = p->rel = NAN;
            }
            c->parts[c->n_parts - 1].last = i;
            c->part_of[c->node_base[k] + i] = c->n_parts - 1;
        }
    }
    if (!(c->be_ms = kiln_calloc((size_t)c->n_parts * CHECK_REPS + 1, sizeof *c->be_ms)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].be_ms = &c->be_ms[(size_t)k * CHECK_REPS];
    return KILN_OK;
}

/* The own-error buffers: the largest activation or state, and the largest
 * node scratch. */
static kiln_status alloc_own(checker *c) {
    const kiln_module *m = c->mod;
    uint64_t own = 1;
    for (int s = 0; s < m->n_states; s++)
        if (m->states[s].nbytes > own) own = m->states[s].nbytes;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int v = 0; v < g->n_values; v++) {
            uint64_t b = kiln_shape_bytes(g->values[v].dtype, g->values[v].ndim, g->values[v].ne);
            if (g->values[v].kind == KILN_VAL_ACT && b > own) own = b;
        }
        uint64_t s = kiln_method_scratch_bytes(c->be, k);
        if (s > c->scratch_bytes) c->scratch_bytes = s;
    }
    if (own > SIZE_MAX || c->scratch_bytes >= SIZE_MAX ||
        !(c->own = kiln_aligned_alloc((size_t)own)) ||
        !(c->scratch = kiln_aligned_alloc((size_t)c->scratch_bytes + 1)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory for the check's buffers");
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
    char err[400];
    if (p->worst < 0)
        snprintf(err, sizeof err, "no output compared");
    else
        snprintf(err, sizeof err, "worst %s cos %.6f rel %.2e", g->nodes[p->worst].name, p->cos,
                 p->rel);
    char ratio[32] = "n/a";
    if (be_ms > 0) snprintf(ratio, sizeof ratio, "x%.2f", p->ref_ms / be_ms);
    snprintf(line, sizeof line, "%s: %s; %s %.3f ms, ref %.3f ms, speed %s: %s", head, err,
             m->backends[p->backend], be_ms, p->ref_ms, ratio,
             !p->failed ? "ok"
             : fallback ? "FAILED, moved to ref"
                        : "FAILED");
    log_line(c->o, line);
}

static kiln_status run_check(checker *c, const char *path, kiln_module *m, int *moved) {
    const kiln_compile_options *o = c->o;
    double threshold = o->check_threshold > 0 ? o->check_threshold : KILN_CHECK_DEFAULT_COS;
    kiln_open_options ref_opt;
    memset(&ref_opt, 0, sizeof ref_opt);
    ref_opt.backend = "ref";
    kiln_status st;
    if ((st = kiln_program_open_with(path, NULL, &c->be)) ||
        (st = kiln_program_open_with(path, &ref_opt, &c->rf)))
        return kiln_error_wrap(st, "check: opening the program");
    c->mod = &c->be->mod;
    if (c->mod->n_methods != m->n_methods) /* the same module, read back */
        return kiln_error(KILN_ERR_FORMAT, "check: the program read back has other methods");
    for (int k = 0; k < m->n_methods; k++)
        if (c->mod->methods[k].n_nodes != m->methods[k].n_nodes)
            return kiln_error(KILN_ERR_FORMAT, "check: the program read back has other nodes");
    if ((st = find_llm(c)) || (st = find_parts(c)) || (st = alloc_own(c)) ||
        (st = kiln_session_create(c->be, &c->be_s)) || (st = kiln_session_create(c->rf, &c->rf_s)))
        return st;
    int per_run = (int)(1 + c->n_dec);
    c->total = per_run * (2 + CHECK_REPS);
    char line[512];
    snprintf(line, sizeof line,
             "check: a prefill of %lld random tokens at position 0, then %lld decodes, on the "
             "program and on ref; a partition passes when each node's own output has cosine >= "
             "%g against ref",
             (long long)c->n_tok, (long long)c->n_dec, threshold);
    log_line(o, line);

    /* ref: accuracy, and its times */
    kiln_session_set_observer(c->rf_s, observe_reference, c);
    if ((st = run_calls(c, c->rf_s))) return kiln_error_wrap(st, "check: on ref");
    for (int k = 0; k < c->n_parts; k++)
        c->parts[k].ref_ms = per_call(c, &c->parts[k]);
    /* the program as compiled: a warm-up, then timed runs */
    kiln_session_set_observer(c->be_s, observe_backend, c);
    int reps = 0;
    double spent = 0;
    for (int r = -1; r < CHECK_REPS && (r < 1 || spent < CHECK_BUDGET_MS); r++) {
        double t0 = kiln_now_ms();
        if ((st = run_calls(c, c->be_s))) return kiln_error_wrap(st, "check: on the program");
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
        p->failed = p->checked && p->worst >= 0 && !(p->cos >= threshold);
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
                          "check: method '%s' partition #%d (%s, nodes %d..%d): node '%s' has "
                          "cosine %.6f against ref, below %g%s; --check=fallback moves failing "
                          "partitions to ref",
                          g->name, (int)(p - c->parts) - c->part_of[c->node_base[p->method]],
                          c->mod->backends[p->backend], p->first, p->last, g->nodes[p->worst].name,
                          p->cos, threshold, more);
    }
    /* fallback: those nodes to ref in the module the program is written from */
    int ref;
    if ((st = kiln_module_add_backend(m, "ref", &ref))) return st;
    for (int k = 0; k < c->n_parts; k++) {
        const part *p = &c->parts[k];
        if (!p->failed) continue;
        for (int i = p->first; i <= p->last; i++)
            m->methods[p->method].nodes[i].backend = ref;
        snprintf(line, sizeof line,
                 "check: moved %s #%d (%s, nodes %d..%d) to ref: node %s has cosine %.6f",
                 m->methods[p->method].name, k - c->part_of[c->node_base[p->method]],
                 c->mod->backends[p->backend], p->first, p->last,
                 m->methods[p->method].nodes[p->worst].name, p->cos);
        log_line(o, line);
    }
    *moved = 1;
    return KILN_OK;
}

kiln_status kiln_check_partitions(const char *path, kiln_module *m, const kiln_compile_options *o,
                                  int *moved) {
    checker c;
    memset(&c, 0, sizeof c);
    c.o = o;
    *moved = 0;
    kiln_status st = run_check(&c, path, m, moved);
    kiln_session_destroy(c.be_s);
    kiln_session_destroy(c.rf_s);
    kiln_program_close(c.be);
    kiln_program_close(c.rf);
    kiln_aligned_free(c.own);
    kiln_aligned_free(c.scratch);
    kiln_free(c.be_ms);
    kiln_free(c.parts);
    kiln_free(c.part_of);
    kiln_free(c.node_base);
    return st;
}
