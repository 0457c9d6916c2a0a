/* qnn_lower.c: Kiln nodes as QNN ops. A partition becomes one QNN graph
 * with static shapes: Tm rows (the method's max_tokens; a shorter call is
 * padded, qnn_delegate.c) and S cache rows. Inside, everything is fp16:
 * weights are converted from whatever dtype they were imported in, f32
 * activations are cast at the graph's edges, and the HTP's precision is
 * set to FLOAT16. No graph keeps state: the KV cache goes in whole, the
 * rows a kv_store writes come out, and the host writes them (so any
 * session can run any graph).
 *
 * How each op lowers:
 *   get_rows   Gather(table, ids)
 *   rms_norm   RmsNorm (per group: reshaped to [Tm, D/G, G])
 *   matmul     FullyConnected(x, w [N, K]); with qnn:quant=w8 the weight
 *              is int8 per output channel and x stays fp16 (weight-only
 *              quantization)
 *   add, mul   ElementWiseAdd / ElementWiseMultiply (broadcast)
 *   silu       x * Sigmoid(x); swiglu: g * Sigmoid(g) * u
 *   softmax    Softmax over the last axis
 *   rope       Gather(cos, sin tables [S, n_rot/2], positions), then the
 *              pairs rotated with StridedSlice, Multiply, Subtract, Add,
 *              Concat (no rotary op of QNN's is used)
 *   kv_store   the rows, cast to the cache's dtype, as an output
 *   attention  scores = (q / div) K^T per KV head (MatMul, batch = KV
 *              heads, GQA as [KV, g*Tm] rows) + an additive mask input,
 *              Softmax, x V. K is the cache input with this call's rows
 *              concatenated (kv_store in the same graph) or the cache as
 *              written (kv_store elsewhere); the mask makes both causal.
 *   logits     FullyConnected over all Tm rows; the host keeps the real
 *              ones (or the last). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/qnn/qnn.h"
#include "quant/quant.h"

#define MASK_OFF (-30000.0f) /* an additive mask's "no": exp underflows to 0 in fp16 */

typedef struct {
    int kind;      /* 0: not lowered yet, 1: t, 2: KV rows (t) of state `state` */
    qnn_tensor t;  /* fp16 (int32 for token ids); fixed point or fp16 in a fixed-point graph */
    int32_t state; /* kind 2: the state value the rows go to */
    int has_alt;   /* fixed-point graph: t converted to the other type (alt) once */
    qnn_tensor alt;
} qval;

typedef struct {
    float theta;
    int n_rot, freqs;    /* freqs: the const value, or -1 */
    qnn_tensor cos, sin; /* gathered: [Tm, n_rot/2] */
    /* the same at the heads' shape [Tm, heads, n_rot/2], per head count:
     * made once per graph, so no rope multiplies by a broadcast table */
    qnn_tensor ecos[2], esin[2], ensin[2]; /* ensin: -sin */
    uint32_t eheads[2];
    int n_exp;
} rope_tab;

typedef struct {
    const qnn_rt *rt;
    qnn_handle graph; /* NULL: validate only */
    const kiln_module *m;
    const kiln_graph *g;
    const kiln_node *node;
    qnn_quant_opts *q; /* NULL: validation (fp16 weights) */
    int n_made;
    void **keep; /* names, dims, data: alive until the graph is finalized */
    int n_keep, cap_keep;
    qval *vals;
    qnn_graph_info *gi;
    int cap_io;
    uint32_t Tm, S;
    int have_positions, have_mask_new, have_mask_all;
    qnn_tensor positions, mask_new, mask_all;
    rope_tab ropes[4];
    int n_ropes;
    kiln_status st;
    char *why; /* validate: the first rejection */
    size_t why_cap;
    /* fixed-point graphs (qnn_quant_fixed): the activations' dtype and
     * largest code, the encoding the next native tensor gets (nat), and
     * the compiler's calibration ranges (module metadata) */
    int fixed_graph; /* a fixed-point graph (qnn_quant_fixed) */
    int fixed;       /* ... and the node being lowered computes in fixed point */
    uint32_t adt, qmax;
    qnn_quant cur;
    const kiln_meta *range_names, *ranges;
} lower;

