/* cpu.c: the optimized CPU backend. Matmuls quantize their activation rows
 * into the node's scratch and run the kernel table's gemm on tiles of weight
 * rows x tokens, split over the program's thread pool; attention scores
 * tiles of query rows against blocks of cached keys with the same gemm and
 * runs an online softmax per row; the other ops are plain C loops. Every output element is computed
 * whole by one thread, in an order that depends neither on the thread count nor on how tokens were
 * batched, so results are bit-identical for any -t and any prefill chunking. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/pool.h"
#include "quant/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

/* Largest attention head the cpu kernels take (their accumulators live on
 * the stack); wider heads run on ref. */
#define ATTN_MAX_HD 512
/* Keys scored per step of the online softmax. Block edges are absolute
 * positions, so a row's arithmetic does not depend on the call's size. */
#define ATTN_BLOCK 64
/* Largest token tile of one gemm call. */
#define MM_TILE_T 64
/* Largest rope position cos/sin tables cover (positions past it are computed
 * on the fly, as ref does). */
#define ROPE_TABLE_MAX_POS 32768
/* Below this much work (multiply-adds or elements) an op runs on the calling
 * thread: waking the pool would cost more. */
#define PAR_MIN_WORK 131072

/* ---- per-program context ------------------------------------------------- */

/* cos/sin of every position for one (theta, n_rot, freq factors) triple:
 * cs[(p * half + j) * 2 + {0, 1}], computed exactly as ref computes them. */
typedef struct rope_table {
    float theta;
    int n_rot;
    const float *ff; /* constant freq factors, or NULL */
    int64_t n_pos;
    float *cs;
} rope_table;

typedef struct cpu_method {
    const kiln_node *nodes;
    int n_nodes;
    const rope_table **rope; /* per node: its table, or NULL */
} cpu_method;

typedef float (*dot_f32_fn)(const float *, const float *, int64_t);
typedef float (*dot_f16_fn)(const float *, const uint16_t *, int64_t);
typedef void (*axpy_f32_fn)(float, const float *, float *, int64_t);
typedef void (*axpy_f16_fn)(float, const uint16_t *, float *, int64_t);

typedef struct cpu_ctx {
    const kiln_cpu_kernels *k; /* the chosen table */
    int x86_simd;              /* k is an x86 SIMD table: AVX2, FMA and F16C are there */
    kiln_pool *pool;
    int n_threads;
    /* Resolved kernels: the chosen table's, else the scalar table's (which
     * is complete: test_cpu_kernels), else (gemm NULL) the dequantizing loop. */
    kiln_cpu_gemm_fn gemm[KILN_DTYPE_END];
    kiln_cpu_gemm_fn score_f16; /* attention over an f16 cache */
    void (*quantize_row)(int act, const float *x, void *dst, int64_t k);
    dot_f32_fn dot_f32;
    dot_f16_fn dot_f16;
    axpy_f32_fn axpy_f32;
    axpy_f16_fn axpy_f16;
    /* Per-method node data, and the rope tables they point to. */
    int n_methods;
    cpu_method *methods;
    int n_ropes;
    rope_table *ropes;
    /* Compute-unit names (unit()). */
    char unit_mm[KILN_DTYPE_END][64];
    char unit_mm_amx[KILN_DTYPE_END][64]; /* [0] = none: with 16 activation rows or more */
    char unit_attn[2][48];
    char unit_vec[48];
    char unit_silu[48];
    char unit_rows[KILN_DTYPE_END][48];
} cpu_ctx;

/* ---- work splitting --------------------------------------------------------- */

/* Items are handed out in chunks from a counter in the job (the pool runs a
 * job on whichever workers join it in time). A chunk count for n items. */
static int chunks_for(const cpu_ctx *c, int64_t n) {
    int64_t k = 4 * (int64_t)c->n_threads;
    return (int)(n < k ? (n > 0 ? n : 1) : k);
}

/* Claims the next of `chunks` chunks of n items: [*lo, *hi); 0 when none is left. */
static int claim(atomic_int *next, int chunks, int64_t n, int64_t *lo, int64_t *hi) {
    int i = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
    if (i >= chunks) return 0;
    *lo = n * i / chunks;
    *hi = n * (i + 1) / chunks;
    return 1;
}

/* Runs fn on the pool, or on this thread alone when the work is small. */
static void run(const cpu_ctx *c, kiln_pool_fn fn, void *job, double work) {
    if (c->n_threads == 1 || work < PAR_MIN_WORK)
        fn(job, 0, 1);
    else
        kiln_pool_run(c->pool, fn, job);
}

/* ---- matmul and logits ------------------------------------------------------ */

typedef struct mm_job {
    const cpu_ctx *c;
    kiln_cpu_gemm_fn gemm; /* NULL: the dequantizing loop */
    kiln_dtype wt;
    const uint8_t *w;
    size_t w_stride;
    const float *x; /* [T, K] f32 */
    int act;
    uint8_t *a; /* activation rows in the weight's format (x itself for f32) */
    size_t a_stride;
    int64_t K, N, T;
    float *out; /* [T, N] */
    int64_t nc, tc, n_chunks, n_items;
    atomic_int next;
    int q_chunks; /* quantization: rows in q_chunks chunks */
    atomic_int q_next;
} mm_job;

static void mm_quantize(void *arg, int ith, int nth) {
    mm_job *j = arg;
    for (int64_t lo, hi; claim(&j->q_next, j->q_chunks, j->T, &lo, &hi);)
        for (int64_t t = lo; t < hi; t++)
            j->c->quantize_row(j->act, j->x + t * j->K, j->a + (size_t)t * j->a_stride, j->K);
}

/* One tile without a gemm kernel: each weight row expanded a block at a time
 * (256 values at most) and dotted with the f32 activations. */
static void mm_tile_dequant(const mm_job *j, int64_t n0, int64_t nr, int64_t t0, int64_t nt) {
    float tmp[256], acc[MM_TILE_T];
    int blk = kiln_dtype_block(j->wt);
    int64_t step = blk > 1 ? blk : 256, K = j->K;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = j->w + (size_t)(n0 + r) * j->w_stride;
        memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < K; k0 += step) {
            int64_t len = K - k0 < step ? K - k0 : step;
            const float *wv = (const float *)(row + kiln_dtype_row_bytes(j->wt, k0));
            if (j->wt != KILN_F32) { /* dtype checked by supports */
                kiln_weight_dequant(j->wt, j->w, j->w_stride, n0 + r, k0, len, tmp);
                wv = tmp;
            }
            for (int64_t t = 0; t < nt; t++)
                acc[t] += j->c->dot_f32(wv, j->x + (t0 + t) * K + k0, len);
        }
        for (int64_t t = 0; t < nt; t++)
            j->out[(t0 + t) * j->N + n0 + r] = acc[t];
    }
}

static void mm_gemm(void *arg, int ith, int nth) {
    mm_job *j = arg;
    for (;;) {
        int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n_items) break;
        /* Token tiles of one weight chunk are neighbours: the chunk stays in cache. */
        int64_t n0 = (i % j->n_chunks) * j->nc, t0 = (i / j->n_chunks) * j->tc;
        int64_t nr = j->N - n0 < j->nc ? j->N - n0 : j->nc;
        int64_t nt = j->T - t0 < j->tc ? j->T - t0 : j->tc;
        if (j->gemm)
            j->gemm(j->K, j->w + (size_t)n0 * j->w_stride, j->w_stride, nr,
                    j->a + (size_t)t0 * j->a_stride, j->a_stride, nt, j->out + t0 * j->N + n0,
                    j->N);
        else
            mm_tile_dequant(j, n0, nr, t0, nt);
    }
}

/* Runs j: its activation rows quantized into j->a first when quantize,
 * then the gemm over tiles. */
