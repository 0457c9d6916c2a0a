/* gguf_writer.c: GGUF fixtures for tests, written from the public layout. */
#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "quant/quant.h"

kt_gguf *kt_gguf_new(void) {
    kt_gguf *g = calloc(1, sizeof(kt_gguf));
    g->version = 3;
    return g;
}

void kt_gguf_free(kt_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_t; i++) {
        free(g->t[i].name);
        free(g->t[i].data);
    }
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].payload);
    }
    free(g->t);
    free(g->kv);
    free(g);
}

static void gstr(kiln_wbuf *b, const char *s) {
    kiln_wbuf_u64(b, strlen(s));
    kiln_wbuf_bytes(b, s, strlen(s));
}

kt_gguf_kv *kt_gguf_find_kv(kt_gguf *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

kt_gguf_tensor_t *kt_gguf_find_tensor(kt_gguf *g, const char *name) {
    for (int i = 0; i < g->n_t; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

void kt_gguf_drop_kv(kt_gguf *g, const char *key) {
    kt_gguf_kv *e = kt_gguf_find_kv(g, key);
    if (!e) return;
    free(e->key);
    free(e->payload);
    *e = g->kv[--g->n_kv];
}

void kt_gguf_drop_tensor(kt_gguf *g, const char *name) {
    kt_gguf_tensor_t *t = kt_gguf_find_tensor(g, name);
    if (!t) return;
    free(t->name);
    free(t->data);
    memmove(t, t + 1, sizeof *t * (size_t)(g->t + g->n_t - t - 1));
    g->n_t--;
}

/* Adds (or replaces) a key whose value bytes are in b. */
static void put(kt_gguf *g, const char *k, uint32_t type, kiln_wbuf *b) {
    kt_gguf_drop_kv(g, k);
    g->kv = realloc(g->kv, sizeof(kt_gguf_kv) * (size_t)(g->n_kv + 1));
    kt_gguf_kv *e = &g->kv[g->n_kv++];
    e->key = strdup(k);
    e->type = type;
    e->payload = b->data;
    e->len = b->len;
}

void kt_gguf_u32(kt_gguf *g, const char *k, uint32_t v) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, v);
    put(g, k, 4, &b);
}
void kt_gguf_f32(kt_gguf *g, const char *k, float v) {
    kiln_wbuf b = {0};
    kiln_wbuf_f32(&b, v);
    put(g, k, 6, &b);
}
void kt_gguf_str(kt_gguf *g, const char *k, const char *v) {
    kiln_wbuf b = {0};
    gstr(&b, v);
    put(g, k, 8, &b);
}
void kt_gguf_strs(kt_gguf *g, const char *k, const char *const *v, int n) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, 8);
    kiln_wbuf_u64(&b, (uint64_t)n);
    for (int i = 0; i < n; i++)
        gstr(&b, v[i]);
    put(g, k, 9, &b);
}
void kt_gguf_i32s(kt_gguf *g, const char *k, const int32_t *v, int n) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, 5);
    kiln_wbuf_u64(&b, (uint64_t)n);
    kiln_wbuf_bytes(&b, v, sizeof(int32_t) * (size_t)n);
    put(g, k, 9, &b);
}
void kt_gguf_f32s(kt_gguf *g, const char *k, const float *v, int n) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, 6);
    kiln_wbuf_u64(&b, (uint64_t)n);
    kiln_wbuf_bytes(&b, v, sizeof(float) * (size_t)n);
    put(g, k, 9, &b);
}

void kt_gguf_scalar(kt_gguf *g, const char *k, uint32_t type, const void *v, size_t size) {
    kiln_wbuf b = {0};
    kiln_wbuf_bytes(&b, v, size);
    put(g, k, type, &b);
}
void kt_gguf_array(kt_gguf *g, const char *k, uint32_t elem_type, const void *v, size_t elem_size,
                   int n) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, elem_type);
    kiln_wbuf_u64(&b, (uint64_t)n);
    kiln_wbuf_bytes(&b, v, elem_size * (size_t)n);
    put(g, k, 9, &b);
}

void kt_gguf_tensor(kt_gguf *g, const char *name, uint32_t type, int ndim, const int64_t *ne,
                    const void *data, size_t nbytes) {
    g->t = realloc(g->t, sizeof(kt_gguf_tensor_t) * (size_t)(g->n_t + 1));
    kt_gguf_tensor_t *t = &g->t[g->n_t++];
    memset(t, 0, sizeof *t);
    t->offset_override = -1;
    t->name = strdup(name);
    t->type = type;
    t->ndim = ndim;
    memcpy(t->ne, ne, sizeof(int64_t) * (size_t)ndim);
    t->data = malloc(nbytes ? nbytes : 1);
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
}

