/* llm.c: the LLM program contract (kiln_llm.h): binds a program's prefill
 * and decode methods once and runs tokens through them. Built on kiln.h
 * alone, so it reads the program as any embedder would. */
#include <string.h>

#include "base/base.h"
#include "kiln/kiln_llm.h"
#include "llm/vl.h"

#define MAX_DS 8 /* DeepStack inputs the contract knows: deepstack.0..7 */

/* Indices of the inputs and outputs of encode_image. */
typedef struct {
    int method, pixels, rope_pos, idx, w; /* inputs */
    int visual, ds[MAX_DS];               /* outputs */
    int side;                             /* the learned position grid is side x side */
} encode_binding;

struct kiln_llm {
    const kiln_program *prog;
    kiln_llm_limits lim;
    int prefill, decode;
    int pre_tokens, pre_pos, pre_all; /* input indices; -1 when absent */
    int pre_rope, pre_visual, pre_mask, pre_ds[MAX_DS];
    int dec_tokens, dec_pos, dec_rope;
    int has_vision;
    kiln_llm_vision vis;
    encode_binding enc;
    const int64_t *end_ids;
    int n_end;
};

struct kiln_llm_image {
    const kiln_program *prog;
    kiln_vl_grid grid;
    int n_tokens, n_embd, n_ds;
    float *rows; /* [1 + n_ds][n_tokens][n_embd]: the visual tokens, then each feature */
};

/* What one method input must be: dtype, dimensions, dim 0 (0: the token
 * count) and dim 1 (2-D inputs); dynamic 1 when dim 0 must be the token
 * count. */
typedef struct {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t size, width;
    int dynamic;
} input_rule;

static kiln_status check_input(const kiln_program *p, int method, int index, const input_rule *r) {
    kiln_tensor_info info;
    kiln_status st = kiln_method_input_info(p, method, index, &info);
    if (st) return st;
    const char *mname = kiln_program_method_name(p, method);
    if (info.dtype != r->dtype || info.ndim != r->ndim || (r->size && info.shape[0] != r->size) ||
        (r->ndim == 2 && info.shape[1] != r->width)) {
        char want[48];
        if (r->ndim == 2)
            snprintf(want, sizeof want, "%s, %lld", r->size ? "1" : "tokens", (long long)r->width);
        else
            snprintf(want, sizeof want, "%s", r->size ? "1" : "tokens");
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: input '%s' of method '%s' is %s with %d dims, not %s [%s]",
            r->name, mname, kiln_dtype_name(info.dtype) ? kiln_dtype_name(info.dtype) : "?",
            info.ndim, kiln_dtype_name(r->dtype), want);
    }
    if (r->dynamic && !(info.dynamic_mask & 1u) && info.shape[0] > 1)
        return kiln_error(
            KILN_ERR_UNSUPPORTED,
            "method '%s' takes a fixed %lld tokens (input '%s' has no dynamic dimension): "
            "fixed-size prefill (padded, with an n_tokens input) is not bound yet",
            mname, (long long)info.shape[0], r->name);
    return KILN_OK;
}

/* Finds each rule's input in `method` (index or -1) and refuses any input
 * no rule names. Rules with required set must be there. */
static kiln_status bind_inputs(const kiln_program *p, int method, const input_rule *rules,
                               int n_rules, int n_required, int *index) {
    const char *mname = kiln_program_method_name(p, method);
    for (int r = 0; r < n_rules; r++)
        index[r] = -1;
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info info;
        kiln_status st = kiln_method_input_info(p, method, i, &info);
        if (st) return st;
        int r = 0;
        while (r < n_rules && strcmp(rules[r].name, info.name))
            r++;
        if (r == n_rules)
            return kiln_error(
                KILN_ERR_UNSUPPORTED,
                "method '%s' has input '%s', which the LLM contract does not know (kiln_llm.h)",
                mname, info.name);
        if ((st = check_input(p, method, i, &rules[r]))) return st;
        index[r] = i;
    }
    for (int r = 0; r < n_required; r++)
        if (index[r] < 0)
            return kiln_error(KILN_ERR_FORMAT, "not an LLM program: method '%s' has no input '%s'",
                              mname, rules[r].name);
    return KILN_OK;
}

static kiln_status check_logits(const kiln_program *p, int method, int vocab) {
    kiln_tensor_info info;
    const char *mname = kiln_program_method_name(p, method);
    if (kiln_method_output_count(p, method) < 1 || kiln_method_output_info(p, method, 0, &info))
        return kiln_error(KILN_ERR_FORMAT, "not an LLM program: method '%s' has no output", mname);
    if (info.dtype != KILN_F32 || info.ndim != 2 || info.shape[1] != vocab)
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: output '%s' of method '%s' is not f32 [tokens, %d] (the logits)",
            info.name, mname, vocab);
    return KILN_OK;
}