static void mm_launch(const cpu_ctx *c, mm_job *j, int quantize) {
    const int64_t T = j->T;
    if (quantize) {
        j->q_chunks = chunks_for(c, T);
        atomic_init(&j->q_next, 0);
        run(c, mm_quantize, j, (double)T * (double)j->K);
    }
    /* About four chunks of weight rows per thread (multiples of 16), at most
     * 256 rows when many tokens share them; tokens in tiles of MM_TILE_T. */
    int64_t per = (j->N + 4 * c->n_threads - 1) / (4 * c->n_threads);
    j->nc = (per + 15) / 16 * 16;
    if (T > 4 && j->nc > 256) j->nc = 256;
    j->tc = T < MM_TILE_T ? T : MM_TILE_T;
    j->n_chunks = (j->N + j->nc - 1) / j->nc;
    j->n_items = j->n_chunks * ((T + j->tc - 1) / j->tc);
    atomic_init(&j->next, 0);
    run(c, mm_gemm, j, (double)T * (double)j->N * (double)j->K);
}

/* out[T, N] = x[T, K] . w[N, K]^T */
static kiln_status k_matmul(const cpu_ctx *c, const float *x, int64_t T, const kiln_tensor *w,
                            float *out, void *scratch, uint64_t scratch_bytes) {
    mm_job j = {.c = c, .wt = w->dtype, .w = w->data, .x = x, .out = out};
    j.N = w->ne[0];
    j.K = w->ne[1];
    j.T = T;
    j.w_stride = kiln_dtype_row_bytes(w->dtype, j.K);
    j.act = kiln_cpu_act_format(w->dtype);
    if (j.act < 0 || !j.w_stride)
        return kiln_error(KILN_ERR_UNSUPPORTED, "cpu has no matmul for %s weights of %lld inputs",
                          kiln_dtype_name(w->dtype), (long long)j.K);
    if (T <= 0 || j.N <= 0) return KILN_OK;
    j.gemm = c->gemm[w->dtype];
    /* avx512-bf16: f16 / bf16 weights' activations rounded to bf16 once per
     * matmul into the scratch, in passes of as many rows as it holds (the
     * bits are gemm[]'s on the f32 rows either way, so this is speed only) */
    const kiln_cpu_gemm_fn pre = c->k->gemm_bf16_act[w->dtype];
    const size_t prow = kiln_cpu_act_row_bytes(KILN_CPU_ACT_BF16, j.K);
    if (pre && j.K <= KILN_CPU_BF16_KMAX && scratch_bytes >= prow) {
        const int64_t pass = (int64_t)(scratch_bytes / prow);
        j.gemm = pre;
        j.act = KILN_CPU_ACT_BF16;
        j.a = scratch;
        j.a_stride = prow;
        for (int64_t t0 = 0; t0 < T; t0 += pass) { /* mm_launch restarts the job's counters */
            j.x = x + t0 * j.K;
            j.out = out + t0 * j.N;
            j.T = T - t0 < pass ? T - t0 : pass;
            mm_launch(c, &j, 1);
        }
        return KILN_OK;
    }
    if (j.act == KILN_CPU_ACT_F32 || !j.gemm || !c->quantize_row) {
        j.gemm = j.act == KILN_CPU_ACT_F32 ? j.gemm : NULL;
        j.a = (uint8_t *)(uintptr_t)x;
        j.a_stride = (size_t)j.K * sizeof(float);
        mm_launch(c, &j, 0);
        return KILN_OK;
    }
    j.a = scratch;
    j.a_stride = kiln_cpu_act_row_bytes(j.act, j.K);
    if ((uint64_t)T * j.a_stride > scratch_bytes)
        return kiln_error(
            KILN_ERR_BACKEND,
            "matmul scratch of %llu bytes cannot hold %lld activation rows of %zu bytes",
            (unsigned long long)scratch_bytes, (long long)T, j.a_stride);
    mm_launch(c, &j, 1);
    return KILN_OK;
}

/* ---- get_rows --------------------------------------------------------------- */

typedef struct rows_job {
    const kiln_tensor *w;
    const int32_t *ids;
    float *o;
    int64_t T, D;
    size_t row_bytes;
    int chunks;
    atomic_int next;
} rows_job;

static void rows_run(void *arg, int ith, int nth) {
    rows_job *j = arg;
    for (int64_t lo, hi; claim(&j->next, j->chunks, j->T, &lo, &hi);) {
        for (int64_t t = lo; t < hi; t++) /* dtype checked by supports */
            kiln_weight_dequant(j->w->dtype, j->w->data, j->row_bytes, j->ids[t], 0, j->D,
                                j->o + t * j->D);
    }
}

static kiln_status k_get_rows(const cpu_ctx *c, const kiln_tensor *const *in, kiln_tensor *out) {
    rows_job j = {
        .w = in[0], .ids = in[1]->data, .o = out->data, .T = out->ne[0], .D = in[0]->ne[1]};
    int64_t V = in[0]->ne[0];
    j.row_bytes = kiln_dtype_row_bytes(in[0]->dtype, j.D);
    for (int64_t t = 0; t < j.T; t++)
        if (j.ids[t] < 0 || j.ids[t] >= V)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "token id %d at row %lld is outside the vocabulary 0..%lld", j.ids[t],
                              (long long)t, (long long)(V - 1));
    j.chunks = chunks_for(c, j.T);
    atomic_init(&j.next, 0);
    run(c, rows_run, &j, (double)j.T * (double)j.D);
    return KILN_OK;
}

/* ---- row-wise and elementwise ops ------------------------------------------------ */

typedef struct vec_job {
    const cpu_ctx *c;
    const kiln_node *n;
    int op;
    const float *a, *b; /* b: second operand (norm weight, add/mul operand, swiglu's up) */
    float *o;
    int64_t rows, width; /* rows of `width` values each */
    int bcast;           /* add/mul: b is one row */
    int simd;            /* silu/swiglu: the x86 SIMD path */
    int chunks;
    atomic_int next;
} vec_job;

