/* ref.c: the reference backend. Portable scalar C for every op, f32
 * arithmetic, accumulation in plain order: the oracle every other backend is
 * compared against, and the fallback. Each output row depends only on its own
 * input row (and the cache), so results do not depend on how tokens were
 * batched into calls. Built with -ffp-contract=off so no FMA changes
 * rounding between machines. */
#include <math.h>
#include <string.h>

#include "backends/backend.h"
#include "quant/quant.h"

/* One weight row as f32: the row itself for f32 weights, else expanded into
 * `tmp` (n floats) from any layout, packed ones included. NULL when the
 * dtype has no reader. */
static const float *weight_row(const kiln_tensor *w, int64_t row, float *tmp) {
    int64_t n = w->ne[1];
    size_t rb = kiln_dtype_row_bytes(w->dtype, n);
    if (w->dtype == KILN_F32) return (const float *)((const uint8_t *)w->data + (size_t)row * rb);
    return kiln_weight_dequant(w->dtype, w->data, rb, row, 0, n, tmp) == KILN_OK ? tmp : NULL;
}

static kiln_status unsupported_dtype(const kiln_tensor *w) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "ref cannot read weights of dtype %s",
                      kiln_dtype_name(w->dtype));
}

static kiln_status k_get_rows(const kiln_tensor *const *in, kiln_tensor *out) {
    const kiln_tensor *w = in[0];
    const int32_t *ids = in[1]->data;
    float *o = out->data;
    int64_t V = w->ne[0], D = w->ne[1];
    for (int64_t t = 0; t < out->ne[0]; t++) {
        if (ids[t] < 0 || ids[t] >= V)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "token id %d at row %lld is outside the vocabulary 0..%lld", ids[t],
                              (long long)t, (long long)(V - 1));
        const float *r = weight_row(w, ids[t], o + t * D);
        if (!r) return unsupported_dtype(w);
        if (r != o + t * D) memcpy(o + t * D, r, (size_t)D * sizeof(float));
    }
    return KILN_OK;
}

static kiln_status k_rms_norm(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out) {
    const float *x = in[0]->data, *w = in[1]->data;
    float *o = out->data;
    int64_t G = in[1]->ne[0], groups = in[0]->ne[0] * in[0]->ne[1] / G;
    float eps = n->fattr[0];
    for (int64_t g = 0; g < groups; g++) {
        const float *xr = x + g * G;
        float *orow = o + g * G;
        float ss = 0.0f;
        for (int64_t j = 0; j < G; j++)
            ss += xr[j] * xr[j];
        ss /= (float)G;
        ss += eps;
        ss = 1.0f / sqrtf(ss);
        for (int64_t j = 0; j < G; j++)
            orow[j] = w[j] * (ss * xr[j]);
    }
    return KILN_OK;
}

/* out[t, n] = sum_k x[t, k] * w[n, k], rows of x from row0 on. */
static kiln_status matmul_rows(const float *x, int64_t rows, const kiln_tensor *w, float *o,
                               float *tmp) {
    int64_t N = w->ne[0], K = w->ne[1];
    for (int64_t n = 0; n < N; n++) {
        const float *wr = weight_row(w, n, tmp);
        if (!wr) return unsupported_dtype(w);
        for (int64_t t = 0; t < rows; t++) {
            const float *xr = x + t * K;
            float val = 0.0f;
            for (int64_t k = 0; k < K; k++)
                val += wr[k] * xr[k];
            o[t * N + n] = val;
        }
    }
    return KILN_OK;
}

static kiln_status k_binary(int op, const kiln_tensor *const *in, kiln_tensor *out) {
    const float *a = in[0]->data, *b = in[1]->data;
    float *o = out->data;
    int64_t T = in[0]->ne[0], N = in[0]->ne[1];
    int bcast = in[1]->ndim == 1;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < N; i++) {
            float y = b[bcast ? i : t * N + i];
            o[t * N + i] = op == KILN_OP_ADD ? a[t * N + i] + y : a[t * N + i] * y;
        }
    return KILN_OK;
}

