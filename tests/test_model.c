/* test_model.c: Kiln's logits against an independent forward pass on tiny
 * random llama2.c models: every position of a prefill, and decode steps
 * after it, across shapes (GQA, odd widths, shared and stored classifier). */
#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln.h"
#include "kiln/kiln_compile.h"

#define TOL 1e-5
/* The cpu backend sums in another order; through the f16 KV cache a last-bit
 * difference can round a key or value to the neighbouring half (2^-11). */
#define TOL_CPU 1e-3

static const kt_l2c_config CONFIGS[] = {
    {32, 48, 2, 4, 4, 300, 64, 1, 11},  /* plain multi-head */
    {32, 40, 3, 8, 2, 320, 64, 0, 12},  /* GQA 4:1, stored classifier */
    {24, 37, 1, 3, 1, 290, 48, 1, 13},  /* odd hidden, MQA, head size 8 */
    {64, 172, 2, 8, 4, 512, 96, 1, 14}, /* the stories260K shape, shorter */
};

/* Prefill `n` tokens in one call with all-position logits, then decode
 * `extra` more, comparing every logit vector with the oracle. */
static int check_config(const kt_l2c_config *c, int n, int extra, const char *backends,
                        double *worst) {
    char name[64];
    snprintf(name, sizeof name, "m%llu.bin", c->seed);
    const char *bin = kt_path(name);
    snprintf(name, sizeof name, "m%llu.kiln", c->seed);
    const char *prog_path = kt_path(name);
    if (kt_write_llama2c(bin, c)) return -1;
    if (kt_compile(bin, NULL, prog_path, 16, 0, backends)) {
        fprintf(stderr, "  compile: %s\n", kiln_last_error());
        return -1;
    }
    kiln_program *p;
    kiln_session *s;
    if (kiln_program_open(prog_path, &p)) return -1;
    if (kiln_session_create(p, &s)) return -1;
    kt_oracle *o = kt_oracle_load(bin);
    kt_oracle_set_kv_f16(o, 1); /* the program has the default f16 KV cache */
    int V = kt_oracle_vocab(o), rc = 0;
    float *want = malloc(sizeof(float) * (size_t)V);
    unsigned long long rs = c->seed * 7 + 1;
    int32_t toks[64];
    for (int i = 0; i < n + extra; i++)
        toks[i] = (int32_t)(kt_rand(&rs) % (unsigned)V);
    int pre, dec;
    kiln_program_find_method(p, "prefill", &pre);
    kiln_program_find_method(p, "decode", &dec);
    int64_t len = n, one = 1;
    int32_t pos0 = 0, all = 1;
    kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &len);
    kiln_session_set_input(s, pre, 1, &pos0, KILN_I32, 1, &one);
    kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one);
    if (kiln_session_execute(s, pre)) {
        fprintf(stderr, "  prefill: %s\n", kiln_last_error());
        rc = -1;
        goto done;
    }
    const void *out;
    int64_t shape[4];
    kiln_session_get_output(s, pre, 0, &out, NULL, NULL, shape);
    if (shape[0] != n || shape[1] != V) {
        fprintf(stderr, "  prefill output shape [%lld, %lld]\n", (long long)shape[0],
                (long long)shape[1]);
        rc = -1;
        goto done;
    }
    for (int t = 0; t < n; t++) {
        kt_oracle_forward(o, toks[t], t, want);
        double e = kt_rel_err((const float *)out + (size_t)t * V, want, V);
        if (e > *worst) *worst = e;
    }
    for (int t = n; t < n + extra; t++) {
        int32_t pos = t;
        kiln_session_set_input(s, dec, 0, &toks[t], KILN_I32, 1, &one);
        kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one);
        if (kiln_session_execute(s, dec)) {
            fprintf(stderr, "  decode: %s\n", kiln_last_error());
            rc = -1;
            goto done;
        }
        kiln_session_get_output(s, dec, 0, &out, NULL, NULL, shape);
        kt_oracle_forward(o, toks[t], t, want);
        double e = kt_rel_err(out, want, V);
        if (e > *worst) *worst = e;
    }
done:
    free(want);
    kt_oracle_free(o);
    kiln_session_destroy(s);
    kiln_program_close(p);
    return rc;
}

