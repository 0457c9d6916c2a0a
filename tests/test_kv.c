/* test_kv.c: the KV cache element type (`--kv-type f16|f32`). Both caches
 * run; each matches the double-precision oracle (which rounds keys and
 * values to f16 for the f16 cache); the two differ by no more than f16
 * rounding; the f16 cache takes half the state memory; any other cache dtype
 * is refused by the verifier, naming the node and the rule. */
#include "fixtures.h"
#include "harness.h"
#include "ir/ops.h"
#include "kiln/kiln.h"
#include "kiln/kiln_compile.h"
#include "runtime/runtime.h"

#define TOL 1e-5     /* each cache against its oracle */
#define F16_TOL 5e-3 /* f16 against f32 cache: a few f16 ulps (2^-11) through the layers */

static const kt_l2c_config CFG = {32, 40, 3, 8, 2, 320, 64, 0, 31}; /* GQA 4:1 */

enum { N_PREFILL = 11, N_DECODE = 9, N_TOK = N_PREFILL + N_DECODE };

/* Runs a prefill of N_PREFILL tokens (all-position logits) then N_DECODE
 * decodes; `logits` receives N_TOK rows of V. Returns the state bytes. */
static uint64_t run(const char *prog, const int32_t *toks, int V, float *logits, kiln_dtype *kv) {
    kiln_program *p;
    kiln_session *s;
    if (kiln_program_open(prog, &p)) return 0;
    if (kiln_session_create(p, &s)) return 0;
    uint64_t bytes = 0;
    for (int i = 0; i < p->mod.n_states; i++)
        bytes += p->mod.states[i].nbytes;
    *kv = p->mod.states[0].dtype;
    int pre, dec;
    kiln_program_find_method(p, "prefill", &pre);
    kiln_program_find_method(p, "decode", &dec);
    int64_t len = N_PREFILL, one = 1;
    int32_t pos0 = 0, all = 1;
    const void *out;
    kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &len);
    kiln_session_set_input(s, pre, 1, &pos0, KILN_I32, 1, &one);
    kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one);
    if (kiln_session_execute(s, pre) || kiln_session_get_output(s, pre, 0, &out, NULL, NULL, NULL))
        bytes = 0;
    else
        memcpy(logits, out, sizeof(float) * (size_t)V * N_PREFILL);
    for (int t = N_PREFILL; t < N_TOK && bytes; t++) {
        int32_t pos = t;
        kiln_session_set_input(s, dec, 0, &toks[t], KILN_I32, 1, &one);
        kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one);
        if (kiln_session_execute(s, dec) ||
            kiln_session_get_output(s, dec, 0, &out, NULL, NULL, NULL))
            bytes = 0;
        else
            memcpy(logits + (size_t)t * V, out, sizeof(float) * (size_t)V);
    }
    kiln_session_destroy(s);
    kiln_program_close(p);
    return bytes;
}

static double worst_vs_oracle(const char *bin, int kv_f16, const int32_t *toks, const float *got,
                              int V) {
    kt_oracle *o = kt_oracle_load(bin);
    kt_oracle_set_kv_f16(o, kv_f16);
    float *want = malloc(sizeof(float) * (size_t)V);
    double worst = 0;
    for (int t = 0; t < N_TOK; t++) {
        kt_oracle_forward(o, toks[t], t, want);
        double e = kt_rel_err(got + (size_t)t * V, want, V);
        if (e > worst || e != e) worst = e;
    }
    free(want);
    kt_oracle_free(o);
    return worst;
}

TEST(f16_and_f32_caches_differ_only_by_f16_rounding) {
    const char *bin = kt_path("kv.bin");
    ASSERT(kt_write_llama2c(bin, &CFG) == 0);
    ASSERT_OK(kt_compile_kv(bin, NULL, kt_path("kv16.kiln"), 16, 0, NULL, "f16"));
    ASSERT_OK(kt_compile_kv(bin, NULL, kt_path("kv32.kiln"), 16, 0, NULL, "f32"));
    ASSERT_OK(kt_compile_kv(bin, NULL, kt_path("kvdef.kiln"), 16, 0, NULL, NULL));
    int V = CFG.vocab;
    int32_t toks[N_TOK];
    unsigned long long rs = 99;
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)(kt_rand(&rs) % (unsigned)V);
    float *l16 = malloc(sizeof(float) * (size_t)V * N_TOK),
          *l32 = malloc(sizeof(float) * (size_t)V * N_TOK);
    float *ldef = malloc(sizeof(float) * (size_t)V * N_TOK);
    kiln_dtype d16, d32, ddef;
    uint64_t b16 = run(kt_path("kv16.kiln"), toks, V, l16, &d16);
    uint64_t b32 = run(kt_path("kv32.kiln"), toks, V, l32, &d32);
    uint64_t bdef = run(kt_path("kvdef.kiln"), toks, V, ldef, &ddef);
    ASSERT_MSG(b16 && b32 && bdef, "a program failed to run: %s", kiln_last_error());
    ASSERT_EQ_I(d16, KILN_F16);
    ASSERT_EQ_I(d32, KILN_F32);
    ASSERT_EQ_I(ddef, KILN_F16); /* the default */
    /* (layers) x 2 x max_seq x kv_dim x 2 bytes: half of f32's */
    ASSERT_EQ_U(b16, (uint64_t)CFG.layers * 2 * CFG.seq *
                         (uint64_t)(CFG.dim / CFG.heads * CFG.kv_heads) * 2);
    ASSERT_EQ_U(b32, 2 * b16);
    ASSERT(memcmp(l16, ldef, sizeof(float) * (size_t)V * N_TOK) == 0);
    double e32 = worst_vs_oracle(bin, 0, toks, l32, V), e16 = worst_vs_oracle(bin, 1, toks, l16, V);
    double d = 0;
    for (int t = 0; t < N_TOK; t++) {
        double e = kt_rel_err(l16 + (size_t)t * V, l32 + (size_t)t * V, V);
        if (e > d || e != e) d = e;
    }
    printf("  f32 cache vs oracle %.3g, f16 cache vs f16-rounding oracle %.3g, f16 vs f32 %.3g; "
           "state %llu vs %llu bytes\n",
           e32, e16, d, (unsigned long long)b16, (unsigned long long)b32);
    ASSERT_MSG(e32 <= TOL, "f32 cache: relative error %.3g > %g", e32, TOL);
    ASSERT_MSG(e16 <= TOL, "f16 cache: relative error %.3g > %g", e16, TOL);
    ASSERT_MSG(d > 0 && d <= F16_TOL, "f16 vs f32 cache: relative difference %.3g (want (0, %g])",
               d, F16_TOL);
    free(l16), free(l32), free(ldef);
}