static void *keep(lower *L, void *p) {
    if (!p) {
        if (!L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (L->n_keep == L->cap_keep) {
        int cap = L->cap_keep ? 2 * L->cap_keep : 64;
        void **k = kiln_realloc(L->keep, (size_t)cap * sizeof *k);
        if (!k) {
            kiln_free(p);
            if (!L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            return NULL;
        }
        L->keep = k, L->cap_keep = cap;
    }
    return L->keep[L->n_keep++] = p;
}

static void drop_keep(lower *L) {
    for (int i = 0; i < L->n_keep; i++)
        kiln_free(L->keep[i]);
    kiln_free(L->keep);
    L->keep = NULL, L->n_keep = L->cap_keep = 0;
}

static uint32_t dsize(uint32_t dt) {
    return dt == QNN_FLOAT16 || dt == QNN_UFIXED16                     ? 2
           : dt == QNN_BOOL8 || dt == QNN_SFIXED8 || dt == QNN_UFIXED8 ? 1
                                                                       : 4;
}

/* A tensor of the graph, quantized as qp says (NULL: not): name NULL =
 * "<node>.tN". */
static qnn_tensor mkq(lower *L, const char *name, uint32_t type, uint32_t dtype, int rank,
                      const uint32_t *dims, void *data, uint64_t bytes, const qnn_quant *qp) {
    qnn_tensor t;
    memset(&t, 0, sizeof t);
    if (L->st) return t;
    char buf[KILN_NAME_MAX + 32];
    if (!name) {
        snprintf(buf, sizeof buf, "%s.t%d", L->node ? L->node->name : "g", L->n_made);
        name = buf;
    }
    L->n_made++;
    char *nm = keep(L, kiln_strdup(name));
    uint32_t *d = keep(L, kiln_malloc(sizeof(uint32_t) * (size_t)(rank ? rank : 1)));
    if (L->st) return t;
    memcpy(d, dims, sizeof(uint32_t) * (size_t)rank);
    t.version = 2;
    t.v2.name = nm;
    t.v2.type = type;
    t.v2.dtype = dtype;
    t.v2.quant.definition = QNN_QUANT_NONE;
    t.v2.quant.encoding = QNN_QUANT_NONE;
    if (qp) t.v2.quant = *qp;
    t.v2.rank = (uint32_t)rank;
    t.v2.dims = d;
    t.v2.buf.data = data;
    t.v2.buf.bytes = (uint32_t)bytes;
    if (L->graph) {
        qnn_err e = L->rt->lib->fn->tensor_create_graph_tensor(L->graph, &t);
        if (e)
            L->st = kiln_error_wrap(qnn_fail(L->rt->lib, "tensorCreateGraphTensor", e),
                                    "tensor '%s' of node '%s'", nm, L->node ? L->node->name : "?");
    }
    return t;
}

static qnn_tensor mk(lower *L, const char *name, uint32_t type, uint32_t dtype, int rank,
                     const uint32_t *dims, void *data, uint64_t bytes) {
    return mkq(L, name, type, dtype, rank, dims, data, bytes, NULL);
}

/* A tensor inside the graph: fp16, or in a fixed-point graph the
 * activation type with the encoding L->cur. */
static qnn_tensor nat(lower *L, int rank, const uint32_t *dims) {
    if (L->fixed) return mkq(L, NULL, QNN_TENSOR_NATIVE, L->adt, rank, dims, NULL, 0, &L->cur);
    return mk(L, NULL, QNN_TENSOR_NATIVE, QNN_FLOAT16, rank, dims, NULL, 0);
}

/* A tensor of a's type and encoding (what a reshape, transpose, slice or
 * concat of a makes). */
static qnn_tensor nat_as(lower *L, qnn_tensor a, int rank, const uint32_t *dims) {
    return mkq(L, NULL, QNN_TENSOR_NATIVE, a.v2.dtype, rank, dims, NULL, 0, &a.v2.quant);
}

/* A static tensor whose data the graph keeps (taken: kept until finalize). */
static qnn_tensor stat(lower *L, const char *name, uint32_t dtype, int rank, const uint32_t *dims,
                       void *data) {
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (data) keep(L, data);
    return mk(L, name, QNN_TENSOR_STATIC, dtype, rank, dims, data, n * dsize(dtype));
}

static void op(lower *L, const char *type, qnn_param *ps, int np, qnn_tensor *in, int nin,
               qnn_tensor *out) {
    if (L->st) return;
    /* "<Kiln node>.op<N>.<QNN type>": how a profile's op finds its node */
    char name[KILN_NAME_MAX + 64];
    snprintf(name, sizeof name, "%s.op%d.%s", L->node ? L->node->name : "g", L->n_made++, type);
    qnn_op o;
    memset(&o, 0, sizeof o);
    o.version = 1;
    o.v1.name = name;
    o.v1.package = "qti.aisw";
    o.v1.type = type;
    o.v1.n_params = (uint32_t)np;
    o.v1.params = ps;
    o.v1.n_in = (uint32_t)nin;
    o.v1.in = in;
    o.v1.n_out = 1;
    o.v1.out = out;
    const qnn_fn *f = L->rt->lib->fn;
    qnn_clear_log();
    qnn_err e = f->backend_validate_op_config(L->rt->be, o);
    if (e) {
        L->st = kiln_error_wrap(qnn_fail(L->rt->lib, "backendValidateOpConfig", e),
                                "node '%s' (%s) as QNN %s", L->node ? L->node->name : "?",
                                L->node ? kiln_op_name(L->node->op) : "?", type);
        if (L->why)
            snprintf(L->why, L->why_cap, "QNN backendValidateOpConfig rejects %s (code %u)", type,
                     QNN_CODE(e));
        return;
    }
    if (L->graph && (e = f->graph_add_node(L->graph, o)))
        L->st = kiln_error_wrap(qnn_fail(L->rt->lib, "graphAddNode", e), "node '%s' as QNN %s",
                                L->node ? L->node->name : "?", type);
}

/* One-input, one-output op with no parameters. */
static qnn_tensor op1(lower *L, const char *type, qnn_tensor a, int rank, const uint32_t *dims) {
    qnn_tensor o = nat(L, rank, dims);
    op(L, type, NULL, 0, &a, 1, &o);
    return o;
}

static qnn_tensor op2(lower *L, const char *type, qnn_tensor a, qnn_tensor b, int rank,
                      const uint32_t *dims) {
    qnn_tensor o = nat(L, rank, dims);
    qnn_tensor in[2] = {a, b};
    op(L, type, NULL, 0, in, 2, &o);
    return o;
}

static qnn_param p_scalar(const char *name, uint32_t dtype, uint64_t bits) {
    qnn_param p;
    memset(&p, 0, sizeof p);
    p.type = QNN_PARAM_SCALAR;
    p.name = name;
    p.scalar.dtype = dtype;
    p.scalar.u64 = bits;
    return p;
}

static qnn_param p_u32(const char *name, uint32_t v) {
    return p_scalar(name, QNN_UINT32, v);
}

static qnn_param p_f32(const char *name, float v) {
    qnn_param p = p_scalar(name, QNN_FLOAT32, 0);
    p.scalar.f32 = v;
    return p;
}

/* A tensor parameter of n uint32/int32 values, shaped [rows, n / rows]. */
static qnn_param p_ints(lower *L, const char *name, uint32_t dtype, const void *vals, int n,
                        int rows) {
    qnn_param p;
    memset(&p, 0, sizeof p);
    p.type = QNN_PARAM_TENSOR;
    p.name = name;
    void *data = kiln_malloc(sizeof(uint32_t) * (size_t)n);
    if (data) memcpy(data, vals, sizeof(uint32_t) * (size_t)n);
    uint32_t dims[2] = {(uint32_t)rows, (uint32_t)(n / rows)};
    p.tensor = stat(L, NULL, dtype, rows > 1 ? 2 : 1, rows > 1 ? dims : dims + 1, data);
    if (!data && !L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    return p;
}

static qnn_tensor reshape(lower *L, qnn_tensor a, int rank, const uint32_t *dims) {
    qnn_tensor o = nat_as(L, a, rank, dims);
    op(L, "Reshape", NULL, 0, &a, 1, &o);
    return o;
}

static qnn_tensor transpose(lower *L, qnn_tensor a, const uint32_t *perm) {
    uint32_t rank = a.v2.rank, dims[QNN_MAX_RANK];
    for (uint32_t i = 0; i < rank; i++)
        dims[i] = a.v2.dims ? a.v2.dims[perm[i]] : 0;
    qnn_tensor o = nat_as(L, a, (int)rank, dims);
    qnn_param p = p_ints(L, "perm", QNN_UINT32, perm, (int)rank, 1);
    op(L, "Transpose", &p, 1, &a, 1, &o);
    return o;
}

/* a[..., begin:end] on the last axis. */
static qnn_tensor slice_last(lower *L, qnn_tensor a, uint32_t begin, uint32_t end) {
    uint32_t rank = a.v2.rank, dims[QNN_MAX_RANK];
    int32_t ranges[QNN_MAX_RANK * 3];
    for (uint32_t i = 0; i < rank; i++) {
        dims[i] = a.v2.dims[i];
        ranges[3 * i] = 0, ranges[3 * i + 1] = (int32_t)dims[i], ranges[3 * i + 2] = 1;
    }
    ranges[3 * (rank - 1)] = (int32_t)begin, ranges[3 * (rank - 1) + 1] = (int32_t)end;
    dims[rank - 1] = end - begin;
    qnn_tensor o = nat_as(L, a, (int)rank, dims);
    qnn_param p = p_ints(L, "ranges", QNN_INT32, ranges, (int)rank * 3, (int)rank);
    op(L, "StridedSlice", &p, 1, &a, 1, &o);
    return o;
}

static qnn_tensor concat(lower *L, qnn_tensor a, qnn_tensor b, uint32_t axis) {
    uint32_t rank = a.v2.rank, dims[QNN_MAX_RANK];
    for (uint32_t i = 0; i < rank; i++)
        dims[i] = a.v2.dims[i];
    dims[axis] += b.v2.dims[axis];
    qnn_tensor o = nat_as(L, a, (int)rank, dims);
    qnn_tensor in[2] = {a, b};
    qnn_param p = p_u32("axis", axis);
    op(L, "Concat", &p, 1, in, 2, &o);
    return o;
}

static qnn_tensor cast(lower *L, qnn_tensor a, qnn_tensor o) {
    op(L, "Cast", NULL, 0, &a, 1, &o);
    return o;
}

/* A float tensor into the graph's type (Quantize to L->cur in a
 * fixed-point graph: a Cast at a fixed graph's edge is not Quantize), and
 * back out as float o. */
static qnn_tensor from_float(lower *L, qnn_tensor a, int rank, const uint32_t *dims) {
    qnn_tensor o = nat(L, rank, dims);
    op(L, L->fixed ? "Quantize" : "Cast", NULL, 0, &a, 1, &o);
    return o;
}

static void to_float(lower *L, qnn_tensor a, qnn_tensor o) {
    int fixed = a.v2.dtype == QNN_UFIXED16 || a.v2.dtype == QNN_UFIXED8;
    op(L, fixed ? "Dequantize" : "Cast", NULL, 0, &a, 1, &o);
}

/* ---- graph inputs and outputs ---------------------------------------------- */

static qnn_tensor io(lower *L, qnn_role role, int32_t value, const char *name, uint32_t dtype,
                     int rank, const uint32_t *dims) {
    uint32_t type = role >= QNN_OUT_VALUE ? QNN_TENSOR_APP_READ : QNN_TENSOR_APP_WRITE;
    qnn_tensor t = mk(L, name, type, dtype, rank, dims, NULL, 0);
    if (L->st) return t;
    qnn_graph_info *gi = L->gi;
    if (gi->n_io == L->cap_io) {
        int cap = L->cap_io ? 2 * L->cap_io : 32;
        qnn_io *n = kiln_realloc(gi->io, (size_t)cap * sizeof *n);
        if (!n) {
            L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            return t;
        }
        gi->io = n, L->cap_io = cap;
    }
    qnn_io *x = &gi->io[gi->n_io];
    memset(x, 0, sizeof *x);
    x->role = role;
    x->value = value;
    x->id = t.v2.id;
    x->dtype = dtype;
    x->rank = (uint32_t)rank;
    memcpy(x->dims, dims, sizeof(uint32_t) * (size_t)rank);
    if (!(x->name = kiln_strdup(name))) {
        L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return t;
    }
    gi->n_io++;
    return t;
}

static int value_dims(const kiln_value *v, uint32_t *dims) {
    for (int i = 0; i < v->ndim; i++)
        dims[i] = (uint32_t)v->ne[i];
    return v->ndim;
}

/* ---- fixed-point encodings (qnn:quant=16a8w, 8a8w) ---------------------------- */

static qnn_quant enc_so(double scale, int32_t offset) {
    qnn_quant q;
    memset(&q, 0, sizeof q);
    q.definition = QNN_DEFINED;
    q.encoding = QNN_ENC_SCALE_OFFSET;
    qnn_scale_offset so = {.scale = (float)(scale > 1e-9 ? scale : 1e-9), .offset = offset};
    memcpy(q.params, &so, sizeof so);
    return q;
}

/* [lo, hi], widened to hold 0 exactly, over the activation type's codes:
 * real = (code + offset) * scale. */
static qnn_quant enc_range(const lower *L, double lo, double hi) {
    lo = fmin(lo, 0), hi = fmax(hi, 0);
    double scale = (hi - lo) / L->qmax;
    if (!(scale > 1e-9)) scale = 1e-9;
    return enc_so(scale, (int32_t)lrint(lo / scale));
}

/* [-m, m] with offset -(qmax + 1) / 2: what a MatMul's second input (the
 * cache's K and V) must have. */
static qnn_quant enc_sym(const lower *L, double m) {
    double half = (L->qmax + 1) / 2.0;
    return enc_so(fabs(m) / (half - 1), -(int32_t)half);
}

static qnn_scale_offset enc_of(qnn_tensor t) {
    qnn_scale_offset so;
    memcpy(&so, t.v2.quant.params, sizeof so);
    return so;
}

/* The largest magnitude t's encoding holds. */
static double enc_absmax(const lower *L, qnn_tensor t) {
    qnn_scale_offset so = enc_of(t);
    return fmax(fabs((double)so.offset * so.scale), fabs(((double)L->qmax + so.offset) * so.scale));
}

static int enc_same(qnn_tensor a, qnn_quant q) {
    qnn_scale_offset x = enc_of(a), y;
    memcpy(&y, q.params, sizeof y);
    return x.scale == y.scale && x.offset == y.offset;
}

/* The calibrated range of `name` (a value's name, or "scores:<attention
 * node>"), from the compiler's calibration run (compiler/calibrate.c),
 * widened on both sides by RANGE_HEADROOM of its width: a text the
 * calibration never saw goes past its ranges, and clipping costs far more
 * than a coarser step (stories260K, 16a8w: a story's attention scores
 * 6 past the built-in text's top sent one decode step to cosine 0.75). */
#define RANGE_HEADROOM 0.25
static int range_of(lower *L, const char *name, double *lo, double *hi) {
    const kiln_meta *n = L->range_names, *r = L->ranges;
    for (uint32_t i = 0; n && r && i < n->n && 2 * i + 1 < r->n; i++)
        if (!strcmp(n->sa[i], name)) {
            double w = r->fa[2 * i + 1] - r->fa[2 * i];
            *lo = r->fa[2 * i] - RANGE_HEADROOM * w, *hi = r->fa[2 * i + 1] + RANGE_HEADROOM * w;
            return 1;
        }
    if (!L->st)
        L->st =
            kiln_error(KILN_ERR_INVALID_ARG,
                       "QNN quant=%s: no calibrated range for '%s' (node '%s'): the "
                       "calibration run did not reach it",
                       qnn_quant_name(L->q ? L->q->mode : 0), name, L->node ? L->node->name : "?");
    *lo = -1, *hi = 1;
    return 0;
}

/* Value vi's encoding, from its calibrated range; symmetric when a
 * kv_store writes it to the cache (attention reads it back as K or V). */
static qnn_quant value_enc(lower *L, int32_t vi) {
    double lo, hi;
    range_of(L, L->g->values[vi].name, &lo, &hi);
    for (int i = 0; i < L->g->n_nodes; i++)
        if (L->g->nodes[i].op == KILN_OP_KV_STORE && L->g->nodes[i].in[1] == vi)
            return enc_sym(L, fmax(fabs(lo), fabs(hi)));
    return enc_range(L, lo, hi);
}

/* The encoding of the cache state value vi (or a view of it) inside the
 * graph: that of the rows its kv_store writes. */
static qnn_quant state_enc(lower *L, int32_t vi) {
    int32_t ref = L->g->values[vi].ref;
    for (int i = 0; i < L->g->n_nodes; i++) {
        const kiln_node *n = &L->g->nodes[i];
        if (n->op == KILN_OP_KV_STORE && L->g->values[n->in[0]].ref == ref)
            return value_enc(L, n->in[1]);
    }
    if (!L->st)
        L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: no kv_store writes the cache '%s'",
                           L->g->values[vi].name);
    return L->cur;
}

/* n floats as a static fixed-point tensor of the activation type, with
 * the encoding of their own range (NULL data: validation). */
static qnn_tensor static_fixed_in(lower *L, const char *name, int rank, const uint32_t *dims,
                                  const float *x, size_t n, double lo, double hi) {
    qnn_quant q = enc_range(L, lo, hi);
    qnn_scale_offset so;
    memcpy(&so, q.params, sizeof so);
    void *d = x ? kiln_malloc(n * dsize(L->adt)) : NULL;
    if (x && !d) {
        if (!L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return (qnn_tensor){0};
    }
    for (size_t i = 0; d && i < n; i++) {
        double c = fmin(fmax(rint(x[i] / so.scale) - so.offset, 0), L->qmax);
        if (L->adt == QNN_UFIXED16)
            ((uint16_t *)d)[i] = (uint16_t)c;
        else
            ((uint8_t *)d)[i] = (uint8_t)c;
    }
    if (d) keep(L, d);
    return mkq(L, name, QNN_TENSOR_STATIC, L->adt, rank, dims, d, n * dsize(L->adt), &q);
}

static qnn_tensor static_fixed(lower *L, const char *name, int rank, const uint32_t *dims,
                               const float *x, size_t n) {
    float lo = 0, hi = 0; /* (plain compares: gcc 12's aarch64 vectorizer fails on fmin here) */
    for (size_t i = 0; x && i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    return static_fixed_in(L, name, rank, dims, x, n, lo, hi);
}

/* t in encoding q (a Convert when t has another). */
static qnn_tensor requant(lower *L, qnn_tensor t, qnn_quant q) {
    if (!L->fixed || L->st || enc_same(t, q)) return t;
    qnn_tensor o = mkq(L, NULL, QNN_TENSOR_NATIVE, L->adt, (int)t.v2.rank, t.v2.dims, NULL, 0, &q);
    op(L, "Convert", NULL, 0, &t, 1, &o);
    return o;
}

/* A constant as fp16, or in a fixed-point graph of the activation type with
 * its own range (validation needs no data). */
static qnn_tensor const_in(lower *L, int32_t vi) {
    const kiln_value *v = &L->g->values[vi];
    const kiln_const *c = &L->m->consts[v->ref];
    uint32_t dims[KILN_MAX_DIMS];
    int rank = value_dims(v, dims);
    int64_t K = c->ne[c->ndim - 1], rows = (int64_t)(kiln_shape_elems(c->ndim, c->ne) / K);
    float *f = NULL;
    if (L->graph) {
        size_t stride = kiln_dtype_row_bytes(c->dtype, K);
        f = kiln_malloc(sizeof(float) * (size_t)(rows * K));
        kiln_status st = f && stride ? KILN_OK : kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int64_t r = 0; r < rows && !st; r++)
            st = kiln_weight_dequant(c->dtype, c->data, stride, r, 0, K, f + r * K);
        if (st) {
            kiln_free(f);
            if (!L->st) L->st = kiln_error_wrap(st, "constant '%s' to fp16", c->name);
            return (qnn_tensor){0};
        }
    }
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "c.%s", c->name);
    if (L->fixed) {
        qnn_tensor t = static_fixed(L, name, rank, dims, f, (size_t)(rows * K));
        kiln_free(f);
        return t;
    }
    uint16_t *h = f ? kiln_malloc(sizeof(uint16_t) * (size_t)(rows * K)) : NULL;
    for (int64_t i = 0; h && i < rows * K; i++)
        h[i] = kiln_f32_to_f16(f[i]);
    kiln_free(f);
    if (L->graph && !h) {
        if (!L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return (qnn_tensor){0};
    }
    return stat(L, name, QNN_FLOAT16, rank, dims, h);
}

/* Value vi as an fp16 tensor (token ids stay int32): lowered already, a
 * constant, or a graph input (cast from f32; in a fixed-point graph
 * quantized, unless the reader wants fp16). */
static qnn_tensor get_raw(lower *L, int32_t vi, int want_f16) {
    qval *q = &L->vals[vi];
    if (q->kind == 1) return q->t;
    const kiln_value *v = &L->g->values[vi];
    if (q->kind == 2 || v->kind == KILN_VAL_STATE || v->kind == KILN_VAL_VIEW) {
        if (!L->st)
            L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: node '%s' reads the state '%s' directly",
                               L->node->name, v->name);
        return q->t;
    }
    uint32_t dims[KILN_MAX_DIMS];
    int rank = value_dims(v, dims);
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "in.%s", v->name);
    if (v->kind == KILN_VAL_CONST) {
        q->t = const_in(L, vi);
    } else if (v->dtype == KILN_I32) {
        q->t = io(L, QNN_IN_VALUE, vi, name, QNN_INT32, rank, dims);
    } else if (v->dtype == KILN_F32) {
        qnn_tensor t = io(L, QNN_IN_VALUE, vi, name, QNN_FLOAT32, rank, dims);
        qnn_quant keep_cur = L->cur;
        if (L->fixed && !want_f16) {
            L->cur = value_enc(L, vi);
            q->t = from_float(L, t, rank, dims);
        } else {
            q->t = cast(L, t, mk(L, NULL, QNN_TENSOR_NATIVE, QNN_FLOAT16, rank, dims, NULL, 0));
        }
        L->cur = keep_cur;
    } else if (!L->st) {
        L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: value '%s' is %s (f32 or i32 expected)",
                           v->name, kiln_dtype_name(v->dtype));
    }
    q->kind = L->st ? 0 : 1;
    return q->t;
}

static int is_fixed(qnn_tensor t) {
    return t.v2.dtype == QNN_UFIXED16 || t.v2.dtype == QNN_UFIXED8;
}

/* Value vi as its reader computes: in a fixed-point graph, the activation
 * type (with the value's encoding), or fp16 for a residual add; converted
 * once when it was made in the other. */
static qnn_tensor get_in(lower *L, int32_t vi, int want_f16) {
    qnn_tensor t = get_raw(L, vi, want_f16);
    if (!L->fixed_graph || L->st || t.v2.dtype == QNN_INT32 || is_fixed(t) != want_f16) return t;
    qval *q = &L->vals[vi];
    if (q->has_alt) return q->alt;
    qnn_quant keep_cur = L->cur;
    qnn_tensor o;
    if (want_f16) {
        o = mk(L, NULL, QNN_TENSOR_NATIVE, QNN_FLOAT16, (int)t.v2.rank, t.v2.dims, NULL, 0);
        op(L, "Dequantize", NULL, 0, &t, 1, &o);
    } else {
        L->cur = value_enc(L, vi);
        o = nat(L, (int)t.v2.rank, t.v2.dims);
        op(L, "Quantize", NULL, 0, &t, 1, &o);
    }
    L->cur = keep_cur;
    q->alt = o, q->has_alt = !L->st;
    return o;
}

static qnn_tensor get(lower *L, int32_t vi) {
    return get_in(L, vi, L->fixed_graph && !L->fixed);
}

/* qnn:perturb=NODE: node L->node's output t [.., W] with every 8th column
 * negated (cosine ignores scale; a sign pattern it cannot), else t. */
static qnn_tensor perturbed(lower *L, qnn_tensor t, int rank, const uint32_t *dims) {
    if (!L->q || !L->q->perturb || !L->node || strcmp(L->node->name, L->q->perturb) || L->st)
        return t;
    uint32_t W = dims[rank - 1];
    float *sign = L->graph ? kiln_malloc(sizeof(float) * W) : NULL;
    if (L->graph && !sign) {
        L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return t;
    }
    for (uint32_t j = 0; sign && j < W; j++)
        sign[j] = j % 8 == 3 ? -1.0f : 1.0f;
    qnn_tensor st;
    if (is_fixed(t)) {
        st = static_fixed(L, NULL, 1, &W, sign, W);
        L->cur = enc_sym(L, enc_absmax(L, t));
        kiln_free(sign);
    } else {
        uint16_t *h = sign ? kiln_malloc(sizeof(uint16_t) * W) : NULL;
        if (sign && !h) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (uint32_t j = 0; h && j < W; j++)
            h[j] = kiln_f32_to_f16(sign[j]);
        kiln_free(sign);
        st = stat(L, NULL, QNN_FLOAT16, 1, &W, h);
    }
    qnn_tensor o = is_fixed(t) || !L->fixed_graph
                       ? nat(L, rank, dims)
                       : mk(L, NULL, QNN_TENSOR_NATIVE, QNN_FLOAT16, rank, dims, NULL, 0);
    qnn_tensor in[2] = {t, st};
    op(L, "ElementWiseMultiply", NULL, 0, in, 2, &o);
    return o;
}

static void set(lower *L, int32_t vi, qnn_tensor t) {
    L->vals[vi].kind = 1;
    uint32_t dims[KILN_MAX_DIMS];
    int rank = value_dims(&L->g->values[vi], dims);
    L->vals[vi].t = perturbed(L, t, rank, dims);
}

static qnn_tensor positions(lower *L) {
    if (!L->have_positions) {
        uint32_t d[1] = {L->Tm};
        L->positions = io(L, QNN_IN_POSITIONS, -1, "in.positions", QNN_INT32, 1, d);
        L->have_positions = !L->st;
    }
    return L->positions;
}

static qnn_tensor mask(lower *L, int with_new) {
    if (with_new ? !L->have_mask_new : !L->have_mask_all) {
        uint32_t d[2] = {L->Tm, L->S + (with_new ? L->Tm : 0)};
        qnn_tensor t = io(L, with_new ? QNN_IN_MASK_NEW : QNN_IN_MASK_ALL, -1,
                          with_new ? "in.mask_new" : "in.mask_all", QNN_FLOAT16, 2, d);
        if (L->fixed) { /* {0, MASK_OFF} saturates to {0, -100}: enough, as the scores'
                         * encoding ends 16 below the lowest calibrated score */
            qnn_quant keep_cur = L->cur;
            L->cur = enc_range(L, -100.0, 0.0);
            t = from_float(L, t, 2, d);
            L->cur = keep_cur;
        }
        if (with_new)
            L->mask_new = t, L->have_mask_new = !L->st;
        else
            L->mask_all = t, L->have_mask_all = !L->st;
    }
    return with_new ? L->mask_new : L->mask_all;
}

static qnn_tensor state_in_float(lower *L, int32_t vi);

/* A state (or a view of it) read whole, as fp16 [S, W]; in a fixed-point
 * graph quantized inside it, symmetric (the cache itself stays fp16). */
static qnn_tensor state_in(lower *L, int32_t vi) {
    qnn_tensor t = state_in_float(L, vi);
    if (!L->fixed || L->st) return t;
    qnn_quant keep_cur = L->cur;
    L->cur = state_enc(L, vi);
    t = from_float(L, t, 2, t.v2.dims);
    L->cur = keep_cur;
    return t;
}

static qnn_tensor state_in_float(lower *L, int32_t vi) {
    const kiln_value *v = &L->g->values[vi];
    const kiln_state *s = &L->m->states[v->ref];
    uint32_t dims[2] = {(uint32_t)s->ne[0], (uint32_t)s->ne[1]};
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "in.%s", s->name);
    for (int i = 0; i < L->gi->n_io; i++) /* once per state and graph */
        if (L->gi->io[i].role == QNN_IN_STATE && !strcmp(L->gi->io[i].name, name)) {
            qnn_tensor t;
            memset(&t, 0, sizeof t);
            t.version = 2;
            t.v2.id = L->gi->io[i].id;
            t.v2.name = L->gi->io[i].name;
            t.v2.type = QNN_TENSOR_APP_WRITE;
            t.v2.dtype = L->gi->io[i].dtype;
            t.v2.quant.definition = t.v2.quant.encoding = QNN_QUANT_NONE;
            t.v2.rank = 2;
            t.v2.dims = L->gi->io[i].dims;
            return s->dtype == KILN_F16 || L->fixed ? t : cast(L, t, nat(L, 2, dims));
        }
    qnn_tensor t =
        io(L, QNN_IN_STATE, vi, name, s->dtype == KILN_F16 ? QNN_FLOAT16 : QNN_FLOAT32, 2, dims);
    return s->dtype == KILN_F16 || L->fixed ? t : cast(L, t, nat(L, 2, dims));
}

