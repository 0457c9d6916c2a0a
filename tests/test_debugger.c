/* test_debugger.c: the debugging engine (src/devtools/debugger.h) on small
 * random programs: the own error names the node the test backend perturbs
 * in the sample calls and after a history, and no other; the carried error
 * starts there and runs on; nodes on ref are skipped when asked; a third
 * program matched by node name; a hook's error, a cancel and bad arguments
 * stop a run with their status and message; out of memory at every
 * allocation is KILN_ERR_NOMEM. */
#include <stdio.h>

#include "devtools/debugger.h"
#include "fixtures.h"
#include "harness.h"
#include "runtime/introspect.h"

#define VOCAB 64
#define CTX 32
static const kt_l2c_config MODEL = {64, 96, 2, 4, 2, VOCAB, CTX, 0, 9};
#define PERTURBED "blk.1.attn_q"

static const char *program(const char *backends, const char *name) {
    static char paths[4][600];
    static int n;
    char *out = paths[n++ & 3];
    snprintf(out, 600, "%s", kt_path(name));
    if (kt_write_llama2c(kt_path("m.bin"), &MODEL) ||
        kt_compile(kt_path("m.bin"), NULL, out, 8, CTX, backends))
        return NULL;
    return out;
}

/* What a run's callbacks saw. */
typedef struct {
    int nodes[KILN_DEBUG_SIDES], calls[KILN_DEBUG_SIDES];
    int method_calls[2]; /* prefill, decode */
    int own, own_failed, carried, against, off_ref_own;
    int negative_ms;
    int units;            /* backend nodes that name a unit */
    char worst_own[64];   /* the node with the lowest own cosine */
    double worst_own_cos; /* ... that cosine */
    double other_own_cos; /* the lowest own cosine of the nodes not perturbed */
    int first_carried;    /* the first node whose carried cosine is below 1, -1 none */
    int perturbed_index;
    double against_min_cos;
    kiln_status fail_with; /* the node hook returns this, once past fail_after nodes */
    int fail_after;
    int pre;
} seen;

static void seen_init(seen *s) {
    memset(s, 0, sizeof *s);
    s->worst_own_cos = s->other_own_cos = s->against_min_cos = 2;
    s->first_carried = s->perturbed_index = -1;
}

static kiln_status on_node(void *user, const kiln_debug_node *e) {
    seen *s = user;
    s->nodes[e->side]++;
    if (e->ms < 0) s->negative_ms++;
    if (s->fail_with && s->nodes[e->side] > s->fail_after)
        return kiln_error(s->fail_with, "stopped by the test at node '%s'", e->node->name);
    int perturbed = !strcmp(e->node->name, PERTURBED);
    if (perturbed) s->perturbed_index = e->index;
    if (e->side == KILN_DEBUG_BACKEND) {
        s->units += e->unit != NULL;
        return KILN_OK;
    }
    if (e->own_status) s->own_failed++;
    if (e->own.valid) {
        s->own++;
        double c = e->own.mismatch ? -1 : e->own.v.cos;
        if (c < s->worst_own_cos) {
            s->worst_own_cos = c;
            snprintf(s->worst_own, sizeof s->worst_own, "%s", e->node->name);
        }
        if (!perturbed && c < s->other_own_cos) s->other_own_cos = c;
    }
    if (e->carried.valid) {
        s->carried++;
        if (s->first_carried < 0 && (e->carried.mismatch || e->carried.v.cos < 1))
            s->first_carried = e->index;
    }
    if (e->against.valid) {
        s->against++;
        double c = e->against.mismatch ? -1 : e->against.v.cos;
        if (c < s->against_min_cos) s->against_min_cos = c;
    }
    return KILN_OK;
}

static kiln_status on_call(void *user, kiln_debug_side side, int method) {
    seen *s = user;
    s->calls[side]++;
    s->method_calls[method == s->pre ? 0 : 1]++;
    return KILN_OK;
}

static int method_nodes(const kiln_debugger *d, const char *name) {
    const kiln_program *p = kiln_debugger_program(d, KILN_DEBUG_BACKEND);
    int m;
    if (kiln_program_find_method(p, name, &m)) return -1;
    return kiln_program_module(p)->methods[m].n_nodes;
}

