/* test_cpu_backend.c: the cpu backend against ref. The pool (every item of
 * every job once, callers on two threads sharing it). Op by op (every op, every
 * weight dtype including q4_1/q4_K/q6_K blocks, f32 and f16 caches, GQA, both
 * rope modes, logits last/all) through the backend interface, for every
 * kernel variant this CPU runs; bit-identical results for 1, 2 and 3
 * threads; attention prefill in pieces and decode steps bit-identical to one
 * prefill (GQA, MQA, odd head sizes); whole programs compiled with --backend cpu per weight format
 * against the same program on ref; methods in any order, any number of
 * times, from several sessions and threads; the fallback flag of a node the
 * cpu backend refuses; bad open options.
 *
 * Tolerances (max |cpu - ref| / max |ref|): plain f32 ops 1e-5 (summation
 * order only); matmuls with f32/f16/bf16 weights 1e-5 (2e-2 on the opt-in
 * avx512-bf16, which rounds their operands to bf16); with q8_0/q4_0/q4_1
 * weights 2e-2 and q4_K/q6_K 2e-2 (the activations are quantized to 8 bits
 * per block of 32 / 256 values: about 1/254 of a block's largest value per
 * element, relative error of a dot ~1e-2 in the worst row); attention 1e-5;
 * get_rows, rope, kv_store exact (ref's formulas). Whole programs (logits
 * of 40 positions): f32/f16 weights 1e-5 with an f32 cache, 1e-3 with an f16
 * one; q8_0 and q4_0 weights 3e-2 (measured ~1.3e-2). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/pool.h"
#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln.h"
#include "kiln/kiln_compile.h"
#include "quant/quant.h"
#include "runtime/runtime.h"

/* ---- the pool ------------------------------------------------------------------------ */

typedef struct {
    atomic_int next;
    int n_items;
    int *hits;
} pool_job;

static void pool_fn(void *arg, int ith, int nth) {
    pool_job *j = arg;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n_items;)
        j->hits[i]++;
}

typedef struct {
    kiln_pool *pool;
    int *hits;
    int rounds;
} pool_caller;

static void *pool_caller_main(void *arg) {
    pool_caller *c = arg;
    for (int r = 0; r < c->rounds; r++) {
        pool_job j = {.n_items = 257, .hits = c->hits};
        atomic_init(&j.next, 0);
        kiln_pool_run(c->pool, pool_fn, &j);
    }
    return NULL;
}

/* Every item of every job runs exactly once, also with two threads sharing
 * one pool (one of them then runs its jobs alone). */