static float silu(float v) {
    return v * (1.0f / (1.0f + expf(-v)));
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define VEC_SIMD 1
/* o = silu(a) (* u when u is given), 8 lanes at a time with attn_exp8 (the
 * rest as silu()); used when the kernel table is an x86 SIMD one. */
static void silu_avx2(const float *a, const float *u, float *o, int64_t n);
#else
#define VEC_SIMD 0
#endif

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

static void vec_row(const vec_job *j, int64_t r) {
    int64_t W = j->width;
    const float *a = j->a + r * W;
    float *o = j->o + r * W;
    switch (j->op) {
    case KILN_OP_RMS_NORM: {
        float ss = j->c->dot_f32(a, a, W) / (float)W + j->n->fattr[0];
        ss = 1.0f / sqrtf(ss);
        for (int64_t i = 0; i < W; i++)
            o[i] = j->b[i] * (ss * a[i]);
        break;
    }
    case KILN_OP_ADD: {
        const float *b = j->bcast ? j->b : j->b + r * W;
        for (int64_t i = 0; i < W; i++)
            o[i] = a[i] + b[i];
        break;
    }
    case KILN_OP_MUL: {
        const float *b = j->bcast ? j->b : j->b + r * W;
        for (int64_t i = 0; i < W; i++)
            o[i] = a[i] * b[i];
        break;
    }
    case KILN_OP_SILU:
#if VEC_SIMD
        if (j->simd) {
            silu_avx2(a, NULL, o, W);
            break;
        }
#endif
        for (int64_t i = 0; i < W; i++)
            o[i] = silu(a[i]);
        break;
    case KILN_OP_SWIGLU: {
        const float *u = j->b + r * W;
#if VEC_SIMD
        if (j->simd) {
            silu_avx2(a, u, o, W);
            break;
        }
#endif
        for (int64_t i = 0; i < W; i++)
            o[i] = silu(a[i]) * u[i];
        break;
    }
    case KILN_OP_SOFTMAX:
        if (o != a) memcpy(o, a, (size_t)W * sizeof(float));
        softmax_row(o, W);
        break;
    default:
        break;
    }
}

static void vec_run(void *arg, int ith, int nth) {
    vec_job *j = arg;
    for (int64_t lo, hi; claim(&j->next, j->chunks, j->rows, &lo, &hi);)
        for (int64_t r = lo; r < hi; r++)
            vec_row(j, r);
}

static kiln_status k_vec(const cpu_ctx *c, const kiln_node *n, const kiln_tensor *const *in,
                         kiln_tensor *out) {
    vec_job j = {.c = c, .n = n, .op = n->op, .a = in[0]->data, .o = out->data};
    j.rows = in[0]->ne[0];
    j.width = in[0]->ne[1];
    if (n->n_in > 1) j.b = in[1]->data;
    if (n->op == KILN_OP_RMS_NORM) { /* per group: G values */
        j.width = in[1]->ne[0];
        j.rows = in[0]->ne[0] * in[0]->ne[1] / j.width;
    }
    if (n->op == KILN_OP_ADD || n->op == KILN_OP_MUL) j.bcast = in[1]->ndim == 1;
    j.simd = VEC_SIMD && c->x86_simd;
    double cost =
        n->op == KILN_OP_SILU || n->op == KILN_OP_SWIGLU || n->op == KILN_OP_SOFTMAX ? 8 : 1;
    j.chunks = chunks_for(c, j.rows);
    atomic_init(&j.next, 0);
    run(c, vec_run, &j, cost * (double)j.rows * (double)j.width);
    return KILN_OK;
}

/* ---- rope ------------------------------------------------------------------ */

/* ref's frequencies and angles, bit for bit. */
static void rope_angles(float theta, int n_rot, const float *ff, int64_t p, float *cs) {
    for (int j = 0; j < n_rot / 2; j++) {
        float freq = 1.0f / powf(theta, (float)(2 * j) / (float)n_rot);
        if (ff) freq /= ff[j];
        float val = (float)p * freq;
        cs[2 * j] = cosf(val);
        cs[2 * j + 1] = sinf(val);
    }
}

typedef struct rope_job {
    const kiln_node *n;
    const rope_table *tab; /* NULL: angles computed per token */
    const float *ff;
    float *o;
    int32_t pos;
    int64_t T, W;
    int chunks;
    atomic_int next;
} rope_job;

static void rope_run(void *arg, int ith, int nth) {
    rope_job *j = arg;
    const kiln_node *n = j->n;
    int nh = n->iattr[KILN_ROPE_N_HEAD], hd = n->iattr[KILN_ROPE_HEAD_DIM];
    int nrot = n->iattr[KILN_ROPE_N_ROT], half = nrot / 2,
        neox = n->iattr[KILN_ROPE_MODE] == KILN_ROPE_NEOX;
    float local[ATTN_MAX_HD * 2];
    for (int64_t lo, hi; claim(&j->next, j->chunks, j->T, &lo, &hi);) {
        for (int64_t t = lo; t < hi; t++) {
            int64_t p = (int64_t)j->pos + t;
            const float *cs = local;
            if (j->tab && p < j->tab->n_pos)
                cs = j->tab->cs + p * half * 2;
            else
                rope_angles(n->fattr[0], nrot, j->ff, p, local);
            for (int h = 0; h < nh; h++) {
                float *r = j->o + t * j->W + (int64_t)h * hd;
                for (int i = 0; i < half; i++) {
                    int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                    float v0 = r[i0], v1 = r[i1], fcr = cs[2 * i], fci = cs[2 * i + 1];
                    r[i0] = v0 * fcr - v1 * fci;
                    r[i1] = v0 * fci + v1 * fcr;
                }
            }
        }
    }
}

static kiln_status k_rope(const cpu_ctx *c, const rope_table *tab, const kiln_node *n,
                          const kiln_tensor *const *in, kiln_tensor *out) {
    rope_job j = {.n = n, .tab = tab, .o = out->data, .T = in[0]->ne[0], .W = in[0]->ne[1]};
    j.pos = *(const int32_t *)in[1]->data;
    j.ff = n->n_in > 2 ? in[2]->data : NULL;
    if (j.pos < 0 || j.pos > (1 << 30) - j.T)
        return kiln_error(KILN_ERR_INVALID_ARG, "position %d is out of range", j.pos);
    if (out->data != in[0]->data)
        memcpy(out->data, in[0]->data, (size_t)(j.T * j.W) * sizeof(float));
    j.chunks = chunks_for(c, j.T);
    atomic_init(&j.next, 0);
    run(c, rope_run, &j, 4.0 * (double)j.T * (double)j.W);
    return KILN_OK;
}

/* ref's row kernels (rope_multi, layer_norm, gelu), rows split over the
 * threads: bit for bit ref's. */
typedef struct {
    kiln_ref_rows_fn fn;
    const kiln_node *n;
    const kiln_tensor *const *in;
    kiln_tensor *out;
    int chunks;
    atomic_int next;
} ref_rows_job;

static void ref_rows_run(void *arg, int ith, int nth) {
    ref_rows_job *j = arg;
    for (int64_t lo, hi; claim(&j->next, j->chunks, j->in[0]->ne[0], &lo, &hi);)
        j->fn(j->n, j->in, j->out, lo, hi);
}

/* cost: the work of one value */
static void k_rows(const cpu_ctx *c, kiln_ref_rows_fn fn, const kiln_node *n,
                   const kiln_tensor *const *in, kiln_tensor *out, double cost) {
    int64_t T = in[0]->ne[0];
    ref_rows_job j = {.fn = fn, .n = n, .in = in, .out = out, .chunks = chunks_for(c, T)};
    atomic_init(&j.next, 0);
    run(c, ref_rows_run, &j, cost * (double)T * (double)in[0]->ne[1]);
}

static kiln_status k_rope_multi(const cpu_ctx *c, const kiln_node *n, const kiln_tensor *const *in,
                                kiln_tensor *out) {
    kiln_status st = kiln_ref_rope_multi_check(in);
    if (st) return st;
    int64_t T = in[0]->ne[0], W = in[0]->ne[1];
    if (out->data != in[0]->data) memcpy(out->data, in[0]->data, (size_t)(T * W) * sizeof(float));
    k_rows(c, kiln_ref_rope_multi_rows, n, in, out, 8);
    return KILN_OK;
}

/* ---- kv_store and attention -------------------------------------------------- */

static kiln_status check_pos(int32_t pos, int64_t T, int64_t S) {
    if (pos < 0 || pos > S || T > S - pos)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "position %d + %lld tokens does not fit the context of %lld", pos,
                          (long long)T, (long long)S);
    return KILN_OK;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
/* dst[i] = kiln_f32_to_f16(src[i]) with F16C (round to nearest even, as
 * kiln_f32_to_f16); a group of 8 holding a NaN goes through
 * kiln_f32_to_f16, which drops NaN payloads. */
__attribute__((target("avx2,f16c"))) static void kv_f16_x86(const float *src, uint16_t *dst,
                                                            int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
            for (int l = 0; l < 8; l++)
                dst[i + l] = kiln_f32_to_f16(src[i + l]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++)
        dst[i] = kiln_f32_to_f16(src[i]);
}
#define KV_F16_X86 1
#else
#define KV_F16_X86 0
#endif

static kiln_status k_kv_store(const cpu_ctx *cc, const kiln_tensor *const *in, kiln_tensor *out) {
    const kiln_tensor *c = in[0], *x = in[1];
    int32_t pos = *(const int32_t *)in[2]->data;
    kiln_status st = check_pos(pos, x->ne[0], c->ne[0]);
    if (st) return st;
    if (out->data != c->data)
        return kiln_error(KILN_ERR_BACKEND, "kv_store output must view its cache");
    int64_t n = x->ne[0] * x->ne[1];
    const float *src = x->data;
    if (c->dtype == KILN_F16) {
        uint16_t *dst = (uint16_t *)c->data + (int64_t)pos * c->ne[1];
#if KV_F16_X86
        if (cc->x86_simd) {
            kv_f16_x86(src, dst, n);
            return KILN_OK;
        }
#else
        (void)cc;
#endif
        for (int64_t i = 0; i < n; i++)
            dst[i] = kiln_f32_to_f16(src[i]);
    } else {
        memcpy((float *)c->data + (int64_t)pos * c->ne[1], src, (size_t)n * sizeof(float));
    }
    return KILN_OK;
}

/* Attention works on tiles: one task takes a KV head, some of the query
 * heads of its group and a run of query tokens, and walks the cache in
 * blocks of ATTN_BLOCK keys. Each block's scores for all the task's rows
 * come from the kernel table's gemm (the K block is a matrix of f16 or f32
 * "weight" rows, kvw values apart), while the block is hot in L1 for every
 * row; each row then does its own online-softmax step (running max and sum,
 * weighted values accumulated key by key: attn_step, or on x86 SIMD tables,
 * chosen by table and hd only, attn_soft_avx2 and then attn_pv_rows, which
 * adds the block's V rows to three rows at once, each value still summed
 * key by key). The gemm computes every output the same way whatever tile
 * it falls in (kernels.h), key blocks start at absolute multiples of
 * ATTN_BLOCK, and a row's step computes only from its own row, so a row's
 * result depends neither on which rows share its task nor on the thread
 * count: decode (T = 1) runs the same code on tasks of one row. */
typedef struct attn_job {
    const cpu_ctx *c;
    kiln_cpu_gemm_fn score; /* gemm for the cache's dtype: K rows x query rows */
    const float *q;         /* [T, nh * hd] */
    const void *kc, *vc;    /* [S, nkv * hd], f32 or f16 */
    int v_f16;
    int simd;     /* attn_soft_avx2 and attn_pv_rows instead of attn_step */
    size_t k_esz; /* bytes of one K value */
    float *o;     /* [T, nh * hd] */
    int64_t T, pos, kvw;
    int64_t all; /* attention_full: every token sees keys 0..all-1; 0: causal */
    int nh, nkv, hd;
    int hq, tq;     /* query heads (of one group) x tokens per task */
    int n_hc, n_tc; /* head chunks per group, token chunks */
    float div;
    atomic_int next;
} attn_job;

/* Rows (token x head) of one task, and its cap on rows x head_dim: the
 * task's scores and accumulators live on the stack (pool threads have 1
 * MiB). */
#define ATTN_ROWS 64
#define ATTN_ACC 8192

/* One row's online-softmax step over a block of nb keys starting at s0:
 * sc holds the row's raw dot products. */
static void attn_step(const attn_job *j, float *sc, int nb, int64_t s0, int64_t kvo, float *mx,
                      float *sum, float *acc) {
    const cpu_ctx *c = j->c;
    int hd = j->hd;
    float bm = -INFINITY;
    for (int i = 0; i < nb; i++) {
        sc[i] = sc[i] / j->div;
        if (sc[i] > bm) bm = sc[i];
    }
    if (bm > *mx) {
        if (*mx != -INFINITY) {
            float r = expf(*mx - bm);
            *sum *= r;
            for (int i = 0; i < hd; i++)
                acc[i] *= r;
        }
        *mx = bm;
    }
    float m = *mx, s = *sum;
    for (int i = 0; i < nb; i++) {
        int64_t off = (s0 + i) * j->kvw + kvo;
        float p = expf(sc[i] - m);
        s += p;
        if (j->v_f16)
            c->axpy_f16(p, (const uint16_t *)j->vc + off, acc, hd);
        else
            c->axpy_f32(p, (const float *)j->vc + off, acc, hd);
    }
    *sum = s;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
/* The same step on AVX2 + FMA + F16C, used when the kernel table is an x86
 * SIMD one (so the CPU has them) and hd is a multiple of 8, for decode and
 * prefill alike: probabilities 8 keys at a time (attn_exp8), their block sum
 * in 8 lanes (key i in lane i % 8), and each 64-value slice of the row's
 * accumulator held in registers across the block's keys, one FMA per key and
 * value in key order (what axpy does, without reloading the row). */
#define ATTN_SIMD 1
/* Widest head whose f16 V block attn_tile converts to f32 once (32 KiB of
 * stack); wider heads convert as they go. */
#define ATTN_VF_HD 128
#define ATTN_AVX2 __attribute__((target("avx2,fma,f16c")))

/* e^x, 8 lanes: Cephes' expf (range reduction by ln 2 in two parts, degree
 * 5 polynomial). Measured over every float in [-87.2, 0]: within 1 ulp of
 * glibc's expf, equal to it for 99.2% of inputs. x below -87.3 gives 0
 * instead of a subnormal; NaN stays NaN. */
ATTN_AVX2 static __m256 attn_exp8(__m256 x) {
    __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);
}

static ATTN_AVX2 void silu_avx2(const float *a, const float *u, float *o, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(a + i);
        __m256 e = attn_exp8(_mm256_xor_ps(v, neg)); /* e^-v */
        __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, e));
        if (u) s = _mm256_mul_ps(s, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(o + i, s);
    }
    for (; i < n; i++)
        o[i] = u ? silu(a[i]) * u[i] : silu(a[i]);
}