TEST(sample_calls_name_the_perturbed_node) {
    const char *path = program("test:perturb=" PERTURBED, "p1.kiln");
    ASSERT(path);
    kiln_debugger *d;
    ASSERT_OK(kiln_debugger_open(path, NULL, &d));
    ASSERT(kiln_debugger_llm(d));
    ASSERT(kiln_debugger_program(d, KILN_DEBUG_REFERENCE));
    ASSERT(!kiln_debugger_program(d, KILN_DEBUG_AGAINST));
    int n_pre, n_dec;
    ASSERT_OK(kiln_debugger_samples(d, &n_pre, &n_dec));
    ASSERT_EQ_I(n_pre, KILN_DEBUG_SAMPLE_PREFILL);
    ASSERT_EQ_I(n_dec, KILN_DEBUG_SAMPLE_DECODES);
    seen s;
    seen_init(&s);
    s.pre = kiln_llm_prefill_method(kiln_debugger_llm(d));
    kiln_debug_hooks h = {KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN, on_node, on_call, &s};
    ASSERT_OK(kiln_debugger_run_samples(d, &h));
    int per_call = method_nodes(d, "prefill");
    ASSERT_EQ_I(method_nodes(d, "decode"), per_call);
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_REFERENCE], (1 + n_dec) * per_call);
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_BACKEND], 0);
    ASSERT_EQ_I(s.calls[KILN_DEBUG_REFERENCE], 1 + n_dec);
    ASSERT_EQ_I(s.method_calls[0], 1);
    ASSERT_EQ_I(s.method_calls[1], n_dec);
    ASSERT_EQ_I(s.carried, 0); /* the backend did not run */
    ASSERT_EQ_I(s.own_failed, 0);
    ASSERT_EQ_I(s.negative_ms, 0);
    ASSERT(s.own > 0);
    ASSERT_STR_EQ(s.worst_own, PERTURBED);
    ASSERT_MSG(s.worst_own_cos < 0.99, "perturbed node's own cos %g", s.worst_own_cos);
    ASSERT_MSG(s.other_own_cos > 0.99999, "another node's own cos %g", s.other_own_cos);
    /* the program as compiled, timed only */
    seen_init(&s);
    s.pre = kiln_llm_prefill_method(kiln_debugger_llm(d));
    kiln_debug_hooks hb = {KILN_DEBUG_RUN_BACKEND, on_node, on_call, &s};
    ASSERT_OK(kiln_debugger_run_samples(d, &hb));
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_BACKEND], (1 + n_dec) * per_call);
    ASSERT_EQ_I(s.units, s.nodes[KILN_DEBUG_BACKEND]); /* the test backend names its unit */
    ASSERT_EQ_I(s.own + s.carried, 0);
    kiln_debugger_close(d);
    kiln_debugger_close(NULL);
}

/* Sets a decode call's inputs: token id at pos. */
static kiln_status set_decode(kiln_debugger *d, int32_t id, int32_t pos) {
    const kiln_llm *lm = kiln_debugger_llm(d);
    int dec = kiln_llm_decode_method(lm);
    int64_t one = 1;
    kiln_status st = kiln_debugger_set_input(
        d, dec, kiln_llm_input_index(lm, KILN_LLM_DECODE_TOKENS), &id, KILN_I32, 1, &one);
    if (!st)
        st = kiln_debugger_set_input(d, dec, kiln_llm_input_index(lm, KILN_LLM_DECODE_POS), &pos,
                                     KILN_I32, 1, &one);
    return st;
}