static float silu(float v) {
    return v * (1.0f / (1.0f + expf(-v)));
}

static void softmax_row(float *x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] /= sum;
}

static kiln_status check_pos(int32_t pos, int64_t T, int64_t S) {
    if (pos < 0 || pos > S || T > S - pos)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "position %d + %lld tokens does not fit the context of %lld", pos,
                          (long long)T, (long long)S);
    return KILN_OK;
}

static kiln_status k_rope(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out) {
    const float *x = in[0]->data;
    const float *ff = n->n_in > 2 ? in[2]->data : NULL;
    float *o = out->data;
    int32_t pos = *(const int32_t *)in[1]->data;
    int64_t T = in[0]->ne[0], W = in[0]->ne[1];
    int nh = n->iattr[KILN_ROPE_N_HEAD], hd = n->iattr[KILN_ROPE_HEAD_DIM];
    int nrot = n->iattr[KILN_ROPE_N_ROT], neox = n->iattr[KILN_ROPE_MODE] == KILN_ROPE_NEOX;
    float theta = n->fattr[0];
    if (pos < 0 || pos > (1 << 30) - T)
        return kiln_error(KILN_ERR_INVALID_ARG, "position %d is out of range", pos);
    if (o != x) memcpy(o, x, (size_t)(T * W) * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        int32_t p = pos + (int32_t)t;
        for (int j = 0; j < nrot / 2; j++) {
            float freq = 1.0f / powf(theta, (float)(2 * j) / (float)nrot);
            if (ff) freq /= ff[j];
            float val = (float)p * freq;
            float fcr = cosf(val), fci = sinf(val);
            for (int h = 0; h < nh; h++) {
                float *r = o + t * W + (int64_t)h * hd;
                int i0 = neox ? j : 2 * j, i1 = neox ? j + nrot / 2 : 2 * j + 1;
                float v0 = r[i0], v1 = r[i1];
                r[i0] = v0 * fcr - v1 * fci;
                r[i1] = v0 * fci + v1 * fcr;
            }
        }
    }
    return KILN_OK;
}

/* Cache rows are f32 or f16 (stored rounded to nearest even). */
static kiln_status k_kv_store(const kiln_tensor *const *in, kiln_tensor *out) {
    const kiln_tensor *c = in[0], *x = in[1];
    int32_t pos = *(const int32_t *)in[2]->data;
    kiln_status st = check_pos(pos, x->ne[0], c->ne[0]);
    if (st) return st;
    if (out->data != c->data)
        return kiln_error(KILN_ERR_BACKEND, "kv_store output must view its cache");
    int64_t n = x->ne[0] * x->ne[1], start = (int64_t)pos * c->ne[1];
    const float *src = x->data;
    if (c->dtype == KILN_F16) {
        uint16_t *dst = (uint16_t *)c->data + start;
        for (int64_t i = 0; i < n; i++)
            dst[i] = kiln_f32_to_f16(src[i]);
    } else {
        memcpy((float *)c->data + start, src, (size_t)n * sizeof(float));
    }
    return KILN_OK;
}

/* Cache element `idx` as f32 (f16 caches widen exactly). */
static inline float cache_at(const kiln_tensor *c, int64_t idx) {
    return c->dtype == KILN_F16 ? kiln_f16_to_f32(((const uint16_t *)c->data)[idx])
                                : ((const float *)c->data)[idx];
}