/* acc[0 .. 8W) += sum over keys k < nb of p[k] * v[k * vs ..], key by key. */
#define ATTN_PV(W)                                                                                 \
    ATTN_AVX2 static void attn_pv##W(int f16, const void *v, int64_t vs, const float *p, int nb,   \
                                     float *acc) {                                                 \
        __m256 a[W];                                                                               \
        for (int w = 0; w < W; w++)                                                                \
            a[w] = _mm256_loadu_ps(acc + 8 * w);                                                   \
        for (int k = 0; k < nb; k++) {                                                             \
            __m256 pk = _mm256_set1_ps(p[k]);                                                      \
            if (f16) {                                                                             \
                const uint16_t *vk = (const uint16_t *)v + k * vs;                                 \
                for (int w = 0; w < W; w++)                                                        \
                    a[w] = _mm256_fmadd_ps(                                                        \
                        pk, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vk + 8 * w))),       \
                        a[w]);                                                                     \
            } else {                                                                               \
                const float *vk = (const float *)v + k * vs;                                       \
                for (int w = 0; w < W; w++)                                                        \
                    a[w] = _mm256_fmadd_ps(pk, _mm256_loadu_ps(vk + 8 * w), a[w]);                 \
            }                                                                                      \
        }                                                                                          \
        for (int w = 0; w < W; w++)                                                                \
            _mm256_storeu_ps(acc + 8 * w, a[w]);                                                   \
    }
ATTN_PV(8)
ATTN_PV(1)

/* The same for three rows sharing the block's V rows: each V vector loaded
 * once for three FMAs, and 12 chains (AVX2's 16 registers: 12 accumulators,
 * 3 probabilities, the V vector). Each accumulator value still sums its
 * keys in order, so the result is attn_pv's. */