/* ---- weight-only quantized matmuls (qnn:quant=) ----------------------------- */

static const char *const QUANT_NAMES[QNN_QUANT_COUNT] = {"fp16", "w8", "16a8w", "8a8w", "16a4w"};

int qnn_quant_from_name(const char *name) {
    for (int i = 1; i < QNN_QUANT_COUNT; i++)
        if (!strcmp(name, QUANT_NAMES[i])) return i;
    return -1;
}

const char *qnn_quant_name(int mode) {
    return mode > 0 && mode < QNN_QUANT_COUNT ? QUANT_NAMES[mode] : QUANT_NAMES[0];
}

int qnn_quant_fixed(int mode) {
    return mode == QNN_QUANT_16A8W || mode == QNN_QUANT_8A8W || mode == QNN_QUANT_16A4W;
}

const char *qnn_quant_weights(int mode) {
    return mode == QNN_QUANT_FP16 ? "fp16, converted from the checkpoint"
           : mode == QNN_QUANT_16A4W
               ? "matmul weights int4 per output channel, symmetric (int8 containers); norm "
                 "weights, the embedding table and rope tables in the activations' type"
           : qnn_quant_fixed(mode)
               ? "matmul weights int8 per output channel, symmetric; norm weights, the embedding "
                 "table and rope tables in the activations' type"
               : "matmul weights int8 per output channel, symmetric";
}

