/* ops.c: the op table: for each op its arity, its shape rule (the checks a
 * verifier and the runtime apply to its inputs), its scratch and its cost. */
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, cap, __VA_ARGS__);                                                           \
        return -1;                                                                                 \
    } while (0)

static int is_weight_dtype(kiln_dtype t) {
    return t != KILN_I32 && kiln_dtype_name(t) != NULL;
}

/* KV caches hold f32 or f16 (half the memory; rounded to nearest even on store). */
static int is_cache_dtype(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F16;
}

static void set_out(kiln_tensor *out, kiln_dtype t, int ndim, int64_t a, int64_t b) {
    out->dtype = t;
    out->ndim = ndim;
    memset(out->ne, 0, sizeof out->ne);
    out->ne[0] = a;
    out->ne[1] = b;
}

/* x must be a 2-D f32 activation [T, D]. */
static int check_act(const kiln_tensor *x, const char *what, char *err, size_t cap) {
    if (x->dtype != KILN_F32) FAIL("%s must be f32, got %s", what, kiln_dtype_name(x->dtype));
    if (x->ndim != 2) FAIL("%s must have 2 dims [tokens, width], got %d", what, x->ndim);
    return 0;
}

static int check_pos(const kiln_tensor *p, char *err, size_t cap) {
    if (p->dtype != KILN_I32 || p->ndim != 1 || p->ne[0] != 1)
        FAIL("position must be i32 [1], got %s with %d dims", kiln_dtype_name(p->dtype), p->ndim);
    return 0;
}

/* At run time (data present): rows pos..pos+T-1 must lie inside a cache of
 * S rows. Checked here, in the op's rule, so no backend can write past the
 * KV cache. */
static int check_window(const kiln_tensor *p, int64_t T, int64_t S, char *err, size_t cap) {
    if (!p->data) return 0;
    int32_t pos = *(const int32_t *)p->data;
    if (pos < 0 || pos > S || T > S - pos)
        FAIL("position %d + %lld tokens does not fit the context of %lld", pos, (long long)T,
             (long long)S);
    return 0;
}

static int shape_get_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                          char *err, size_t cap) {
    const kiln_tensor *w = in[0], *ids = in[1];
    if (w->ndim != 2 || !is_weight_dtype(w->dtype))
        FAIL("table must be a 2-D weight [rows, width]");
    if (ids->dtype != KILN_I32 || ids->ndim != 1) FAIL("ids must be i32 [tokens]");
    set_out(out, KILN_F32, 2, ids->ne[0], w->ne[1]);
    return 0;
}

static int shape_rms_norm(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                          char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    const kiln_tensor *w = in[1];
    if (w->dtype != KILN_F32 || w->ndim != 1) FAIL("norm weight must be f32 [width]");
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1))
        FAIL("epsilon %g must be in (0, 1)", (double)n->fattr[0]);
    if (w->ne[0] <= 0 || in[0]->ne[1] % w->ne[0])
        FAIL("norm weight length %lld does not divide the row width %lld", (long long)w->ne[0],
             (long long)in[0]->ne[1]);
    *out = *in[0];
    return 0;
}

static int shape_matmul(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    const kiln_tensor *w = in[1];
    if (w->ndim != 2 || !is_weight_dtype(w->dtype)) FAIL("weight must be a 2-D [out, in] weight");
    if (w->ne[1] != in[0]->ne[1])
        FAIL("weight has %lld inputs per row but x has width %lld", (long long)w->ne[1],
             (long long)in[0]->ne[1]);
    set_out(out, KILN_F32, 2, in[0]->ne[0], w->ne[0]);
    return 0;
}

static int shape_binary(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        char *err, size_t cap) {
    if (check_act(in[0], "a", err, cap)) return -1;
    const kiln_tensor *b = in[1];
    if (b->dtype != KILN_F32) FAIL("b must be f32");
    if (b->ndim == 1) {
        if (b->ne[0] != in[0]->ne[1])
            FAIL("b [%lld] does not match the row width %lld", (long long)b->ne[0],
                 (long long)in[0]->ne[1]);
    } else if (b->ndim != 2 || b->ne[0] != in[0]->ne[0] || b->ne[1] != in[0]->ne[1]) {
        FAIL("b must be [width] or the shape of a");
    }
    *out = *in[0];
    return 0;
}

static int shape_unary(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                       char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    *out = *in[0];
    return 0;
}

static int shape_swiglu(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        char *err, size_t cap) {
    if (check_act(in[0], "gate", err, cap) || check_act(in[1], "up", err, cap)) return -1;
    if (in[0]->ne[0] != in[1]->ne[0] || in[0]->ne[1] != in[1]->ne[1])
        FAIL("gate and up differ in shape");
    *out = *in[0];
    return 0;
}

