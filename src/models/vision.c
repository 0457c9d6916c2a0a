/* vision.c: the Qwen3-VL vision tower as the `encode_image` method. One
 * call encodes one image: its patches in the processor's order (each
 * merge x merge block consecutive), with the host's per-patch tables (the
 * (row, col) rope positions and the bilinear taps into the learned position
 * grid, both pure functions of the image's grid). Out: the visual tokens
 * (patches / merge^2 rows of the text width) and one DeepStack feature per
 * configured block, the same shape. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"
#include "models/builder.h"
#include "models/llama.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) return kiln_error(KILN_ERR_FORMAT, __VA_ARGS__);                              \
    } while (0)

kiln_status kiln_vision_check(const kiln_vision_config *v, const char *src) {
    CHECK(v->depth > 0 && v->depth <= 256, "%s: vision depth %d out of range 1..256", src,
          v->depth);
    CHECK(v->n_embd > 0 && v->n_embd <= 65536, "%s: vision hidden_size %d out of range", src,
          v->n_embd);
    CHECK(v->n_ff > 0 && v->n_ff <= 1 << 20, "%s: vision intermediate_size %d out of range", src,
          v->n_ff);
    CHECK(v->n_head > 0 && v->n_embd % v->n_head == 0 && (v->n_embd / v->n_head) % 4 == 0,
          "%s: vision num_heads %d must divide hidden_size %d into heads of a multiple of 4", src,
          v->n_head, v->n_embd);
    CHECK(v->n_embd / v->n_head <= 4096, "%s: vision head size %d too large", src,
          v->n_embd / v->n_head);
    CHECK(v->in_channels > 0 && v->in_channels <= 16, "%s: vision in_channels %d out of range", src,
          v->in_channels);
    CHECK(v->patch > 0 && v->patch <= 64, "%s: vision patch_size %d out of range 1..64", src,
          v->patch);
    CHECK(v->temporal_patch > 0 && v->temporal_patch <= 16,
          "%s: vision temporal_patch_size %d out of range 1..16", src, v->temporal_patch);
    CHECK(v->merge > 0 && v->merge <= 8, "%s: vision spatial_merge_size %d out of range 1..8", src,
          v->merge);
    int side = (int)sqrt((double)v->n_pos_embd);
    CHECK(v->n_pos_embd > 0 && side * side == v->n_pos_embd,
          "%s: vision num_position_embeddings %d is not a square", src, v->n_pos_embd);
    CHECK(v->rope_theta > 0 && isfinite(v->rope_theta), "%s: vision rope theta %g must be positive",
          src, v->rope_theta);
    CHECK(v->norm_eps > 0 && v->norm_eps < 1, "%s: vision norm epsilon %g out of range", src,
          v->norm_eps);
    CHECK(v->n_deepstack >= 0 && v->n_deepstack <= KILN_MAX_DEEPSTACK,
          "%s: %d DeepStack layers; Kiln takes at most %d", src, v->n_deepstack,
          KILN_MAX_DEEPSTACK);
    for (int k = 0; k < v->n_deepstack; k++)
        CHECK(v->deepstack_layer[k] >= 0 && v->deepstack_layer[k] < v->depth &&
                  (!k || v->deepstack_layer[k] > v->deepstack_layer[k - 1]),
              "%s: deepstack_visual_indexes[%d] = %d must rise and lie in 0..depth-1 (%d)", src, k,
              v->deepstack_layer[k], v->depth - 1);
    int unit = v->merge * v->merge;
    CHECK(v->max_patches >= unit && v->max_patches % unit == 0 && v->max_patches <= 1 << 20,
          "%s: the image patch limit %d must be a multiple of %d in %d..1048576", src,
          v->max_patches, unit, unit);
    return KILN_OK;
}

typedef struct {
    const char *name;
    int ndim;
    int64_t a, b;
    int per; /* 0 global, 1 per block, 2 per DeepStack merger */
} wrule;