static kiln_status meta_positive(const kiln_program *p, const char *key, int *out) {
    int64_t v;
    if (kiln_program_meta_int(p, key, &v))
        return kiln_error(KILN_ERR_FORMAT, "not an LLM program: no integer metadata '%s'", key);
    if (v < 1 || v > INT32_MAX)
        return kiln_error(KILN_ERR_FORMAT,
                          "not an LLM program: metadata '%s' is %lld, outside 1..%d", key,
                          (long long)v, INT32_MAX);
    *out = (int)v;
    return KILN_OK;
}

static kiln_status find_output(const kiln_program *p, int method, const char *name,
                               kiln_dtype dtype, int64_t width, int *index) {
    const char *mname = kiln_program_method_name(p, method);
    for (int i = 0; i < kiln_method_output_count(p, method); i++) {
        kiln_tensor_info info;
        kiln_status st = kiln_method_output_info(p, method, i, &info);
        if (st) return st;
        if (strcmp(info.name, name)) continue;
        if (info.dtype != dtype || info.ndim != 2 || info.shape[1] != width)
            return kiln_error(KILN_ERR_FORMAT,
                              "not a vision program: output '%s' of method '%s' is not %s "
                              "[tokens, %lld]",
                              name, mname, kiln_dtype_name(dtype), (long long)width);
        *index = i;
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_FORMAT, "not a vision program: method '%s' has no output '%s'",
                      mname, name);
}

static const char *const ds_names[MAX_DS] = {"deepstack.0", "deepstack.1", "deepstack.2",
                                             "deepstack.3", "deepstack.4", "deepstack.5",
                                             "deepstack.6", "deepstack.7"};

/* The vision part of the contract: llm.vision.* metadata and encode_image
 * (pixels, rope_pos, interp_idx, interp_w in; visual, deepstack.K out). */
static kiln_status bind_vision(const kiln_program *p, kiln_llm *lm, int embd) {
    kiln_llm_vision *v = &lm->vis;
    int n_pos = 0, image = 0, start = 0, end = 0, n_ds = 0;
    kiln_status st;
    if ((st = meta_positive(p, "vision.patch_size", &v->patch)) ||
        (st = meta_positive(p, "vision.temporal_patch_size", &v->temporal_patch)) ||
        (st = meta_positive(p, "vision.spatial_merge_size", &v->merge)) ||
        (st = meta_positive(p, "vision.in_channels", &v->channels)) ||
        (st = meta_positive(p, "vision.max_patches", &v->max_patches)) ||
        (st = meta_positive(p, "vision.num_position_embeddings", &n_pos)) ||
        (st = meta_positive(p, "vision.image_token_id", &image)) ||
        (st = meta_positive(p, "vision.start_token_id", &start)) ||
        (st = meta_positive(p, "vision.end_token_id", &end)))
        return st;
    int64_t nd;
    if (!kiln_program_meta_int(p, "vision.deepstack_count", &nd) && nd > 0 && nd <= MAX_DS)
        n_ds = (int)nd;
    int side = 1;
    while ((int64_t)side * side < n_pos)
        side++;
    if ((int64_t)side * side != n_pos || image >= lm->lim.vocab || start >= lm->lim.vocab ||
        end >= lm->lim.vocab)
        return kiln_error(KILN_ERR_FORMAT,
                          "not a vision program: %d position embeddings (not a square) or "
                          "vision token ids %d, %d, %d outside the vocabulary",
                          n_pos, image, start, end);
    v->image_token = image, v->vision_start = start, v->vision_end = end;
    v->n_embd = embd, v->n_deepstack = n_ds;
    /* the image processor: pixel range, then [rescale, mean RGB, std RGB] */
    const int64_t *range;
    const double *norm;
    int n_range, n_norm;
    if (kiln_program_meta_ints(p, "vision.image_pixels", &range, &n_range) || n_range != 2 ||
        range[0] < 1 || range[0] > range[1] ||
        kiln_program_meta_floats(p, "vision.image_normalize", &norm, &n_norm) || n_norm != 7 ||
        !(norm[0] > 0) || !(norm[4] > 0) || !(norm[5] > 0) || !(norm[6] > 0))
        return kiln_error(KILN_ERR_FORMAT,
                          "not a vision program: no image processor settings (metadata "
                          "'vision.image_pixels' and 'vision.image_normalize')");
    int64_t cap = (int64_t)v->max_patches * v->patch * v->patch; /* an image is t = 1 */
    v->max_pixels = range[1] < cap ? range[1] : cap;
    v->min_pixels = range[0] < v->max_pixels ? range[0] : v->max_pixels;
    v->rescale = (float)norm[0];
    for (int c = 0; c < 3; c++)
        v->mean[c] = (float)norm[1 + c], v->std[c] = (float)norm[4 + c];
    encode_binding *e = &lm->enc;
    e->side = side;
    if (kiln_program_find_method(p, "encode_image", &e->method))
        return kiln_error(KILN_ERR_FORMAT, "not a vision program: no method 'encode_image'");
    int64_t P = (int64_t)v->channels * v->temporal_patch * v->patch * v->patch;
    const input_rule er[] = {{"pixels", KILN_F32, 2, 0, P, 1},
                             {"rope_pos", KILN_I32, 2, 0, 2, 1},
                             {"interp_idx", KILN_I32, 2, 0, 4, 1},
                             {"interp_w", KILN_F32, 2, 0, 4, 1}};
    int ei[4];
    if ((st = bind_inputs(p, e->method, er, 4, 4, ei))) return st;
    e->pixels = ei[0], e->rope_pos = ei[1], e->idx = ei[2], e->w = ei[3];
    if ((st = find_output(p, e->method, "visual", KILN_F32, embd, &e->visual))) return st;
    for (int k = 0; k < n_ds; k++)
        if ((st = find_output(p, e->method, ds_names[k], KILN_F32, embd, &e->ds[k]))) return st;
    return KILN_OK;
}