TEST(logits_match_oracle_every_position) {
    for (size_t i = 0; i < sizeof CONFIGS / sizeof *CONFIGS; i++)
        for (int cpu = 0; cpu <= 1; cpu++) {
            double worst = 0, tol = cpu ? TOL_CPU : TOL;
            ASSERT_MSG(check_config(&CONFIGS[i], 13, 20, cpu ? "cpu" : "ref", &worst) == 0,
                       "config %zu failed to run", i);
            printf("  config %zu on %s: worst relative error %.3g\n", i, cpu ? "cpu" : "ref",
                   worst);
            ASSERT_MSG(worst <= tol, "config %zu on %s: relative error %.3g > %g", i,
                       cpu ? "cpu" : "ref", worst, tol);
        }
}

/* The oracle is sensitive: a model whose weights differ in one value gives
 * logits the check would reject (so the tolerance above means something). */
TEST(oracle_detects_a_changed_weight) {
    kt_l2c_config c = CONFIGS[0];
    const char *bin = kt_path("changed.bin");
    size_t len;
    uint8_t *b = kt_llama2c_bytes(&c, &len);
    ASSERT(b);
    ASSERT(kt_write_file(kt_path("orig.bin"), b, len) == 0);
    float w;
    size_t at = 28 + 4 * (size_t)(c.vocab * c.dim + c.layers * c.dim + 5); /* inside wq */
    memcpy(&w, b + at, 4);
    w += 0.05f;
    memcpy(b + at, &w, 4);
    ASSERT(kt_write_file(bin, b, len) == 0);
    free(b);
    ASSERT_OK(kt_compile(kt_path("orig.bin"), NULL, kt_path("orig.kiln"), 8, 0, NULL));
    kiln_program *p;
    kiln_session *s;
    ASSERT_OK(kiln_program_open(kt_path("orig.kiln"), &p));
    ASSERT_OK(kiln_session_create(p, &s));
    kt_oracle *o = kt_oracle_load(bin);
    int V = kt_oracle_vocab(o);
    float *want = malloc(sizeof(float) * (size_t)V);
    int dec;
    ASSERT_OK(kiln_program_find_method(p, "decode", &dec));
    double worst = 0;
    for (int t = 0; t < 4; t++) {
        int32_t tok = 7 + t, pos = t;
        int64_t one = 1;
        ASSERT_OK(kiln_session_set_input(s, dec, 0, &tok, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_execute(s, dec));
        const void *out;
        ASSERT_OK(kiln_session_get_output(s, dec, 0, &out, NULL, NULL, NULL));
        kt_oracle_forward(o, tok, t, want);
        double e = kt_rel_err(out, want, V);
        if (e > worst) worst = e;
    }
    free(want);
    kt_oracle_free(o);
    kiln_session_destroy(s);
    kiln_program_close(p);
    ASSERT_MSG(worst > 100 * TOL, "a changed weight gave only %.3g relative error", worst);
}

/* Prefill in chunks gives the same logits, bit for bit, as one call: ref's
 * rows do not depend on batching. */
TEST(chunked_prefill_equals_single_call) {
    kt_l2c_config c = CONFIGS[1];
    ASSERT(kt_write_llama2c(kt_path("chunk.bin"), &c) == 0);
    ASSERT_OK(kt_compile(kt_path("chunk.bin"), NULL, kt_path("chunk.kiln"), 32, 0, NULL));
    kiln_program *p;
    ASSERT_OK(kiln_program_open(kt_path("chunk.kiln"), &p));
    kiln_session *a, *b;
    ASSERT_OK(kiln_session_create(p, &a));
    ASSERT_OK(kiln_session_create(p, &b));
    int pre;
    ASSERT_OK(kiln_program_find_method(p, "prefill", &pre));
    int32_t toks[30], zero = 0;
    for (int i = 0; i < 30; i++)
        toks[i] = (i * 37 + 5) % c.vocab;
    int64_t one = 1, n = 30;
    ASSERT_OK(kiln_session_set_input(a, pre, 0, toks, KILN_I32, 1, &n));
    ASSERT_OK(kiln_session_set_input(a, pre, 1, &zero, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_set_input(a, pre, 2, &zero, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_execute(a, pre));
    static const int cuts[] = {0, 7, 8, 21, 30};
    for (int k = 0; k < 4; k++) {
        int64_t len = cuts[k + 1] - cuts[k];
        int32_t pos = cuts[k];
        ASSERT_OK(kiln_session_set_input(b, pre, 0, toks + cuts[k], KILN_I32, 1, &len));
        ASSERT_OK(kiln_session_set_input(b, pre, 1, &pos, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_set_input(b, pre, 2, &zero, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_execute(b, pre));
    }
    const void *la, *lb;
    int64_t sa[4], sb[4];
    ASSERT_OK(kiln_session_get_output(a, pre, 0, &la, NULL, NULL, sa));
    ASSERT_OK(kiln_session_get_output(b, pre, 0, &lb, NULL, NULL, sb));
    ASSERT_EQ_I(sa[0], 1);
    ASSERT_EQ_I(sb[0], 1);
    ASSERT(memcmp(la, lb, sizeof(float) * (size_t)c.vocab) == 0);
    kiln_session_destroy(a);
    kiln_session_destroy(b);
    kiln_program_close(p);
}

/* --quant converts matmul and embedding weights only; the logits stay near
 * the f32 oracle by each format's precision, and norms stay f32. */
TEST(quantized_weights_stay_close) {
    kt_l2c_config c = {64, 128, 2, 4, 2, 320, 64, 1, 21};
    ASSERT(kt_write_llama2c(kt_path("q.bin"), &c) == 0);
    /* On ref the error is the format's alone; the cpu backend also quantizes
     * activations to 8 bits for q8_0/q4_0 weights. */
    static const struct {
        const char *fmt;
        double tol, tol_cpu;
    } cases[] = {{"f16", 2e-3, 2e-3}, {"q8_0", 2e-2, 4e-2}, {"q4_0", 2e-1, 2e-1}};
    kt_oracle *o = kt_oracle_load(kt_path("q.bin"));
    float *want = malloc(sizeof(float) * 320 * 8);
    for (int t = 0; t < 8; t++)
        kt_oracle_forward(o, 3 + 17 * t, t, want + 320 * t);
    for (size_t k = 0; k < 2 * sizeof cases / sizeof *cases; k++) {
        int cpu = k & 1;
        double tol = cpu ? cases[k / 2].tol_cpu : cases[k / 2].tol;
        kiln_compile_options opt;
        kiln_compile_options_init(&opt);
        opt.input = kt_path("q.bin");
        opt.output = kt_path("q.kiln");
        opt.quant = cases[k / 2].fmt;
        opt.backends = cpu ? "cpu" : "ref";
        ASSERT_OK(kiln_compile(&opt));
        kiln_program *p;
        kiln_session *s;
        ASSERT_OK(kiln_program_open(kt_path("q.kiln"), &p));
        ASSERT_OK(kiln_session_create(p, &s));
        int pre;
        ASSERT_OK(kiln_program_find_method(p, "prefill", &pre));
        int32_t toks[8], zero = 0, all = 1;
        for (int t = 0; t < 8; t++)
            toks[t] = 3 + 17 * t;
        int64_t n = 8, one = 1;
        ASSERT_OK(kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &n));
        ASSERT_OK(kiln_session_set_input(s, pre, 1, &zero, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_execute(s, pre));
        const void *out;
        ASSERT_OK(kiln_session_get_output(s, pre, 0, &out, NULL, NULL, NULL));
        double worst = 0, err;
        for (int t = 0; t < 8; t++)
            if ((err = kt_rel_err((const float *)out + 320 * t, want + 320 * t, 320)) > worst)
                worst = err;
        printf("  --quant %s on %s: worst relative error %.3g (bound %g)\n", cases[k / 2].fmt,
               opt.backends, worst, tol);
        ASSERT_MSG(worst <= tol && worst > 0, "--quant %s on %s: error %.3g", cases[k / 2].fmt,
                   opt.backends, worst);
        kiln_session_destroy(s);
        kiln_program_close(p);
    }
    free(want);
    kt_oracle_free(o);
}

TEST_MAIN(logits_match_oracle_every_position, quantized_weights_stay_close,
          oracle_detects_a_changed_weight, chunked_prefill_equals_single_call)