static kiln_status k_attention(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                               float *scores, uint64_t scratch_bytes) {
    const float *q = in[0]->data;
    const kiln_tensor *kc = in[1], *vc = in[2];
    float *o = out->data;
    int32_t pos = *(const int32_t *)in[3]->data;
    int64_t T = in[0]->ne[0], S = in[1]->ne[0];
    int nh = n->iattr[KILN_ATTN_N_HEAD], nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    int hd = n->iattr[KILN_ATTN_HEAD_DIM];
    int64_t kvw = (int64_t)nkv * hd;
    float div = n->fattr[0];
    kiln_status st = check_pos(pos, T, S);
    if (st) return st;
    if (scratch_bytes < (uint64_t)S * sizeof(float))
        return kiln_error(KILN_ERR_BACKEND, "attention scratch of %llu bytes is too small",
                          (unsigned long long)scratch_bytes);
    for (int64_t t = 0; t < T; t++) {
        int64_t last = pos + t; /* attends to positions 0..last */
        for (int h = 0; h < nh; h++) {
            const float *qh = q + t * nh * hd + (int64_t)h * hd;
            int64_t kvo = (int64_t)(h / (nh / nkv)) * hd;
            for (int64_t s = 0; s <= last; s++) {
                int64_t kr = s * kvw + kvo;
                float score = 0.0f;
                for (int i = 0; i < hd; i++)
                    score += qh[i] * cache_at(kc, kr + i);
                scores[s] = score / div;
            }
            softmax_row(scores, last + 1);
            float *oh = o + t * nh * hd + (int64_t)h * hd;
            memset(oh, 0, (size_t)hd * sizeof(float));
            for (int64_t s = 0; s <= last; s++) {
                int64_t vr = s * kvw + kvo;
                float a = scores[s];
                for (int i = 0; i < hd; i++)
                    oh[i] += a * cache_at(vc, vr + i);
            }
        }
    }
    return KILN_OK;
}

void kiln_ref_layer_norm_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                              int64_t t0, int64_t t1) {
    const float *x = in[0]->data, *w = in[1]->data, *b = in[2]->data;
    float *o = out->data;
    int64_t D = in[0]->ne[1];
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = x + t * D;
        float mean = 0.0f, var = 0.0f;
        for (int64_t j = 0; j < D; j++)
            mean += xr[j];
        mean /= (float)D;
        for (int64_t j = 0; j < D; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        float inv = 1.0f / sqrtf(var / (float)D + n->fattr[0]);
        for (int64_t j = 0; j < D; j++)
            o[t * D + j] = (xr[j] - mean) * inv * w[j] + b[j];
    }
}

static float gelu(float v, int tanh_form) {
    if (tanh_form)
        return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

void kiln_ref_gelu_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        int64_t t0, int64_t t1) {
    const float *x = in[0]->data;
    float *o = out->data;
    int64_t D = in[0]->ne[1];
    for (int64_t i = t0 * D; i < t1 * D; i++)
        o[i] = gelu(x[i], n->iattr[KILN_GELU_TANH]);
}

static kiln_status k_merge_rows(const kiln_tensor *const *in, kiln_tensor *out) {
    const int32_t *mask = in[2]->data;
    int64_t T = in[0]->ne[0], D = in[0]->ne[1];
    for (int64_t t = 0; t < T; t++) {
        const float *src = (const float *)(mask[t] ? in[1]->data : in[0]->data) + t * D;
        float *o = (float *)out->data + t * D;
        if (o != src) memmove(o, src, (size_t)D * sizeof(float));
    }
    return KILN_OK;
}

static kiln_status k_embed_bag(const kiln_tensor *const *in, kiln_tensor *out, float *tmp) {
    const kiln_tensor *w = in[0];
    const int32_t *ids = in[1]->data;
    const float *wt = in[2]->data;
    int64_t V = w->ne[0], D = w->ne[1], K = in[1]->ne[1];
    float *o = out->data;
    for (int64_t t = 0; t < out->ne[0]; t++) {
        float *orow = o + t * D;
        memset(orow, 0, (size_t)D * sizeof(float));
        for (int64_t k = 0; k < K; k++) {
            int32_t id = ids[t * K + k];
            if (id < 0 || id >= V)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "embed_bag id %d at row %lld is outside the table 0..%lld", id,
                                  (long long)t, (long long)(V - 1));
            const float *r = weight_row(w, id, tmp);
            if (!r) return unsupported_dtype(w);
            float a = wt[t * K + k];
            for (int64_t j = 0; j < D; j++)
                orow[j] += a * r[j];
        }
    }
    return KILN_OK;
}