const char *qnn_quant_activations(int mode) {
    return mode == QNN_QUANT_16A8W || mode == QNN_QUANT_16A4W
               ? "uint16 per tensor, asymmetric, from calibration ranges"
           : mode == QNN_QUANT_8A8W ? "uint8 per tensor, asymmetric, from calibration ranges"
                                    : "fp16 (weight-only quantization)";
}

const char *qnn_quant_kv(int mode) {
    return qnn_quant_fixed(mode) ? "fp16 in the cache; quantized symmetric inside each graph "
                                   "(the range of the rows stored)"
                                 : "fp16 (not quantized)";
}

/* An int4 row's scale: of the clipping points mx * f / 7 (f from 1 down to
 * 0.5), the one with the least squared error. With 15 levels, clipping the
 * few largest weights buys a finer step for all the others (stories260K,
 * 16a4w: perplexity ... against absmax's ...). */
static float int4_scale(const float *row, int64_t K, float mx) {
    float best = mx / 7.0f;
    double best_err = INFINITY;
    for (int i = 0; i <= 10; i++) {
        float sc = mx * (1.0f - 0.05f * (float)i) / 7.0f;
        double err = 0;
        for (int64_t k = 0; k < K; k++) {
            float d = row[k] - fminf(fmaxf(rintf(row[k] / sc), -7.0f), 7.0f) * sc;
            err += (double)d * d;
        }
        if (err < best_err) best_err = err, best = sc;
    }
    return best;
}

