/* debugger.c: the debugging engine (debugger.h): one program on the backend
 * under test and on a reference, calls run on both with the same inputs,
 * and per node the carried error (the backend's output against the
 * reference's) and the own error (the node alone on the backend, given the
 * reference's inputs), taken through the executor's node observer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "devtools/debugger.h"
#include "devtools/random.h"
#include "runtime/runtime.h"

#define SAMPLE_SEED 0x6b696c6eULL /* "kiln": the sample calls' tokens */

/* A node's output kept until the reference runs that node. */
typedef struct {
    void *buf;
    uint64_t cap;
    kiln_debug_tensor t; /* t.data = buf */
    int valid;           /* kept in this run */
} kept;

typedef struct {
    kiln_program *prog;
    kiln_session *sess;
    kiln_llm *llm;     /* NULL: the program does not bind as a language model */
    int method;        /* AGAINST: its index of the method it runs for */
    const char *label; /* heads its errors */
} side;

/* What an observer is told it watches. */
typedef struct {
    kiln_debugger *d;
    kiln_debug_side side;
} watch;

struct kiln_debugger {
    kiln_debugger_options o;
    side s[KILN_DEBUG_SIDES];
    watch w[KILN_DEBUG_SIDES];
    const kiln_module *mod; /* the program under test's */
    int ref_backend;        /* the index of "ref" in its backends, or -1 */
    /* the own runs: an output and the node scratch, the largest of any method */
    void *own, *scratch;
    uint64_t scratch_bytes;
    kiln_tensor own_t; /* the own output's dtype and shape */
    int own_ok;
    kiln_status own_st;
    char own_msg[600];
    kept *keep[KILN_DEBUG_SIDES]; /* BACKEND's and AGAINST's outputs, per node of the method */
    int most_nodes;               /* the most nodes of any method: keep's length */
    /* AGAINST: the method it runs for, and per node of that method the
     * node of the same name there (-1: none) */
    int against_method;
    int *against_node;
    /* the run in progress */
    const kiln_debug_hooks *h;
    int method;
    double t0;
    kiln_status failed; /* set by an observer that stopped the call */
    char failed_msg[600];
};

/* ---- comparing ---------------------------------------------------------------------------- */

/* The compared part of node n's output at `data` (dtype and shape of t): a
 * kv_store's cache rows 0 .. pos + T (`written`: pos .. pos + T), else all. */
static kiln_debug_tensor part_of(const kiln_node *n, const kiln_tensor *const *in,
                                 const kiln_tensor *t, const void *data, int written) {
    kiln_debug_tensor r = {t->dtype, t->ndim, {0}, data};
    memcpy(r.ne, t->ne, sizeof r.ne);
    if (n->op == KILN_OP_KV_STORE && t->ndim == 2) {
        int64_t pos = *(const int32_t *)in[2]->data, T = in[1]->ne[0];
        if (pos < 0) pos = 0;
        int64_t end = pos + T < t->ne[0] ? pos + T : t->ne[0];
        if (written) {
            r.data =
                (const uint8_t *)data + kiln_shape_bytes(t->dtype, 1, &t->ne[1]) * (uint64_t)pos;
            r.ne[0] = end - pos;
        } else {
            r.ne[0] = end;
        }
    }
    return r;
}

static kiln_debug_cmp compare(const kiln_debug_tensor *a, const kiln_debug_tensor *r) {
    kiln_debug_cmp c = {1, 0, {NAN, NAN, NAN, NAN}};
    if (a->ndim != r->ndim || memcmp(a->ne, r->ne, (size_t)a->ndim * sizeof *a->ne)) {
        c.mismatch = 1;
        return c;
    }
    kiln_compare_values(a->dtype, a->data, r->dtype, r->data, 0, kiln_shape_elems(a->ndim, a->ne),
                        &c.v);
    return c;
}

