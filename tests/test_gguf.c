/* test_gguf.c: GGUF import. A llama2.c fixture re-expressed as a GGUF
 * 'llama' model must give the same logits as the llama2.c import (f32:
 * bit for bit; f16 / q8_0 / q4_0 within each format's precision of the
 * oracle), metadata is kept as found, and damaged or unsupported GGUFs are
 * clear errors naming the file, key or tensor. */
#include "fixtures.h"
#include "gguf_writer.h"
#include "harness.h"
#include "kiln/kiln.h"
#include "kiln/kiln_compile.h"
#include "runtime/runtime.h"

static const kt_l2c_config CFG = {64, 96, 2, 4, 2, 320, 64, 0, 31};

/* Runs 6 prompt tokens through prefill (all logits) and 4 decode steps;
 * writes 10 x vocab logits. */
static int run_logits(const char *prog, float *out, int vocab) {
    kiln_program *p;
    kiln_session *s;
    if (kiln_program_open(prog, &p)) return -1;
    if (kiln_session_create(p, &s)) return -1;
    int pre, dec;
    kiln_program_find_method(p, "prefill", &pre);
    kiln_program_find_method(p, "decode", &dec);
    int32_t toks[10] = {5, 77, 300, 12, 9, 250, 31, 64, 100, 7}, zero = 0, all = 1;
    int64_t n = 6, one = 1;
    const void *o;
    int rc = -1;
    if (kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &n) ||
        kiln_session_set_input(s, pre, 1, &zero, KILN_I32, 1, &one) ||
        kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one) ||
        kiln_session_execute(s, pre) || kiln_session_get_output(s, pre, 0, &o, NULL, NULL, NULL))
        goto done;
    memcpy(out, o, sizeof(float) * 6 * (size_t)vocab);
    for (int t = 6; t < 10; t++) {
        int32_t pos = t;
        if (kiln_session_set_input(s, dec, 0, &toks[t], KILN_I32, 1, &one) ||
            kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one) ||
            kiln_session_execute(s, dec) ||
            kiln_session_get_output(s, dec, 0, &o, NULL, NULL, NULL))
            goto done;
        memcpy(out + (size_t)t * vocab, o, sizeof(float) * (size_t)vocab);
    }
    rc = 0;
done:
    kiln_session_destroy(s);
    kiln_program_close(p);
    return rc;
}

TEST(f32_gguf_equals_llama2c_import) {
    size_t len, glen;
    uint8_t *l2c = kt_llama2c_bytes(&CFG, &len);
    ASSERT(kt_write_file(kt_path("m.bin"), l2c, len) == 0);
    kt_gguf *g = kt_gguf_from_llama2c(l2c, 0);
    uint8_t *gg = kt_gguf_bytes(g, &glen);
    kt_gguf_free(g);
    ASSERT(kt_write_file(kt_path("m.gguf"), gg, glen) == 0);
    free(gg);
    free(l2c);
    ASSERT_OK(kt_compile(kt_path("m.bin"), NULL, kt_path("a.kiln"), 16, 0, NULL));
    ASSERT_OK(kt_compile(kt_path("m.gguf"), NULL, kt_path("b.kiln"), 16, 0, NULL));
    float *a = malloc(sizeof(float) * 10 * 320), *b = malloc(sizeof(float) * 10 * 320);
    ASSERT(run_logits(kt_path("a.kiln"), a, 320) == 0);
    ASSERT_MSG(run_logits(kt_path("b.kiln"), b, 320) == 0, "%s", kiln_last_error());
    ASSERT(memcmp(a, b, sizeof(float) * 10 * 320) == 0);
    free(a);
    free(b);
    kiln_program *p;
    ASSERT_OK(kiln_program_open(kt_path("b.kiln"), &p));
    ASSERT_STR_EQ(kiln_program_meta_str(p, "general.name"), "kiln test fixture");
    ASSERT_STR_EQ(kiln_program_meta_str(p, "general.architecture"), "llama");
    int64_t v;
    ASSERT_OK(kiln_program_meta_int(p, "llama.block_count", &v));
    ASSERT_EQ_I(v, 2);
    kiln_program_close(p);
}