#define ATTN_PV3(W)                                                                                \
    ATTN_AVX2 static void attn_pv3_##W(int f16, const void *v, int64_t vs, float *const *p,        \
                                       int nb, float *const *acc, int d) {                         \
        __m256 a[3][W];                                                                            \
        for (int r = 0; r < 3; r++)                                                                \
            for (int w = 0; w < W; w++)                                                            \
                a[r][w] = _mm256_loadu_ps(acc[r] + d + 8 * w);                                     \
        for (int k = 0; k < nb; k++) {                                                             \
            __m256 p0 = _mm256_set1_ps(p[0][k]), p1 = _mm256_set1_ps(p[1][k]),                     \
                   p2 = _mm256_set1_ps(p[2][k]);                                                   \
            for (int w = 0; w < W; w++) {                                                          \
                __m256 x = f16 ? _mm256_cvtph_ps(_mm_loadu_si128(                                  \
                                     (const __m128i *)((const uint16_t *)v + k * vs + d + 8 * w))) \
                               : _mm256_loadu_ps((const float *)v + k * vs + d + 8 * w);           \
                a[0][w] = _mm256_fmadd_ps(p0, x, a[0][w]);                                         \
                a[1][w] = _mm256_fmadd_ps(p1, x, a[1][w]);                                         \
                a[2][w] = _mm256_fmadd_ps(p2, x, a[2][w]);                                         \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < 3; r++)                                                                \
            for (int w = 0; w < W; w++)                                                            \
                _mm256_storeu_ps(acc[r] + d + 8 * w, a[r][w]);                                     \
    }
ATTN_PV3(4)
ATTN_PV3(1)

/* One row's acc[0 .. hd) += its probabilities p[k] times V row k, for keys
 * k0 <= k < nb (vb: the block's first V row). */
ATTN_AVX2 static void attn_pv_row(int f16, const void *vb, int64_t vs, const float *p, int k0,
                                  int nb, float *acc, int hd) {
    size_t esz = f16 ? sizeof(uint16_t) : sizeof(float);
    const uint8_t *v = (const uint8_t *)vb + (size_t)(k0 * vs) * esz;
    int d = 0;
    for (; d + 64 <= hd; d += 64)
        attn_pv8(f16, v + (size_t)d * esz, vs, p + k0, nb - k0, acc + d);
    for (; d < hd; d += 8)
        attn_pv1(f16, v + (size_t)d * esz, vs, p + k0, nb - k0, acc + d);
}

/* The PV step of n rows of a block: rows three at a time over the keys all
 * three see, then each row's remaining keys alone. */
ATTN_AVX2 static void attn_pv_rows(int f16, const void *vb, int64_t vs, float *const *p,
                                   const int *nb, float *const *acc, int n, int hd) {
    int r = 0;
    for (; r + 3 <= n; r += 3) {
        int m = nb[r] < nb[r + 1] ? nb[r] : nb[r + 1];
        m = nb[r + 2] < m ? nb[r + 2] : m;
        int d = 0;
        for (; d + 32 <= hd; d += 32)
            attn_pv3_4(f16, vb, vs, p + r, m, acc + r, d);
        for (; d < hd; d += 8)
            attn_pv3_1(f16, vb, vs, p + r, m, acc + r, d);
        for (int i = r; i < r + 3; i++)
            if (nb[i] > m) attn_pv_row(f16, vb, vs, p[i], m, nb[i], acc[i], hd);
    }
    for (; r < n; r++)
        attn_pv_row(f16, vb, vs, p[r], 0, nb[r], acc[r], hd);
}

/* The online-softmax part of one row's step over a block of nb keys: sc's
 * raw dot products become the probabilities (0 past nb, up to the next
 * multiple of 8), mx and sum and the row's accumulator acc are updated for
 * the block; attn_pv_rows then adds the block's V rows. */
ATTN_AVX2 static void attn_soft_avx2(const attn_job *j, float *sc, int nb, float *mx, float *sum,
                                     float *acc) {
    int hd = j->hd;
    /* Scores / div (IEEE division, lane by lane: the plain step's values);
     * keys past nb become -inf. The block max ignores NaN like the plain
     * step (max_ps returns its second operand when either is NaN). */
    __m256 dv = _mm256_set1_ps(j->div), bm8 = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < nb; i += 8) {
        __m256 x;
        if (i + 8 <= nb) {
            x = _mm256_div_ps(_mm256_loadu_ps(sc + i), dv);
        } else {
            float t[8];
            for (int l = 0; l < 8; l++)
                t[l] = i + l < nb ? sc[i + l] : 0.0f;
            __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb - i),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_div_ps(_mm256_loadu_ps(t), dv),
                                 _mm256_castsi256_ps(live));
        }
        _mm256_storeu_ps(sc + i, x);
        bm8 = _mm256_max_ps(x, bm8);
    }
    __m128 b4 = _mm_max_ps(_mm256_castps256_ps128(bm8), _mm256_extractf128_ps(bm8, 1));
    b4 = _mm_max_ps(b4, _mm_movehl_ps(b4, b4));
    b4 = _mm_max_ss(b4, _mm_movehdup_ps(b4));
    float bm = _mm_cvtss_f32(b4);
    if (bm > *mx) {
        if (*mx != -INFINITY) {
            float r = _mm256_cvtss_f32(attn_exp8(_mm256_set1_ps(*mx - bm)));
            *sum *= r;
            for (int i = 0; i < hd; i++)
                acc[i] *= r;
        }
        *mx = bm;
    }
    __m256 m = _mm256_set1_ps(*mx), s8 = _mm256_setzero_ps();
    for (int i = 0; i < nb; i += 8) {
        __m256 e = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + i), m)); /* past nb: e^-inf = 0 */
        _mm256_storeu_ps(sc + i, e);
        s8 = _mm256_add_ps(s8, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *sum += _mm_cvtss_f32(h);
}
/* The f16 V rows [n, hd] at v (rows vs values apart) as f32 rows of hd:
 * exact, done once per block for all the task's rows. */
ATTN_AVX2 static void attn_v_f32(const uint16_t *v, int64_t vs, int n, int hd, float *dst) {
    for (int k = 0; k < n; k++)
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(dst + (int64_t)k * hd + d,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + k * vs + d))));
}
#else
#define ATTN_SIMD 0
#endif

/* Query heads h0 .. h0 + nhq - 1 (all of KV head g's group) x tokens
 * t0 .. t0 + ntq - 1; row hi * ntq + ti. */
static void attn_tile(const attn_job *j, int g, int h0, int nhq, int64_t t0, int ntq) {
    int hd = j->hd, n_rows = nhq * ntq;
    int64_t kvo = (int64_t)g * hd, n_keys = j->all ? j->all : j->pos + t0 + ntq; /* the last's */
    size_t ws = (size_t)j->kvw * j->k_esz, qs = (size_t)j->nh * (size_t)hd * sizeof(float);
    float acc[ATTN_ACC], sc[ATTN_ROWS * ATTN_BLOCK], mx[ATTN_ROWS], sum[ATTN_ROWS];
#if ATTN_SIMD
    float vbuf[ATTN_BLOCK * ATTN_VF_HD];
#endif
    memset(acc, 0, (size_t)n_rows * (size_t)hd * sizeof(float));
    for (int r = 0; r < n_rows; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    for (int64_t s0 = 0; s0 < n_keys; s0 += ATTN_BLOCK) {
        int nk = n_keys - s0 < ATTN_BLOCK ? (int)(n_keys - s0) : ATTN_BLOCK;
        /* Tokens before ti0 see none of this block (token t sees keys up to
         * pos + t); keys past a row's last are scored but not used. */
        int ti0 = !j->all && s0 - j->pos > t0 ? (int)(s0 - j->pos - t0) : 0, nt = ntq - ti0;
        const uint8_t *kb = (const uint8_t *)j->kc + (size_t)(s0 * j->kvw + kvo) * j->k_esz;
        const float *qb = j->q + ((t0 + ti0) * j->nh + h0) * hd;
        if (nt >= nhq) /* per head, its tokens as the activation rows */
            for (int hi = 0; hi < nhq; hi++)
                j->score(hd, kb, ws, nk, qb + (int64_t)hi * hd, qs, nt,
                         sc + (hi * ntq + ti0) * ATTN_BLOCK, ATTN_BLOCK);
        else /* per token, its heads as the activation rows */
            for (int ti = 0; ti < nt; ti++)
                j->score(hd, kb, ws, nk, qb + (int64_t)ti * j->nh * hd, (size_t)hd * sizeof(float),
                         nhq, sc + (ti0 + ti) * ATTN_BLOCK, (int64_t)ntq * ATTN_BLOCK);
#if ATTN_SIMD
        /* An f16 V block several rows will read: converted once. */
        const void *vb = (const uint8_t *)j->vc + (size_t)(s0 * j->kvw + kvo) *
                                                      (j->v_f16 ? sizeof(uint16_t) : sizeof(float));
        float *vf = NULL;
        if (j->simd && j->v_f16 && hd <= ATTN_VF_HD && nhq * nt > 1) {
            attn_v_f32(vb, j->kvw, nk, hd, vbuf);
            vf = vbuf;
        }
        /* each row's probabilities, key count and accumulator, for attn_pv_rows */
        float *pr[ATTN_ROWS], *ar[ATTN_ROWS];
        int nbr[ATTN_ROWS], m = 0;
#endif
        for (int hi = 0; hi < nhq; hi++)
            for (int ti = ti0; ti < ntq; ti++) {
                int r = hi * ntq + ti;
                int64_t nb = (j->all ? j->all : j->pos + t0 + ti + 1) - s0;
                int n = nb < ATTN_BLOCK ? (int)nb : ATTN_BLOCK;
#if ATTN_SIMD
                if (j->simd) {
                    attn_soft_avx2(j, sc + r * ATTN_BLOCK, n, &mx[r], &sum[r],
                                   acc + (int64_t)r * hd);
                    pr[m] = sc + r * ATTN_BLOCK, ar[m] = acc + (int64_t)r * hd, nbr[m++] = n;
                    continue;
                }
#endif
                attn_step(j, sc + r * ATTN_BLOCK, n, s0, kvo, &mx[r], &sum[r],
                          acc + (int64_t)r * hd);
            }
#if ATTN_SIMD
        if (m)
            attn_pv_rows(j->v_f16 && !vf, vf ? (const void *)vf : vb, vf ? hd : j->kvw, pr, nbr, ar,
                         m, hd);
#endif
    }
    for (int hi = 0; hi < nhq; hi++)
        for (int ti = 0; ti < ntq; ti++) {
            int r = hi * ntq + ti;
            float inv = 1.0f / sum[r], *a = acc + (int64_t)r * hd;
            float *oh = j->o + ((t0 + ti) * j->nh + h0 + hi) * hd;
            for (int i = 0; i < hd; i++)
                oh[i] = a[i] * inv;
        }
}

static void attn_run(void *arg, int ith, int nth) {
    attn_job *j = arg;
    int per_tc = j->nkv * j->n_hc, n_tasks = j->n_tc * per_tc, gq = j->nh / j->nkv;
    for (;;) {
        int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= n_tasks) break;
        /* Latest tokens (most keys) first, for balance. */
        int tc = j->n_tc - 1 - i / per_tc, g = i % per_tc / j->n_hc, hc = i % j->n_hc;
        int h0 = g * gq + hc * j->hq, nhq = gq - hc * j->hq < j->hq ? gq - hc * j->hq : j->hq;
        int64_t t0 = (int64_t)tc * j->tq;
        int ntq = j->T - t0 < j->tq ? (int)(j->T - t0) : j->tq;
        attn_tile(j, g, h0, nhq, t0, ntq);
    }
}