static kiln_status bind(const kiln_program *p, kiln_llm *lm) {
    memset(lm, 0, sizeof *lm);
    lm->prog = p;
    kiln_status st;
    if (kiln_program_find_method(p, "prefill", &lm->prefill) ||
        kiln_program_find_method(p, "decode", &lm->decode))
        return kiln_error(KILN_ERR_FORMAT,
                          "not an LLM program: it needs methods 'prefill' and 'decode'");
    if ((st = meta_positive(p, "llm.context_length", &lm->lim.context)) ||
        (st = meta_positive(p, "llm.vocab_size", &lm->lim.vocab)))
        return st;
    /* A model width for the visual inputs; 0 (no rule matches) without one. */
    int embd = 0;
    int64_t e64;
    if (!kiln_program_meta_int(p, "llm.embedding_length", &e64) && e64 > 0 && e64 <= INT32_MAX)
        embd = (int)e64;
    input_rule pre[4 + 2 + MAX_DS] = {
        {"tokens", KILN_I32, 1, 0, 0, 1},     {"pos", KILN_I32, 1, 1, 0, 0},
        {"all_logits", KILN_I32, 1, 1, 0, 0}, {"rope_pos", KILN_I32, 2, 0, 3, 1},
        {"visual", KILN_F32, 2, 0, embd, 1},  {"visual_mask", KILN_I32, 1, 0, 0, 1},
    };
    for (int k = 0; k < MAX_DS; k++)
        pre[6 + k] = (input_rule){ds_names[k], KILN_F32, 2, 0, embd, 1};
    static const input_rule dec[] = {{"tokens", KILN_I32, 1, 1, 0, 0},
                                     {"pos", KILN_I32, 1, 1, 0, 0},
                                     {"rope_pos", KILN_I32, 2, 1, 3, 0}};
    int ip[6 + MAX_DS], id[3];
    if ((st = bind_inputs(p, lm->prefill, pre, 6 + MAX_DS, 2, ip)) ||
        (st = bind_inputs(p, lm->decode, dec, 3, 2, id)) ||
        (st = check_logits(p, lm->prefill, lm->lim.vocab)) ||
        (st = check_logits(p, lm->decode, lm->lim.vocab)))
        return st;
    lm->pre_tokens = ip[0], lm->pre_pos = ip[1], lm->pre_all = ip[2];
    lm->pre_rope = ip[3], lm->pre_visual = ip[4], lm->pre_mask = ip[5];
    for (int k = 0; k < MAX_DS; k++)
        lm->pre_ds[k] = ip[6 + k];
    lm->dec_tokens = id[0], lm->dec_pos = id[1], lm->dec_rope = id[2];
    if ((lm->pre_rope < 0) != (lm->dec_rope < 0))
        return kiln_error(KILN_ERR_FORMAT,
                          "not an LLM program: only one of prefill and decode takes 'rope_pos'");
    lm->has_vision = lm->pre_visual >= 0;
    if (lm->has_vision) {
        if (lm->pre_mask < 0 || lm->pre_rope < 0)
            return kiln_error(KILN_ERR_FORMAT, "not a vision program: prefill takes 'visual' "
                                               "but not 'visual_mask' and 'rope_pos'");
        if ((st = bind_vision(p, lm, embd))) return st;
        for (int k = 0; k < MAX_DS; k++)
            if ((lm->pre_ds[k] >= 0) != (k < lm->vis.n_deepstack))
                return kiln_error(KILN_ERR_FORMAT,
                                  "not a vision program: prefill's DeepStack inputs do not match "
                                  "vision.deepstack_count %d (input '%s')",
                                  lm->vis.n_deepstack, ds_names[k]);
    } else {
        for (int k = 0; k < MAX_DS; k++)
            if (lm->pre_ds[k] >= 0 || lm->pre_mask >= 0)
                return kiln_error(KILN_ERR_FORMAT,
                                  "not a vision program: prefill takes DeepStack features or a "
                                  "visual mask but no 'visual'");
    }
    kiln_tensor_info info;
    if ((st = kiln_method_input_info(p, lm->prefill, lm->pre_tokens, &info))) return st;
    if (info.shape[0] < 1 || info.shape[0] > lm->lim.context)
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: prefill takes %lld tokens, outside 1..%d (the context)",
            (long long)info.shape[0], lm->lim.context);
    lm->lim.prefill_max = (int)info.shape[0];
    lm->lim.all_logits = lm->pre_all >= 0;
    if (kiln_program_meta_ints(p, "llm.end_token_ids", &lm->end_ids, &lm->n_end)) {
        lm->end_ids = NULL;
        lm->n_end = 0;
    }
    return KILN_OK;
}