/* On ref the error is the weights' format alone; the cpu backend also
 * quantizes activations to 8 bits for q8_0/q4_0 weights (its own bound). */
TEST(quantized_gguf_close_to_oracle) {
    static const struct {
        uint32_t type;
        const char *name;
        double tol, tol_cpu;
    } cases[] = {{1, "f16", 2e-3, 2e-3}, {8, "q8_0", 2e-2, 4e-2}, {2, "q4_0", 2e-1, 2e-1}};
    size_t len;
    uint8_t *l2c = kt_llama2c_bytes(&CFG, &len);
    ASSERT(kt_write_file(kt_path("o.bin"), l2c, len) == 0);
    kt_oracle *o = kt_oracle_load(kt_path("o.bin"));
    float *want = malloc(sizeof(float) * 10 * 320), *got = malloc(sizeof(float) * 10 * 320);
    int32_t toks[10] = {5, 77, 300, 12, 9, 250, 31, 64, 100, 7};
    for (int t = 0; t < 10; t++)
        kt_oracle_forward(o, toks[t], t, want + 320 * t);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        kt_gguf *g = kt_gguf_from_llama2c(l2c, cases[k].type);
        ASSERT(kt_gguf_write(g, kt_path("q.gguf")) == 0);
        kt_gguf_free(g);
        for (int cpu = 0; cpu <= 1; cpu++) {
            ASSERT_OK(
                kt_compile(kt_path("q.gguf"), NULL, kt_path("q.kiln"), 16, 0, cpu ? "cpu" : "ref"));
            ASSERT(run_logits(kt_path("q.kiln"), got, 320) == 0);
            double worst = 0, e, tol = cpu ? cases[k].tol_cpu : cases[k].tol;
            for (int t = 0; t < 10; t++)
                if ((e = kt_rel_err(got + 320 * t, want + 320 * t, 320)) > worst) worst = e;
            printf("  %s gguf on %s: worst relative error %.3g (bound %g)\n", cases[k].name,
                   cpu ? "cpu" : "ref", worst, tol);
            ASSERT_MSG(worst > 0 && worst <= tol, "%s on %s: %.3g", cases[k].name,
                       cpu ? "cpu" : "ref", worst);
        }
    }
    kt_oracle_free(o);
    free(want);
    free(got);
    free(l2c);
}

/* ---- damaged and unsupported files ------------------------------------------ */