static kiln_status keep(kept *k, const kiln_debug_tensor *t, const char *node) {
    uint64_t bytes = kiln_shape_bytes(t->dtype, t->ndim, t->ne);
    if (bytes > k->cap || !k->buf) {
        kiln_free(k->buf);
        k->cap = 0;
        if (bytes > SIZE_MAX || !(k->buf = kiln_malloc(bytes ? (size_t)bytes : 1)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory keeping the output of node '%s'",
                              node);
        k->cap = bytes;
    }
    if (bytes) memcpy(k->buf, t->data, (size_t)bytes);
    k->t = *t;
    k->t.data = k->buf;
    k->valid = 1;
    return KILN_OK;
}

/* ---- the observer ------------------------------------------------------------------------- */

/* Stops the call; its message is kept past the executor's own. */
static int stop(kiln_debugger *d, kiln_status st) {
    d->failed = st;
    snprintf(d->failed_msg, sizeof d->failed_msg, "%s", kiln_last_error());
    return 1;
}

/* Before the reference runs node i: the node alone on the backend under
 * test, on the reference's inputs, into d->own. A kv_store writes into a
 * copy of the reference's cache there. */
static void own_run(kiln_debugger *d, int method, int i, const kiln_tensor *const *in,
                    const kiln_tensor *out) {
    const kiln_graph *g = &d->mod->methods[method];
    const kiln_node *n = &g->nodes[i];
    d->own_ok = 0;
    d->own_st = KILN_OK;
    if (!(d->h->run & KILN_DEBUG_OWN)) return;
    if (n->op != KILN_OP_KV_STORE && g->values[n->out].kind != KILN_VAL_ACT)
        return; /* another op writing state: no own error */
    if ((d->h->run & KILN_DEBUG_OWN_OFF_REF) && n->backend == d->ref_backend) return;
    kiln_tensor o = *out;
    o.data = d->own;
    kiln_status st = kiln_program_exec_node(d->s[KILN_DEBUG_BACKEND].prog, method, i, in, &o,
                                            d->scratch, d->scratch_bytes);
    if (st) {
        d->own_st = st;
        snprintf(d->own_msg, sizeof d->own_msg, "%s", kiln_last_error());
        return;
    }
    d->own_t = o;
    d->own_ok = 1;
}

/* AGAINST finished its node j: keep it for each node of that name. */
static kiln_status keep_against(kiln_debugger *d, int j, const kiln_tensor *const *in,
                                const kiln_tensor *out) {
    if (d->method != d->against_method) return KILN_OK;
    const kiln_graph *fg = &kiln_program_module(d->s[KILN_DEBUG_AGAINST].prog)
                                ->methods[d->s[KILN_DEBUG_AGAINST].method];
    const kiln_node *n = &fg->nodes[j];
    for (int i = 0; i < d->mod->methods[d->method].n_nodes; i++) {
        if (d->against_node[i] != j) continue;
        kiln_debug_tensor t = part_of(n, in, out, out->data, 0);
        kiln_status st = keep(&d->keep[KILN_DEBUG_AGAINST][i], &t, n->name);
        if (st) return st;
    }
    return KILN_OK;
}

/* Around every node of every side's call: the own run before the
 * reference's node; after any node, its time, then what is kept, compared
 * and called back. */
static int observe(void *user, int method, int i, const kiln_tensor *const *in,
                   const kiln_tensor *out, int phase) {
    const watch *w = user;
    kiln_debugger *d = w->d;
    if (d->o.cancel && d->o.cancel(d->o.cancel_user))
        return stop(d, kiln_error(KILN_ERR_CANCELLED, "interrupted"));
    if (phase == 0) {
        if (w->side == KILN_DEBUG_REFERENCE) own_run(d, method, i, in, out);
        d->t0 = kiln_now_ms();
        return 0;
    }
    double ms = kiln_now_ms() - d->t0;
    kiln_status st;
    if (w->side == KILN_DEBUG_AGAINST) {
        if ((d->h->run & KILN_DEBUG_RUN_REFERENCE) && (st = keep_against(d, i, in, out)))
            return stop(d, st);
        return 0;
    }
    const kiln_node *n = &d->mod->methods[method].nodes[i];
    kiln_debug_node e;
    memset(&e, 0, sizeof e);
    e.side = w->side;
    e.method = method;
    e.index = i;
    e.node = n;
    e.out = part_of(n, in, out, out->data, 0);
    e.ms = ms;
    if (w->side == KILN_DEBUG_BACKEND) {
        const kiln_program *p = d->s[KILN_DEBUG_BACKEND].prog;
        e.unit = kiln_program_node_unit(p, n, in);
        e.fallback = kiln_program_node_is_fallback(p, n);
        if ((d->h->run & KILN_DEBUG_RUN_REFERENCE) &&
            (st = keep(&d->keep[KILN_DEBUG_BACKEND][i], &e.out, n->name)))
            return stop(d, st);
    } else {
        const kept *b = &d->keep[KILN_DEBUG_BACKEND][i], *a = &d->keep[KILN_DEBUG_AGAINST][i];
        if (b->valid) e.carried = compare(&b->t, &e.out);
        if (d->own_ok) {
            kiln_debug_tensor own = part_of(n, in, &d->own_t, d->own, 1),
                              ref = part_of(n, in, out, out->data, 1);
            e.own = compare(&own, &ref);
        }
        e.own_status = d->own_st;
        e.own_error = d->own_st ? d->own_msg : NULL;
        if (a->valid) e.against = compare(&e.out, &a->t);
    }
    if (d->h->node && (st = d->h->node(d->h->user, &e))) return stop(d, st);
    return 0;
}

/* ---- running calls ------------------------------------------------------------------------ */

/* One call: `method` as its inputs are set, or a language model's prefill
 * of ids[0..n) at pos, or its decode of ids[0] at pos. */
typedef enum { CALL_EXECUTE, CALL_PREFILL, CALL_DECODE } call_kind;
typedef struct {
    call_kind kind;
    int method; /* the program under test's index */
    const int32_t *ids;
    int n, pos;
} call;

static kiln_status run_side(kiln_debugger *d, kiln_debug_side k, const call *c) {
    side *s = &d->s[k];
    kiln_status st;
    kiln_session_set_observer(s->sess, observe, &d->w[k]);
    d->failed = KILN_OK;
    if (c->kind == CALL_PREFILL)
        st = kiln_llm_prefill(s->sess, s->llm, c->ids, c->n, c->pos, 0, NULL);
    else if (c->kind == CALL_DECODE)
        st = kiln_llm_decode(s->sess, s->llm, c->ids[0], c->pos, NULL);
    else
        st = kiln_session_execute(s->sess, k == KILN_DEBUG_AGAINST ? s->method : c->method);
    kiln_session_set_observer(s->sess, NULL, NULL);
    if (d->failed) /* an observer's own error, not the stop it caused */
        st = kiln_error(d->failed, "%s", d->failed_msg);
    if (!st && d->h->call) st = d->h->call(d->h->user, k, c->method);
    return st ? kiln_error_wrap(st, "%s", s->label) : KILN_OK;
}

/* The own-error buffers: the largest node output or state, and the
 * largest node scratch, of any method. */
static kiln_status alloc_own(kiln_debugger *d) {
    const kiln_module *m = d->mod;
    uint64_t own = 64;
    for (int s = 0; s < m->n_states; s++)
        if (m->states[s].nbytes > own) own = m->states[s].nbytes;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_value *v = &g->values[g->nodes[i].out];
            uint64_t b = kiln_shape_bytes(v->dtype, v->ndim, v->ne);
            if (b > own) own = b;
        }
        uint64_t s = kiln_method_scratch_bytes(d->s[KILN_DEBUG_BACKEND].prog, k);
        if (s > d->scratch_bytes) d->scratch_bytes = s;
    }
    if (own > SIZE_MAX || d->scratch_bytes >= SIZE_MAX ||
        !(d->own = kiln_aligned_alloc((size_t)own)) ||
        !(d->scratch = kiln_aligned_alloc((size_t)d->scratch_bytes + 1)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory for the own-error buffers");
    return KILN_OK;
}

static const kiln_debug_side ORDER[KILN_DEBUG_SIDES] = {KILN_DEBUG_AGAINST, KILN_DEBUG_BACKEND,
                                                        KILN_DEBUG_REFERENCE};
static const unsigned RUN_BIT[KILN_DEBUG_SIDES] = {KILN_DEBUG_RUN_BACKEND, KILN_DEBUG_RUN_REFERENCE,
                                                   KILN_DEBUG_RUN_AGAINST};

/* The call on each side h->run names, in ORDER. */
static kiln_status run_call(kiln_debugger *d, const call *c, const kiln_debug_hooks *h) {
    if (c->method < 0 || c->method >= d->mod->n_methods)
        return kiln_error(KILN_ERR_INVALID_ARG, "no method %d", c->method);
    if (h->run & KILN_DEBUG_RUN_AGAINST) {
        if (!d->s[KILN_DEBUG_AGAINST].sess)
            return kiln_error(KILN_ERR_INVALID_ARG, "no program to compare against is open");
        if (c->kind == CALL_EXECUTE && c->method != d->against_method)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "the program compared against runs method '%s' only",
                              d->mod->methods[d->against_method].name);
    }
    kiln_status st;
    if ((h->run & KILN_DEBUG_OWN) && !d->own && (st = alloc_own(d))) return st;
    d->h = h;
    d->method = c->method;
    for (int i = 0; i < d->mod->methods[c->method].n_nodes; i++)
        d->keep[KILN_DEBUG_BACKEND][i].valid = d->keep[KILN_DEBUG_AGAINST][i].valid = 0;
    for (int k = 0; k < KILN_DEBUG_SIDES; k++)
        if ((h->run & RUN_BIT[ORDER[k]]) && (st = run_side(d, ORDER[k], c))) return st;
    return KILN_OK;
}