kiln_status kiln_llm_bind(const kiln_program *p, kiln_llm **out) {
    *out = NULL;
    if (!p) return kiln_error(KILN_ERR_INVALID_ARG, "kiln_llm_bind: no program");
    kiln_llm *lm = kiln_malloc(sizeof *lm);
    if (!lm) return kiln_error(KILN_ERR_NOMEM, "out of memory binding an LLM program");
    kiln_status st = bind(p, lm);
    if (st) {
        kiln_free(lm);
        return st;
    }
    *out = lm;
    return KILN_OK;
}

void kiln_llm_free(kiln_llm *lm) {
    kiln_free(lm);
}

const kiln_program *kiln_llm_program(const kiln_llm *lm) {
    return lm->prog;
}
const kiln_llm_limits *kiln_llm_get_limits(const kiln_llm *lm) {
    return &lm->lim;
}
int kiln_llm_prefill_method(const kiln_llm *lm) {
    return lm->prefill;
}
int kiln_llm_decode_method(const kiln_llm *lm) {
    return lm->decode;
}

int kiln_llm_input_index(const kiln_llm *lm, kiln_llm_input which) {
    switch (which) {
    case KILN_LLM_PREFILL_TOKENS:
        return lm->pre_tokens;
    case KILN_LLM_PREFILL_POS:
        return lm->pre_pos;
    case KILN_LLM_PREFILL_ALL_LOGITS:
        return lm->pre_all;
    case KILN_LLM_DECODE_TOKENS:
        return lm->dec_tokens;
    case KILN_LLM_DECODE_POS:
        return lm->dec_pos;
    case KILN_LLM_PREFILL_ROPE_POS:
        return lm->pre_rope;
    case KILN_LLM_DECODE_ROPE_POS:
        return lm->dec_rope;
    case KILN_LLM_PREFILL_VISUAL:
        return lm->pre_visual;
    case KILN_LLM_PREFILL_VISUAL_MASK:
        return lm->pre_mask;
    }
    return -1;
}

const int64_t *kiln_llm_end_ids(const kiln_llm *lm, int *n) {
    *n = lm->n_end;
    return lm->end_ids;
}

int kiln_llm_is_end(const kiln_llm *lm, int32_t id) {
    for (int e = 0; e < lm->n_end; e++)
        if (lm->end_ids[e] == id) return 1;
    return 0;
}

kiln_status kiln_llm_check_tokens(const kiln_llm *lm, const int32_t *ids, int n, int start) {
    int ctx = lm->lim.context;
    if (n < 1) return kiln_error(KILN_ERR_INVALID_ARG, "no tokens to run");
    if (start < 0 || start >= ctx)
        return kiln_error(KILN_ERR_INVALID_ARG, "start position %d is outside the context 0..%d",
                          start, ctx - 1);
    if ((int64_t)start + n > ctx) {
        if (!start)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "the prompt has %d tokens, more than the context of %d", n, ctx);
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%d new tokens at position %d = %lld tokens, more than the context of %d",
                          n, start, (long long)start + n, ctx);
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lm->lim.vocab)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "token %d is id %d, outside the vocabulary 0..%d", i, ids[i],
                              lm->lim.vocab - 1);
    return KILN_OK;
}