/* Attention of T query tokens at cache row pos over K/V rows kc/vc (f32 or
 * f16), causal, or over all `all` rows (attention_full: pos 0). */
static kiln_status attn_start(const cpu_ctx *c, const kiln_node *n, const kiln_tensor *const *in,
                              kiln_tensor *out, int64_t pos, int64_t all) {
    attn_job j = {.c = c, .q = in[0]->data, .kc = in[1]->data, .vc = in[2]->data, .o = out->data};
    int k_f16 = in[1]->dtype == KILN_F16;
    j.score = k_f16 ? c->score_f16 : c->gemm[KILN_F32];
    j.k_esz = k_f16 ? sizeof(uint16_t) : sizeof(float);
    j.v_f16 = in[2]->dtype == KILN_F16;
    j.hd = n->iattr[KILN_ATTN_HEAD_DIM];
    /* x86 SIMD tables run only where AVX2, FMA and F16C are. */
    j.simd = ATTN_SIMD && j.hd % 8 == 0 && c->x86_simd;
    j.T = in[0]->ne[0];
    j.pos = pos;
    j.all = all;
    j.nh = n->iattr[KILN_ATTN_N_HEAD];
    j.nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    j.kvw = (int64_t)j.nkv * j.hd;
    j.div = n->fattr[0];
    if (j.hd <= 0 || j.nkv <= 0 || j.nh <= 0 || j.nh % j.nkv)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "cpu attention: %d heads on %d KV heads of %d values is no GQA shape",
                          j.nh, j.nkv, j.hd);
    if (j.hd > ATTN_MAX_HD)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "cpu attention takes heads of up to %d values, not %d", ATTN_MAX_HD,
                          j.hd);
    if (j.T * j.nh > 0x7fffffff)
        return kiln_error(KILN_ERR_UNSUPPORTED, "cpu attention: %lld tokens x %d heads is too many",
                          (long long)j.T, j.nh);
    if (!j.score) return kiln_error(KILN_ERR_BACKEND, "cpu attention: no gemm for the cache dtype");
    /* Tasks: a few tokens take one head each (decode keeps a task per head);
     * longer runs take a group's heads x as many tokens as ATTN_ROWS allows,
     * halved while there are too few tasks to balance the threads. */
    int gq = j.nh / j.nkv, max_rows = ATTN_ACC / j.hd < ATTN_ROWS ? ATTN_ACC / j.hd : ATTN_ROWS;
    j.hq = j.T < 4 ? 1 : gq < max_rows ? gq : max_rows;
    j.tq = j.T < max_rows / j.hq ? (int)j.T : max_rows / j.hq;
    j.n_hc = (gq + j.hq - 1) / j.hq;
    for (;;) {
        j.n_tc = (int)((j.T + j.tq - 1) / j.tq);
        if (j.tq <= 4 || (int64_t)j.n_tc * j.nkv * j.n_hc >= 4 * (int64_t)c->n_threads) break;
        j.tq = (j.tq + 1) / 2;
    }
    atomic_init(&j.next, 0);
    double keys = (double)j.T * (double)(all ? all : j.pos + j.T);
    run(c, attn_run, &j, 2.0 * keys * (double)j.nh * (double)j.hd);
    return KILN_OK;
}

static kiln_status k_attention(const cpu_ctx *c, const kiln_node *n, const kiln_tensor *const *in,
                               kiln_tensor *out) {
    int32_t pos = *(const int32_t *)in[3]->data;
    kiln_status st = check_pos(pos, in[0]->ne[0], in[1]->ne[0]);
    return st ? st : attn_start(c, n, in, out, pos, 0);
}

/* ---- exec --------------------------------------------------------------------- */

static const rope_table *node_rope(const cpu_ctx *c, const kiln_node *n) {
    for (int i = 0; i < c->n_methods; i++) {
        const cpu_method *m = &c->methods[i];
        if (n >= m->nodes && n < m->nodes + m->n_nodes) return m->rope[n - m->nodes];
    }
    return NULL;
}

static kiln_status cpu_exec(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                            kiln_tensor *out, void *scratch, uint64_t scratch_bytes) {
    const cpu_ctx *c = ctx;
    if (!c) return kiln_error(KILN_ERR_BACKEND, "cpu backend used without being opened");
    switch ((kiln_op)n->op) {
    case KILN_OP_GET_ROWS:
        return k_get_rows(c, in, out);
    case KILN_OP_MATMUL:
        return k_matmul(c, in[0]->data, in[0]->ne[0], in[1], out->data, scratch, scratch_bytes);
    case KILN_OP_LOGITS: {
        /* One row (the last token's) unless the flag asks for all. */
        int64_t T = in[0]->ne[0], D = in[0]->ne[1];
        const float *x = (const float *)in[0]->data + (out->ne[0] == 1 ? (T - 1) * D : 0);
        return k_matmul(c, x, out->ne[0], in[1], out->data, scratch, scratch_bytes);
    }
    case KILN_OP_RMS_NORM:
    case KILN_OP_ADD:
    case KILN_OP_MUL:
    case KILN_OP_SILU:
    case KILN_OP_SWIGLU:
    case KILN_OP_SOFTMAX:
        return k_vec(c, n, in, out);
    case KILN_OP_ROPE:
        return k_rope(c, node_rope(c, n), n, in, out);
    case KILN_OP_KV_STORE:
        return k_kv_store(c, in, out);
    case KILN_OP_ATTENTION:
        return k_attention(c, n, in, out);
    case KILN_OP_ROPE_MULTI:
        return k_rope_multi(c, n, in, out);
    case KILN_OP_LAYER_NORM:
        k_rows(c, kiln_ref_layer_norm_rows, n, in, out, 4);
        return KILN_OK;
    case KILN_OP_GELU:
        k_rows(c, kiln_ref_gelu_rows, n, in, out, 16);
        return KILN_OK;
    case KILN_OP_MERGE_ROWS: /* row copies and a few weighted rows: ref's loops, */
    case KILN_OP_FOLD_ROWS:  /* inline, so that they split no partition */
    case KILN_OP_EMBED_BAG:
        return kiln_ref_exec(NULL, n, in, out, scratch, scratch_bytes);
    case KILN_OP_ATTENTION_FULL: /* T queries over the same T keys, no mask */
        return attn_start(c, n, in, out, 0, in[0]->ne[0]);
    default: /* cpu_supports sends every other op elsewhere */
        break;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "cpu has no kernel for op %d", n->op);
}