kiln_status kiln_debugger_execute(kiln_debugger *d, int method, const kiln_debug_hooks *h) {
    call c = {CALL_EXECUTE, method, NULL, 0, 0};
    return run_call(d, &c, h);
}

kiln_status kiln_debugger_set_input(kiln_debugger *d, int method, int input, const void *data,
                                    kiln_dtype dtype, int ndim, const int64_t *shape) {
    for (int k = 0; k < KILN_DEBUG_SIDES; k++) {
        const side *s = &d->s[k];
        if (!s->sess || (k == KILN_DEBUG_AGAINST && method != d->against_method)) continue;
        kiln_status st = kiln_session_set_input(
            s->sess, k == KILN_DEBUG_AGAINST ? s->method : method, input, data, dtype, ndim, shape);
        if (st) return st;
    }
    return KILN_OK;
}

/* ---- a language model: history and sample calls ------------------------------------------- */

kiln_status kiln_debugger_history(kiln_debugger *d, const int32_t *ids, int n) {
    if (!d->s[KILN_DEBUG_BACKEND].llm)
        return kiln_error(KILN_ERR_UNSUPPORTED, "the program is no language model (kiln_llm.h)");
    for (int k = 0; k < KILN_DEBUG_SIDES; k++) {
        const side *s = &d->s[ORDER[k]];
        if (!s->sess) continue;
        if (!s->llm)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "%s: no prefill method taking tokens, pos and all_logits", s->label);
        kiln_status st = kiln_session_reset(s->sess);
        int chunk = kiln_llm_get_limits(s->llm)->prefill_max;
        for (int q = 0; q < n && !st;) {
            int len = n - q < chunk ? n - q : chunk;
            if (d->o.cancel && d->o.cancel(d->o.cancel_user))
                st = kiln_error(KILN_ERR_CANCELLED, "interrupted");
            if (!st) st = kiln_llm_prefill(s->sess, s->llm, ids + q, len, q, 0, NULL);
            if (st)
                st = kiln_error_wrap(st, "%s: building the history: prefill of %d tokens at %d",
                                     s->label, len, q);
            q += len;
        }
        if (st) return st;
    }
    return KILN_OK;
}