kiln_status kiln_vision_check_weights(const kiln_module *m, const kiln_vision_config *v,
                                      const char *src) {
    int64_t W = v->n_embd, F = v->n_ff, M = (int64_t)v->merge * v->merge * W, O = v->out_embd;
    int64_t P = (int64_t)v->in_channels * v->temporal_patch * v->patch * v->patch;
    const wrule w[] = {
        {"v.patch_embd.weight", 2, W, P, 0},
        {"v.patch_embd.bias", 1, W, 0, 0},
        {"v.pos_embd.weight", 2, v->n_pos_embd, W, 0},
        {"v.blk.%d.ln1.weight", 1, W, 0, 1},
        {"v.blk.%d.ln1.bias", 1, W, 0, 1},
        {"v.blk.%d.attn_q.weight", 2, W, W, 1},
        {"v.blk.%d.attn_q.bias", 1, W, 0, 1},
        {"v.blk.%d.attn_k.weight", 2, W, W, 1},
        {"v.blk.%d.attn_k.bias", 1, W, 0, 1},
        {"v.blk.%d.attn_v.weight", 2, W, W, 1},
        {"v.blk.%d.attn_v.bias", 1, W, 0, 1},
        {"v.blk.%d.attn_out.weight", 2, W, W, 1},
        {"v.blk.%d.attn_out.bias", 1, W, 0, 1},
        {"v.blk.%d.ln2.weight", 1, W, 0, 1},
        {"v.blk.%d.ln2.bias", 1, W, 0, 1},
        {"v.blk.%d.ffn_up.weight", 2, F, W, 1},
        {"v.blk.%d.ffn_up.bias", 1, F, 0, 1},
        {"v.blk.%d.ffn_down.weight", 2, W, F, 1},
        {"v.blk.%d.ffn_down.bias", 1, W, 0, 1},
        {"v.merger.norm.weight", 1, W, 0, 0},
        {"v.merger.norm.bias", 1, W, 0, 0},
        {"v.merger.fc1.weight", 2, M, M, 0},
        {"v.merger.fc1.bias", 1, M, 0, 0},
        {"v.merger.fc2.weight", 2, O, M, 0},
        {"v.merger.fc2.bias", 1, O, 0, 0},
        {"v.deepstack.%d.norm.weight", 1, M, 0, 2},
        {"v.deepstack.%d.norm.bias", 1, M, 0, 2},
        {"v.deepstack.%d.fc1.weight", 2, M, M, 2},
        {"v.deepstack.%d.fc1.bias", 1, M, 0, 2},
        {"v.deepstack.%d.fc2.weight", 2, O, M, 2},
        {"v.deepstack.%d.fc2.bias", 1, O, 0, 2},
    };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        int count = w[i].per == 1 ? v->depth : w[i].per == 2 ? v->n_deepstack : 1;
        for (int l = 0; l < count; l++) {
            char name[KILN_NAME_MAX];
            snprintf(name, sizeof name, w[i].name, l);
            kiln_status st = kiln_check_weight(m, name, w[i].ndim, w[i].a, w[i].b, src);
            if (st) return st;
        }
    }
    return KILN_OK;
}

/* `name` + `suffix` into dst; a name past KILN_NAME_MAX fails the build. */
static int join(kiln_builder *b, char dst[KILN_NAME_MAX], const char *name, const char *suffix) {
    if (snprintf(dst, KILN_NAME_MAX, "%s%s", name, suffix) < KILN_NAME_MAX) return 0;
    kiln_error(KILN_ERR_INVALID_ARG, "vision: name '%s%s' is longer than %d bytes", name, suffix,
               KILN_NAME_MAX - 1);
    b->failed = 1;
    return -1;
}

/* The constant `<name><suffix>`. */
static int cnst(kiln_builder *b, const char *name, const char *suffix) {
    char full[KILN_NAME_MAX];
    return b->failed || join(b, full, name, suffix) ? -1 : kiln_b_const(b, full, 0);
}

/* A node named `name` (no layer number in it). */
static int node(kiln_builder *b, int op, const char *name, int n_in, const int32_t *in,
                const int32_t *iattr, const float *fattr) {
    return kiln_b_node(b, op, name, 0, n_in, in, iattr, fattr);
}