static int shape_rope(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out, char *err,
                      size_t cap) {
    if (check_act(in[0], "x", err, cap) || check_pos(in[1], err, cap)) return -1;
    int64_t nh = n->iattr[KILN_ROPE_N_HEAD], hd = n->iattr[KILN_ROPE_HEAD_DIM];
    int64_t nrot = n->iattr[KILN_ROPE_N_ROT], mode = n->iattr[KILN_ROPE_MODE];
    if (nh <= 0 || hd <= 0 || nh * hd != in[0]->ne[1])
        FAIL("n_head %lld x head_dim %lld does not equal the width %lld", (long long)nh,
             (long long)hd, (long long)in[0]->ne[1]);
    if (nrot <= 0 || nrot > hd || nrot % 2)
        FAIL("n_rot %lld must be even and in 2..head_dim", (long long)nrot);
    if (mode != KILN_ROPE_ADJACENT && mode != KILN_ROPE_NEOX)
        FAIL("unknown rope mode %lld", (long long)mode);
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1e30f))
        FAIL("rope theta %g must be positive and finite", (double)n->fattr[0]);
    if (n->n_in == 3) {
        const kiln_tensor *f = in[2];
        if (f->dtype != KILN_F32 || f->ndim != 1 || f->ne[0] != nrot / 2)
            FAIL("freq factors must be f32 [n_rot/2 = %lld]", (long long)(nrot / 2));
    }
    *out = *in[0];
    return 0;
}

static int shape_kv_store(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                          char *err, size_t cap) {
    const kiln_tensor *c = in[0];
    if (!is_cache_dtype(c->dtype) || c->ndim != 2)
        FAIL("cache must be f32 or f16 [positions, width], got %s with %d dims",
             kiln_dtype_name(c->dtype) ? kiln_dtype_name(c->dtype) : "?", c->ndim);
    if (check_act(in[1], "x", err, cap) || check_pos(in[2], err, cap)) return -1;
    if (in[1]->ne[1] != c->ne[1])
        FAIL("x width %lld differs from the cache width %lld", (long long)in[1]->ne[1],
             (long long)c->ne[1]);
    if (in[1]->ne[0] > c->ne[0]) FAIL("more tokens than cache positions");
    if (check_window(in[2], in[1]->ne[0], c->ne[0], err, cap)) return -1;
    *out = *c;
    return 0;
}

static int shape_attention(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                           char *err, size_t cap) {
    if (check_act(in[0], "q", err, cap) || check_pos(in[3], err, cap)) return -1;
    int64_t nh = n->iattr[KILN_ATTN_N_HEAD], nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    int64_t hd = n->iattr[KILN_ATTN_HEAD_DIM];
    if (nh <= 0 || nkv <= 0 || hd <= 0 || nh % nkv) FAIL("n_head must be a multiple of n_kv_head");
    if (in[0]->ne[1] != nh * hd)
        FAIL("q width %lld is not n_head x head_dim", (long long)in[0]->ne[1]);
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1e30f))
        FAIL("score divisor %g must be positive and finite", (double)n->fattr[0]);
    for (int i = 1; i <= 2; i++) {
        const kiln_tensor *c = in[i];
        if (!is_cache_dtype(c->dtype) || c->ndim != 2 || c->ne[1] != nkv * hd)
            FAIL("%s cache must be f32 or f16 [positions, n_kv_head x head_dim = %lld], got %s",
                 i == 1 ? "k" : "v", (long long)(nkv * hd),
                 kiln_dtype_name(c->dtype) ? kiln_dtype_name(c->dtype) : "?");
    }
    if (in[1]->dtype != in[2]->dtype) FAIL("k and v caches differ in dtype");
    if (in[1]->ne[0] != in[2]->ne[0]) FAIL("k and v caches differ in length");
    if (check_window(in[3], in[0]->ne[0], in[1]->ne[0], err, cap)) return -1;
    *out = *in[0];
    return 0;
}

static int shape_logits(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    const kiln_tensor *w = in[1], *all = n->n_in > 2 ? in[2] : NULL;
    if (w->ndim != 2 || !is_weight_dtype(w->dtype) || w->ne[1] != in[0]->ne[1])
        FAIL("output weight must be [vocab, width %lld]", (long long)in[0]->ne[1]);
    if (all && (all->dtype != KILN_I32 || all->ndim != 1 || all->ne[0] != 1))
        FAIL("flag must be i32 [1]");
    int64_t rows = in[0]->ne[0];
    if (all && all->data && *(const int32_t *)all->data == 0) rows = 1;
    set_out(out, KILN_F32, 2, rows, w->ne[0]);
    return 0;
}