kiln_status kiln_debugger_samples(const kiln_debugger *d, int *n_prefill, int *n_decode) {
    const kiln_llm *lm = d->s[KILN_DEBUG_BACKEND].llm;
    if (!lm)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "the program has no prefill and decode methods to run");
    const kiln_llm_limits *l = kiln_llm_get_limits(lm);
    /* the prefill size is at most the context (kiln_llm_bind) */
    *n_prefill =
        l->prefill_max < KILN_DEBUG_SAMPLE_PREFILL ? l->prefill_max : KILN_DEBUG_SAMPLE_PREFILL;
    int room = l->context - *n_prefill;
    *n_decode = room < KILN_DEBUG_SAMPLE_DECODES ? room : KILN_DEBUG_SAMPLE_DECODES;
    return KILN_OK;
}

/* The calibration text's held-out tokens (calibration.held_out) when the
 * program has at least n of them, all in the vocabulary; else NULL. */
static const int64_t *held_out(const kiln_debugger *d, int n) {
    const kiln_meta *e = kiln_meta_find(d->mod, "calibration.held_out");
    const kiln_llm *lm = d->s[KILN_DEBUG_BACKEND].llm;
    if (!lm || !e || e->type != KILN_META_INT_ARRAY || e->n < (uint32_t)n) return NULL;
    for (int q = 0; q < n; q++)
        if (e->ia[q] < 0 || e->ia[q] >= kiln_llm_get_limits(lm)->vocab) return NULL;
    return e->ia;
}

