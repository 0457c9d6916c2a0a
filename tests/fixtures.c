/* fixtures.c: writers for test models and the independent oracle. */
#include "fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kiln/kiln_compile.h"

/* ---- llama2.c checkpoints ---------------------------------------------------- */

static size_t l2c_floats(const kt_l2c_config *c) {
    size_t dim = (size_t)c->dim, hid = (size_t)c->hidden, L = (size_t)c->layers,
           V = (size_t)c->vocab;
    size_t hs = dim / (size_t)c->heads, kvd = hs * (size_t)c->kv_heads;
    size_t n = V * dim + L * dim + L * dim * dim + 2 * L * dim * kvd + L * dim * dim + L * dim +
               3 * L * dim * hid + dim + (size_t)c->seq * hs;
    if (!c->shared_classifier) n += V * dim;
    return n;
}

uint8_t *kt_llama2c_bytes(const kt_l2c_config *c, size_t *len) {
    size_t nf = l2c_floats(c);
    *len = 28 + nf * 4;
    uint8_t *b = malloc(*len);
    if (!b) return NULL;
    int32_t h[7] = {c->dim,   c->hidden,   c->layers,
                    c->heads, c->kv_heads, c->shared_classifier ? c->vocab : -c->vocab,
                    c->seq};
    memcpy(b, h, 28);
    float *w = (float *)(b + 28);
    unsigned long long s = c->seed ? c->seed : 1;
    size_t dim = (size_t)c->dim, L = (size_t)c->layers;
    size_t off = 0;
    /* Embeddings and matrices ~U(-0.3, 0.3); norm weights ~1 +- 0.2. */
    size_t emb = (size_t)c->vocab * dim;
    for (size_t i = 0; i < emb; i++)
        w[off++] = 0.3f * kt_randf(&s);
    for (size_t i = 0; i < L * dim; i++)
        w[off++] = 1.0f + 0.2f * kt_randf(&s);
    size_t hs = dim / (size_t)c->heads, kvd = hs * (size_t)c->kv_heads, hid = (size_t)c->hidden;
    size_t mats = L * dim * dim + 2 * L * dim * kvd + L * dim * dim;
    for (size_t i = 0; i < mats; i++)
        w[off++] = 0.3f * kt_randf(&s) / sqrtf((float)dim) * 3.0f;
    for (size_t i = 0; i < L * dim; i++)
        w[off++] = 1.0f + 0.2f * kt_randf(&s);
    for (size_t i = 0; i < 3 * L * dim * hid; i++)
        w[off++] = 0.3f * kt_randf(&s) / sqrtf((float)dim) * 3.0f;
    for (size_t i = 0; i < dim; i++)
        w[off++] = 1.0f + 0.2f * kt_randf(&s);
    for (size_t i = 0; i < (size_t)c->seq * hs; i++)
        w[off++] = 0.0f; /* rope tables: unused */
    if (!c->shared_classifier)
        for (size_t i = 0; i < emb; i++)
            w[off++] = 0.3f * kt_randf(&s);
    return b;
}

int kt_write_llama2c(const char *path, const kt_l2c_config *c) {
    size_t len;
    uint8_t *b = kt_llama2c_bytes(c, &len);
    int r = b ? kt_write_file(path, b, len) : -1;
    free(b);
    return r;
}

/* ---- tokenizers ---------------------------------------------------------------- */

uint8_t *kt_tokenizer_bytes(int vocab, size_t *len) {
    /* Pieces: 3 specials, 256 bytes, then " ", letters, and " a", "ab"... */
    char **pieces = calloc((size_t)vocab, sizeof *pieces);
    float *scores = calloc((size_t)vocab, sizeof *scores);
    int n = 0;
    const char *special[3] = {"<unk>", "\n<s>\n", "\n</s>\n"};
    for (int i = 0; i < 3 && n < vocab; i++)
        pieces[n++] = strdup(special[i]);
    for (int b = 0; b < 256 && n < vocab; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        pieces[n++] = strdup(p);
    }
    const char *extra[] = {" ",  "e",    "t",  "a",  "o",  "n",    "h",    "s",  " t",
                           "he", " the", "th", "an", " a", "in",   " an",  "nd", " and",
                           "at", "en",   "es", "on", "st", "Once", " Once"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra && n < vocab; i++) {
        scores[n] = -(float)i;
        pieces[n++] = strdup(extra[i]);
    }
    for (int k = 0; n < vocab; k++) { /* filler pieces that never merge by accident */
        char p[16];
        snprintf(p, sizeof p, "~%d~", k);
        scores[n] = -1000.0f - (float)k;
        pieces[n++] = strdup(p);
    }
    size_t cap = 4;
    for (int i = 0; i < vocab; i++)
        cap += 8 + strlen(pieces[i]);
    uint8_t *b = malloc(cap), *p = b;
    int32_t maxlen = 0;
    for (int i = 0; i < vocab; i++)
        if ((int32_t)strlen(pieces[i]) > maxlen) maxlen = (int32_t)strlen(pieces[i]);
    memcpy(p, &maxlen, 4);
    p += 4;
    for (int i = 0; i < vocab; i++) {
        int32_t l = (int32_t)strlen(pieces[i]);
        memcpy(p, &scores[i], 4);
        memcpy(p + 4, &l, 4);
        memcpy(p + 8, pieces[i], (size_t)l);
        p += 8 + l;
        free(pieces[i]);
    }
    free(pieces);
    free(scores);
    *len = (size_t)(p - b);
    return b;
}