static int shape_layer_norm(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                            char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    for (int i = 1; i <= 2; i++)
        if (in[i]->dtype != KILN_F32 || in[i]->ndim != 1 || in[i]->ne[0] != in[0]->ne[1])
            FAIL("norm %s must be f32 [%lld] (the row width)", i == 1 ? "weight" : "bias",
                 (long long)in[0]->ne[1]);
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1))
        FAIL("epsilon %g must be in (0, 1)", (double)n->fattr[0]);
    *out = *in[0];
    return 0;
}

static int shape_gelu(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out, char *err,
                      size_t cap) {
    if (n->iattr[KILN_GELU_TANH] != 0 && n->iattr[KILN_GELU_TANH] != 1)
        FAIL("gelu form %d is not 0 (erf) or 1 (tanh)", n->iattr[KILN_GELU_TANH]);
    return shape_unary(n, in, out, err, cap);
}

static int shape_merge_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                            char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap) || check_act(in[1], "src", err, cap)) return -1;
    if (in[0]->ne[0] != in[1]->ne[0] || in[0]->ne[1] != in[1]->ne[1])
        FAIL("src must have the shape of x");
    const kiln_tensor *m = in[2];
    if (m->dtype != KILN_I32 || m->ndim != 1 || m->ne[0] != in[0]->ne[0])
        FAIL("mask must be i32 [%lld] (one per row)", (long long)in[0]->ne[0]);
    *out = *in[0];
    return 0;
}

static int shape_embed_bag(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                           char *err, size_t cap) {
    const kiln_tensor *w = in[0], *ids = in[1], *wt = in[2];
    if (w->ndim != 2 || !is_weight_dtype(w->dtype))
        FAIL("table must be a 2-D weight [rows, width]");
    if (ids->dtype != KILN_I32 || ids->ndim != 2 || ids->ne[1] < 1 || ids->ne[1] > 64)
        FAIL("ids must be i32 [rows, taps] with 1..64 taps");
    if (wt->dtype != KILN_F32 || wt->ndim != 2 || wt->ne[0] != ids->ne[0] ||
        wt->ne[1] != ids->ne[1])
        FAIL("weights must be f32 of the ids' shape");
    set_out(out, KILN_F32, 2, ids->ne[0], w->ne[1]);
    return 0;
}

static int shape_fold_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                           char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    int64_t r = n->iattr[KILN_FOLD_ROWS_R];
    if (r < 1 || r > 64) FAIL("rows per fold %lld must be in 1..64", (long long)r);
    if (in[0]->ne[0] % r)
        FAIL("%lld rows do not fold by %lld", (long long)in[0]->ne[0], (long long)r);
    set_out(out, KILN_F32, 2, in[0]->ne[0] / r, in[0]->ne[1] * r);
    return 0;
}

static int shape_rope_multi(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                            char *err, size_t cap) {
    if (check_act(in[0], "x", err, cap)) return -1;
    int64_t nh = n->iattr[KILN_ROPEM_N_HEAD], hd = n->iattr[KILN_ROPEM_HEAD_DIM];
    int layout = n->iattr[KILN_ROPEM_LAYOUT];
    if (nh <= 0 || hd <= 0 || nh * hd != in[0]->ne[1])
        FAIL("n_head %lld x head_dim %lld does not equal the width %lld", (long long)nh,
             (long long)hd, (long long)in[0]->ne[1]);
    int streams = layout == KILN_ROPEM_INTERLEAVED ? 3 : layout == KILN_ROPEM_AXIAL ? 2 : 0;
    if (!streams) FAIL("unknown rope_multi layout %d", layout);
    if (hd % (layout == KILN_ROPEM_AXIAL ? 4 : 2))
        FAIL("head_dim %lld must be a multiple of %d", (long long)hd,
             layout == KILN_ROPEM_AXIAL ? 4 : 2);
    for (int i = 0; layout == KILN_ROPEM_INTERLEAVED && i < 3; i++)
        if (n->iattr[KILN_ROPEM_SECTION + i] < 0 || n->iattr[KILN_ROPEM_SECTION + i] > hd / 2)
            FAIL("section %d (%d) must be in 0..head_dim/2", i, n->iattr[KILN_ROPEM_SECTION + i]);
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1e30f))
        FAIL("rope theta %g must be positive and finite", (double)n->fattr[0]);
    const kiln_tensor *p = in[1];
    if (p->dtype != KILN_I32 || p->ndim != 2 || p->ne[0] != in[0]->ne[0] || p->ne[1] != streams)
        FAIL("positions must be i32 [%lld, %d] (a row of %d streams per token)",
             (long long)in[0]->ne[0], streams, streams);
    *out = *in[0];
    return 0;
}