/* Weight value vi [N, K] as a static int8 tensor, one symmetric scale per
 * output row (its largest magnitude maps to 127). */
static qnn_tensor weight_q(lower *L, int32_t vi) {
    const kiln_value *v = &L->g->values[vi];
    const kiln_const *c = &L->m->consts[v->ref];
    uint32_t dims[2] = {(uint32_t)v->ne[0], (uint32_t)v->ne[1]};
    int64_t N = dims[0], K = dims[1];
    qnn_scale_offset *so = keep(L, kiln_calloc((size_t)N, sizeof *so));
    int8_t *q = L->graph ? kiln_malloc((size_t)(N * K)) : NULL;
    float *row = L->graph ? kiln_malloc(sizeof(float) * (size_t)K) : NULL;
    if (L->graph && (!q || !row) && !L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (L->st) {
        kiln_free(q);
        kiln_free(row);
        return (qnn_tensor){0};
    }
    size_t stride = kiln_dtype_row_bytes(c->dtype, K);
    /* 16a4w: int4 values (-7..7) in int8 containers */
    int four = L->q && L->q->mode == QNN_QUANT_16A4W;
    float top = four ? 7.0f : 127.0f;
    for (int64_t r = 0; r < N; r++) {
        so[r].scale = 1.0f; /* validation: no data, any valid scale */
        if (!L->graph) continue;
        kiln_status st = kiln_weight_dequant(c->dtype, c->data, stride, r, 0, K, row);
        if (st) {
            kiln_free(q);
            kiln_free(row);
            L->st = kiln_error_wrap(st, "constant '%s' to int8", c->name);
            return (qnn_tensor){0};
        }
        float mx = 0;
        for (int64_t k = 0; k < K; k++)
            mx = fmaxf(mx, fabsf(row[k]));
        if (mx > 0) so[r].scale = four ? int4_scale(row, K, mx) : mx / top;
        for (int64_t k = 0; k < K; k++)
            q[r * K + k] = (int8_t)fminf(fmaxf(rintf(row[k] / so[r].scale), -top), top);
    }
    kiln_free(row);
    if (q) keep(L, q);
    qnn_quant qp;
    memset(&qp, 0, sizeof qp);
    qp.definition = QNN_DEFINED;
    if (four) {
        float *sc = keep(L, kiln_malloc(sizeof(float) * (size_t)N));
        int32_t *off = keep(L, kiln_calloc((size_t)N, sizeof(int32_t)));
        if (L->st) return (qnn_tensor){0};
        for (int64_t r = 0; r < N; r++)
            sc[r] = so[r].scale;
        qnn_bw_axis bw = {.bitwidth = 4, .axis = 0, .n = (uint32_t)N, .scales = sc, .offsets = off};
        qp.encoding = QNN_ENC_BW_AXIS;
        memcpy(qp.params, &bw, sizeof bw);
    } else {
        qnn_axis_scale_offset ax = {.axis = 0, .n = (uint32_t)N, .so = so};
        qp.encoding = QNN_ENC_AXIS;
        memcpy(qp.params, &ax, sizeof ax);
    }
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "q.%s", c->name);
    return mkq(L, name, QNN_TENSOR_STATIC, QNN_SFIXED8, 2, dims, q, (uint64_t)(N * K), &qp);
}

/* A matmul's output: fp16 activations times the weight, which is fp16, or
 * int8 per output channel when the graph is quantized (qnn:quant=w8). A
 * weight QNN refuses quantized is an error naming it. */
static qnn_tensor matmul(lower *L, const kiln_node *n) {
    const kiln_value *xv = &L->g->values[n->in[0]], *wv = &L->g->values[n->in[1]];
    uint32_t dims[2] = {(uint32_t)xv->ne[0], (uint32_t)wv->ne[0]};
    qnn_tensor in[2] = {get(L, n->in[0]), {0}};
    int quant = L->q && L->q->mode != QNN_QUANT_FP16 && wv->kind == KILN_VAL_CONST;
    in[1] = quant ? weight_q(L, n->in[1]) : get(L, n->in[1]);
    qnn_tensor o = nat(L, 2, dims);
    op(L, "FullyConnected", NULL, 0, in, 2, &o);
    if (quant && L->st)
        L->st = kiln_error_wrap(L->st, "QNN quant=%s: weight '%s' of node '%s'",
                                qnn_quant_name(L->q->mode), wv->name, n->name);
    else if (quant)
        L->q->n_quantized++;
    return o;
}

/* ---- ops ------------------------------------------------------------------------ */

static void lower_rms_norm(lower *L, const kiln_node *n) {
    const kiln_value *xv = &L->g->values[n->in[0]];
    uint32_t T = (uint32_t)xv->ne[0], D = (uint32_t)xv->ne[1];
    uint32_t G = (uint32_t)L->g->values[n->in[1]].ne[0];
    qnn_tensor x = get(L, n->in[0]), w = get(L, n->in[1]);
    uint32_t d2[2] = {T, D}, d3[3] = {T, D / G, G};
    int grouped = G != D;
    if (grouped) x = reshape(L, x, 3, d3);
    qnn_tensor o = nat(L, grouped ? 3 : 2, grouped ? d3 : d2);
    uint32_t axis = grouped ? 2 : 1;
    qnn_param ps[2] = {p_f32("epsilon", n->fattr[0]), p_ints(L, "axes", QNN_UINT32, &axis, 1, 1)};
    qnn_tensor in[2] = {x, w};
    op(L, "RmsNorm", ps, 2, in, 2, &o);
    set(L, n->out, grouped ? reshape(L, o, 2, d2) : o);
}

static void lower_fc(lower *L, const kiln_node *n, int32_t out_value) {
    set(L, out_value, matmul(L, n));
}