/* x W^T + bias: nodes `name` and `name`_bias (or `out` when given). */
static int linear(kiln_builder *b, int x, const char *name, const char *out) {
    char nb[KILN_NAME_MAX];
    if (join(b, nb, name, "_bias")) return -1;
    int y = node(b, KILN_OP_MATMUL, name, KILN_IN(x, cnst(b, name, ".weight")), NULL, NULL);
    return node(b, KILN_OP_ADD, out ? out : nb, KILN_IN(y, cnst(b, name, ".bias")), NULL, NULL);
}

static int layer_norm(kiln_builder *b, int x, const char *name, float eps) {
    float fa[KILN_MAX_FATTR] = {eps};
    return node(b, KILN_OP_LAYER_NORM, name,
                KILN_IN(x, cnst(b, name, ".weight"), cnst(b, name, ".bias")), NULL, fa);
}

/* A patch merger: (norm before or after folding) fc1, gelu (erf), fc2. */
static int merger(kiln_builder *b, int x, const char *prefix, int norm_after_fold,
                  const kiln_vision_config *v, const char *out) {
    char nm[KILN_NAME_MAX];
    int32_t fold[KILN_MAX_IATTR] = {v->merge * v->merge};
    int32_t erf[KILN_MAX_IATTR] = {0};
    snprintf(nm, sizeof nm, "%s.fold", prefix);
    char norm[KILN_NAME_MAX];
    snprintf(norm, sizeof norm, "%s.norm", prefix);
    if (norm_after_fold) {
        x = node(b, KILN_OP_FOLD_ROWS, nm, KILN_IN(x), fold, NULL);
        x = layer_norm(b, x, norm, v->norm_eps);
    } else {
        x = layer_norm(b, x, norm, v->norm_eps);
        x = node(b, KILN_OP_FOLD_ROWS, nm, KILN_IN(x), fold, NULL);
    }
    snprintf(nm, sizeof nm, "%s.fc1", prefix);
    x = linear(b, x, nm, NULL);
    snprintf(nm, sizeof nm, "%s.gelu", prefix);
    x = node(b, KILN_OP_GELU, nm, KILN_IN(x), erf, NULL);
    snprintf(nm, sizeof nm, "%s.fc2", prefix);
    return linear(b, x, nm, out);
}