static int shape_attention_full(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                                char *err, size_t cap) {
    if (check_act(in[0], "q", err, cap) || check_act(in[1], "k", err, cap) ||
        check_act(in[2], "v", err, cap))
        return -1;
    int64_t nh = n->iattr[KILN_ATTN_N_HEAD], nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    int64_t hd = n->iattr[KILN_ATTN_HEAD_DIM];
    if (nh <= 0 || nkv <= 0 || hd <= 0 || nh % nkv) FAIL("n_head must be a multiple of n_kv_head");
    if (in[0]->ne[1] != nh * hd)
        FAIL("q width %lld is not n_head x head_dim", (long long)in[0]->ne[1]);
    for (int i = 1; i <= 2; i++)
        if (in[i]->ne[1] != nkv * hd || in[i]->ne[0] != in[0]->ne[0])
            FAIL("%s must be [%lld rows, n_kv_head x head_dim = %lld]", i == 1 ? "k" : "v",
                 (long long)in[0]->ne[0], (long long)(nkv * hd));
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1e30f))
        FAIL("score divisor %g must be positive and finite", (double)n->fattr[0]);
    *out = *in[0];
    return 0;
}

static uint64_t scratch_attention_full(const kiln_node *n, const kiln_tensor *const *in) {
    return (uint64_t)in[1]->ne[0] * sizeof(float);
}

static uint64_t scratch_table_row(const kiln_node *n, const kiln_tensor *const *in) {
    return in[0]->dtype == KILN_F32 ? 0 : (uint64_t)in[0]->ne[1] * sizeof(float);
}

static double flops_attention_full(const kiln_node *n, const kiln_tensor *const *in,
                                   const kiln_tensor *o) {
    double t = (double)o->ne[0], hd = n->iattr[KILN_ATTN_HEAD_DIM], nh = n->iattr[KILN_ATTN_N_HEAD];
    return 4.0 * nh * hd * t * t;
}

static double flops_embed_bag(const kiln_node *n, const kiln_tensor *const *in,
                              const kiln_tensor *o) {
    return 2.0 * (double)o->ne[0] * (double)o->ne[1] * (double)in[1]->ne[1];
}

static uint64_t scratch_attention(const kiln_node *n, const kiln_tensor *const *in) {
    return (uint64_t)in[1]->ne[0] * sizeof(float); /* one row of scores at a time */
}

uint64_t kiln_matmul_act_bytes(int64_t rows, int64_t k) {
    return (uint64_t)rows * (uint64_t)((k + 31) / 32) * KILN_ACT_BLOCK_BYTES;
}

/* ref expands non-f32 weights one row at a time into scratch; backends that
 * quantize activations (cpu) put the quantized rows there. */
static uint64_t scratch_weight_row(const kiln_node *n, const kiln_tensor *const *in) {
    uint64_t row = in[1]->dtype == KILN_F32 ? 0 : (uint64_t)in[1]->ne[1] * sizeof(float);
    uint64_t act = kiln_matmul_act_bytes(in[0]->ne[0], in[1]->ne[1]);
    return row > act ? row : act;
}

static double flops_matmul(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *o) {
    return 2.0 * (double)o->ne[0] * (double)o->ne[1] * (double)in[0]->ne[1];
}
static double flops_elems(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *o) {
    return (double)o->ne[0] * (double)o->ne[1];
}
static double flops_norm(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *o) {
    return 3.0 * (double)o->ne[0] * (double)o->ne[1];
}
static double flops_attention(const kiln_node *n, const kiln_tensor *const *in,
                              const kiln_tensor *o) {
    /* Causal: row t sees pos + t + 1 keys; pos is unknown here, so count the
     * keys of the rows themselves (a lower bound refined by the profiler). */
    double t = (double)o->ne[0], hd = n->iattr[KILN_ATTN_HEAD_DIM], nh = n->iattr[KILN_ATTN_N_HEAD];
    double keys =
        in[3]->data ? *(const int32_t *)in[3]->data * t + t * (t + 1) / 2 : t * (t + 1) / 2;
    return 4.0 * nh * hd * keys;
}