int kt_write_tokenizer(const char *path, int vocab) {
    size_t len;
    uint8_t *b = kt_tokenizer_bytes(vocab, &len);
    int r = b ? kt_write_file(path, b, len) : -1;
    free(b);
    return r;
}

/* ---- the oracle: llama2.c's forward pass, written plainly, in double ---------- */

struct kt_oracle {
    int dim, hidden, layers, heads, kv_heads, vocab, seq, hs;
    float *data; /* the whole file */
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
    double *kc, *vc; /* [layer][seq][kv_dim] */
    int kv_f16;      /* round stored keys and values to f16, as an f16 KV cache does */
};

kt_oracle *kt_oracle_load(const char *path) {
    size_t len;
    char *file = kt_read_file(path, &len);
    if (!file) return NULL;
    kt_oracle *o = calloc(1, sizeof *o);
    int32_t h[7];
    memcpy(h, file, 28);
    o->dim = h[0], o->hidden = h[1], o->layers = h[2], o->heads = h[3], o->kv_heads = h[4];
    o->vocab = abs(h[5]), o->seq = h[6];
    o->hs = o->dim / o->heads;
    o->data = malloc(len - 28);
    memcpy(o->data, file + 28, len - 28);
    free(file);
    size_t dim = (size_t)o->dim, L = (size_t)o->layers, kvd = (size_t)(o->hs * o->kv_heads),
           hid = (size_t)o->hidden;
    const float *p = o->data;
    o->emb = p, p += (size_t)o->vocab * dim;
    o->rms_att = p, p += L * dim;
    o->wq = p, p += L * dim * dim;
    o->wk = p, p += L * dim * kvd;
    o->wv = p, p += L * dim * kvd;
    o->wo = p, p += L * dim * dim;
    o->rms_ffn = p, p += L * dim;
    o->w1 = p, p += L * dim * hid;
    o->w2 = p, p += L * dim * hid;
    o->w3 = p, p += L * dim * hid;
    o->rms_final = p, p += dim;
    p += (size_t)o->seq * (size_t)o->hs;
    o->wcls = h[5] > 0 ? o->emb : p;
    o->kc = calloc(L * (size_t)o->seq * kvd, sizeof(double));
    o->vc = calloc(L * (size_t)o->seq * kvd, sizeof(double));
    return o;
}

void kt_oracle_free(kt_oracle *o) {
    if (!o) return;
    free(o->data);
    free(o->kc);
    free(o->vc);
    free(o);
}

void kt_oracle_reset(kt_oracle *o) {
    size_t n = (size_t)o->layers * (size_t)o->seq * (size_t)(o->hs * o->kv_heads);
    memset(o->kc, 0, n * sizeof(double));
    memset(o->vc, 0, n * sizeof(double));
}

int kt_oracle_vocab(const kt_oracle *o) {
    return o->vocab;
}

void kt_oracle_set_kv_f16(kt_oracle *o, int on) {
    o->kv_f16 = on;
}

/* x rounded to the nearest IEEE half (ties to even; no overflow at these
 * magnitudes), written independently of src/base/fp16.c. */
static double round_f16(double x) {
    if (fabs(x) < 0x1p-14) return nearbyint(x * 0x1p24) * 0x1p-24; /* subnormal: quantum 2^-24 */
    int e;
    double m = frexp(x, &e); /* 0.5 <= |m| < 1: 11 significant bits are m * 2^11 */
    return ldexp(nearbyint(ldexp(m, 11)), e - 11);
}

static void rmsnorm_d(double *out, const double *x, const float *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++)
        out[i] = w[i] * x[i] * ss;
}

/* out[rows] = W[rows, cols] x */
static void matvec_d(double *out, const double *x, const float *w, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)w[(size_t)r * cols + c] * x[c];
        out[r] = s;
    }
}