typedef void (*damage_fn)(kt_gguf *g);
static void d_arch(kt_gguf *g) {
    kt_gguf_str(g, "general.architecture", "gpt2");
}
static void d_no_arch(kt_gguf *g) {
    kt_gguf_drop_kv(g, "general.architecture");
}
static void d_no_width(kt_gguf *g) {
    kt_gguf_drop_kv(g, "llama.embedding_length");
}
static void d_width_str(kt_gguf *g) {
    kt_gguf_str(g, "llama.embedding_length", "sixty-four");
}
static void d_heads_zero(kt_gguf *g) {
    kt_gguf_u32(g, "llama.attention.head_count", 0);
}
static void d_kv_heads(kt_gguf *g) {
    kt_gguf_u32(g, "llama.attention.head_count_kv", 3);
}
static void d_layers_more(kt_gguf *g) {
    kt_gguf_u32(g, "llama.block_count", 3);
}
static void d_eps_str(kt_gguf *g) {
    kt_gguf_str(g, "llama.attention.layer_norm_rms_epsilon", "x");
}
static void d_align(kt_gguf *g) {
    kt_gguf_u32(g, "general.alignment", 24);
}
static void d_version1(kt_gguf *g) {
    g->version = 1;
}
static void d_version4(kt_gguf *g) {
    g->version = 4;
}
static void d_missing_tensor(kt_gguf *g) {
    kt_gguf_drop_tensor(g, "blk.1.attn_k.weight");
}
static void d_missing_embd(kt_gguf *g) {
    kt_gguf_drop_tensor(g, "token_embd.weight");
}
static void d_shape(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.0.ffn_up.weight")->ne[1] = 95;
}
static void d_type(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.0.attn_v.weight")->type = 6; /* Q5_0 */
}
static void d_type_unknown(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.0.attn_v.weight")->type = 99;
}
static void d_ndim(kt_gguf *g) {
    kt_gguf_find_tensor(g, "output_norm.weight")->ndim = 0;
}
static void d_offset_misaligned(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.1.attn_q.weight")->offset_override = 3;
}
static void d_offset_past(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.1.attn_q.weight")->offset_override = 1 << 30;
}
static void d_dup(kt_gguf *g) {
    kt_gguf_tensor_t t = *kt_gguf_find_tensor(g, "blk.0.attn_q.weight"); /* adding may move it */
    uint8_t *copy = malloc(t.nbytes);
    memcpy(copy, t.data, t.nbytes);
    kt_gguf_tensor(g, "blk.0.attn_q.weight", t.type, t.ndim, t.ne, copy, t.nbytes);
    free(copy);
}
static void d_norm_f16(kt_gguf *g) {
    kt_gguf_tensor_t *t = kt_gguf_find_tensor(g, "blk.0.ffn_norm.weight");
    t->type = 1;
    t->nbytes /= 2;
}
static void d_dim_zero(kt_gguf *g) {
    kt_gguf_find_tensor(g, "blk.0.attn_q.weight")->ne[0] = 0;
}
static void d_key_type(kt_gguf *g) {
    kt_gguf_find_kv(g, "llama.block_count")->type = 77;
}
static void d_nested(kt_gguf *g) {
    int32_t v[2] = {1, 2};
    kt_gguf_i32s(g, "general.tags", v, 2);
    kt_gguf_find_kv(g, "general.tags")->payload[0] = 9; /* element type: array */
}