static const kiln_op_info g_ops[KILN_OP_COUNT] = {
    [KILN_OP_GET_ROWS] = {"get_rows", 2, 2, shape_get_rows, NULL, NULL},
    [KILN_OP_RMS_NORM] = {"rms_norm", 2, 2, shape_rms_norm, NULL, flops_norm},
    [KILN_OP_MATMUL] = {"matmul", 2, 2, shape_matmul, scratch_weight_row, flops_matmul},
    [KILN_OP_ADD] = {"add", 2, 2, shape_binary, NULL, flops_elems},
    [KILN_OP_MUL] = {"mul", 2, 2, shape_binary, NULL, flops_elems},
    [KILN_OP_SILU] = {"silu", 1, 1, shape_unary, NULL, flops_norm},
    [KILN_OP_SWIGLU] = {"swiglu", 2, 2, shape_swiglu, NULL, flops_norm},
    [KILN_OP_SOFTMAX] = {"softmax", 1, 1, shape_unary, NULL, flops_norm},
    [KILN_OP_ROPE] = {"rope", 2, 3, shape_rope, NULL, flops_norm},
    [KILN_OP_KV_STORE] = {"kv_store", 3, 3, shape_kv_store, NULL, NULL},
    [KILN_OP_ATTENTION] = {"attention", 4, 4, shape_attention, scratch_attention, flops_attention},
    [KILN_OP_LOGITS] = {"logits", 2, 3, shape_logits, scratch_weight_row, flops_matmul},
    [KILN_OP_LAYER_NORM] = {"layer_norm", 3, 3, shape_layer_norm, NULL, flops_norm},
    [KILN_OP_GELU] = {"gelu", 1, 1, shape_gelu, NULL, flops_norm},
    [KILN_OP_MERGE_ROWS] = {"merge_rows", 3, 3, shape_merge_rows, NULL, NULL},
    [KILN_OP_EMBED_BAG] = {"embed_bag", 3, 3, shape_embed_bag, scratch_table_row, flops_embed_bag},
    [KILN_OP_FOLD_ROWS] = {"fold_rows", 1, 1, shape_fold_rows, NULL, NULL},
    [KILN_OP_ROPE_MULTI] = {"rope_multi", 2, 2, shape_rope_multi, NULL, flops_norm},
    [KILN_OP_ATTENTION_FULL] = {"attention_full", 3, 3, shape_attention_full,
                                scratch_attention_full, flops_attention_full},
};

const kiln_op_info *kiln_op_get(int op) {
    return op >= 0 && op < KILN_OP_COUNT ? &g_ops[op] : NULL;
}

const char *kiln_op_name(int op) {
    return op >= 0 && op < KILN_OP_COUNT ? g_ops[op].name : "?";
}

int kiln_op_from_name(const char *name) {
    for (int i = 0; i < KILN_OP_COUNT; i++)
        if (strcmp(g_ops[i].name, name) == 0) return i;
    return -1;
}

kiln_tensor kiln_value_view(const kiln_value *v) {
    kiln_tensor t = {v->dtype, v->ndim, {0}, NULL};
    memcpy(t.ne, v->ne, sizeof v->ne);
    return t;
}

uint64_t kiln_tensor_bytes(const kiln_tensor *t) {
    return kiln_shape_bytes(t->dtype, t->ndim, t->ne);
}

double kiln_op_bytes(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out) {
    double b = (double)kiln_tensor_bytes(out);
    if (n->op == KILN_OP_KV_STORE) /* out is a view of the whole cache: T rows are written */
        b = (double)kiln_dtype_row_bytes(in[0]->dtype, in[0]->ne[1]) * (double)in[1]->ne[0];
    for (int i = 0; i < n->n_in; i++) {
        if ((n->op == KILN_OP_GET_ROWS || n->op == KILN_OP_EMBED_BAG) && i == 0) {
            /* reads only the rows it gathers */
            double rows = (double)in[1]->ne[0] * (double)(in[1]->ndim == 2 ? in[1]->ne[1] : 1);
            b += (double)kiln_dtype_row_bytes(in[0]->dtype, in[0]->ne[1]) * rows;
            continue;
        }
        if (n->op == KILN_OP_KV_STORE && i == 0) continue; /* writes T rows, counted above */
        if (n->op == KILN_OP_ATTENTION && (i == 1 || i == 2) && in[3]->data) {
            /* reads the cache rows below pos + T, not the whole cache */
            int64_t rows = (int64_t) * (const int32_t *)in[3]->data + in[0]->ne[0];
            if (rows > in[i]->ne[0]) rows = in[i]->ne[0];
            b += (double)kiln_dtype_row_bytes(in[i]->dtype, in[i]->ne[1]) * (double)rows;
            continue;
        }
        b += (double)kiln_tensor_bytes(in[i]);
    }
    return b;
}