static kiln_status check_session(const kiln_session *s, const kiln_llm *lm) {
    if (kiln_session_program(s) != lm->prog)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the session was made from another program than the LLM handle's");
    return KILN_OK;
}

static kiln_status set_i32(kiln_session *s, int method, int input, const int32_t *v, int64_t n) {
    return kiln_session_set_input(s, method, input, v, KILN_I32, 1, &n);
}

static kiln_status logits_of(kiln_session *s, int method, const float **logits) {
    const void *out;
    kiln_status st = kiln_session_get_output(s, method, 0, &out, NULL, NULL, NULL);
    if (!st && logits) *logits = out;
    return st;
}

/* What a prefill feeds besides the tokens, for M-RoPE and vision programs:
 * every token's rope positions, the image each visual token comes from,
 * and one chunk's visual inputs. All NULL for a plain program. */
typedef struct {
    int32_t *rope;          /* [n, 3] */
    int32_t *img, *img_row; /* [n]: the image of a visual token (-1: text), its row */
    kiln_llm_image *const *images;
    int32_t *mask; /* [chunk] */
    float *vis;    /* [1 + n_ds][chunk][n_embd] */
} feed;

static void feed_free(feed *f) {
    kiln_free(f->rope);
    kiln_free(f->img);
    kiln_free(f->mask);
    kiln_free(f->vis);
}

/* Forms the feed of ids[0..n) at cache rows start.. with the history's
 * rope delta; *delta_out the delta after them. */
static kiln_status feed_init(feed *f, const kiln_llm *lm, const int32_t *ids, int n, int start,
                             int delta, kiln_llm_image *const *images, int n_images, int chunk,
                             int *delta_out) {
    memset(f, 0, sizeof *f);
    *delta_out = delta;
    if (n_images < 0 || (n_images && !images))
        return kiln_error(KILN_ERR_INVALID_ARG, "%d images given at %p", n_images,
                          (const void *)images);
    if (n_images && !lm->has_vision)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%d images given, but the program has no vision encoder", n_images);
    if (lm->pre_rope < 0)
        return delta ? kiln_error(KILN_ERR_INVALID_ARG,
                                  "rope delta %d given, but the program's rope positions are its "
                                  "cache rows",
                                  delta)
                     : KILN_OK;
    kiln_vl_grid grids[64];
    if (n_images > (int)(sizeof grids / sizeof *grids))
        return kiln_error(KILN_ERR_INVALID_ARG, "%d images in one prefill; Kiln takes at most %d",
                          n_images, (int)(sizeof grids / sizeof *grids));
    for (int i = 0; i < n_images; i++) {
        if (!images[i] || images[i]->prog != lm->prog)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "image %d was not encoded by this program's encode_image", i);
        grids[i] = images[i]->grid;
    }
    int vis = lm->has_vision, D = lm->vis.n_embd, nds = lm->vis.n_deepstack;
    f->rope = kiln_malloc(sizeof(int32_t) * 3 * (size_t)n);
    f->img = vis ? kiln_malloc(sizeof(int32_t) * 2 * (size_t)n) : NULL;
    f->mask = vis ? kiln_malloc(sizeof(int32_t) * (size_t)chunk) : NULL;
    f->vis =
        vis ? kiln_malloc(sizeof(float) * (size_t)(1 + nds) * (size_t)chunk * (size_t)D) : NULL;
    if (!f->rope || (vis && (!f->img || !f->mask || !f->vis))) {
        feed_free(f);
        return kiln_error(KILN_ERR_NOMEM, "out of memory for the rope positions of %d tokens", n);
    }
    int32_t d = 0;
    if (vis) {
        kiln_status st = kiln_vl_rope_index(ids, n, lm->vis.image_token, grids, n_images,
                                            lm->vis.merge, f->rope, &d);
        if (st) {
            feed_free(f);
            return st;
        }
        f->img_row = f->img + n;
        f->images = images;
        for (int i = 0, j = 0, r = 0; i < n; i++) {
            f->img[i] = ids[i] == lm->vis.image_token ? j : -1;
            f->img_row[i] = f->img[i] >= 0 ? r++ : 0;
            if (f->img[i] >= 0 && r == images[j]->n_tokens) j++, r = 0;
        }
    } else {
        for (int i = 0; i < n; i++)
            f->rope[3 * i] = f->rope[3 * i + 1] = f->rope[3 * i + 2] = i;
    }
    int32_t base = start + delta;
    for (int i = 0; i < 3 * n; i++)
        f->rope[i] += base;
    *delta_out = delta + d;
    return KILN_OK;
}