TEST(pool_runs_every_item_once) {
    kiln_pool *pool;
    ASSERT_OK(kiln_pool_create(3, &pool));
    ASSERT_EQ_I(kiln_pool_threads(pool), 3);
    static int ha[257], hb[257];
    pool_caller a = {pool, ha, 3000}, b = {pool, hb, 3000};
    pool_caller_main(&a);
    for (int i = 0; i < 257; i++)
        ASSERT_EQ_I(ha[i], 3000);
    memset(ha, 0, sizeof ha);
    pthread_t ta, tb;
    ASSERT(pthread_create(&ta, NULL, pool_caller_main, &a) == 0);
    ASSERT(pthread_create(&tb, NULL, pool_caller_main, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    for (int i = 0; i < 257; i++)
        ASSERT(ha[i] == 3000 && hb[i] == 3000);
    kiln_pool_destroy(pool);
    kiln_pool_destroy(NULL);
    ASSERT(kiln_pool_create(0, &pool) == KILN_ERR_INVALID_ARG);
}

/* ---- op level --------------------------------------------------------------------- */

static float *randv(unsigned long long *rs, int64_t n, float scale) {
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = kt_randf(rs) * scale;
    return v;
}

static kiln_tensor tens(kiln_dtype t, int64_t a, int64_t b, void *data) {
    kiln_tensor x = {t, b ? 2 : 1, {a, b ? b : 0, 0, 0}, data};
    return x;
}

/* A weight matrix [N, K] of dtype t with random contents: quantized from
 * random floats where src/quant writes the format, else random block bytes
 * with sane scales. */
static void *rand_weight(unsigned long long *rs, kiln_dtype t, int64_t N, int64_t K) {
    size_t rb = kiln_dtype_row_bytes(t, K);
    if (kiln_dtype_row_group(t) > 1) { /* plain rows, packed */
        uint8_t *plain = rand_weight(rs, kiln_dtype_plain(t), N, K), *w = malloc(rb * (size_t)N);
        (void)kiln_pack_rows(t, plain, rb, N, K, w, rb);
        free(plain);
        return w;
    }
    uint8_t *w = malloc(rb * (size_t)N);
    float *row = randv(rs, K, 1.0f);
    for (int64_t r = 0; r < N; r++) {
        uint8_t *p = w + rb * (size_t)r;
        for (int64_t i = 0; i < K; i++)
            row[i] = kt_randf(rs);
        if (kiln_quant_row(t, row, p, K) == KILN_OK) continue;
        for (size_t i = 0; i < rb; i++)
            p[i] = (uint8_t)kt_rand(rs);
        size_t bb = kiln_dtype_row_bytes(t, kiln_dtype_block(t));
        for (size_t b = 0; b < rb; b += bb) { /* scales: small positive halves */
            uint16_t d = kiln_f32_to_f16(0.01f + 0.01f * (float)(kt_rand(rs) % 8)),
                     m = kiln_f32_to_f16(0.02f);
            if (t == KILN_Q4_1 || t == KILN_Q4_K) {
                memcpy(p + b, &d, 2);
                memcpy(p + b + 2, &m, 2);
            } else if (t == KILN_Q6_K) {
                memcpy(p + b + bb - 2, &d, 2);
            }
        }
    }
    free(row);
    return w;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The cpu backend opened on a module with no methods (rope angles computed
 * per call) with the given variant and threads. */
static void *cpu_open_ctx(const char *variant, int threads) {
    static kiln_module empty;
    kiln_open_options o = {.n_threads = threads, .cpu_variant = variant};
    void *ctx = NULL;
    if (kiln_backend_cpu_impl.open(&empty, &o, &ctx)) {
        fprintf(stderr, "  open cpu (%s, %d threads): %s\n", variant ? variant : "best", threads,
                kiln_last_error());
        return NULL;
    }
    return ctx;
}

/* One op, with its inputs, run on ref and on cpu contexts. */
typedef struct op_case {
    kiln_node n;
    kiln_tensor in[4];
    kiln_tensor out;
    const char *what;
    double tol;
} op_case;

static uint8_t g_scratch[1 << 22];

/* Runs c on ctx (NULL = ref) into a fresh output buffer (caller frees). For
 * in-place style ops (kv_store) the cache is copied first, so every run
 * starts from the same state. */
static float *run_op(void *ctx, const op_case *c, kiln_status *st) {
    kiln_tensor in[4], out = c->out;
    const kiln_tensor *pin[4];
    void *copy = NULL;
    for (int i = 0; i < c->n.n_in; i++) {
        in[i] = c->in[i];
        pin[i] = &in[i];
    }
    size_t ob = (size_t)kiln_tensor_bytes(&c->out);
    float *o = calloc(1, ob + 64);
    out.data = o;
    if (c->n.op == KILN_OP_KV_STORE) { /* the output views the cache */
        copy = malloc(ob);
        memcpy(copy, c->in[0].data, ob);
        in[0].data = copy;
        out.data = copy;
    }
    memset(g_scratch, 0xA5, sizeof g_scratch);
    if (ctx)
        *st = kiln_backend_cpu_impl.exec(ctx, &c->n, pin, &out, g_scratch, sizeof g_scratch);
    else
        *st = kiln_ref_exec(NULL, &c->n, pin, &out, g_scratch, sizeof g_scratch);
    if (copy) {
        memcpy(o, copy, ob);
        free(copy);
    }
    return o;
}

#define MAX_CASES 128
static op_case g_cases[MAX_CASES];
static void *g_bufs[MAX_CASES * 5];
static int g_ncases, g_nbufs;

static void *keep(void *p) {
    if (g_nbufs == MAX_CASES * 5) {
        fprintf(stderr, "test_cpu_backend: more than %d buffers: raise MAX_CASES\n", MAX_CASES * 5);
        exit(1);
    }
    g_bufs[g_nbufs++] = p;
    return p;
}

static op_case *add_case(int op, const char *what, double tol) {
    if (g_ncases == MAX_CASES) {
        fprintf(stderr, "test_cpu_backend: more than %d op cases: raise MAX_CASES\n", MAX_CASES);
        exit(1);
    }
    op_case *c = &g_cases[g_ncases++];
    memset(c, 0, sizeof *c);
    c->n.op = op;
    c->n.name = (char *)what;
    c->what = what;
    c->tol = tol;
    return c;
}

/* Builds every op case once: shapes chosen so that matmuls and attention
 * are big enough to be split over threads (and small ones run inline). */
static void build_cases(void) {
    if (g_ncases) return;
    unsigned long long rs = 7;
    static const kiln_dtype wts[] = {
        KILN_F32,  KILN_F16,     KILN_BF16,    KILN_Q8_0,    KILN_Q4_0,    KILN_Q4_1,   KILN_Q4_K,
        KILN_Q6_K, KILN_Q4_0_X8, KILN_Q4_1_X8, KILN_Q8_0_X8, KILN_Q4_K_X8, KILN_Q6_K_X8};
    static const char *mm_names[] = {
        "matmul f32",    "matmul f16",    "matmul bf16",  "matmul q8_0",   "matmul q4_0",
        "matmul q4_1",   "matmul q4_K",   "matmul q6_K",  "matmul q4_0x8", "matmul q4_1x8",
        "matmul q8_0x8", "matmul q4_Kx8", "matmul q6_Kx8"};
    static const char *gr_names[] = {"get_rows f32",    "get_rows f16",    "get_rows bf16",
                                     "get_rows q8_0",   "get_rows q4_0",   "get_rows q4_1",
                                     "get_rows q4_K",   "get_rows q6_K",   "get_rows q4_0x8",
                                     "get_rows q4_1x8", "get_rows q8_0x8", "get_rows q4_Kx8",
                                     "get_rows q6_Kx8"};
    for (size_t k = 0; k < sizeof wts / sizeof *wts; k++) {
        kiln_dtype t = wts[k];
        int quant = kiln_dtype_block(t) > 1;
        for (int T = 1; T <= 67; T += 66) { /* decode and a prefill with a partial token tile */
            int64_t K = 512, N = T == 1 ? 200 : 72;
            op_case *c = add_case(KILN_OP_MATMUL, mm_names[k], quant ? 2e-2 : 1e-5);
            c->n.n_in = 2;
            c->in[0] = tens(KILN_F32, T, K, keep(randv(&rs, T * K, 1.0f)));
            c->in[1] = tens(t, N, K, keep(rand_weight(&rs, t, N, K)));
            c->out = tens(KILN_F32, T, N, NULL);
        }
        op_case *c = add_case(KILN_OP_GET_ROWS, gr_names[k], 0);
        int32_t *ids = keep(malloc(sizeof(int32_t) * 5));
        for (int i = 0; i < 5; i++)
            ids[i] = (int32_t)(kt_rand(&rs) % 40);
        c->n.n_in = 2;
        c->in[0] = tens(t, 40, 256, keep(rand_weight(&rs, t, 40, 256)));
        c->in[1] = tens(KILN_I32, 5, 0, ids);
        c->out = tens(KILN_F32, 5, 256, NULL);
    }
    /* logits: the last row only, and all rows */
    for (int all = 0; all <= 1; all++) {
        op_case *c = add_case(KILN_OP_LOGITS, all ? "logits all rows" : "logits last row", 2e-2);
        int32_t *flag = keep(malloc(sizeof(int32_t)));
        *flag = all;
        c->n.n_in = 3;
        c->in[0] = tens(KILN_F32, 9, 256, keep(randv(&rs, 9 * 256, 1.0f)));
        c->in[1] = tens(KILN_Q4_0, 300, 256, keep(rand_weight(&rs, KILN_Q4_0, 300, 256)));
        c->in[2] = tens(KILN_I32, 1, 0, flag);
        c->out = tens(KILN_F32, all ? 9 : 1, 300, NULL);
    }
    /* elementwise and row-wise ops, small (inline) and large (threaded) */
    for (int T = 1; T <= 100; T += 99) {
        int64_t W = 768;
        float *a = keep(randv(&rs, T * W, 3.0f)), *b = keep(randv(&rs, T * W, 3.0f));
        float *row = keep(randv(&rs, W, 1.0f));
        static const struct {
            int op;
            const char *name;
            int n_in;
            int bcast;
        } ew[] = {{KILN_OP_ADD, "add", 2, 0},        {KILN_OP_ADD, "add broadcast", 2, 1},
                  {KILN_OP_MUL, "mul", 2, 0},        {KILN_OP_MUL, "mul broadcast", 2, 1},
                  {KILN_OP_SILU, "silu", 1, 0},      {KILN_OP_SWIGLU, "swiglu", 2, 0},
                  {KILN_OP_SOFTMAX, "softmax", 1, 0}};
        for (size_t e = 0; e < sizeof ew / sizeof *ew; e++) {
            op_case *c = add_case(ew[e].op, ew[e].name, 1e-6);
            c->n.n_in = ew[e].n_in;
            c->in[0] = tens(KILN_F32, T, W, a);
            c->in[1] = ew[e].bcast ? tens(KILN_F32, W, 0, row) : tens(KILN_F32, T, W, b);
            c->out = tens(KILN_F32, T, W, NULL);
        }
        for (int per_head = 0; per_head <= 1; per_head++) {
            op_case *c =
                add_case(KILN_OP_RMS_NORM, per_head ? "rms_norm per head" : "rms_norm", 1e-5);
            c->n.n_in = 2;
            c->n.fattr[0] = 1e-5f;
            c->in[0] = tens(KILN_F32, T, W, a);
            c->in[1] = tens(KILN_F32, per_head ? 64 : W, 0, row);
            c->out = tens(KILN_F32, T, W, NULL);
        }
        for (int mode = 0; mode <= 1; mode++)
            for (int ff = 0; ff <= 1; ff++) {
                op_case *c = add_case(KILN_OP_ROPE, mode ? "rope neox" : "rope adjacent", 0);
                int32_t *pos = keep(malloc(sizeof(int32_t)));
                *pos = T == 1 ? 1234 : 3;
                c->n.n_in = ff ? 3 : 2;
                c->n.iattr[KILN_ROPE_N_HEAD] = 12;
                c->n.iattr[KILN_ROPE_HEAD_DIM] = 64;
                c->n.iattr[KILN_ROPE_MODE] = mode;
                c->n.iattr[KILN_ROPE_N_ROT] = ff ? 48 : 64;
                c->n.fattr[0] = 10000.0f;
                c->in[0] = tens(KILN_F32, T, W, a);
                c->in[1] = tens(KILN_I32, 1, 0, pos);
                float *f = keep(malloc(sizeof(float) * 24));
                for (int j = 0; j < 24; j++)
                    f[j] = 1.0f + (float)j / 4;
                c->in[2] = tens(KILN_F32, 24, 0, f);
                c->out = tens(KILN_F32, T, W, NULL);
            }
    }
    /* kv_store and attention on f32 and f16 caches, GQA 8 heads on 2 */
    for (int f16 = 0; f16 <= 1; f16++)
        for (int T = 1; T <= 37; T += 36) {
            int64_t S = 200, hd = 64, nh = 8, nkv = 2, kvw = nkv * hd;
            kiln_dtype ct = f16 ? KILN_F16 : KILN_F32;
            size_t eb = f16 ? 2 : 4;
            uint8_t *kc = keep(malloc((size_t)(S * kvw) * eb)),
                    *vc = keep(malloc((size_t)(S * kvw) * eb));
            for (int64_t i = 0; i < S * kvw; i++) {
                float kv = kt_randf(&rs), vv = kt_randf(&rs);
                if (f16) {
                    ((uint16_t *)kc)[i] = kiln_f32_to_f16(kv);
                    ((uint16_t *)vc)[i] = kiln_f32_to_f16(vv);
                } else {
                    ((float *)kc)[i] = kv;
                    ((float *)vc)[i] = vv;
                }
            }
            int32_t *pos = keep(malloc(sizeof(int32_t)));
            *pos = T == 1 ? 150 : 100;
            op_case *c = add_case(KILN_OP_ATTENTION,
                                  f16 ? "attention f16 cache" : "attention f32 cache", 1e-5);
            c->n.n_in = 4;
            c->n.iattr[KILN_ATTN_N_HEAD] = (int)nh;
            c->n.iattr[KILN_ATTN_N_KV_HEAD] = (int)nkv;
            c->n.iattr[KILN_ATTN_HEAD_DIM] = (int)hd;
            c->n.fattr[0] = 8.0f;
            c->in[0] = tens(KILN_F32, T, nh * hd, keep(randv(&rs, T * nh * hd, 2.0f)));
            c->in[1] = tens(ct, S, kvw, kc);
            c->in[2] = tens(ct, S, kvw, vc);
            c->in[3] = tens(KILN_I32, 1, 0, pos);
            c->out = tens(KILN_F32, T, nh * hd, NULL);
            op_case *s = add_case(KILN_OP_KV_STORE, f16 ? "kv_store f16" : "kv_store f32", 0);
            s->n.n_in = 3;
            s->in[0] = tens(ct, S, kvw, kc);
            s->in[1] = tens(KILN_F32, T, kvw, keep(randv(&rs, T * kvw, 1.0f)));
            s->in[2] = tens(KILN_I32, 1, 0, pos);
            s->out = tens(ct, S, kvw, NULL);
        }
    /* layer_norm with bias and gelu (erf and tanh), the vision tower's:
     * ref's rows on the threads, exact */
    for (int T = 1; T <= 100; T += 99) {
        int64_t W = 1024;
        float *x = keep(randv(&rs, T * W, 3.0f));
        op_case *c = add_case(KILN_OP_LAYER_NORM, "layer_norm", 0);
        c->n.n_in = 3;
        c->n.fattr[0] = 1e-6f;
        c->in[0] = tens(KILN_F32, T, W, x);
        c->in[1] = tens(KILN_F32, W, 0, keep(randv(&rs, W, 1.0f)));
        c->in[2] = tens(KILN_F32, W, 0, keep(randv(&rs, W, 1.0f)));
        c->out = tens(KILN_F32, T, W, NULL);
        for (int tanh_form = 0; tanh_form <= 1; tanh_form++) {
            c = add_case(KILN_OP_GELU, tanh_form ? "gelu tanh" : "gelu erf", 0);
            c->n.n_in = 1;
            c->n.iattr[KILN_GELU_TANH] = tanh_form;
            c->in[0] = tens(KILN_F32, T, W, x);
            c->out = tens(KILN_F32, T, W, NULL);
        }
    }
    /* merge_rows, fold_rows, embed_bag (f32 and f16 tables): ref's loops,
     * run inline by cpu so they split no partition; exact */
    {
        int64_t T = 40, D = 96;
        int32_t *mask = keep(malloc(sizeof(int32_t) * (size_t)T)),
                *ids = keep(malloc(sizeof(int32_t) * (size_t)T * 4));
        float *wt = keep(randv(&rs, T * 4, 1.0f));
        for (int64_t i = 0; i < T; i++)
            mask[i] = (int32_t)(kt_rand(&rs) % 2);
        for (int64_t i = 0; i < T * 4; i++)
            ids[i] = (int32_t)(kt_rand(&rs) % 36);
        op_case *c = add_case(KILN_OP_MERGE_ROWS, "merge_rows", 0);
        c->n.n_in = 3;
        c->in[0] = tens(KILN_F32, T, D, keep(randv(&rs, T * D, 1.0f)));
        c->in[1] = tens(KILN_F32, T, D, keep(randv(&rs, T * D, 1.0f)));
        c->in[2] = tens(KILN_I32, T, 0, mask);
        c->out = tens(KILN_F32, T, D, NULL);
        c = add_case(KILN_OP_FOLD_ROWS, "fold_rows", 0);
        c->n.n_in = 1;
        c->n.iattr[0] = 4;
        c->in[0] = tens(KILN_F32, T, D, keep(randv(&rs, T * D, 1.0f)));
        c->out = tens(KILN_F32, T / 4, D * 4, NULL);
        for (int f16 = 0; f16 <= 1; f16++) {
            c = add_case(KILN_OP_EMBED_BAG, f16 ? "embed_bag f16" : "embed_bag f32", 0);
            kiln_dtype t = f16 ? KILN_F16 : KILN_F32;
            c->n.n_in = 3;
            c->in[0] = tens(t, 36, D, keep(rand_weight(&rs, t, 36, D)));
            c->in[1] = tens(KILN_I32, T, 4, ids);
            c->in[2] = tens(KILN_F32, T, 4, wt);
            c->out = tens(KILN_F32, T, D, NULL);
        }
    }
    /* rope_multi: Qwen3-VL's text rope (interleaved M-RoPE, head 128,
     * sections 24/20/20) and its tower's axial 2-D rope (head 64), one token
     * and 100 (threaded), positions apart per stream; exact (ref's rows) */
    for (int axial = 0; axial <= 1; axial++)
        for (int T = 1; T <= 100; T += 99) {
            int hd = axial ? 64 : 128, nh = axial ? 16 : 8, S = axial ? 2 : 3;
            int64_t W = (int64_t)nh * hd;
            op_case *c = add_case(KILN_OP_ROPE_MULTI, axial ? "rope_multi axial" : "rope_multi", 0);
            int32_t *pos = keep(malloc(sizeof(int32_t) * (size_t)(T * S)));
            for (int i = 0; i < T * S; i++)
                pos[i] = (int32_t)(kt_rand(&rs) % 5000);
            c->n.n_in = 2;
            c->n.iattr[KILN_ROPEM_N_HEAD] = nh;
            c->n.iattr[KILN_ROPEM_HEAD_DIM] = hd;
            c->n.iattr[KILN_ROPEM_LAYOUT] = axial ? KILN_ROPEM_AXIAL : KILN_ROPEM_INTERLEAVED;
            c->n.iattr[KILN_ROPEM_SECTION] = 24;
            c->n.iattr[KILN_ROPEM_SECTION + 1] = 20;
            c->n.iattr[KILN_ROPEM_SECTION + 2] = 20;
            c->n.fattr[0] = axial ? 10000.0f : 5000000.0f;
            c->in[0] = tens(KILN_F32, T, W, keep(randv(&rs, T * W, 1.0f)));
            c->in[1] = tens(KILN_I32, T, S, pos);
            c->out = tens(KILN_F32, T, W, NULL);
        }
    /* attention_full (the vision tower's: every token sees every token):
     * few tokens inline; 300 over several key blocks, threaded; head sizes
     * 64 (Qwen3-VL-2B's tower), 72 (the 4B/8B towers') and 36 (the plain
     * step), GQA and not */
    static const struct {
        int T, nh, nkv, hd;
    } af[] = {{5, 4, 4, 64}, {300, 16, 16, 64}, {300, 16, 16, 72}, {131, 6, 2, 36}};
    for (size_t i = 0; i < sizeof af / sizeof *af; i++) {
        int64_t T = af[i].T, qw = (int64_t)af[i].nh * af[i].hd, kvw = (int64_t)af[i].nkv * af[i].hd;
        op_case *c = add_case(KILN_OP_ATTENTION_FULL, "attention_full", 1e-5);
        c->n.n_in = 3;
        c->n.iattr[KILN_ATTN_N_HEAD] = af[i].nh;
        c->n.iattr[KILN_ATTN_N_KV_HEAD] = af[i].nkv;
        c->n.iattr[KILN_ATTN_HEAD_DIM] = af[i].hd;
        c->n.fattr[0] = sqrtf((float)af[i].hd);
        c->in[0] = tens(KILN_F32, T, qw, keep(randv(&rs, T * qw, 2.0f)));
        c->in[1] = tens(KILN_F32, T, kvw, keep(randv(&rs, T * kvw, 2.0f)));
        c->in[2] = tens(KILN_F32, T, kvw, keep(randv(&rs, T * kvw, 1.0f)));
        c->out = tens(KILN_F32, T, qw, NULL);
    }
}

static int compare_variant(const char *variant) {
    build_cases();
    /* opt-in tables (avx512-bf16) round f16/bf16 matmuls' operands to bf16:
     * 8-bit significands, held to the quantized kinds' bound */
    const kiln_cpu_kernels *const *all, *table = NULL;
    for (int i = 0, n = kiln_cpu_kernels_all(&all); i < n; i++)
        if (!strcmp(all[i]->name, variant)) table = all[i];
    const int bf16_dot = table && table->opt_in;
    void *ctx = cpu_open_ctx(variant, 2);
    if (!ctx) return 1;
    int bad = 0;
    double worst_mm = 0;
    for (int i = 0; i < g_ncases; i++) {
        const op_case *c = &g_cases[i];
        kiln_status s1, s2;
        float *want = run_op(NULL, c, &s1), *got = run_op(ctx, c, &s2);
        size_t ob = (size_t)kiln_tensor_bytes(&c->out);
        double e = s1 || s2 ? 1e30
                   : c->tol == 0
                       ? (memcmp(got, want, ob) ? 1e30 : 0) /* exact: same formulas as ref */
                       : rel_err(got, want, (int64_t)(ob / sizeof(float)));
        if (s1 || s2) fprintf(stderr, "  %s: %s\n", c->what, kiln_last_error());
        if (c->n.op == KILN_OP_MATMUL && e > worst_mm) worst_mm = e;
        const int loose = bf16_dot && c->n.op == KILN_OP_MATMUL &&
                          (c->in[1].dtype == KILN_F16 || c->in[1].dtype == KILN_BF16);
        const double tol = loose ? 2e-2 : c->tol;
        if (!(e <= tol)) {
            fprintf(stderr, "  %s %s [%lld x %lld]: relative error %.3g > %g\n", variant, c->what,
                    (long long)c->out.ne[0], (long long)c->out.ne[1], e, tol);
            bad++;
        }
        free(want);
        free(got);
    }
    printf("  %s: %d ops within tolerance of ref (worst matmul %.3g)\n", variant, g_ncases - bad,
           worst_mm);
    kiln_backend_cpu_impl.close(ctx);
    return bad;
}

TEST(every_op_every_variant_matches_ref) {
    const kiln_cpu_kernels *const *all;
    int n = kiln_cpu_kernels_all(&all), ran = 0;
    for (int i = 0; i < n; i++) {
        if (!kiln_cpu_kernels_runnable(all[i])) continue;
        ASSERT_MSG(compare_variant(all[i]->name) == 0, "variant %s differs from ref", all[i]->name);
        ran++;
    }
    ASSERT(ran >= 1);
}

TEST(ops_bit_identical_for_1_2_3_threads) {
    build_cases();
    void *ctx[3];
    for (int t = 0; t < 3; t++)
        ASSERT((ctx[t] = cpu_open_ctx(NULL, t + 1)) != NULL);
    for (int i = 0; i < g_ncases; i++) {
        const op_case *c = &g_cases[i];
        kiln_status st;
        float *one = run_op(ctx[0], c, &st);
        size_t ob = (size_t)kiln_tensor_bytes(&c->out);
        for (int t = 1; t < 3; t++) {
            float *more = run_op(ctx[t], c, &st);
            int same = memcmp(one, more, ob) == 0;
            free(more);
            if (!same) {
                free(one);
                KT_FAIL("%s: %d threads differ from 1", c->what, t + 1);
            }
        }
        free(one);
    }
    for (int t = 0; t < 3; t++)
        kiln_backend_cpu_impl.close(ctx[t]);
}

TEST(units_name_the_variant) {
    build_cases();
    void *ctx = cpu_open_ctx("scalar", 1);
    ASSERT(ctx);
    for (int i = 0; i < g_ncases; i++) {
        const kiln_tensor *pin[4] = {&g_cases[i].in[0], &g_cases[i].in[1], &g_cases[i].in[2],
                                     &g_cases[i].in[3]};
        const char *u = kiln_backend_cpu_impl.unit(ctx, &g_cases[i].n, pin);
        if (!u || !*u) KT_FAIL("%s: no unit", g_cases[i].what);
        if (g_cases[i].n.op == KILN_OP_MATMUL && g_cases[i].in[1].dtype == KILN_Q4_0)
            ASSERT_STR_EQ(u, "scalar q4_0 x q8 dot");
    }
    kiln_backend_cpu_impl.close(ctx);
}

/* Attention on tiles: prefill of T tokens must give, row for row, the same
 * bits as the same tokens in pieces (decode steps, short and long prefills,
 * pieces that start off a key-block edge), for 1 and 3 threads (the task
 * tiling follows both T and the thread count), in every variant; and stay
 * within 1e-5 of ref. Shapes: GQA 6 heads on 2 (hd 64: the SIMD step's
 * 64-value slices), MQA 8 on 1 (hd 80: a slice plus 8-value ones), 4 on 4
 * (hd 36: not a multiple of 8, the plain step). */
static float *attn_run_pieces(void *ctx, kiln_node *n, const kiln_tensor *k, const kiln_tensor *v,
                              const float *q, int64_t T, int32_t pos, const int *plan, int n_plan) {
    int64_t w = (int64_t)n->iattr[KILN_ATTN_N_HEAD] * n->iattr[KILN_ATTN_HEAD_DIM];
    float *o = calloc((size_t)(T * w), sizeof(float));
    for (int64_t t0 = 0, i = 0; t0 < T; i++) {
        int64_t len = plan[i % n_plan] < T - t0 ? plan[i % n_plan] : T - t0;
        int32_t p = pos + (int32_t)t0;
        kiln_tensor qt = tens(KILN_F32, len, w, (void *)(q + t0 * w)),
                    pt = tens(KILN_I32, 1, 0, &p), ot = tens(KILN_F32, len, w, o + t0 * w);
        const kiln_tensor *pin[4] = {&qt, k, v, &pt};
        kiln_status st = kiln_backend_cpu_impl.exec(ctx, n, pin, &ot, g_scratch, sizeof g_scratch);
        if (st) {
            fprintf(stderr, "  attention: %s\n", kiln_last_error());
            free(o);
            return NULL;
        }
        t0 += len;
    }
    return o;
}

TEST(attention_prefill_in_pieces_bit_identical) {
    static const int shapes[][3] = {{6, 2, 64}, {8, 1, 80}, {4, 4, 36}}; /* nh, nkv, hd */
    static const int whole[] = {150}, pieces[] = {1, 7, 64, 3, 1, 74}, steps[] = {1};
    const int *plans[] = {pieces, steps};
    const int n_plans[] = {6, 1};
    const int64_t S = 256, T = 150;
    const int32_t pos = 40; /* keys 0 .. 189: three blocks, pieces off their edges */
    const kiln_cpu_kernels *const *all;
    int n_var = kiln_cpu_kernels_all(&all);
    unsigned long long rs = 7;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int f16 = 0; f16 <= 1; f16++) {
            int nh = shapes[si][0], nkv = shapes[si][1], hd = shapes[si][2];
            int64_t kvw = (int64_t)nkv * hd, w = (int64_t)nh * hd;
            kiln_dtype ct = f16 ? KILN_F16 : KILN_F32;
            size_t eb = f16 ? 2 : 4;
            uint8_t *kc = malloc((size_t)(S * kvw) * eb), *vc = malloc((size_t)(S * kvw) * eb);
            for (int64_t i = 0; i < S * kvw; i++) {
                float kv = kt_randf(&rs) * 2.0f, vv = kt_randf(&rs);
                if (f16) {
                    ((uint16_t *)kc)[i] = kiln_f32_to_f16(kv);
                    ((uint16_t *)vc)[i] = kiln_f32_to_f16(vv);
                } else {
                    ((float *)kc)[i] = kv;
                    ((float *)vc)[i] = vv;
                }
            }
            float *q = randv(&rs, T * w, 2.0f);
            kiln_node n = {0};
            n.op = KILN_OP_ATTENTION;
            n.n_in = 4;
            n.iattr[KILN_ATTN_N_HEAD] = nh;
            n.iattr[KILN_ATTN_N_KV_HEAD] = nkv;
            n.iattr[KILN_ATTN_HEAD_DIM] = hd;
            n.fattr[0] = sqrtf((float)hd);
            kiln_tensor k = tens(ct, S, kvw, kc), v = tens(ct, S, kvw, vc);
            /* ref, for the tolerance check */
            int32_t p0 = pos;
            kiln_tensor qt = tens(KILN_F32, T, w, q), pt = tens(KILN_I32, 1, 0, &p0);
            float *want = calloc((size_t)(T * w), sizeof(float));
            kiln_tensor ot = tens(KILN_F32, T, w, want);
            const kiln_tensor *pin[4] = {&qt, &k, &v, &pt};
            ASSERT_OK(kiln_ref_exec(NULL, &n, pin, &ot, g_scratch, sizeof g_scratch));
            for (int vi = 0; vi < n_var; vi++) {
                if (!kiln_cpu_kernels_runnable(all[vi])) continue;
                float *base = NULL;
                for (int threads = 1; threads <= 3; threads += 2) {
                    void *ctx = cpu_open_ctx(all[vi]->name, threads);
                    ASSERT(ctx);
                    float *one = attn_run_pieces(ctx, &n, &k, &v, q, T, pos, whole, 1);
                    ASSERT(one);
                    if (!base) {
                        base = one;
                        double e = rel_err(base, want, T * w);
                        ASSERT_MSG(e <= 1e-5, "%s nh %d nkv %d hd %d %s cache: %.3g from ref",
                                   all[vi]->name, nh, nkv, hd, f16 ? "f16" : "f32", e);
                    } else {
                        ASSERT_MSG(!memcmp(one, base, sizeof(float) * (size_t)(T * w)),
                                   "%s hd %d: %d threads differ from 1", all[vi]->name, hd,
                                   threads);
                        free(one);
                    }
                    for (int pl = 0; pl < 2; pl++) {
                        float *got =
                            attn_run_pieces(ctx, &n, &k, &v, q, T, pos, plans[pl], n_plans[pl]);
                        ASSERT(got);
                        for (int64_t t = 0; t < T; t++)
                            ASSERT_MSG(
                                !memcmp(got + t * w, base + t * w, sizeof(float) * (size_t)w),
                                "%s nh %d nkv %d hd %d %s cache, %d threads, plan %d: "
                                "token %lld differs from one prefill",
                                all[vi]->name, nh, nkv, hd, f16 ? "f16" : "f32", threads, pl,
                                (long long)t);
                        free(got);
                    }
                    kiln_backend_cpu_impl.close(ctx);
                }
                free(base);
            }
            free(want);
            free(q);
            free(kc);
            free(vc);
        }
}

/* kv_store into an f16 cache: every variant gives ref's halves bit for bit
 * on random bit patterns (NaNs with payloads, infinities, subnormals, values
 * that round to inf) and halfway cases, in groups of 8 and a tail. */
TEST(kv_store_f16_exact_on_any_bits) {
    enum { S = 8, T = 5, W = 13 };
    unsigned long long rs = 11;
    float *x = malloc(sizeof(float) * T * W);
    for (int i = 0; i < T * W; i++) {
        uint32_t u = (uint32_t)kt_rand(&rs);
        if (i % 5 == 1) u = (u & 0x807fffffu) | 0x7f800001u;           /* NaN, payload */
        if (i % 7 == 4) u = (u & 0x80000000u) | 0x7f800000u;           /* inf */
        if (i % 5 == 2) u = (u & 0x80ffe000u) | 0x33000000u | 0x1000u; /* halfway, tiny */
        if (i % 5 == 3) u = (u & 0x807fe000u) | 0x47000000u | 0x1000u; /* halfway, large */
        memcpy(&x[i], &u, 4);
    }
    const kiln_cpu_kernels *const *all;
    int n_var = kiln_cpu_kernels_all(&all);
    int32_t pos = 2;
    for (int vi = 0; vi < n_var; vi++) {
        if (!kiln_cpu_kernels_runnable(all[vi])) continue;
        void *ctx = cpu_open_ctx(all[vi]->name, 1);
        ASSERT(ctx);
        uint16_t want[S * W] = {0}, got[S * W] = {0};
        kiln_node n = {0};
        n.op = KILN_OP_KV_STORE;
        n.n_in = 3;
        kiln_tensor xt = tens(KILN_F32, T, W, x), pt = tens(KILN_I32, 1, 0, &pos);
        kiln_tensor cw = tens(KILN_F16, S, W, want), cg = tens(KILN_F16, S, W, got);
        const kiln_tensor *pw[3] = {&cw, &xt, &pt}, *pg[3] = {&cg, &xt, &pt};
        ASSERT_OK(kiln_ref_exec(NULL, &n, pw, &cw, g_scratch, sizeof g_scratch));
        ASSERT_OK(kiln_backend_cpu_impl.exec(ctx, &n, pg, &cg, g_scratch, sizeof g_scratch));
        for (int i = 0; i < S * W; i++)
            ASSERT_MSG(want[i] == got[i], "%s: value %d: 0x%04x, ref 0x%04x", all[vi]->name, i,
                       got[i], want[i]);
        kiln_backend_cpu_impl.close(ctx);
    }
    free(x);
}

/* ---- programs ------------------------------------------------------------------------ */

#define VOCAB 256
#define CTX 64
#define PREFILL 16
static const kt_l2c_config MODEL = {128, 384, 2, 4, 2, VOCAB, CTX, 0, 5};

static const char *model_file(void) {
    static int done;
    if (!done && kt_write_llama2c(kt_path("m.bin"), &MODEL) == 0) done = 1;
    return done ? kt_path("m.bin") : NULL;
}

/* Compiles the model for `backends` with weight format `quant` (NULL: keep). */
static const char *compile(const char *backends, const char *quant, const char *kv) {
    static char paths[16][600];
    static int n;
    char *out = paths[n++ & 15];
    snprintf(out, 600, "%s", kt_path(""));
    snprintf(out + strlen(out), 600 - strlen(out), "m_%s_%s_%s.kiln", backends,
             quant ? quant : "keep", kv ? kv : "dflt");
    kiln_compile_options o;
    kiln_compile_options_init(&o);
    o.input = model_file();
    o.output = out;
    o.prefill = PREFILL;
    o.max_seq = CTX;
    o.backends = backends;
    o.quant = quant;
    o.kv_type = kv;
    if (!o.input || kiln_compile(&o)) {
        fprintf(stderr, "  compile %s %s: %s\n", backends, quant ? quant : "", kiln_last_error());
        return NULL;
    }
    return out;
}

typedef struct {
    kiln_program *p;
    int pre, dec;
} prog;

static kiln_status prog_open(const char *path, const kiln_open_options *o, prog *g) {
    kiln_status st = kiln_program_open_with(path, o, &g->p);
    if (!st) st = kiln_program_find_method(g->p, "prefill", &g->pre);
    if (!st) st = kiln_program_find_method(g->p, "decode", &g->dec);
    return st;
}

/* prefill tokens[0..n) at pos with all rows out; rows copied to out. */
static kiln_status prefill(kiln_session *s, const prog *g, const int32_t *toks, int n, int pos,
                           float *out) {
    int64_t len = n, one = 1;
    int32_t p = pos, all = 1;
    const void *o;
    kiln_status st;
    if ((st = kiln_session_set_input(s, g->pre, 0, toks, KILN_I32, 1, &len)) ||
        (st = kiln_session_set_input(s, g->pre, 1, &p, KILN_I32, 1, &one)) ||
        (st = kiln_session_set_input(s, g->pre, 2, &all, KILN_I32, 1, &one)) ||
        (st = kiln_session_execute(s, g->pre)) ||
        (st = kiln_session_get_output(s, g->pre, 0, &o, NULL, NULL, NULL)))
        return st;
    memcpy(out, o, sizeof(float) * (size_t)n * VOCAB);
    return KILN_OK;
}

static kiln_status decode(kiln_session *s, const prog *g, int32_t tok, int pos, float *out) {
    int64_t one = 1;
    int32_t p = pos;
    const void *o;
    kiln_status st;
    if ((st = kiln_session_set_input(s, g->dec, 0, &tok, KILN_I32, 1, &one)) ||
        (st = kiln_session_set_input(s, g->dec, 1, &p, KILN_I32, 1, &one)) ||
        (st = kiln_session_execute(s, g->dec)) ||
        (st = kiln_session_get_output(s, g->dec, 0, &o, NULL, NULL, NULL)))
        return st;
    memcpy(out, o, sizeof(float) * VOCAB);
    return KILN_OK;
}

#define HIST 40
static int32_t g_hist[HIST];

static void init_hist(void) {
    unsigned long long rs = 99;
    for (int i = 0; i < HIST; i++)
        g_hist[i] = (int32_t)(kt_rand(&rs) % VOCAB);
}

/* The logits of every position of g_hist, by `plan`: a list of chunk sizes
 * (1 = decode, >1 = prefill of that many), repeated until HIST tokens. */
static kiln_status run_plan(kiln_session *s, const prog *g, const int *plan, int n_plan,
                            float *rows) {
    kiln_status st = kiln_session_reset(s);
    for (int done = 0, k = 0; !st && done < HIST; k++) {
        int len = plan[k % n_plan];
        if (len > HIST - done) len = HIST - done;
        if (len == 1)
            st = decode(s, g, g_hist[done], done, rows + (size_t)done * VOCAB);
        else
            st = prefill(s, g, g_hist + done, len, done, rows + (size_t)done * VOCAB);
        done += len;
    }
    return st;
}

static const int PLAN_PREFILL[] = {PREFILL};
static const int PLAN_MIXED[] = {5, 1, 1, 16, 3, 1, 7};
static const int PLAN_DECODE[] = {1};

/* Whole programs, each weight format: cpu against ref on the same weights. */
TEST(programs_match_ref_per_weight_format) {
    static const struct {
        const char *quant;
        double tol;
    } cases[] = {{NULL, 1e-5}, {"f16", 1e-5}, {"q8_0", 3e-2}, {"q4_0", 3e-2}};
    init_hist();
    float *want = malloc(sizeof(float) * HIST * VOCAB), *got = malloc(sizeof(float) * HIST * VOCAB);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        for (int kv = 0; kv <= 1; kv++) {
            const char *kvt = kv ? "f32" : "f16";
            const char *pr = compile("ref", cases[k].quant, kvt),
                       *pc = compile("cpu", cases[k].quant, kvt);
            ASSERT(pr && pc);
            prog gr, gc;
            kiln_session *sr, *sc;
            ASSERT_OK(prog_open(pr, NULL, &gr));
            ASSERT_OK(prog_open(pc, NULL, &gc));
            ASSERT_OK(kiln_session_create(gr.p, &sr));
            ASSERT_OK(kiln_session_create(gc.p, &sc));
            ASSERT_OK(run_plan(sr, &gr, PLAN_PREFILL, 1, want));
            ASSERT_OK(run_plan(sc, &gc, PLAN_MIXED, 7, got));
            /* An f16 cache turns a last-bit difference in a key or value
             * into a neighbouring half (2^-11 relative) now and then. */
            double e = rel_err(got, want, HIST * VOCAB),
                   tol = cases[k].tol < 1e-3 && !kv ? 1e-3 : cases[k].tol;
            printf("  %s weights, %s cache: cpu vs ref relative error %.3g (bound %g)\n",
                   cases[k].quant ? cases[k].quant : "f32", kvt, e, tol);
            ASSERT_MSG(e <= tol, "%s: %.3g", cases[k].quant ? cases[k].quant : "f32", e);
            /* q4_0 on cpu: the compiler packed the weights (q4_0x8) */
            if (cases[k].quant && !strcmp(cases[k].quant, "q4_0")) {
                int packed = 0;
                for (int i = 0; i < gc.p->mod.n_consts; i++)
                    packed += gc.p->mod.consts[i].dtype == KILN_Q4_0_X8;
                ASSERT_MSG(packed > 0, "no weight of the cpu q4_0 program is packed");
            }
            /* Every node of this model runs on cpu: none falls back. */
            for (int m = 0; m < kiln_program_method_count(gc.p); m++)
                for (int i = 0; i < gc.p->mod.methods[m].n_nodes; i++) {
                    const kiln_node *nd = &gc.p->mod.methods[m].nodes[i];
                    ASSERT_MSG(!kiln_program_node_is_fallback(gc.p, nd) &&
                                   !strcmp(kiln_program_node_backend(gc.p, nd)->name, "cpu"),
                               "node %s is not on cpu", nd->name);
                }
            kiln_session_destroy(sr);
            kiln_session_destroy(sc);
            kiln_program_close(gr.p);
            kiln_program_close(gc.p);
        }
    }
    free(want);
    free(got);
}

/* Any method in any order, any number of times, several sessions, 1..3
 * threads: the same bits as one prefill per chunk on one thread. */
TEST(any_order_any_threads_bit_identical) {
    init_hist();
    const char *pc = compile("cpu", "q4_0", NULL);
    ASSERT(pc);
    float *base = malloc(sizeof(float) * HIST * VOCAB), *got = malloc(sizeof(float) * HIST * VOCAB);
    const int *plans[] = {PLAN_PREFILL, PLAN_MIXED, PLAN_DECODE};
    const int n_plans[] = {1, 7, 1};
    for (int threads = 1; threads <= 3; threads++) {
        kiln_open_options o = {.n_threads = threads};
        prog g;
        ASSERT_OK(prog_open(pc, &o, &g));
        kiln_session *s[2];
        ASSERT_OK(kiln_session_create(g.p, &s[0]));
        ASSERT_OK(kiln_session_create(g.p, &s[1]));
        if (threads == 1) ASSERT_OK(run_plan(s[0], &g, PLAN_PREFILL, 1, base));
        for (int rep = 0; rep < 2; rep++)
            for (int k = 0; k < 3; k++) {
                ASSERT_OK(run_plan(s[(rep + k) & 1], &g, plans[k], n_plans[k], got));
                ASSERT_MSG(memcmp(got, base, sizeof(float) * HIST * VOCAB) == 0,
                           "%d threads, plan %d, repeat %d: logits differ from 1 thread", threads,
                           k, rep);
            }
        kiln_session_destroy(s[0]);
        kiln_session_destroy(s[1]);
        kiln_program_close(g.p);
    }
    free(base);
    free(got);
}

/* Two sessions of one program executing at once from two threads (the pool
 * is busy for one of them, which then runs alone): the same bits. */
typedef struct {
    const prog *g;
    const int *plan;
    int n_plan;
    float *rows;
    kiln_status st;
} walker;

static void *walk(void *arg) {
    walker *w = arg;
    kiln_session *s;
    if ((w->st = kiln_session_create(w->g->p, &s))) return NULL;
    for (int i = 0; i < 6 && !w->st; i++)
        w->st = run_plan(s, w->g, w->plan, w->n_plan, w->rows);
    kiln_session_destroy(s);
    return NULL;
}

TEST(concurrent_sessions_bit_identical) {
    init_hist();
    const char *pc = compile("cpu", "q4_0", NULL);
    ASSERT(pc);
    kiln_open_options o = {.n_threads = 2};
    prog g;
    ASSERT_OK(prog_open(pc, &o, &g));
    float *base = malloc(sizeof(float) * HIST * VOCAB), *a = malloc(sizeof(float) * HIST * VOCAB),
          *b = malloc(sizeof(float) * HIST * VOCAB);
    kiln_session *s;
    ASSERT_OK(kiln_session_create(g.p, &s));
    ASSERT_OK(run_plan(s, &g, PLAN_PREFILL, 1, base));
    kiln_session_destroy(s);
    walker wa = {&g, PLAN_MIXED, 7, a, 0}, wb = {&g, PLAN_DECODE, 1, b, 0};
    pthread_t ta, tb;
    ASSERT(pthread_create(&ta, NULL, walk, &wa) == 0);
    ASSERT(pthread_create(&tb, NULL, walk, &wb) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ASSERT_OK(wa.st);
    ASSERT_OK(wb.st);
    ASSERT(memcmp(a, base, sizeof(float) * HIST * VOCAB) == 0);
    ASSERT(memcmp(b, base, sizeof(float) * HIST * VOCAB) == 0);
    kiln_program_close(g.p);
    free(base);
    free(a);
    free(b);
}

/* Heads wider than the cpu attention takes (640 values): that node runs on
 * ref, flagged as a fallback; everything else stays on cpu. */
TEST(refused_node_falls_back_to_ref) {
    static const kt_l2c_config WIDE = {640, 32, 1, 1, 1, 32, 8, 0, 3};
    ASSERT(kt_write_llama2c(kt_path("wide.bin"), &WIDE) == 0);
    ASSERT_OK(kt_compile(kt_path("wide.bin"), NULL, kt_path("wide.kiln"), 4, 8, "cpu"));
    kiln_program *p;
    ASSERT_OK(kiln_program_open(kt_path("wide.kiln"), &p));
    int fallback = 0, on_cpu = 0;
    const kiln_graph *g = &p->mod.methods[0];
    for (int i = 0; i < g->n_nodes; i++) {
        int fb = kiln_program_node_is_fallback(p, &g->nodes[i]);
        if (g->nodes[i].op == KILN_OP_ATTENTION)
            ASSERT_MSG(fb, "attention of head 640 is not a fallback");
        fallback += fb;
        on_cpu += !strcmp(kiln_program_node_backend(p, &g->nodes[i])->name, "cpu");
    }
    ASSERT_EQ_I(fallback, 1);
    ASSERT_EQ_I(on_cpu, g->n_nodes - 1);
    kiln_program_close(p);
}

TEST(bad_open_options_are_clear_errors) {
    const char *pc = compile("cpu", NULL, NULL);
    ASSERT(pc);
    kiln_program *p = NULL;
    kiln_open_options o = {.n_threads = 0, .cpu_variant = "mmx"};
    ASSERT_EQ_I(kiln_program_open_with(pc, &o, &p), KILN_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(kiln_last_error(), "'mmx'");
    ASSERT_CONTAINS(kiln_last_error(), "scalar");
    ASSERT(p == NULL);
    kiln_open_options t = {.n_threads = KILN_MAX_THREADS + 1};
    ASSERT_EQ_I(kiln_program_open_with(pc, &t, &p), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "thread");
    kiln_open_options neg = {.n_threads = -2};
    ASSERT_EQ_I(kiln_program_open_with(pc, &neg, &p), KILN_ERR_INVALID_ARG);
    setenv("KILN_THREADS", "two", 1);
    ASSERT_EQ_I(kiln_program_open_with(pc, NULL, &p), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "KILN_THREADS='two'");
    setenv("KILN_THREADS", "3", 1);
    ASSERT_OK(kiln_program_open_with(pc, NULL, &p));
    kiln_program_close(p);
    unsetenv("KILN_THREADS");
    /* the variant by name, and the scalar one always */
    kiln_open_options sc = {.n_threads = 1, .cpu_variant = "scalar"};
    ASSERT_OK(kiln_program_open_with(pc, &sc, &p));
    kiln_program_close(p);
}

TEST_MAIN(pool_runs_every_item_once, every_op_every_variant_matches_ref,
          ops_bit_identical_for_1_2_3_threads, units_name_the_variant,
          attention_prefill_in_pieces_bit_identical, kv_store_f16_exact_on_any_bits,
          programs_match_ref_per_weight_format, any_order_any_threads_bit_identical,
          concurrent_sessions_bit_identical, refused_node_falls_back_to_ref,
          bad_open_options_are_clear_errors)