void kt_oracle_forward(kt_oracle *o, int token, int pos, float *logits) {
    int dim = o->dim, hs = o->hs, kvd = hs * o->kv_heads, hid = o->hidden;
    double *x = calloc((size_t)dim, sizeof(double)), *xb = calloc((size_t)dim, sizeof(double));
    double *q = calloc((size_t)dim, sizeof(double)), *k = calloc((size_t)kvd, sizeof(double));
    double *v = calloc((size_t)kvd, sizeof(double)), *att = calloc((size_t)o->seq, sizeof(double));
    double *h1 = calloc((size_t)hid, sizeof(double)), *h3 = calloc((size_t)hid, sizeof(double));
    double *out = calloc((size_t)dim, sizeof(double));
    for (int i = 0; i < dim; i++)
        x[i] = o->emb[(size_t)token * dim + i];
    for (int l = 0; l < o->layers; l++) {
        rmsnorm_d(xb, x, o->rms_att + (size_t)l * dim, dim);
        matvec_d(q, xb, o->wq + (size_t)l * dim * dim, dim, dim);
        matvec_d(k, xb, o->wk + (size_t)l * dim * kvd, kvd, dim);
        matvec_d(v, xb, o->wv + (size_t)l * dim * kvd, kvd, dim);
        /* rotate adjacent pairs within each head */
        for (int i = 0; i < dim; i += 2) {
            int j = i % hs;
            double freq = 1.0 / pow(10000.0, (double)j / hs), a = pos * freq;
            double c = cos(a), s = sin(a);
            double q0 = q[i], q1 = q[i + 1];
            q[i] = q0 * c - q1 * s, q[i + 1] = q0 * s + q1 * c;
            if (i < kvd) {
                double k0 = k[i], k1 = k[i + 1];
                k[i] = k0 * c - k1 * s, k[i + 1] = k0 * s + k1 * c;
            }
        }
        double *kc = o->kc + (size_t)l * o->seq * kvd, *vc = o->vc + (size_t)l * o->seq * kvd;
        if (o->kv_f16)
            for (int i = 0; i < kvd; i++)
                k[i] = round_f16(k[i]), v[i] = round_f16(v[i]);
        memcpy(kc + (size_t)pos * kvd, k, (size_t)kvd * sizeof(double));
        memcpy(vc + (size_t)pos * kvd, v, (size_t)kvd * sizeof(double));
        for (int h = 0; h < o->heads; h++) {
            int kvh = h / (o->heads / o->kv_heads);
            double mx = -1e300, sum = 0;
            for (int t = 0; t <= pos; t++) {
                double s = 0;
                for (int i = 0; i < hs; i++)
                    s += q[h * hs + i] * kc[(size_t)t * kvd + kvh * hs + i];
                att[t] = s / sqrt((double)hs);
                if (att[t] > mx) mx = att[t];
            }
            for (int t = 0; t <= pos; t++)
                sum += (att[t] = exp(att[t] - mx));
            for (int i = 0; i < hs; i++) {
                double acc = 0;
                for (int t = 0; t <= pos; t++)
                    acc += att[t] / sum * vc[(size_t)t * kvd + kvh * hs + i];
                xb[h * hs + i] = acc;
            }
        }
        matvec_d(out, xb, o->wo + (size_t)l * dim * dim, dim, dim);
        for (int i = 0; i < dim; i++)
            x[i] += out[i];
        rmsnorm_d(xb, x, o->rms_ffn + (size_t)l * dim, dim);
        matvec_d(h1, xb, o->w1 + (size_t)l * dim * hid, hid, dim);
        matvec_d(h3, xb, o->w3 + (size_t)l * dim * hid, hid, dim);
        for (int i = 0; i < hid; i++)
            h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
        matvec_d(out, h1, o->w2 + (size_t)l * dim * hid, dim, hid);
        for (int i = 0; i < dim; i++)
            x[i] += out[i];
    }
    rmsnorm_d(xb, x, o->rms_final, dim);
    for (int r = 0; r < o->vocab; r++) {
        double s = 0;
        for (int c = 0; c < dim; c++)
            s += (double)o->wcls[(size_t)r * dim + c] * xb[c];
        logits[r] = (float)s;
    }
    free(x), free(xb), free(q), free(k), free(v), free(att), free(h1), free(h3), free(out);
}

double kt_rel_err(const float *a, const float *b, int n) {
    double md = 0, mb = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

int kt_compile(const char *model, const char *tokenizer, const char *out, int prefill, int max_seq,
               const char *backends) {
    return kt_compile_kv(model, tokenizer, out, prefill, max_seq, backends, NULL);
}

int kt_compile_kv(const char *model, const char *tokenizer, const char *out, int prefill,
                  int max_seq, const char *backends, const char *kv_type) {
    kiln_compile_options o;
    kiln_compile_options_init(&o);
    o.input = model;
    o.tokenizer = tokenizer;
    o.output = out;
    o.prefill = prefill;
    o.max_seq = max_seq;
    o.backends = backends;
    o.kv_type = kv_type;
    return kiln_compile(&o);
}