static kiln_status set_2d(kiln_session *s, int method, int input, const void *v, kiln_dtype t,
                          int64_t rows, int64_t width) {
    int64_t shape[2] = {rows, width};
    return kiln_session_set_input(s, method, input, v, t, 2, shape);
}

/* The visual inputs of tokens first..first+n of a feed: each visual
 * token's rows from its image, zeros for text. */
static kiln_status set_visual(kiln_session *s, const kiln_llm *lm, const feed *f, int first,
                              int n) {
    int64_t D = lm->vis.n_embd;
    int nds = lm->vis.n_deepstack;
    for (int i = 0; i < n; i++) {
        int im = f->img[first + i];
        f->mask[i] = im >= 0;
        for (int k = 0; k <= nds; k++) {
            float *dst = f->vis + ((size_t)k * (size_t)n + (size_t)i) * (size_t)D;
            if (im < 0) {
                memset(dst, 0, sizeof(float) * (size_t)D);
                continue;
            }
            const kiln_llm_image *x = f->images[im];
            memcpy(dst,
                   x->rows + ((size_t)k * (size_t)x->n_tokens + (size_t)f->img_row[first + i]) *
                                 (size_t)D,
                   sizeof(float) * (size_t)D);
        }
    }
    kiln_status st;
    if ((st = set_2d(s, lm->prefill, lm->pre_visual, f->vis, KILN_F32, n, D)) ||
        (st = set_i32(s, lm->prefill, lm->pre_mask, f->mask, n)))
        return st;
    for (int k = 0; k < nds; k++)
        if ((st = set_2d(s, lm->prefill, lm->pre_ds[k],
                         f->vis + (size_t)(k + 1) * (size_t)n * (size_t)D, KILN_F32, n, D)))
            return st;
    return KILN_OK;
}

/* One prefill call on ids[0..n) at pos (n <= prefill_max), token `first`
 * of the feed's. */
static kiln_status prefill_call(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                int pos, const feed *f, int first) {
    int32_t p = pos;
    kiln_status st;
    if ((st = set_i32(s, lm->prefill, lm->pre_tokens, ids, n)) ||
        (st = set_i32(s, lm->prefill, lm->pre_pos, &p, 1)))
        return st;
    if (f->rope &&
        (st = set_2d(s, lm->prefill, lm->pre_rope, f->rope + 3 * (size_t)first, KILN_I32, n, 3)))
        return st;
    if (f->img && (st = set_visual(s, lm, f, first, n))) return st;
    return kiln_session_execute(s, lm->prefill);
}

static kiln_status set_all_logits(kiln_session *s, const kiln_llm *lm, int32_t on) {
    return lm->pre_all >= 0 ? set_i32(s, lm->prefill, lm->pre_all, &on, 1) : KILN_OK;
}

/* The chunk length a caller's `chunk` means (validated by the callers). */
static int chunk_len(const kiln_llm *lm, int chunk) {
    return !chunk || chunk > lm->lim.prefill_max ? lm->lim.prefill_max : chunk;
}

/* The prefill loop: chunks of ids[0..n) from cache row start, each chunk's
 * logits to fn when given (all_logits on). */
static kiln_status prefill_loop(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                int start, kiln_llm_image *const *images, int n_images, int chunk,
                                int *delta, int all, kiln_llm_rows_fn fn, void *user) {
    kiln_status st;
    if (chunk < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "chunk %d must be >= 0 (0 = prefill's most)",
                          chunk);
    chunk = chunk_len(lm, chunk);
    if ((st = check_session(s, lm)) || (st = kiln_llm_check_tokens(lm, ids, n, start)) ||
        (st = set_all_logits(s, lm, all)))
        return st;
    feed f;
    int delta_after;
    if ((st = feed_init(&f, lm, ids, n, start, *delta, images, n_images, chunk, &delta_after)))
        return st;
    for (int done = 0; done < n && !st;) {
        int len = n - done < chunk ? n - done : chunk;
        const float *rows;
        if ((st = prefill_call(s, lm, ids + done, len, start + done, &f, done))) break;
        if (fn && (st = logits_of(s, lm->prefill, &rows))) break;
        if (fn && fn(user, done, len, rows))
            st = kiln_error(KILN_ERR_CANCELLED,
                            "prefill stopped by its caller after %d of %d tokens", done + len, n);
        done += len;
    }
    feed_free(&f);
    if (!st) *delta = delta_after;
    return st;
}

kiln_status kiln_llm_prefill(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                             int start, int chunk, const float **logits) {
    int delta = 0;
    kiln_status st = prefill_loop(s, lm, ids, n, start, NULL, 0, chunk, &delta, 0, NULL, NULL);
    return st ? st : logits_of(s, lm->prefill, logits);
}