TEST(damaged_and_unsupported_ggufs) {
    static const struct {
        damage_fn f;
        const char *expect;
    } cases[] = {
        {d_arch, "architecture 'gpt2' is not one Kiln builds"},
        {d_no_arch, "metadata key 'general.architecture' is missing"},
        {d_no_width, "metadata key 'llama.embedding_length' is missing"},
        {d_width_str, "metadata key 'llama.embedding_length' should be an integer"},
        {d_heads_zero, "head count 0 out of range"},
        {d_kv_heads, "KV head count 3 must divide the head count 4"},
        {d_layers_more, "tensor 'blk.2.attn_norm.weight' is missing"},
        {d_eps_str, "'llama.attention.layer_norm_rms_epsilon' should be a number"},
        {d_align, "general.alignment is 24"},
        {d_version1, "GGUF version 1; Kiln reads versions 2 and 3"},
        {d_version4, "GGUF version 4"},
        {d_missing_tensor, "tensor 'blk.1.attn_k.weight' is missing (expected shape [32, 64])"},
        {d_missing_embd, "tensor 'token_embd.weight' is missing"},
        {d_shape, "tensor 'blk.0.ffn_up.weight' has shape [95, 64], expected [96, 64]"},
        {d_type, "tensor 'blk.0.attn_v.weight' has type Q5_0, which Kiln does not read"},
        {d_type_unknown, "has type unknown"},
        {d_ndim, "tensor 'output_norm.weight' has 0 dims"},
        {d_offset_misaligned,
         "tensor 'blk.1.attn_q.weight' offset 3 is not a multiple of the alignment 32"},
        {d_offset_past, "tensor 'blk.1.attn_q.weight': offset"},
        {d_dup, "tensor 'blk.0.attn_q.weight' appears twice"},
        {d_norm_f16, "tensor 'blk.0.ffn_norm.weight' is f16; Kiln needs norms and biases in f32"},
        {d_dim_zero, "tensor 'blk.0.attn_q.weight' dim 0 is 0"},
        {d_key_type, "metadata key 'llama.block_count' has unknown value type 77"},
        {d_nested, "array 'general.tags' has element type 9"},
    };
    size_t len;
    uint8_t *l2c = kt_llama2c_bytes(&CFG, &len);
    int n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kt_gguf *g = kt_gguf_from_llama2c(l2c, 0);
        cases[i].f(g);
        ASSERT(kt_gguf_write(g, kt_path("bad.gguf")) == 0);
        kt_gguf_free(g);
        int st = kt_compile(kt_path("bad.gguf"), NULL, kt_path("bad.kiln"), 16, 0, NULL);
        ASSERT_MSG(st != 0, "case %zu (%s) compiled", i, cases[i].expect);
        ASSERT_CONTAINS(kiln_last_error(), cases[i].expect);
        ASSERT_CONTAINS(kiln_last_error(), "bad.gguf");
        n++;
    }
    /* Truncated at 40 offsets through the file: header, metadata, tensor
     * infos, data. */
    kt_gguf *g = kt_gguf_from_llama2c(l2c, 8);
    size_t glen;
    uint8_t *gg = kt_gguf_bytes(g, &glen);
    kt_gguf_free(g);
    for (int k = 0; k < 40; k++) {
        size_t cut = k < 20 ? (size_t)k * 37 : glen * (size_t)(k - 19) / 21;
        if (cut >= glen) cut = glen - 1;
        ASSERT(kt_write_file(kt_path("cut.gguf"), gg, cut) == 0);
        int st = kt_compile(kt_path("cut.gguf"), NULL, kt_path("cut.kiln"), 16, 0, NULL);
        ASSERT_MSG(st != 0, "truncated at %zu of %zu compiled", cut, glen);
        ASSERT_MSG(strlen(kiln_last_error()) > 10, "no message at cut %zu", cut);
        n++;
    }
    /* Absurd counts in the header. */
    for (int k = 0; k < 4; k++) {
        uint8_t *c = malloc(glen);
        memcpy(c, gg, glen);
        uint64_t huge = k < 2 ? ((uint64_t)1 << 40) : UINT64_MAX;
        memcpy(c + (k % 2 ? 16 : 8), &huge, 8); /* tensor_count / metadata_kv_count */
        ASSERT(kt_write_file(kt_path("count.gguf"), c, glen) == 0);
        free(c);
        ASSERT(kt_compile(kt_path("count.gguf"), NULL, kt_path("count.kiln"), 16, 0, NULL) != 0);
        ASSERT_CONTAINS(kiln_last_error(), "more than the file can hold");
        n++;
    }
    free(gg);
    free(l2c);
    printf("  %d damaged GGUF files rejected\n", n);
}

/* Every metadata key is copied as found (kiln_gguf_store_meta, which
 * kiln_tokenizer_load shares for the tokenizer.* keys): each scalar and
 * array element type. A key the program cannot hold (KILN_NAME_MAX) is
 * refused naming it. */