TEST(carried_error_after_a_history) {
    const char *path = program("test:perturb=" PERTURBED, "p2.kiln");
    ASSERT(path);
    kiln_debugger *d;
    ASSERT_OK(kiln_debugger_open(path, NULL, &d));
    int32_t ids[12];
    for (int q = 0; q < 12; q++)
        ids[q] = (int32_t)(1 + 5 * q % (VOCAB - 1));
    ASSERT_OK(kiln_debugger_history(d, ids, 12)); /* two prefill calls of at most 8 */
    ASSERT_OK(set_decode(d, 7, 12));
    seen s;
    seen_init(&s);
    int dec = kiln_llm_decode_method(kiln_debugger_llm(d));
    kiln_debug_hooks h = {KILN_DEBUG_RUN_BACKEND | KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN,
                          on_node, on_call, &s};
    ASSERT_OK(kiln_debugger_execute(d, dec, &h));
    int n = method_nodes(d, "decode");
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_BACKEND], n);
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_REFERENCE], n);
    ASSERT_EQ_I(s.calls[KILN_DEBUG_BACKEND], 1);
    ASSERT_EQ_I(s.calls[KILN_DEBUG_REFERENCE], 1);
    ASSERT_EQ_I(s.carried, n);
    ASSERT(s.perturbed_index >= 0);
    /* the test backend runs ref's kernels: exact up to the perturbed node */
    ASSERT_EQ_I(s.first_carried, s.perturbed_index);
    ASSERT_STR_EQ(s.worst_own, PERTURBED);
    ASSERT(s.other_own_cos > 0.99999);
    kiln_debugger_close(d);
}

TEST(own_error_off_ref_only_when_asked) {
    /* rope on ref (the test backend refuses it), the rest on test */
    const char *path = program("test:refuse=rope", "p3.kiln");
    ASSERT(path);
    kiln_debugger *d;
    ASSERT_OK(kiln_debugger_open(path, NULL, &d));
    int total = 0, own_all = 0;
    for (int off = 0; off < 2; off++) {
        seen s;
        seen_init(&s);
        s.pre = kiln_llm_prefill_method(kiln_debugger_llm(d));
        unsigned run =
            KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN | (off ? KILN_DEBUG_OWN_OFF_REF : 0);
        kiln_debug_hooks h = {run, on_node, on_call, &s};
        ASSERT_OK(kiln_debugger_run_samples(d, &h));
        if (!off) {
            own_all = s.own;
            total = s.nodes[KILN_DEBUG_REFERENCE];
            ASSERT(own_all > 0 && own_all <= total);
        } else {
            ASSERT_MSG(s.own > 0 && s.own < own_all, "%d own errors off ref, %d in all", s.own,
                       own_all);
        }
    }
    kiln_debugger_close(d);
}

TEST(against_a_program_matched_by_name) {
    const char *path = program("cpu", "c.kiln"), *ref = program("ref", "r.kiln");
    ASSERT(path && ref);
    kiln_debugger *d;
    kiln_debugger_options o;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    ASSERT_OK(kiln_debugger_open(path, &o, &d));
    const kiln_llm *lm = kiln_debugger_llm(d);
    int dec = kiln_llm_decode_method(lm), pre = kiln_llm_prefill_method(lm), matched = -1;
    ASSERT_EQ_I(kiln_debugger_against(d, kt_path("nope.kiln"), dec, &matched), KILN_ERR_IO);
    ASSERT_EQ_I(matched, 0);
    kiln_debugger_close(d);
    ASSERT_OK(kiln_debugger_open(path, &o, &d));
    ASSERT_OK(kiln_debugger_against(d, ref, dec, &matched));
    ASSERT_EQ_I(matched, method_nodes(d, "decode"));
    ASSERT(kiln_debugger_program(d, KILN_DEBUG_AGAINST));
    int again;
    ASSERT_EQ_I(kiln_debugger_against(d, ref, dec, &again), KILN_ERR_INVALID_ARG);
    int32_t ids[5] = {3, 1, 4, 1, 5};
    ASSERT_OK(kiln_debugger_history(d, ids, 5));
    ASSERT_OK(set_decode(d, 9, 5));
    seen s;
    seen_init(&s);
    s.pre = pre;
    kiln_debug_hooks h = {KILN_DEBUG_RUN_AGAINST | KILN_DEBUG_RUN_BACKEND |
                              KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN,
                          on_node, on_call, &s};
    ASSERT_OK(kiln_debugger_execute(d, dec, &h));
    ASSERT_EQ_I(s.calls[KILN_DEBUG_AGAINST], 1);
    ASSERT_EQ_I(s.nodes[KILN_DEBUG_AGAINST], 0); /* kept, not called back */
    ASSERT_EQ_I(s.against, matched);
    /* the same weights on ref, the same history: the reference's own twin */
    ASSERT_NEAR(s.against_min_cos, 1.0, 1e-12);
    /* another method than the one it was opened for */
    ASSERT_EQ_I(kiln_debugger_execute(d, pre, &h), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "runs method 'decode' only");
    kiln_debugger_close(d);
}