kiln_status kiln_llm_prefill_images(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                    int start, kiln_llm_image *const *images, int n_images,
                                    int chunk, int *rope_delta, const float **logits) {
    if (!rope_delta)
        return kiln_error(KILN_ERR_INVALID_ARG, "kiln_llm_prefill_images: no rope_delta");
    kiln_status st =
        prefill_loop(s, lm, ids, n, start, images, n_images, chunk, rope_delta, 0, NULL, NULL);
    return st ? st : logits_of(s, lm->prefill, logits);
}

kiln_status kiln_llm_prefill_rows(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                  int start, int chunk, kiln_llm_rows_fn fn, void *user) {
    if (lm->pre_all < 0)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "method 'prefill' has no 'all_logits' input: it gives the last row only");
    int delta = 0;
    return prefill_loop(s, lm, ids, n, start, NULL, 0, chunk, &delta, 1, fn, user);
}

kiln_status kiln_llm_decode_rope(kiln_session *s, const kiln_llm *lm, int32_t id, int pos,
                                 int rope_delta, const float **logits) {
    kiln_status st;
    int32_t p = pos;
    if ((st = check_session(s, lm)) || (st = kiln_llm_check_tokens(lm, &id, 1, pos)) ||
        (st = set_i32(s, lm->decode, lm->dec_tokens, &id, 1)) ||
        (st = set_i32(s, lm->decode, lm->dec_pos, &p, 1)))
        return st;
    if (lm->dec_rope >= 0) {
        int32_t r[3] = {pos + rope_delta, pos + rope_delta, pos + rope_delta};
        if ((st = set_2d(s, lm->decode, lm->dec_rope, r, KILN_I32, 1, 3))) return st;
    } else if (rope_delta) {
        return kiln_error(
            KILN_ERR_INVALID_ARG,
            "rope delta %d given, but the program's rope positions are its cache rows", rope_delta);
    }
    if ((st = kiln_session_execute(s, lm->decode))) return st;
    return logits_of(s, lm->decode, logits);
}

kiln_status kiln_llm_decode(kiln_session *s, const kiln_llm *lm, int32_t id, int pos,
                            const float **logits) {
    return kiln_llm_decode_rope(s, lm, id, pos, 0, logits);
}

const kiln_llm_vision *kiln_llm_get_vision(const kiln_llm *lm) {
    return lm->has_vision ? &lm->vis : NULL;
}

int kiln_llm_encode_method(const kiln_llm *lm) {
    return lm->has_vision ? lm->enc.method : -1;
}

void kiln_llm_image_grid(const kiln_llm_image *im, int *t, int *h, int *w) {
    *t = im->grid.t, *h = im->grid.h, *w = im->grid.w;
}

int kiln_llm_image_tokens(const kiln_llm_image *im) {
    return im ? im->n_tokens : 0;
}

void kiln_llm_image_free(kiln_llm_image *im) {
    if (!im) return;
    kiln_free(im->rows);
    kiln_free(im);
}

/* encode_image on n patches: the host tables, the call, the outputs copied
 * into im->rows. */
static kiln_status encode(kiln_session *s, const kiln_llm *lm, const float *pixels,
                          kiln_llm_image *im) {
    const kiln_llm_vision *v = &lm->vis;
    const encode_binding *e = &lm->enc;
    int64_t n = (int64_t)im->grid.t * im->grid.h * im->grid.w;
    int64_t P = (int64_t)v->channels * v->temporal_patch * v->patch * v->patch;
    int32_t *rope = kiln_malloc(sizeof(int32_t) * 6 * (size_t)n);
    float *w = kiln_malloc(sizeof(float) * 4 * (size_t)n);
    kiln_status st = KILN_OK;
    if (!rope || !w) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory for the tables of %lld patches",
                        (long long)n);
        goto done;
    }
    int32_t *idx = rope + 2 * n;
    if ((st = kiln_vl_patch_tables(im->grid, v->merge, e->side, rope, idx, w)) ||
        (st = set_2d(s, e->method, e->pixels, pixels, KILN_F32, n, P)) ||
        (st = set_2d(s, e->method, e->rope_pos, rope, KILN_I32, n, 2)) ||
        (st = set_2d(s, e->method, e->idx, idx, KILN_I32, n, 4)) ||
        (st = set_2d(s, e->method, e->w, w, KILN_F32, n, 4)) ||
        (st = kiln_session_execute(s, e->method)))
        goto done;
    size_t bytes = sizeof(float) * (size_t)im->n_tokens * (size_t)im->n_embd;
    for (int k = 0; k <= im->n_ds; k++) {
        const void *out;
        int64_t shape[KILN_MAX_DIMS];
        if ((st = kiln_session_get_output(s, e->method, k ? e->ds[k - 1] : e->visual, &out, NULL,
                                          NULL, shape)))
            goto done;
        if (shape[0] != im->n_tokens) {
            st = kiln_error(KILN_ERR_BACKEND, "encode_image gave %lld visual tokens, not %d",
                            (long long)shape[0], im->n_tokens);
            goto done;
        }
        memcpy((char *)im->rows + (size_t)k * bytes, out, bytes);
    }