TEST(metadata_kept_as_found) {
    size_t len, glen;
    uint8_t *l2c = kt_llama2c_bytes(&CFG, &len);
    kt_gguf *g = kt_gguf_from_llama2c(l2c, 0);
    free(l2c);
    const uint8_t u8s[2] = {0, 255};
    const int8_t i8s[2] = {-1, 127};
    const uint16_t u16s[1] = {65535};
    const int16_t i16s[1] = {-32768};
    const uint32_t u32s[1] = {4294967295u};
    const int64_t i64s[1] = {-5};
    const uint64_t u64s[1] = {((uint64_t)1 << 63) + 1};
    const uint8_t bools[2] = {1, 0};
    const double f64s[2] = {0.25, -1e300};
    kt_gguf_array(g, "test.u8s", 0, u8s, 1, 2);
    kt_gguf_array(g, "test.i8s", 1, i8s, 1, 2);
    kt_gguf_array(g, "test.u16s", 2, u16s, 2, 1);
    kt_gguf_array(g, "test.i16s", 3, i16s, 2, 1);
    kt_gguf_array(g, "test.u32s", 4, u32s, 4, 1);
    kt_gguf_array(g, "test.i64s", 11, i64s, 8, 1);
    kt_gguf_array(g, "test.u64s", 10, u64s, 8, 1);
    kt_gguf_array(g, "test.bools", 7, bools, 1, 2);
    kt_gguf_array(g, "test.f64s", 12, f64s, 8, 2);
    const int8_t i8 = -3;
    const uint8_t yes = 1;
    const double f64 = 1.5;
    kt_gguf_scalar(g, "test.i8", 1, &i8, 1);
    kt_gguf_scalar(g, "test.bool", 7, &yes, 1);
    kt_gguf_scalar(g, "test.f64", 12, &f64, 8);
    const char *strs[2] = {"a", ""};
    kt_gguf_strs(g, "test.strs", strs, 2);
    uint8_t *gg = kt_gguf_bytes(g, &glen);
    ASSERT(kt_write_file(kt_path("meta.gguf"), gg, glen) == 0);
    free(gg);
    char long_key[720];
    memcpy(long_key, "test.long.", 10);
    memset(long_key + 10, 'k', 700);
    long_key[710] = 0;
    kt_gguf_str(g, long_key, "long");
    gg = kt_gguf_bytes(g, &glen);
    kt_gguf_free(g);
    ASSERT(kt_write_file(kt_path("long_key.gguf"), gg, glen) == 0);
    free(gg);
    ASSERT_EQ_I(kt_compile(kt_path("long_key.gguf"), NULL, kt_path("long_key.kiln"), 16, 0, NULL),
                KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "metadata key name 'test.long.kkk");
    ASSERT_CONTAINS(kiln_last_error(), "longer than 255 bytes");
    ASSERT_OK(kt_compile(kt_path("meta.gguf"), NULL, kt_path("meta.kiln"), 16, 0, NULL));
    kiln_program *p;
    ASSERT_OK(kiln_program_open(kt_path("meta.kiln"), &p));
    static const struct {
        const char *key;
        int n;
        int64_t v[2];
    } ints[] = {
        {"test.u8s", 2, {0, 255}},         {"test.i8s", 2, {-1, 127}},
        {"test.u16s", 1, {65535}},         {"test.i16s", 1, {-32768}},
        {"test.u32s", 1, {4294967295ll}},  {"test.i64s", 1, {-5}},
        {"test.u64s", 1, {INT64_MIN + 1}}, /* the u64's bits */
        {"test.bools", 2, {1, 0}},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        const int64_t *v;
        int n;
        ASSERT_OK(kiln_program_meta_ints(p, ints[i].key, &v, &n));
        ASSERT_EQ_I(n, ints[i].n);
        for (int j = 0; j < n; j++)
            ASSERT_EQ_I(v[j], ints[i].v[j]);
    }
    int64_t v;
    ASSERT_OK(kiln_program_meta_int(p, "test.i8", &v));
    ASSERT_EQ_I(v, -3);
    ASSERT_OK(kiln_program_meta_int(p, "test.bool", &v));
    ASSERT_EQ_I(v, 1);
    const kiln_meta *e = kiln_meta_find(&p->mod, "test.f64");
    ASSERT(e && e->type == KILN_META_FLOAT && e->f == 1.5);
    e = kiln_meta_find(&p->mod, "test.f64s");
    ASSERT(e && e->type == KILN_META_FLOAT_ARRAY && e->n == 2 && e->fa[0] == 0.25 &&
           e->fa[1] == -1e300);
    e = kiln_meta_find(&p->mod, "test.strs");
    ASSERT(e && e->type == KILN_META_STR_ARRAY && e->n == 2);
    ASSERT_STR_EQ(e->sa[0], "a");
    ASSERT_STR_EQ(e->sa[1], "");
    kiln_program_close(p);
}

TEST_MAIN(f32_gguf_equals_llama2c_import, quantized_gguf_close_to_oracle,
          damaged_and_unsupported_ggufs, metadata_kept_as_found)