static int cancel_now(void *user) {
    return ++*(int *)user > 3;
}

TEST(errors_stop_a_run) {
    const char *path = program("test:perturb=" PERTURBED, "p4.kiln");
    ASSERT(path);
    kiln_debugger *d;
    kiln_debugger_options o;
    memset(&o, 0, sizeof o);
    o.label[KILN_DEBUG_REFERENCE] = "on ref";
    int polls = 0;
    o.cancel = cancel_now;
    o.cancel_user = &polls;
    ASSERT_EQ_I(kiln_debugger_open(kt_path("nope.kiln"), &o, &d), KILN_ERR_IO);
    o.reference = "npu";
    ASSERT_EQ_I(kiln_debugger_open(path, &o, &d), KILN_ERR_UNSUPPORTED);
    o.reference = NULL;
    ASSERT_OK(kiln_debugger_open(path, &o, &d));
    seen s;
    seen_init(&s);
    kiln_debug_hooks h = {KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN, on_node, NULL, &s};
    /* the cancel poll */
    ASSERT_EQ_I(kiln_debugger_run_samples(d, &h), KILN_ERR_CANCELLED);
    ASSERT_CONTAINS(kiln_last_error(), "on ref: interrupted");
    o.cancel = NULL;
    kiln_debugger_close(d);
    ASSERT_OK(kiln_debugger_open(path, &o, &d));
    /* a hook's own error, its message kept past the executor's */
    seen_init(&s);
    s.fail_with = KILN_ERR_IO;
    s.fail_after = 5;
    ASSERT_EQ_I(kiln_debugger_run_samples(d, &h), KILN_ERR_IO);
    ASSERT_CONTAINS(kiln_last_error(), "on ref: stopped by the test at node");
    ASSERT_EQ_I(kiln_debugger_execute(d, 99, &h), KILN_ERR_INVALID_ARG);
    h.run |= KILN_DEBUG_RUN_AGAINST;
    ASSERT_EQ_I(kiln_debugger_execute(d, 0, &h), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "no program to compare against");
    /* a history token outside the vocabulary, said with the side and call */
    int32_t bad[3] = {1, VOCAB, 2};
    ASSERT_EQ_I(kiln_debugger_history(d, bad, 3), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "backend: building the history: prefill of 3 tokens at 0");
    kiln_debugger_close(d);
}

/* Open, the sample calls with own errors, a decode with both sides. */
static kiln_status whole_run(void *user) {
    const char *path = user;
    kiln_debugger *d;
    kiln_status st = kiln_debugger_open(path, NULL, &d);
    if (st) return st;
    seen s;
    seen_init(&s);
    kiln_debug_hooks h = {KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN, on_node, NULL, &s};
    st = kiln_debugger_run_samples(d, &h);
    if (!st) st = set_decode(d, 4, 11);
    h.run |= KILN_DEBUG_RUN_BACKEND;
    if (!st) st = kiln_debugger_execute(d, kiln_llm_decode_method(kiln_debugger_llm(d)), &h);
    kiln_debugger_close(d);
    return st;
}

TEST(out_of_memory_at_every_allocation) {
    const char *path = program("test:perturb=" PERTURBED, "p5.kiln");
    ASSERT(path);
    int n;
    for (n = 1; n < 2000; n++) {
        kiln_fail_alloc_after(n);
        kiln_status st = whole_run((void *)path);
        void *probe = kiln_malloc(1); /* NULL: the injected failure never came */
        kiln_fail_alloc_after(0);
        int pending = probe == NULL;
        kiln_free(probe);
        if (!st && pending) break; /* every allocation succeeded */
        ASSERT_MSG(st == KILN_ERR_NOMEM, "allocation %d: status %d (%s)", n, (int)st,
                   kiln_last_error());
        ASSERT_CONTAINS(kiln_last_error(), "out of memory");
    }
    ASSERT_MSG(n > 5 && n < 2000, "%d allocations", n);
}

TEST_MAIN(sample_calls_name_the_perturbed_node, carried_error_after_a_history,
          own_error_off_ref_only_when_asked, against_a_program_matched_by_name, errors_stop_a_run,
          out_of_memory_at_every_allocation)