static void lower_eltwise(lower *L, const kiln_node *n) {
    const kiln_value *ov = &L->g->values[n->out];
    uint32_t dims[KILN_MAX_DIMS];
    int rank = value_dims(ov, dims);
    if (L->fixed_graph && n->op == KILN_OP_ADD) {
        /* the residual stream stays fp16 in a fixed-point graph: its range
         * holds a model's few huge activations (SmolLM2: to 22550), where
         * a per-tensor uint16 step is 0.35, and each layer's add would
         * round every small value again */
        qnn_tensor in[2] = {get_in(L, n->in[0], 1), get_in(L, n->in[1], 1)};
        qnn_tensor o = mk(L, NULL, QNN_TENSOR_NATIVE, QNN_FLOAT16, rank, dims, NULL, 0);
        op(L, "ElementWiseAdd", NULL, 0, in, 2, &o);
        set(L, n->out, o);
        return;
    }
    qnn_tensor a = get(L, n->in[0]);
    qnn_quant out_enc = L->cur;
    if (L->fixed) L->cur = enc_range(L, 0, 1); /* a sigmoid's */
    if (n->op == KILN_OP_SILU) {
        qnn_tensor s = op1(L, "Sigmoid", a, rank, dims);
        L->cur = out_enc;
        set(L, n->out, op2(L, "ElementWiseMultiply", a, s, rank, dims));
        return;
    }
    L->cur = out_enc;
    if (n->op == KILN_OP_SOFTMAX) {
        qnn_tensor o = nat(L, rank, dims);
        qnn_param ps[2] = {p_u32("axis", (uint32_t)rank - 1), p_f32("beta", 1.0f)};
        op(L, "Softmax", ps, 2, &a, 1, &o);
        set(L, n->out, o);
        return;
    }
    qnn_tensor b = get(L, n->in[1]);
    if (n->op == KILN_OP_SWIGLU) {
        if (L->fixed) L->cur = enc_range(L, 0, 1);
        qnn_tensor s = op1(L, "Sigmoid", a, rank, dims);
        if (L->fixed) /* silu(g) lies in [-0.2785, max(g, 0)] */
            L->cur = enc_range(L, -0.2785, enc_absmax(L, a));
        qnn_tensor g = op2(L, "ElementWiseMultiply", a, s, rank, dims);
        L->cur = out_enc;
        set(L, n->out, op2(L, "ElementWiseMultiply", g, b, rank, dims));
        return;
    }
    set(L, n->out,
        op2(L, n->op == KILN_OP_ADD ? "ElementWiseAdd" : "ElementWiseMultiply", a, b, rank, dims));
}

static void lower_get_rows(lower *L, const kiln_node *n) {
    const kiln_value *ov = &L->g->values[n->out];
    uint32_t dims[2] = {(uint32_t)ov->ne[0], (uint32_t)ov->ne[1]};
    qnn_tensor in[2] = {get(L, n->in[0]), get(L, n->in[1])};
    qnn_tensor o = nat_as(L, in[0], 2, dims); /* fixed point: the table's encoding */
    qnn_param p = p_scalar("axis", QNN_INT32, 0);
    op(L, "Gather", &p, 1, in, 2, &o);
    set(L, n->out, o);
}

/* A static table [dims] of values in [-1, 1] (taken: freed here): fp16, or
 * the activation type over [-1, 1]. */
static qnn_tensor table(lower *L, const char *name, int rank, const uint32_t *dims, float *x) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (L->fixed) {
        qnn_tensor t = static_fixed_in(L, name, rank, dims, x, n, -1, 1);
        kiln_free(x);
        return t;
    }
    uint16_t *h = x ? kiln_malloc(sizeof(uint16_t) * n) : NULL;
    if (x && !h && !L->st) L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; h && i < n; i++)
        h[i] = kiln_f32_to_f16(x[i]);
    kiln_free(x);
    return stat(L, name, QNN_FLOAT16, rank, dims, h);
}

/* cos and sin of (pos + i) * freq_j for this node's rope, gathered for the
 * call's positions: [Tm, n_rot/2], shared by the graph's ropes alike. */
static rope_tab *rope_tables(lower *L, const kiln_node *n) {
    int n_rot = n->iattr[KILN_ROPE_N_ROT], freqs = n->n_in > 2 ? n->in[2] : -1;
    for (int i = 0; i < L->n_ropes; i++)
        if (L->ropes[i].theta == n->fattr[0] && L->ropes[i].n_rot == n_rot &&
            L->ropes[i].freqs == freqs)
            return &L->ropes[i];
    if (L->n_ropes == 4) {
        L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: more than 4 kinds of rope in one graph");
        return NULL;
    }
    rope_tab *r = &L->ropes[L->n_ropes];
    r->theta = n->fattr[0], r->n_rot = n_rot, r->freqs = freqs;
    uint32_t half = (uint32_t)n_rot / 2, S = L->S ? L->S : 1;
    float *c = NULL, *s = NULL;
    if (L->graph) {
        const float *ff = NULL;
        if (freqs >= 0) {
            const kiln_const *fc = &L->m->consts[L->g->values[freqs].ref];
            if (fc->dtype != KILN_F32) {
                L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: rope factors '%s' are not f32",
                                   fc->name);
                return NULL;
            }
            ff = fc->data;
        }
        c = kiln_malloc(sizeof(float) * S * half);
        s = kiln_malloc(sizeof(float) * S * half);
        if (!c || !s) {
            kiln_free(c);
            kiln_free(s);
            L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (uint32_t p = 0; p < S; p++)
            for (uint32_t j = 0; j < half; j++) { /* as ref computes it */
                float freq = 1.0f / powf(r->theta, (float)(2 * j) / (float)n_rot);
                if (ff) freq /= ff[j];
                float val = (float)p * freq;
                c[p * half + j] = cosf(val);
                s[p * half + j] = sinf(val);
            }
    }
    char name[64];
    uint32_t td[2] = {S, half}, gd[2] = {L->Tm, half};
    snprintf(name, sizeof name, "rope%d.cos", L->n_ropes);
    qnn_tensor ct = table(L, name, 2, td, c);
    snprintf(name, sizeof name, "rope%d.sin", L->n_ropes);
    qnn_tensor st = table(L, name, 2, td, s);
    qnn_tensor pos = positions(L);
    qnn_param p = p_scalar("axis", QNN_INT32, 0);
    qnn_tensor in[2] = {ct, pos};
    r->cos = nat_as(L, ct, 2, gd);
    op(L, "Gather", &p, 1, in, 2, &r->cos);
    in[0] = st;
    r->sin = nat_as(L, st, 2, gd);
    op(L, "Gather", &p, 1, in, 2, &r->sin);
    if (L->st) return NULL;
    L->n_ropes++;
    return r;
}

/* r's tables at [T, nh, half]: table + zeros of that shape (one broadcast
 * per graph and head count instead of four per rope). */
static int rope_expanded(lower *L, rope_tab *r, uint32_t T, uint32_t nh, uint32_t half,
                         qnn_tensor *c, qnn_tensor *s, qnn_tensor *ns) {
    for (int i = 0; i < r->n_exp; i++)
        if (r->eheads[i] == nh) {
            *c = r->ecos[i], *s = r->esin[i], *ns = r->ensin[i];
            return 1;
        }
    if (r->n_exp == 2) return 0;
    uint32_t dh[3] = {T, nh, half}, dc[3] = {T, 1, half};
    float *z = L->graph ? kiln_calloc((size_t)T * nh * half, sizeof(float)) : NULL;
    if (L->graph && !z) {
        L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return 0;
    }
    qnn_tensor zero = table(L, NULL, 3, dh, z);
    qnn_quant keep_cur = L->cur;
    if (L->fixed) L->cur = enc_range(L, -1, 1);
    int i = r->n_exp++;
    r->eheads[i] = nh;
    r->ecos[i] = op2(L, "ElementWiseAdd", reshape(L, r->cos, 3, dc), zero, 3, dh);
    r->esin[i] = op2(L, "ElementWiseAdd", reshape(L, r->sin, 3, dc), zero, 3, dh);
    r->ensin[i] = op2(L, "ElementWiseSubtract", zero, r->esin[i], 3, dh);
    L->cur = keep_cur;
    *c = r->ecos[i], *s = r->esin[i], *ns = r->ensin[i];
    return 1;
}