uint8_t *kt_gguf_bytes(kt_gguf *g, size_t *len) {
    kiln_wbuf b = {0};
    kiln_wbuf_bytes(&b, "GGUF", 4);
    kiln_wbuf_u32(&b, g->version);
    kiln_wbuf_u64(&b, (uint64_t)g->n_t);
    kiln_wbuf_u64(&b, (uint64_t)g->n_kv);
    for (int i = 0; i < g->n_kv; i++) {
        gstr(&b, g->kv[i].key);
        kiln_wbuf_u32(&b, g->kv[i].type);
        kiln_wbuf_bytes(&b, g->kv[i].payload, g->kv[i].len);
    }
    uint64_t off = 0;
    for (int i = 0; i < g->n_t; i++) {
        kt_gguf_tensor_t *t = &g->t[i];
        gstr(&b, t->name);
        kiln_wbuf_u32(&b, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++)
            kiln_wbuf_u64(&b, (uint64_t)t->ne[d]);
        kiln_wbuf_u32(&b, t->type);
        kiln_wbuf_u64(&b, t->offset_override >= 0 ? (uint64_t)t->offset_override : off);
        off = (off + t->nbytes + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    kiln_wbuf_bytes(&b, zeros, (32 - b.len % 32) % 32);
    for (int i = 0; i < g->n_t; i++) {
        kiln_wbuf_bytes(&b, g->t[i].data, g->t[i].nbytes);
        kiln_wbuf_bytes(&b, zeros, (32 - g->t[i].nbytes % 32) % 32);
    }
    *len = b.len;
    return b.data;
}

int kt_gguf_write(kt_gguf *g, const char *path) {
    size_t len;
    uint8_t *b = kt_gguf_bytes(g, &len);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, len, f) == len;
    if (f) ok &= fclose(f) == 0;
    kiln_free(b);
    return ok ? 0 : -1;
}

/* ---- a llama2.c fixture as GGUF ----------------------------------------------- */

static void add_weight(kt_gguf *g, const char *name, const float *w, int64_t rows, int64_t cols,
                       uint32_t type) {
    int64_t ne[2] = {cols, rows};
    if (cols == 0) { /* a vector: always f32, as converters write norms */
        int64_t n1[1] = {rows};
        kt_gguf_tensor(g, name, 0, 1, n1, w, sizeof(float) * (size_t)rows);
        return;
    }
    kiln_dtype dt = type == 1 ? KILN_F16 : type == 8 ? KILN_Q8_0 : type == 2 ? KILN_Q4_0 : KILN_F32;
    size_t rb = kiln_dtype_row_bytes(dt, cols);
    uint8_t *buf = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        kiln_quant_row(dt, w + r * cols, buf + (size_t)r * rb, cols);
    kt_gguf_tensor(g, name, type, 2, ne, buf, rb * (size_t)rows);
    free(buf);
}

kt_gguf *kt_gguf_from_llama2c(const void *bytes, uint32_t type) {
    int32_t h[7];
    memcpy(h, bytes, 28);
    int64_t dim = h[0], hid = h[1], L = h[2], nh = h[3], nkv = h[4], V = abs(h[5]), seq = h[6];
    int64_t hs = dim / nh, kvd = hs * nkv;
    const float *p = (const float *)((const uint8_t *)bytes + 28);
    kt_gguf *g = kt_gguf_new();
    kt_gguf_str(g, "general.architecture", "llama");
    kt_gguf_str(g, "general.name", "kiln test fixture");
    kt_gguf_u32(g, "llama.context_length", (uint32_t)seq);
    kt_gguf_u32(g, "llama.embedding_length", (uint32_t)dim);
    kt_gguf_u32(g, "llama.feed_forward_length", (uint32_t)hid);
    kt_gguf_u32(g, "llama.block_count", (uint32_t)L);
    kt_gguf_u32(g, "llama.attention.head_count", (uint32_t)nh);
    kt_gguf_u32(g, "llama.attention.head_count_kv", (uint32_t)nkv);
    kt_gguf_u32(g, "llama.rope.dimension_count", (uint32_t)hs);
    kt_gguf_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kt_gguf_f32(g, "llama.rope.freq_base", 10000.0f);
    kt_gguf_u32(g, "tokenizer.ggml.eos_token_id", 2);
    const float *emb = p;
    add_weight(g, "token_embd.weight", emb, V, dim, type);
    p += V * dim;
    const float *rms_att = p, *wq = rms_att + L * dim, *wk = wq + L * dim * dim,
                *wv = wk + L * dim * kvd;
    const float *wo = wv + L * dim * kvd, *rms_ffn = wo + L * dim * dim, *w1 = rms_ffn + L * dim;
    const float *w2 = w1 + L * dim * hid, *w3 = w2 + L * dim * hid, *fin = w3 + L * dim * hid;
    const float *wcls = fin + dim + seq * hs;
    char name[64];
    for (int64_t l = 0; l < L; l++) {
#define W(fmt, ptr, rows, cols)                                                                    \
    snprintf(name, sizeof name, fmt, (int)l);                                                      \
    add_weight(g, name, ptr, rows, cols, type)
        W("blk.%d.attn_norm.weight", rms_att + l * dim, dim, 0);
        W("blk.%d.attn_q.weight", wq + l * dim * dim, dim, dim);
        W("blk.%d.attn_k.weight", wk + l * dim * kvd, kvd, dim);
        W("blk.%d.attn_v.weight", wv + l * dim * kvd, kvd, dim);
        W("blk.%d.attn_output.weight", wo + l * dim * dim, dim, dim);
        W("blk.%d.ffn_norm.weight", rms_ffn + l * dim, dim, 0);
        W("blk.%d.ffn_gate.weight", w1 + l * dim * hid, hid, dim);
        W("blk.%d.ffn_down.weight", w2 + l * dim * hid, dim, hid);
        W("blk.%d.ffn_up.weight", w3 + l * dim * hid, hid, dim);
#undef W
    }
    add_weight(g, "output_norm.weight", fin, dim, 0, type);
    if (h[5] < 0) add_weight(g, "output.weight", wcls, V, dim, type);
    return g;
}