/* ---- supports ------------------------------------------------------------------ */

static kiln_dtype in_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    return g->values[n->in[i]].dtype;
}

/* Weight dtypes src/quant expands (get_rows and the dequantizing matmul). */
static int readable(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_Q8_0 || t == KILN_Q4_0 ||
           t == KILN_Q4_1 || t == KILN_Q4_K || t == KILN_Q6_K || t == KILN_Q4_0_X8 ||
           t == KILN_Q4_1_X8 || t == KILN_Q8_0_X8 || t == KILN_Q4_K_X8 || t == KILN_Q6_K_X8;
}

static int cpu_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) {
    if (n->op < 0 || n->op >= KILN_OP_COUNT || n->n_in < 1) return 0;
    switch ((kiln_op)n->op) {
    case KILN_OP_GET_ROWS:
        return readable(in_dtype(g, n, 0));
    case KILN_OP_MATMUL:
    case KILN_OP_LOGITS: {
        const kiln_value *w = &g->values[n->in[1]];
        int blk = kiln_dtype_block(w->dtype);
        return in_dtype(g, n, 0) == KILN_F32 && kiln_cpu_act_format(w->dtype) >= 0 &&
               readable(w->dtype) && w->ndim == 2 && blk > 0 && w->ne[1] % blk == 0;
    }
    case KILN_OP_KV_STORE: {
        kiln_dtype c = in_dtype(g, n, 0);
        return (c == KILN_F32 || c == KILN_F16) && in_dtype(g, n, 1) == KILN_F32;
    }
    case KILN_OP_ATTENTION_FULL:
    case KILN_OP_ATTENTION: {
        kiln_dtype k = in_dtype(g, n, 1), v = in_dtype(g, n, 2);
        return in_dtype(g, n, 0) == KILN_F32 && (k == KILN_F32 || k == KILN_F16) &&
               (v == KILN_F32 || v == KILN_F16) && n->iattr[KILN_ATTN_HEAD_DIM] > 0 &&
               n->iattr[KILN_ATTN_HEAD_DIM] <= ATTN_MAX_HD;
    }
    case KILN_OP_ROPE_MULTI:
        return in_dtype(g, n, 0) == KILN_F32 && in_dtype(g, n, 1) == KILN_I32;
    case KILN_OP_ROPE:
        return in_dtype(g, n, 0) == KILN_F32 && n->iattr[KILN_ROPE_N_ROT] > 0 &&
               n->iattr[KILN_ROPE_N_ROT] <= 2 * ATTN_MAX_HD;
    case KILN_OP_LAYER_NORM:
        return in_dtype(g, n, 0) == KILN_F32 && in_dtype(g, n, 1) == KILN_F32 &&
               in_dtype(g, n, 2) == KILN_F32;
    case KILN_OP_GELU:
        return in_dtype(g, n, 0) == KILN_F32;
    case KILN_OP_MERGE_ROWS:
    case KILN_OP_FOLD_ROWS:
        return in_dtype(g, n, 0) == KILN_F32;
    case KILN_OP_EMBED_BAG: {
        kiln_dtype t = in_dtype(g, n, 0);
        return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
    }
    case KILN_OP_COUNT:
        return 0;
    default:
        return in_dtype(g, n, 0) == KILN_F32;
    }
}

/* ---- open / close / unit -------------------------------------------------------- */

static void cpu_close(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c) return;
    kiln_pool_destroy(c->pool);
    for (int i = 0; c->methods && i < c->n_methods; i++)
        kiln_free(c->methods[i].rope);
    for (int i = 0; c->ropes && i < c->n_ropes; i++)
        kiln_free(c->ropes[i].cs);
    kiln_free(c->methods);
    kiln_free(c->ropes);
    kiln_free(c);
}

/* The cores this process may run on (its affinity mask, as taskset or a
 * container sets it), else the online ones. */
static long usable_cores(void) {
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return sysconf(_SC_NPROCESSORS_ONLN);
}

/* The thread count: the option, else $KILN_THREADS, else the usable cores. */
static kiln_status pick_threads(const kiln_open_options *o, int *out) {
    long n = o->n_threads;
    if (n < 0 || n > KILN_MAX_THREADS)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "cpu backend: thread count %ld is out of range 0..%d", n,
                          KILN_MAX_THREADS);
    const char *env = getenv("KILN_THREADS");
    if (!n && env && *env) {
        char *end;
        n = strtol(env, &end, 10);
        if (*end || n < 0 || n > KILN_MAX_THREADS)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "cpu backend: KILN_THREADS='%s' is not a thread count in 0..%d", env,
                              KILN_MAX_THREADS);
    }
    if (!n) n = usable_cores();
    if (n < 1) n = 1;
    if (n > KILN_MAX_THREADS) n = KILN_MAX_THREADS;
    *out = (int)n;
    return KILN_OK;
}

/* The rope table of node n (shared between nodes with the same theta, n_rot
 * and constant freq factors); NULL when its factors are not a constant. */
static kiln_status rope_for(cpu_ctx *c, const kiln_module *m, const kiln_graph *g,
                            const kiln_node *n, int64_t n_pos, const rope_table **out) {
    *out = NULL;
    const float *ff = NULL;
    if (n->n_in > 2) {
        const kiln_value *v = &g->values[n->in[2]];
        if (v->kind != KILN_VAL_CONST || v->ref < 0 || v->ref >= m->n_consts) return KILN_OK;
        ff = m->consts[v->ref].data;
    }
    float theta = n->fattr[0];
    int nrot = n->iattr[KILN_ROPE_N_ROT];
    for (int i = 0; i < c->n_ropes; i++)
        if (c->ropes[i].theta == theta && c->ropes[i].n_rot == nrot && c->ropes[i].ff == ff) {
            *out = &c->ropes[i];
            return KILN_OK;
        }
    rope_table *r = &c->ropes[c->n_ropes];
    size_t stride = (size_t)nrot; /* (nrot / 2) pairs of cos, sin */
    if (!(r->cs = kiln_malloc((size_t)n_pos * stride * sizeof(float))))
        return kiln_error(KILN_ERR_NOMEM,
                          "cpu backend: out of memory for a rope table of %lld positions",
                          (long long)n_pos);
    r->theta = theta;
    r->n_rot = nrot;
    r->ff = ff;
    r->n_pos = n_pos;
    for (int64_t p = 0; p < n_pos; p++)
        rope_angles(theta, nrot, ff, p, r->cs + (size_t)p * stride);
    c->n_ropes++;
    *out = r;
    return KILN_OK;
}

static const char *act_name(int act) {
    return act == KILN_CPU_ACT_Q8 || act == KILN_CPU_ACT_Q8S ? "q8 dot"
           : act == KILN_CPU_ACT_Q8K                         ? "q8k dot"
                                                             : "f32";
}