kiln_status kiln_ref_rope_multi_check(const kiln_tensor *const *in) {
    const int32_t *pos = in[1]->data;
    for (int64_t i = 0; i < in[1]->ne[0] * in[1]->ne[1]; i++)
        if (pos[i] < -(1 << 30) || pos[i] > (1 << 30))
            return kiln_error(KILN_ERR_INVALID_ARG, "position %d is out of range", pos[i]);
    return KILN_OK;
}

void kiln_ref_rope_multi_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                              int64_t t0, int64_t t1) {
    const int32_t *pos = in[1]->data;
    float *o = out->data;
    int64_t W = in[0]->ne[1], S = in[1]->ne[1];
    int nh = n->iattr[KILN_ROPEM_N_HEAD], hd = n->iattr[KILN_ROPEM_HEAD_DIM];
    int axial = n->iattr[KILN_ROPEM_LAYOUT] == KILN_ROPEM_AXIAL;
    const int32_t *sec = n->iattr + KILN_ROPEM_SECTION;
    float theta = n->fattr[0];
    int half = hd / 2;
    for (int64_t t = t0; t < t1; t++) {
        for (int j = 0; j < half; j++) {
            /* axial: each stream's quarter of the head restarts the frequencies */
            int stream = axial                            ? j >= half / 2
                         : (j % 3 == 1 && j < 3 * sec[1]) ? 1
                         : (j % 3 == 2 && j < 3 * sec[2]) ? 2
                                                          : 0;
            int e = axial ? j - stream * (half / 2) : j;
            float freq = 1.0f / powf(theta, (float)(2 * e) / (float)(axial ? half : hd));
            float val = (float)pos[t * S + stream] * freq;
            float fcr = cosf(val), fci = sinf(val);
            for (int h = 0; h < nh; h++) {
                float *r = o + t * W + (int64_t)h * hd;
                float v0 = r[j], v1 = r[j + half];
                r[j] = v0 * fcr - v1 * fci;
                r[j + half] = v0 * fci + v1 * fcr;
            }
        }
    }
}

static kiln_status k_rope_multi(const kiln_node *n, const kiln_tensor *const *in,
                                kiln_tensor *out) {
    kiln_status st = kiln_ref_rope_multi_check(in);
    if (st) return st;
    if (out->data != in[0]->data)
        memcpy(out->data, in[0]->data, (size_t)(in[0]->ne[0] * in[0]->ne[1]) * sizeof(float));
    kiln_ref_rope_multi_rows(n, in, out, 0, in[0]->ne[0]);
    return KILN_OK;
}

static kiln_status k_attention_full(const kiln_node *n, const kiln_tensor *const *in,
                                    kiln_tensor *out, float *scores, uint64_t scratch_bytes) {
    const float *q = in[0]->data, *k = in[1]->data, *v = in[2]->data;
    float *o = out->data;
    int64_t T = in[0]->ne[0];
    int nh = n->iattr[KILN_ATTN_N_HEAD], nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    int hd = n->iattr[KILN_ATTN_HEAD_DIM];
    int64_t kvw = (int64_t)nkv * hd;
    if (scratch_bytes < (uint64_t)T * sizeof(float))
        return kiln_error(KILN_ERR_BACKEND, "attention scratch of %llu bytes is too small",
                          (unsigned long long)scratch_bytes);
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *qh = q + t * nh * hd + (int64_t)h * hd;
            int64_t kvo = (int64_t)(h / (nh / nkv)) * hd;
            for (int64_t s = 0; s < T; s++) {
                float score = 0.0f;
                for (int i = 0; i < hd; i++)
                    score += qh[i] * k[s * kvw + kvo + i];
                scores[s] = score / n->fattr[0];
            }
            softmax_row(scores, T);
            float *oh = o + t * nh * hd + (int64_t)h * hd;
            memset(oh, 0, (size_t)hd * sizeof(float));
            for (int64_t s = 0; s < T; s++)
                for (int i = 0; i < hd; i++)
                    oh[i] += scores[s] * v[s * kvw + kvo + i];
        }
    return KILN_OK;
}