static void lower_rope(lower *L, const kiln_node *n) {
    const kiln_value *xv = &L->g->values[n->in[0]];
    uint32_t T = (uint32_t)xv->ne[0], W = (uint32_t)xv->ne[1];
    uint32_t nh = (uint32_t)n->iattr[KILN_ROPE_N_HEAD], hd = (uint32_t)n->iattr[KILN_ROPE_HEAD_DIM];
    uint32_t nrot = (uint32_t)n->iattr[KILN_ROPE_N_ROT], half = nrot / 2;
    int neox = n->iattr[KILN_ROPE_MODE] == KILN_ROPE_NEOX;
    qnn_tensor x = get(L, n->in[0]);
    rope_tab *r = rope_tables(L, n);
    if (!r) return;
    uint32_t d3[3] = {T, nh, hd}, dr[3] = {T, nh, nrot};
    x = reshape(L, x, 3, d3);
    qnn_tensor xr = nrot < hd ? slice_last(L, x, 0, nrot) : x;
    /* The pairs: neox (j, j + half) on [T, nh, nrot]; else (2j, 2j + 1), the
     * rows seen as [T, nh, half, 2]. a = x1 cos - x2 sin, b = x2 cos + x1 sin,
     * with the tables at the heads' shape and a as x1 cos + x2 (-sin): on
     * the emulated HTP a multiply by a table broadcast over the heads, and a
     * subtract, each cost more than the layer's matmuls (bench/RESULTS.md);
     * broadcast tables only past two head counts in a graph. */
    uint32_t R = neox ? 3 : 4, lo = neox ? half : 1, hi = neox ? nrot : 2;
    uint32_t dh[4] = {T, nh, half, 1}, dc[4] = {T, 1, half, 1}, d4[4] = {T, nh, half, 2};
    qnn_tensor xs = neox ? xr : reshape(L, xr, 4, d4);
    qnn_tensor c, s, ns, x1 = slice_last(L, xs, 0, lo), x2 = slice_last(L, xs, lo, hi);
    /* fixed point: each product within max |x|, a and b within the output's range */
    qnn_quant out_enc = L->cur;
    if (L->fixed) L->cur = enc_sym(L, enc_absmax(L, x));
    qnn_tensor p[4];
    const char *a_op = "ElementWiseAdd";
    if (rope_expanded(L, r, T, nh, half, &c, &s, &ns)) {
        if (!neox) c = reshape(L, c, 4, dh), s = reshape(L, s, 4, dh), ns = reshape(L, ns, 4, dh);
        p[1] = op2(L, "ElementWiseMultiply", x2, ns, R, dh);
    } else {
        c = reshape(L, r->cos, R, dc), s = reshape(L, r->sin, R, dc);
        p[1] = op2(L, "ElementWiseMultiply", x2, s, R, dh);
        a_op = "ElementWiseSubtract";
    }
    p[0] = op2(L, "ElementWiseMultiply", x1, c, R, dh);
    p[2] = op2(L, "ElementWiseMultiply", x2, c, R, dh);
    p[3] = op2(L, "ElementWiseMultiply", x1, s, R, dh);
    L->cur = out_enc;
    qnn_tensor a = op2(L, a_op, p[0], p[1], R, dh), b = op2(L, "ElementWiseAdd", p[2], p[3], R, dh);
    qnn_tensor rot = concat(L, a, b, R - 1);
    if (!neox) rot = reshape(L, rot, 3, dr);
    if (nrot < hd) rot = concat(L, rot, requant(L, slice_last(L, x, nrot, hd), out_enc), 2);
    uint32_t d2[2] = {T, W};
    set(L, n->out, reshape(L, rot, 2, d2));
}

static void lower_kv_store(lower *L, const kiln_node *n) {
    const kiln_value *cv = &L->g->values[n->in[0]], *xv = &L->g->values[n->in[1]];
    const kiln_state *s = &L->m->states[cv->ref];
    uint32_t dims[2] = {(uint32_t)xv->ne[0], (uint32_t)xv->ne[1]};
    qnn_tensor x = perturbed(L, get(L, n->in[1]), 2, dims);
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "out.%s", n->name);
    qnn_tensor o = io(L, QNN_OUT_KV_ROWS, n->out, name,
                      s->dtype == KILN_F16 ? QNN_FLOAT16 : QNN_FLOAT32, 2, dims);
    to_float(L, x, o);
    L->vals[n->out].kind = 2;
    L->vals[n->out].t = x;
    L->vals[n->out].state = n->in[0];
}

static void lower_attention(lower *L, const kiln_node *n) {
    const kiln_value *qv = &L->g->values[n->in[0]];
    uint32_t T = (uint32_t)qv->ne[0];
    uint32_t H = (uint32_t)n->iattr[KILN_ATTN_N_HEAD], KV = (uint32_t)n->iattr[KILN_ATTN_N_KV_HEAD];
    uint32_t hd = (uint32_t)n->iattr[KILN_ATTN_HEAD_DIM], G = H / KV;
    qval *kq = &L->vals[n->in[1]], *vq = &L->vals[n->in[2]];
    if ((kq->kind == 2) != (vq->kind == 2)) {
        L->st = kiln_error(KILN_ERR_UNSUPPORTED,
                           "QNN: attention '%s' has one kv_store in its graph and one outside",
                           n->name);
        return;
    }
    int with_new = kq->kind == 2;
    qnn_tensor K, V;
    qnn_quant out_enc = L->cur;
    if (with_new) {
        qnn_tensor kc = state_in(L, kq->state), vc = state_in(L, vq->state);
        K = concat(L, kc, requant(L, kq->t, kc.v2.quant), 0);
        V = concat(L, vc, requant(L, vq->t, vc.v2.quant), 0);
    } else {
        K = state_in(L, n->in[1]);
        V = state_in(L, n->in[2]);
    }
    uint32_t Lr = L->S + (with_new ? T : 0);
    qnn_tensor q = get(L, n->in[0]);
    uint32_t one = 1, dq[2] = {T, H * hd};
    float inv = 1.0f / n->fattr[0];
    qnn_tensor scale;
    double s_lo = 0, s_hi = 0; /* fixed point: the scores' calibrated range */
    if (L->fixed) {
        char nm[KILN_NAME_MAX + 8];
        snprintf(nm, sizeof nm, "scores:%s", n->name);
        range_of(L, nm, &s_lo, &s_hi);
        scale = static_fixed_in(L, NULL, 1, &one, L->graph ? &inv : NULL, 1, 0, inv);
        qnn_scale_offset qs = enc_of(q);
        L->cur = enc_range(L, qs.offset * qs.scale * inv, (L->qmax + qs.offset) * qs.scale * inv);
    } else {
        uint16_t *sc = L->graph ? kiln_malloc(sizeof(uint16_t)) : NULL;
        if (L->graph && !sc) {
            L->st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            return;
        }
        if (sc) *sc = kiln_f32_to_f16(inv);
        scale = stat(L, NULL, QNN_FLOAT16, 1, &one, sc);
    }
    q = op2(L, "ElementWiseMultiply", q, scale, 2, dq);
    uint32_t dq4[4] = {T, KV, G, hd}, dq3[3] = {KV, G * T, hd}, pq[4] = {1, 2, 0, 3};
    q = reshape(L, transpose(L, reshape(L, q, 4, dq4), pq), 3, dq3);
    uint32_t dk3[3] = {Lr, KV, hd}, pk[3] = {1, 0, 2};
    qnn_tensor k = transpose(L, reshape(L, K, 3, dk3), pk); /* [KV, Lr, hd] */
    qnn_tensor v = transpose(L, reshape(L, V, 3, dk3), pk);
    uint32_t ds[3] = {KV, G * T, Lr}, ds4[4] = {KV, G, T, Lr};
    /* fixed point: the scores over their range; with the mask, 16 below its
     * low end, where a masked score ends (exp(-16) is nothing next to 1) */
    if (L->fixed) L->cur = enc_range(L, s_lo, s_hi);
    qnn_tensor s = nat(L, 3, ds);
    qnn_param tp[2] = {p_scalar("transpose_in0", QNN_BOOL8, 0),
                       p_scalar("transpose_in1", QNN_BOOL8, 1)};
    qnn_tensor in[2] = {q, k};
    op(L, "MatMul", tp, 2, in, 2, &s);
    qnn_tensor m4 = mask(L, with_new), s4r = reshape(L, s, 4, ds4);
    if (L->fixed) L->cur = enc_range(L, s_lo - 16, s_hi);
    qnn_tensor s4 = op2(L, "ElementWiseAdd", s4r, m4, 4, ds4);
    if (L->fixed) L->cur = enc_range(L, 0, 1);
    qnn_tensor pr = nat(L, 4, ds4);
    qnn_param sp[2] = {p_u32("axis", 3), p_f32("beta", 1.0f)};
    op(L, "Softmax", sp, 2, &s4, 1, &pr);
    uint32_t do3[3] = {KV, G * T, hd}, do4[4] = {KV, G, T, hd}, po[4] = {2, 0, 1, 3};
    L->cur = out_enc;
    qnn_tensor o = nat(L, 3, do3);
    in[0] = reshape(L, pr, 3, ds), in[1] = v;
    op(L, "MatMul", NULL, 0, in, 2, &o);
    o = transpose(L, reshape(L, o, 4, do4), po); /* [T, KV, G, hd] */
    set(L, n->out, reshape(L, o, 2, dq));
}