TEST(unknown_kv_type_is_refused) {
    const char *bin = kt_path("kvbad.bin");
    ASSERT(kt_write_llama2c(bin, &CFG) == 0);
    ASSERT(kt_compile_kv(bin, NULL, kt_path("kvbad.kiln"), 8, 0, NULL, "q8_0") ==
           KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "'q8_0'");
    FILE *f = fopen(kt_path("kvbad.kiln"), "rb");
    ASSERT(f == NULL); /* nothing written */
}

/* cache (state) [8, 16] -> kv_store(cache, x, pos) -> attention(x, view, view, pos). */
static int build(kiln_module *m, kiln_dtype cache) {
    memset(m, 0, sizeof *m);
    int64_t sh[2] = {8, 16}, one[1] = {1}, xs[2] = {4, 16};
    if (kiln_module_add_state(m, "cache", cache, 2, sh) < 0) return -1;
    kiln_graph *g = kiln_module_add_method(m, "run", 4);
    int x = kiln_graph_input(g, "x", KILN_F32, 2, xs, 1);
    int pos = kiln_graph_input(g, "pos", KILN_I32, 1, one, 0);
    int c = kiln_graph_state(g, m, "cache");
    if (x < 0 || pos < 0 || c < 0) return -1;
    int v = kiln_graph_node(g, m, KILN_OP_KV_STORE, "store", 3, (int32_t[]){c, x, pos}, NULL, NULL);
    if (v < 0) return -1;
    int32_t ia[KILN_MAX_IATTR] = {2, 2, 8};
    float fa[KILN_MAX_FATTR] = {2.8f};
    int o = kiln_graph_node(g, m, KILN_OP_ATTENTION, "attn", 4, (int32_t[]){x, v, v, pos}, ia, fa);
    if (o < 0) return -1;
    return kiln_graph_output(g, o);
}

TEST(verifier_refuses_other_cache_dtypes) {
    kiln_module m;
    ASSERT_OK(build(&m, KILN_F16));
    ASSERT_OK(kiln_module_verify(&m, 0));
    kiln_module_free(&m);
    ASSERT_OK(build(&m, KILN_F32));
    ASSERT_OK(kiln_module_verify(&m, 0));
    kiln_module_free(&m);
    /* The builder refuses a bad cache at once, naming the node. */
    ASSERT(build(&m, KILN_BF16) < 0);
    ASSERT_CONTAINS(kiln_last_error(), "store");
    ASSERT_CONTAINS(kiln_last_error(), "cache must be f32 or f16");
    kiln_module_free(&m);
    /* A module changed after building (as a damaged file would be) is refused
     * by the verifier, naming the node and the rule. */
    static const kiln_dtype bad[] = {KILN_BF16, KILN_I32};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_OK(build(&m, KILN_F32));
        m.states[0].dtype = bad[i];
        kiln_graph *g = &m.methods[0];
        for (int k = 0; k < g->n_values; k++)
            if (g->values[k].kind == KILN_VAL_STATE || g->values[k].kind == KILN_VAL_VIEW)
                g->values[k].dtype = bad[i];
        ASSERT(kiln_module_verify(&m, 0) == KILN_ERR_FORMAT);
        ASSERT_CONTAINS(kiln_last_error(), "node 'store' (kv_store)");
        ASSERT_CONTAINS(kiln_last_error(), "cache must be f32 or f16");
        ASSERT_CONTAINS(kiln_last_error(), kiln_dtype_name(bad[i]));
        kiln_module_free(&m);
    }
}

TEST_MAIN(f16_and_f32_caches_differ_only_by_f16_rounding, unknown_kv_type_is_refused,
          verifier_refuses_other_cache_dtypes)