done:
    kiln_free(rope);
    kiln_free(w);
    return st;
}

kiln_status kiln_llm_encode_image(kiln_session *s, const kiln_llm *lm, const float *pixels,
                                  int grid_t, int grid_h, int grid_w, kiln_llm_image **out) {
    *out = NULL;
    kiln_status st = check_session(s, lm);
    if (st) return st;
    if (!lm->has_vision)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the program has no vision encoder (no method 'encode_image')");
    const kiln_llm_vision *v = &lm->vis;
    int m = v->merge;
    if (!pixels) return kiln_error(KILN_ERR_INVALID_ARG, "kiln_llm_encode_image: no pixels");
    if (grid_t < 1 || grid_h < m || grid_w < m || grid_h % m || grid_w % m)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image grid %d x %d x %d patches: t must be >= 1 and h, w whole "
                          "multiples of the merge size %d",
                          grid_t, grid_h, grid_w, m);
    int64_t n = (int64_t)grid_t * grid_h * grid_w;
    if (n > v->max_patches)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image grid %d x %d x %d is %lld patches, more than the %d the "
                          "program's encode_image takes",
                          grid_t, grid_h, grid_w, (long long)n, v->max_patches);
    kiln_llm_image *im = kiln_malloc(sizeof *im);
    if (!im) return kiln_error(KILN_ERR_NOMEM, "out of memory for an image");
    *im = (kiln_llm_image){lm->prog,  {grid_t, grid_h, grid_w}, (int)(n / (m * m)),
                           v->n_embd, v->n_deepstack,           NULL};
    im->rows = kiln_malloc(sizeof(float) * (size_t)(1 + im->n_ds) * (size_t)im->n_tokens *
                           (size_t)im->n_embd);
    st = im->rows ? encode(s, lm, pixels, im)
                  : kiln_error(KILN_ERR_NOMEM, "out of memory for %d visual tokens", im->n_tokens);
    if (st) {
        kiln_llm_image_free(im);
        return st;
    }
    *out = im;
    return KILN_OK;
}

kiln_status kiln_llm_encode_rgb(kiln_session *s, const kiln_llm *lm, const uint8_t *rgb, int h,
                                int w, kiln_llm_image **out) {
    *out = NULL;
    if (!lm->has_vision)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the program has no vision encoder (no method 'encode_image')");
    if (!rgb) return kiln_error(KILN_ERR_INVALID_ARG, "kiln_llm_encode_rgb: no pixels");
    const kiln_llm_vision *v = &lm->vis;
    kiln_vl_image_config c = {
        v->patch, v->merge, v->temporal_patch, v->min_pixels, v->max_pixels, v->rescale, {0}, {0}};
    for (int k = 0; k < 3; k++)
        c.mean[k] = v->mean[k], c.std[k] = v->std[k];
    if (v->channels != 3)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the program's vision tower takes %d channels, not RGB", v->channels);
    int oh, ow;
    kiln_status st =
        kiln_vl_target_size(h, w, v->patch * v->merge, c.min_pixels, c.max_pixels, &oh, &ow);
    if (st) return st;
    size_t n = (size_t)oh * (size_t)ow; /* within max_pixels, so within max_patches */
    size_t row = (size_t)3 * v->temporal_patch * v->patch * v->patch;
    uint8_t *sized = kiln_malloc(n * 3);
    float *pix = kiln_malloc(sizeof *pix * n / ((size_t)v->patch * v->patch) * row);
    kiln_vl_grid g;
    if (!sized || !pix)
        st = kiln_error(KILN_ERR_NOMEM, "out of memory for a %d x %d image", oh, ow);
    else if (!(st = kiln_vl_resize_rgb(rgb, h, w, sized, oh, ow)) &&
             !(st = kiln_vl_patchify(sized, oh, ow, &c, pix, &g)))
        st = kiln_llm_encode_image(s, lm, pix, g.t, g.h, g.w, out);
    kiln_free(sized);
    kiln_free(pix);
    return st;
}