static void lower_logits(lower *L, const kiln_node *n) {
    const kiln_value *xv = &L->g->values[n->in[0]], *wv = &L->g->values[n->in[1]];
    uint32_t dims[2] = {(uint32_t)xv->ne[0], (uint32_t)wv->ne[0]};
    qnn_tensor y = perturbed(L, matmul(L, n), 2, dims);
    char name[KILN_NAME_MAX + 8];
    snprintf(name, sizeof name, "out.%s", L->g->values[n->out].name);
    to_float(L, y, io(L, QNN_OUT_LOGITS, n->out, name, QNN_FLOAT32, 2, dims));
    L->gi->flag_value = n->n_in > 2 ? n->in[2] : -1;
    L->vals[n->out].kind = 3; /* a graph output already */
}

/* A matmul or gated product whose output's range (with headroom) spans
 * more than QNN_OUTLIER_RANGE computes in fp16 inside a fixed-point graph: a
 * model's few huge activations set such ranges (SmolLM2's blk.11 ffn_down
 * writes 22500 into the residual at the first token; blk.28 and 29 take it
 * out), and on one uint16 step of 0.5 every other token's output rounds to
 * noise (--check on the held-out text: decode's blk.11.ffn_down at own
 * cosine 0.976). Its weights stay quantized, as with quant=w8. */
static int outlier(lower *L, const kiln_node *n) {
    if (n->op != KILN_OP_MATMUL && n->op != KILN_OP_SWIGLU && n->op != KILN_OP_SILU &&
        n->op != KILN_OP_MUL)
        return 0;
    double lo, hi;
    return range_of(L, L->g->values[n->out].name, &lo, &hi) && hi - lo > QNN_OUTLIER_RANGE;
}

static void lower_node(lower *L, const kiln_node *n) {
    L->node = n;
    /* fixed point: what the node makes gets its output's calibrated range,
     * unless the lowering says otherwise (a kv_store's output is the cache) */
    L->fixed = L->fixed_graph && !outlier(L, n);
    if (L->fixed_graph && !L->fixed && L->q) {
        size_t len = strlen(L->q->outliers);
        if (len + strlen(n->name) + 6 < sizeof L->q->outliers)
            snprintf(L->q->outliers + len, sizeof L->q->outliers - len, "%s%s", len ? ", " : "",
                     n->name);
        else if (!strstr(L->q->outliers, ", ..."))
            snprintf(L->q->outliers + len, sizeof L->q->outliers - len, ", ...");
        L->q->n_outliers++;
    }
    if (L->fixed && n->op != KILN_OP_KV_STORE) L->cur = value_enc(L, n->out);
    switch ((kiln_op)n->op) {
    case KILN_OP_GET_ROWS:
        lower_get_rows(L, n);
        break;
    case KILN_OP_RMS_NORM:
        lower_rms_norm(L, n);
        break;
    case KILN_OP_MATMUL:
        lower_fc(L, n, n->out);
        break;
    case KILN_OP_ADD:
    case KILN_OP_MUL:
    case KILN_OP_SILU:
    case KILN_OP_SWIGLU:
    case KILN_OP_SOFTMAX:
        lower_eltwise(L, n);
        break;
    case KILN_OP_ROPE:
        lower_rope(L, n);
        break;
    case KILN_OP_KV_STORE:
        lower_kv_store(L, n);
        break;
    case KILN_OP_ATTENTION:
        lower_attention(L, n);
        break;
    case KILN_OP_LOGITS:
        lower_logits(L, n);
        break;
    default:
        if (!L->st)
            L->st = kiln_error(KILN_ERR_UNSUPPORTED, "QNN: no lowering for op %s (node '%s')",
                               kiln_op_name(n->op), n->name);
    }
}

static kiln_status lower_init(lower *L, const qnn_rt *rt, const kiln_module *m, const kiln_graph *g,
                              qnn_graph_info *gi) {
    memset(L, 0, sizeof *L);
    L->rt = rt, L->m = m, L->g = g, L->gi = gi;
    L->Tm = (uint32_t)g->max_tokens;
    L->S = m->n_states ? (uint32_t)m->states[0].ne[0] : 0;
    gi->pos_value = gi->flag_value = -1;
    gi->rows = L->Tm, gi->ctx_rows = L->S;
    if (!(L->vals = kiln_calloc((size_t)g->n_values, sizeof *L->vals)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

/* The method input "pos" the partition's position-dependent nodes read. */
static void find_pos(lower *L, const kiln_node *n) {
    int slot = n->op == KILN_OP_ROPE        ? 1
               : n->op == KILN_OP_KV_STORE  ? 2
               : n->op == KILN_OP_ATTENTION ? 3
                                            : -1;
    if (slot >= 0 && slot < n->n_in && L->gi->pos_value < 0) L->gi->pos_value = n->in[slot];
}

kiln_status qnn_lower_partition(const qnn_rt *rt, qnn_handle ctx, const kiln_module *m,
                                const kiln_graph *g, const kiln_partition *p, const char *name,
                                qnn_quant_opts *q, qnn_graph_info *gi) {
    memset(gi, 0, sizeof *gi);
    lower L;
    kiln_status st = lower_init(&L, rt, m, g, gi);
    L.q = q;
    if (q && qnn_quant_fixed(q->mode)) {
        L.fixed_graph = L.fixed = 1;
        L.adt = q->mode == QNN_QUANT_8A8W ? QNN_UFIXED8 : QNN_UFIXED16;
        L.qmax = q->mode == QNN_QUANT_8A8W ? 255 : 65535;
        L.cur = enc_range(&L, -1, 1);
        L.range_names = kiln_meta_find(m, "calibration.names");
        L.ranges = kiln_meta_find(m, "calibration.ranges");
        if (L.range_names && L.range_names->type != KILN_META_STR_ARRAY) L.range_names = NULL;
        if (L.ranges && L.ranges->type != KILN_META_FLOAT_ARRAY) L.ranges = NULL;
    }
    if (!st && !(gi->name = kiln_strdup(name))) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (st) {
        kiln_free(L.vals);
        return st;
    }
    const qnn_fn *f = rt->lib->fn;
    qnn_htp_graph_config prec = {.option = QNN_HTP_GRAPH_PRECISION,
                                 .precision = QNN_HTP_PRECISION_FLOAT16};
    qnn_config gc = {.option = 0, .custom = &prec};
    const qnn_config *gcs[2] = {&gc, NULL};
    qnn_err e = f->graph_create(ctx, name, gcs, &L.graph);
    if (e) L.st = qnn_fail(rt->lib, "graphCreate", e);
    for (int i = p->first; i < p->first + p->n_nodes && !L.st; i++) {
        find_pos(&L, &g->nodes[i]);
        lower_node(&L, &g->nodes[i]);
    }
    /* The partition's outputs leave as f32 (KV rows and logits already did). */
    for (int j = 0; j < p->n_out && !L.st; j++) {
        int32_t vi = p->out[j];
        if (L.vals[vi].kind != 1) continue;
        const kiln_value *v = &g->values[vi];
        uint32_t dims[KILN_MAX_DIMS];
        int rank = value_dims(v, dims);
        char nm[KILN_NAME_MAX + 8];
        snprintf(nm, sizeof nm, "out.%s", v->name);
        L.node = NULL;
        to_float(&L, L.vals[vi].t, io(&L, QNN_OUT_VALUE, vi, nm, QNN_FLOAT32, rank, dims));
    }
    if (!L.st && (e = f->graph_finalize(L.graph, NULL, NULL)))
        L.st = kiln_error_wrap(qnn_fail(rt->lib, "graphFinalize", e), "graph '%s'", name);
    drop_keep(&L);
    kiln_free(L.vals);
    if (L.st) qnn_graph_info_free(gi);
    gi->graph = L.st ? NULL : L.graph;
    return L.st;
}

int qnn_validate_node(const qnn_rt *rt, const kiln_module *m, const kiln_graph *g,
                      const kiln_node *n, char *why, size_t cap) {
    qnn_graph_info gi;
    memset(&gi, 0, sizeof gi);
    lower L;
    if (lower_init(&L, rt, m, g, &gi)) return 0;
    L.why = why, L.why_cap = cap;
    why[0] = 0;
    lower_node(&L, n);
    int ok = !L.st;
    if (!ok && !why[0]) snprintf(why, cap, "%s", kiln_last_error());
    drop_keep(&L);
    kiln_free(L.vals);
    qnn_graph_info_free(&gi);
    return ok;
}

void qnn_graph_info_free(qnn_graph_info *gi) {
    for (int i = 0; i < gi->n_io; i++)
        kiln_free(gi->io[i].name);
    kiln_free(gi->io);
    kiln_free(gi->name);
    memset(gi, 0, sizeof *gi);
}