int kiln_debugger_samples_from_text(const kiln_debugger *d) {
    int n_pre = 0, n_dec = 0;
    return !kiln_debugger_samples(d, &n_pre, &n_dec) && held_out(d, n_pre + n_dec);
}

kiln_status kiln_debugger_run_samples(kiln_debugger *d, const kiln_debug_hooks *h) {
    int n_pre = 0, n_dec = 0;
    kiln_status st = kiln_debugger_samples(d, &n_pre, &n_dec);
    if (st) return st;
    const kiln_llm *lm = d->s[KILN_DEBUG_BACKEND].llm;
    const int64_t *text = held_out(d, n_pre + n_dec);
    int32_t tok[KILN_DEBUG_SAMPLE_PREFILL + KILN_DEBUG_SAMPLE_DECODES];
    for (int q = 0; q < n_pre + n_dec; q++)
        tok[q] =
            text ? (int32_t)text[q] : kiln_token_at(SAMPLE_SEED, q, kiln_llm_get_limits(lm)->vocab);
    for (int k = 0; k < KILN_DEBUG_SIDES; k++)
        if ((h->run & RUN_BIT[k]) && d->s[k].sess && (st = kiln_session_reset(d->s[k].sess)))
            return st;
    call c = {CALL_PREFILL, kiln_llm_prefill_method(lm), tok, n_pre, 0};
    st = run_call(d, &c, h);
    for (int q = 0; q < n_dec && !st; q++) {
        call dc = {CALL_DECODE, kiln_llm_decode_method(lm), &tok[n_pre + q], 1, n_pre + q};
        st = run_call(d, &dc, h);
    }
    return st;
}

/* ---- opening ------------------------------------------------------------------------------ */