kiln_status kiln_ref_exec(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                          kiln_tensor *out, void *scratch, uint64_t scratch_bytes) {
    (void)ctx;
    float *o = out->data;
    int64_t elems = out->ne[0] * out->ne[1];
    switch ((kiln_op)n->op) {
    case KILN_OP_GET_ROWS:
        return k_get_rows(in, out);
    case KILN_OP_RMS_NORM:
        return k_rms_norm(n, in, out);
    case KILN_OP_MATMUL:
        return matmul_rows(in[0]->data, in[0]->ne[0], in[1], o, scratch);
    case KILN_OP_ADD:
    case KILN_OP_MUL:
        return k_binary(n->op, in, out);
    case KILN_OP_SILU: {
        const float *x = in[0]->data;
        for (int64_t i = 0; i < elems; i++)
            o[i] = silu(x[i]);
        return KILN_OK;
    }
    case KILN_OP_SWIGLU: {
        const float *g = in[0]->data, *u = in[1]->data;
        for (int64_t i = 0; i < elems; i++) {
            float val = g[i];
            val *= 1.0f / (1.0f + expf(-val));
            o[i] = val * u[i];
        }
        return KILN_OK;
    }
    case KILN_OP_SOFTMAX: {
        if (o != in[0]->data) memcpy(o, in[0]->data, (size_t)elems * sizeof(float));
        for (int64_t t = 0; t < out->ne[0]; t++)
            softmax_row(o + t * out->ne[1], out->ne[1]);
        return KILN_OK;
    }
    case KILN_OP_ROPE:
        return k_rope(n, in, out);
    case KILN_OP_KV_STORE:
        return k_kv_store(in, out);
    case KILN_OP_ATTENTION:
        return k_attention(n, in, out, scratch, scratch_bytes);
    case KILN_OP_LOGITS: {
        /* One row: the last token's. */
        int64_t T = in[0]->ne[0], D = in[0]->ne[1];
        const float *x = (const float *)in[0]->data + (out->ne[0] == 1 ? (T - 1) * D : 0);
        return matmul_rows(x, out->ne[0], in[1], o, scratch);
    }
    case KILN_OP_LAYER_NORM:
        kiln_ref_layer_norm_rows(n, in, out, 0, in[0]->ne[0]);
        return KILN_OK;
    case KILN_OP_GELU:
        kiln_ref_gelu_rows(n, in, out, 0, in[0]->ne[0]);
        return KILN_OK;
    case KILN_OP_MERGE_ROWS:
        return k_merge_rows(in, out);
    case KILN_OP_EMBED_BAG:
        return k_embed_bag(in, out, scratch);
    case KILN_OP_FOLD_ROWS: /* the same bytes, read as fewer, wider rows */
        if (o != in[0]->data) memmove(o, in[0]->data, (size_t)elems * sizeof(float));
        return KILN_OK;
    case KILN_OP_ROPE_MULTI:
        return k_rope_multi(n, in, out);
    case KILN_OP_ATTENTION_FULL:
        return k_attention_full(n, in, out, scratch, scratch_bytes);
    case KILN_OP_COUNT:
        break;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "ref has no kernel for op %d", n->op);
}

static int ref_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) {
    return n->op >= 0 && n->op < KILN_OP_COUNT;
}

static const char *ref_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) {
    return "scalar f32";
}

const kiln_backend kiln_backend_ref_impl = {
    .name = "ref",
    .configure = NULL,
    .supports = ref_supports,
    .open = NULL,
    .close = NULL,
    .exec = kiln_ref_exec,
    .unit = ref_unit,
};