kiln_status kiln_vision_build(kiln_module *m, const kiln_vision_config *v) {
    kiln_status st = kiln_vision_check(v, "vision config");
    if (st) return st;
    kiln_graph *g = kiln_module_add_method(m, "encode_image", v->max_patches);
    if (!g) return kiln_last_status();
    kiln_builder b = {g, m, 0};
    /* Shapes: N patches (1..max_patches, a multiple of merge^2), P = channels
     * x temporal_patch x patch^2 pixels each, W = block width, hd = W / heads. */
    int64_t P = (int64_t)v->in_channels * v->temporal_patch * v->patch * v->patch;
    int64_t px[2] = {v->max_patches, P}, rc[2] = {v->max_patches, 2}, taps[2] = {v->max_patches, 4};
    uint32_t dyn = v->max_patches > 1 ? 1u : 0u;
    int pixels = kiln_b_input(&b, "pixels", KILN_F32, 2, px, dyn);           /* (N, P) */
    int rope_pos = kiln_b_input(&b, "rope_pos", KILN_I32, 2, rc, dyn);       /* (N, 2) */
    int interp_idx = kiln_b_input(&b, "interp_idx", KILN_I32, 2, taps, dyn); /* (N, 4) */
    int interp_w = kiln_b_input(&b, "interp_w", KILN_F32, 2, taps, dyn);     /* (N, 4) */
    int hd = v->n_embd / v->n_head;
    int32_t rope[KILN_MAX_IATTR] = {v->n_head, hd, KILN_ROPEM_AXIAL};
    int32_t attn[KILN_MAX_IATTR] = {v->n_head, v->n_head, hd};
    int32_t act[KILN_MAX_IATTR] = {v->gelu_tanh};
    float theta[KILN_MAX_FATTR] = {v->rope_theta}, div[KILN_MAX_FATTR] = {sqrtf((float)hd)};

    /* the patch embedding (a convolution with stride = kernel: one matmul),
     * plus the learned grid resampled to this image's grid */
    int x = linear(&b, pixels, "v.patch_embd", NULL); /* (N, W) */
    int pe = node(&b, KILN_OP_EMBED_BAG, "v.pos_embd",
                  KILN_IN(cnst(&b, "v.pos_embd", ".weight"), interp_idx, interp_w), NULL, NULL);
    x = node(&b, KILN_OP_ADD, "v.pos_add", KILN_IN(x, pe), NULL, NULL);
    int outs[1 + KILN_MAX_DEEPSTACK], n_out = 1, k_ds = 0;
    for (int l = 0; l < v->depth && !b.failed; l++) {
        char nm[KILN_NAME_MAX], p[64];
        snprintf(p, sizeof p, "v.blk.%d", l);
#define NAME(suffix) (snprintf(nm, sizeof nm, "%s." suffix, p), nm)
        int h = layer_norm(&b, x, NAME("ln1"), v->norm_eps);
        int q = linear(&b, h, NAME("attn_q"), NULL); /* (N, W) each */
        int k = linear(&b, h, NAME("attn_k"), NULL);
        int vv = linear(&b, h, NAME("attn_v"), NULL);
        q = node(&b, KILN_OP_ROPE_MULTI, NAME("rope_q"), KILN_IN(q, rope_pos), rope, theta);
        k = node(&b, KILN_OP_ROPE_MULTI, NAME("rope_k"), KILN_IN(k, rope_pos), rope, theta);
        int a = node(&b, KILN_OP_ATTENTION_FULL, NAME("attn"), KILN_IN(q, k, vv), attn, div);
        int o = linear(&b, a, NAME("attn_out"), NULL);
        x = node(&b, KILN_OP_ADD, NAME("attn_residual"), KILN_IN(x, o), NULL, NULL);
        h = layer_norm(&b, x, NAME("ln2"), v->norm_eps);
        int u = linear(&b, h, NAME("ffn_up"), NULL); /* (N, F) */
        u = node(&b, KILN_OP_GELU, NAME("ffn_gelu"), KILN_IN(u), act, NULL);
        int d = linear(&b, u, NAME("ffn_down"), NULL);
        x = node(&b, KILN_OP_ADD, NAME("ffn_residual"), KILN_IN(x, d), NULL, NULL);
#undef NAME
        if (k_ds < v->n_deepstack && v->deepstack_layer[k_ds] == l) {
            char pre[64], out[64];
            snprintf(pre, sizeof pre, "v.deepstack.%d", k_ds);
            snprintf(out, sizeof out, "deepstack.%d", k_ds);
            outs[n_out++] = merger(&b, x, pre, 1, v, out); /* (N / merge^2, D) */
            k_ds++;
        }
    }
    outs[0] = merger(&b, x, "v.merger", 0, v, "visual"); /* (N / merge^2, D) */
    if (b.failed) return kiln_error_wrap(kiln_last_status(), "building method 'encode_image'");
    for (int i = 0; i < n_out; i++)
        if ((st = kiln_graph_output(g, outs[i]))) return st;
    struct {
        const char *key;
        int64_t v;
    } ints[] = {
        {"vision.patch_size", v->patch},
        {"vision.temporal_patch_size", v->temporal_patch},
        {"vision.spatial_merge_size", v->merge},
        {"vision.in_channels", v->in_channels},
        {"vision.num_position_embeddings", v->n_pos_embd},
        {"vision.max_patches", v->max_patches},
        {"vision.deepstack_count", v->n_deepstack},
        {"vision.image_token_id", v->image_token},
        {"vision.start_token_id", v->vision_start},
        {"vision.end_token_id", v->vision_end},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if ((st = kiln_meta_set_int(m, ints[i].key, ints[i].v))) return st;
    /* the image processor: the pixel range and [rescale, mean RGB, std RGB] */
    const int64_t range[2] = {v->min_pixels, v->max_pixels};
    if ((st = kiln_meta_set_int_array(m, "vision.image_pixels", range, 2))) return st;
    double *norm = kiln_malloc(7 * sizeof *norm);
    if (!norm) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    norm[0] = v->rescale;
    for (int c = 0; c < 3; c++)
        norm[1 + c] = v->mean[c], norm[4 + c] = v->std[c];
    return kiln_meta_set_float_array_owned(m, "vision.image_normalize", norm, 7);
}