static kiln_status open_sides(kiln_debugger *d, const char *path) {
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    oo.n_threads = d->o.n_threads;
    oo.backend = d->o.backend;
    side *be = &d->s[KILN_DEBUG_BACKEND], *rf = &d->s[KILN_DEBUG_REFERENCE];
    kiln_status st;
    if ((st = kiln_program_open_with(path, &oo, &be->prog))) return st;
    oo.backend = d->o.reference ? d->o.reference : "ref";
    if ((st = kiln_program_open_with(path, &oo, &rf->prog)) ||
        (st = kiln_session_create(be->prog, &be->sess)) ||
        (st = kiln_session_create(rf->prog, &rf->sess)))
        return st;
    d->mod = kiln_program_module(be->prog);
    d->ref_backend = -1;
    for (int b = 0; b < d->mod->n_backends; b++)
        if (!strcmp(d->mod->backends[b], "ref")) d->ref_backend = b;
    /* a language model binds on both sides (the same file), or on neither */
    if ((st = kiln_llm_bind(be->prog, &be->llm)) == KILN_ERR_NOMEM) return st;
    if (!st && (st = kiln_llm_bind(rf->prog, &rf->llm))) return st;
    int most = 1;
    for (int k = 0; k < d->mod->n_methods; k++)
        if (d->mod->methods[k].n_nodes > most) most = d->mod->methods[k].n_nodes;
    d->most_nodes = most;
    if (!(d->keep[KILN_DEBUG_BACKEND] = kiln_calloc((size_t)most, sizeof(kept))) ||
        !(d->keep[KILN_DEBUG_AGAINST] = kiln_calloc((size_t)most, sizeof(kept))))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

kiln_status kiln_debugger_open(const char *path, const kiln_debugger_options *options,
                               kiln_debugger **out) {
    static const char *names[KILN_DEBUG_SIDES] = {"backend", "reference", "against"};
    *out = NULL;
    kiln_debugger *d = kiln_calloc(1, sizeof *d);
    if (!d) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (options) d->o = *options;
    for (int k = 0; k < KILN_DEBUG_SIDES; k++) {
        d->s[k].label = d->o.label[k] ? d->o.label[k] : names[k];
        d->w[k].d = d;
        d->w[k].side = (kiln_debug_side)k;
    }
    d->against_method = -1;
    kiln_status st = open_sides(d, path);
    if (st) {
        kiln_debugger_close(d);
        return st;
    }
    *out = d;
    return KILN_OK;
}

kiln_status kiln_debugger_against(kiln_debugger *d, const char *path, int method, int *matched) {
    side *a = &d->s[KILN_DEBUG_AGAINST];
    const kiln_program *p = d->s[KILN_DEBUG_BACKEND].prog;
    *matched = 0;
    if (a->prog)
        return kiln_error(KILN_ERR_INVALID_ARG, "a program to compare against is open already");
    if (method < 0 || method >= d->mod->n_methods)
        return kiln_error(KILN_ERR_INVALID_ARG, "no method %d", method);
    const kiln_graph *g = &d->mod->methods[method];
    kiln_status st = kiln_program_open_with(path, NULL, &a->prog);
    if (st) return st;
    if (kiln_program_find_method(a->prog, g->name, &a->method))
        return kiln_error(KILN_ERR_INVALID_ARG, "its program has no method '%s'", g->name);
    int n_in = kiln_method_input_count(p, method);
    if (kiln_method_input_count(a->prog, a->method) != n_in)
        return kiln_error(KILN_ERR_INVALID_ARG, "method '%s' takes other inputs than the program's",
                          g->name);
    for (int i = 0; i < n_in; i++) {
        kiln_tensor_info t, want;
        if ((st = kiln_method_input_info(a->prog, a->method, i, &t)) ||
            (st = kiln_method_input_info(p, method, i, &want)))
            return st;
        if (strcmp(t.name, want.name) || t.dtype != want.dtype || t.ndim != want.ndim ||
            memcmp(t.shape, want.shape, sizeof t.shape))
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "method '%s' input '%s' differs from the program's", g->name, t.name);
    }
    const kiln_graph *fg = &kiln_program_module(a->prog)->methods[a->method];
    if (!(d->against_node = kiln_malloc((size_t)g->n_nodes * sizeof *d->against_node + 1)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        d->against_node[i] = -1;
        for (int j = 0; j < fg->n_nodes && d->against_node[i] < 0; j++)
            if (!strcmp(fg->nodes[j].name, g->nodes[i].name)) d->against_node[i] = j;
        *matched += d->against_node[i] >= 0;
    }
    if ((st = kiln_llm_bind(a->prog, &a->llm)) == KILN_ERR_NOMEM) return st; /* else no history */
    d->against_method = method;
    return kiln_session_create(a->prog, &a->sess);
}

void kiln_debugger_close(kiln_debugger *d) {
    if (!d) return;
    for (int k = 0; k < KILN_DEBUG_SIDES; k++) {
        side *s = &d->s[k];
        kiln_session_destroy(s->sess);
        kiln_llm_free(s->llm);
        kiln_program_close(s->prog);
    }
    for (int k = 0; k < KILN_DEBUG_SIDES; k++) {
        for (int i = 0; d->keep[k] && i < d->most_nodes; i++)
            kiln_free(d->keep[k][i].buf);
        kiln_free(d->keep[k]);
    }
    kiln_free(d->against_node);
    kiln_aligned_free(d->own);
    kiln_aligned_free(d->scratch);
    kiln_free(d);
}

const kiln_program *kiln_debugger_program(const kiln_debugger *d, kiln_debug_side which) {
    return which >= 0 && which < KILN_DEBUG_SIDES ? d->s[which].prog : NULL;
}

double kiln_debugger_bar(const kiln_debugger *d) {
    const kiln_program *p = d->s[KILN_DEBUG_BACKEND].prog;
    const kiln_module *m = kiln_program_module(p);
    double bar = 0;
    for (int k = 0; k < m->n_methods; k++)
        for (int i = 0; i < m->methods[k].n_nodes; i++) {
            const kiln_backend *b = kiln_program_node_backend(p, &m->methods[k].nodes[i]);
            double c = b && b->check_cos ? b->check_cos(m) : 0;
            if (c > 0 && (bar == 0 || c < bar)) bar = c;
        }
    return bar;
}

const kiln_llm *kiln_debugger_llm(const kiln_debugger *d) {
    return d->s[KILN_DEBUG_BACKEND].llm;
}