static void name_units(cpu_ctx *c) {
    const kiln_cpu_kernels *s = &kiln_cpu_kernels_scalar;
    for (int t = 0; t < KILN_DTYPE_END; t++) {
        int act = kiln_cpu_act_format((kiln_dtype)t);
        const char *dt = kiln_dtype_name((kiln_dtype)t);
        if (act < 0 || !dt) continue;
        const char *var = c->k->gemm[t] ? c->k->name : s->gemm[t] ? s->name : NULL;
        if (act != KILN_CPU_ACT_F32 && !c->quantize_row) var = NULL;
        if (!var)
            snprintf(c->unit_mm[t], sizeof c->unit_mm[t], "portable %s dequant x f32", dt);
        else if (t == KILN_F32)
            snprintf(c->unit_mm[t], sizeof c->unit_mm[t], "%s f32", var);
        else
            snprintf(c->unit_mm[t], sizeof c->unit_mm[t], "%s %s x %s", var, dt, act_name(act));
    }
    /* avx512-amx: AMX tiles for q8_0x8 / q4_0x8 / q4_1x8 from 16 activation
     * rows (kernels_x86_x8.h), its VNNI tiles below */
    static const kiln_dtype amx[] = {KILN_Q8_0_X8, KILN_Q4_0_X8, KILN_Q4_1_X8};
    for (int i = 0; i < 3 && !strcmp(c->k->name, "avx512-amx"); i++) {
        int t = amx[i];
        memcpy(c->unit_mm_amx[t], c->unit_mm[t], sizeof c->unit_mm[t]);
        strncat(c->unit_mm_amx[t], ", AMX tiles", sizeof c->unit_mm[t] - strlen(c->unit_mm[t]) - 1);
        strncat(c->unit_mm[t], ", VNNI", sizeof c->unit_mm[t] - strlen(c->unit_mm[t]) - 1);
    }
    const char *f32 = c->k->dot_f32 ? c->k->name : s->dot_f32 ? s->name : "portable";
    /* Attention's scores come from the gemm (scalar's when the table lacks it). */
    const char *a32 = c->k->gemm[KILN_F32] ? c->k->name : s->name;
    const char *a16 = c->k->gemm[KILN_F16] ? c->k->name : s->name;
    snprintf(c->unit_attn[0], sizeof c->unit_attn[0], "%s f32 attention", a32);
    snprintf(c->unit_attn[1], sizeof c->unit_attn[1], "%s f16-cache attention", a16);
    snprintf(c->unit_vec, sizeof c->unit_vec, "%s f32", f32);
    snprintf(c->unit_silu, sizeof c->unit_silu, "%s f32 exp",
             VEC_SIMD && c->x86_simd ? c->k->name : "portable");
    for (int t = 0; t < KILN_DTYPE_END; t++)
        if (kiln_dtype_name((kiln_dtype)t))
            snprintf(c->unit_rows[t], sizeof c->unit_rows[t], "portable %s rows to f32",
                     kiln_dtype_name((kiln_dtype)t));
}

static kiln_status cpu_open(const kiln_module *m, const kiln_open_options *o, void **ctx) {
    *ctx = NULL;
    cpu_ctx *c = kiln_calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_NOMEM, "cpu backend: out of memory");
    kiln_status st = kiln_cpu_kernels_select(o->cpu_variant, &c->k);
    if (!st) c->x86_simd = strncmp(c->k->name, "avx", 3) == 0;
    if (!st) st = pick_threads(o, &c->n_threads);
    if (!st) st = kiln_pool_create(c->n_threads, &c->pool);
    if (st) goto fail;

    const kiln_cpu_kernels *s = &kiln_cpu_kernels_scalar;
    for (int t = 0; t < KILN_DTYPE_END; t++)
        c->gemm[t] = c->k->gemm[t] ? c->k->gemm[t] : s->gemm[t];
    c->score_f16 = c->k->score_f16 ? c->k->score_f16 : c->gemm[KILN_F16];
    c->quantize_row = c->k->quantize_row ? c->k->quantize_row : s->quantize_row;
    c->dot_f32 = c->k->dot_f32 ? c->k->dot_f32 : s->dot_f32;
    c->dot_f16 = c->k->dot_f16 ? c->k->dot_f16 : s->dot_f16;
    c->axpy_f32 = c->k->axpy_f32 ? c->k->axpy_f32 : s->axpy_f32;
    c->axpy_f16 = c->k->axpy_f16 ? c->k->axpy_f16 : s->axpy_f16;
    name_units(c);

    /* Rope tables cover the longest cache (no position past it can attend). */
    int64_t n_pos = 0;
    for (int i = 0; i < m->n_states; i++)
        if (m->states[i].ndim >= 1 && m->states[i].ne[0] > n_pos) n_pos = m->states[i].ne[0];
    if (n_pos > ROPE_TABLE_MAX_POS) n_pos = ROPE_TABLE_MAX_POS;
    int n_rope_nodes = 0;
    for (int k = 0; k < m->n_methods; k++)
        for (int i = 0; i < m->methods[k].n_nodes; i++)
            n_rope_nodes += m->methods[k].nodes[i].op == KILN_OP_ROPE;
    c->methods = kiln_calloc((size_t)m->n_methods + 1, sizeof *c->methods);
    c->ropes = kiln_calloc((size_t)n_rope_nodes + 1, sizeof *c->ropes);
    if (!c->methods || !c->ropes) {
        st = kiln_error(KILN_ERR_NOMEM, "cpu backend: out of memory");
        goto fail;
    }
    c->n_methods = m->n_methods;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        cpu_method *cm = &c->methods[k];
        cm->nodes = g->nodes;
        cm->n_nodes = g->n_nodes;
        if (!(cm->rope = kiln_calloc((size_t)g->n_nodes + 1, sizeof *cm->rope))) {
            st = kiln_error(KILN_ERR_NOMEM, "cpu backend: out of memory");
            goto fail;
        }
        for (int i = 0; n_pos > 0 && i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            int mine = n->backend >= 0 && n->backend < m->n_backends &&
                       !strcmp(m->backends[n->backend], "cpu");
            if (n->op == KILN_OP_ROPE && mine && cpu_supports(m, g, n) &&
                (st = rope_for(c, m, g, n, n_pos, &cm->rope[i])))
                goto fail;
        }
    }
    *ctx = c;
    return KILN_OK;
fail:
    cpu_close(c);
    return st;
}

static const char *cpu_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) {
    const cpu_ctx *c = ctx;
    if (!c) return "cpu";
    switch ((kiln_op)n->op) {
    case KILN_OP_MATMUL:
    case KILN_OP_LOGITS: {
        int t = in[1]->dtype;
        if (t < 0 || t >= KILN_DTYPE_END || !c->unit_mm[t][0]) return "cpu";
        /* logits: named as for one row, the usual case (no output shape here) */
        int64_t rows = n->op == KILN_OP_MATMUL ? in[0]->ne[0] : 1;
        return rows >= 16 && c->unit_mm_amx[t][0] ? c->unit_mm_amx[t] : c->unit_mm[t];
    }
    case KILN_OP_ATTENTION:
    case KILN_OP_ATTENTION_FULL:
        return c->unit_attn[in[1]->dtype == KILN_F16];
    case KILN_OP_RMS_NORM:
        return c->unit_vec;
    case KILN_OP_SILU:
    case KILN_OP_SWIGLU:
        return c->unit_silu;
    case KILN_OP_GET_ROWS: {
        int t = in[0]->dtype;
        return t >= 0 && t < KILN_DTYPE_END && c->unit_rows[t][0] ? c->unit_rows[t]
                                                                  : "portable rows";
    }
    default:
        return "portable f32";
    }
}

static int cpu_threads(void *ctx) {
    const cpu_ctx *c = ctx;
    return c ? c->n_threads : 1;
}

const kiln_backend kiln_backend_cpu_impl = {
    .name = "cpu",
    .configure = NULL,
    .supports = cpu_supports,
    .open = cpu_open,
    .close = cpu_close,
    .exec = cpu_exec,
    .unit = cpu_unit,
    .threads = cpu_threads,
    .prepare = kiln_cpu_prepare,
};
