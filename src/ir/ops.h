/* ops.h: the op table. One row per op: name, arity, shape rule, scratch
 * rule, and cost rule (FLOPs and bytes moved), used alike by the compiler,
 * the verifier, the runtime and the profiler. */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "ir/graph.h"

typedef enum kiln_op {
    KILN_OP_GET_ROWS = 0, /* (table [V,D], ids i32 [T]) -> [T,D]: embedding lookup */
    KILN_OP_RMS_NORM = 1, /* (x [T,D], w [G]) -> [T,D]; G divides D: per-group (per-head) norm */
    KILN_OP_MATMUL = 2,   /* (x [T,K], w [N,K]) -> [T,N] */
    KILN_OP_ADD = 3,      /* (a [T,N], b [T,N] or [N]) -> [T,N] */
    KILN_OP_MUL = 4,      /* (a [T,N], b [T,N] or [N]) -> [T,N] */
    KILN_OP_SILU = 5,     /* (x) -> x * sigmoid(x) */
    KILN_OP_SWIGLU = 6,   /* (gate [T,N], up [T,N]) -> silu(gate) * up */
    KILN_OP_SOFTMAX = 7,  /* (x [T,N]) -> softmax of each row */
    KILN_OP_ROPE = 8,     /* (x [T,H*hd], pos i32 [1] [, freq_factors [n_rot/2]]) -> rotated */
    KILN_OP_KV_STORE =
        9, /* (cache [S,W] state, x [T,W], pos [1]) -> view of cache, rows pos.. written */
    KILN_OP_ATTENTION =
        10, /* (q [T,H*hd], k cache [S,KV*hd], v cache, pos [1]) -> [T,H*hd], causal, GQA */
    KILN_OP_LOGITS =
        11, /* (x [T,D], w [V,D] [, all i32 [1]]) -> [all ? T : 1, V]; no flag: T rows */
    KILN_OP_LAYER_NORM = 12, /* (x [T,D], w [D], b [D]) -> (x - mean) / sqrt(var + eps) * w + b */
    KILN_OP_GELU = 13,       /* (x) -> gelu(x): erf, or the tanh form when iattr[0] is 1 */
    KILN_OP_MERGE_ROWS = 14, /* (x [T,D], src [T,D], mask i32 [T]) -> row t of src where
                                mask[t] != 0, else of x: visual tokens into a text sequence */
    KILN_OP_EMBED_BAG = 15,  /* (table [V,D], ids i32 [T,K], w f32 [T,K]) -> [T,D]:
                                row t = sum_k w[t,k] table[ids[t,k]] (interpolated embeddings) */
    KILN_OP_FOLD_ROWS = 16,  /* (x [T,D]) -> [T/r, D*r], r = iattr[0]: r rows side by side */
    KILN_OP_ROPE_MULTI = 17, /* (x [T,H*hd], pos i32 [T,S]) -> rotated, neox pairs, each
                                frequency turned by one of S position streams (below) */
    KILN_OP_ATTENTION_FULL = 18, /* (q [T,H*hd], k [T,KV*hd], v [T,KV*hd]) -> [T,H*hd]: every
                                    row sees every row (not causal, no cache), GQA */
    KILN_OP_COUNT
} kiln_op;

/* Attribute slots. Float attributes: fattr[0] is rms_norm's epsilon,
 * rope's theta (frequency base), attention's score divisor (sqrt(head_dim)). */
enum {
    KILN_ROPE_N_HEAD = 0,
    KILN_ROPE_HEAD_DIM = 1,
    KILN_ROPE_MODE = 2,
    KILN_ROPE_N_ROT = 3,
    KILN_ATTN_N_HEAD = 0,
    KILN_ATTN_N_KV_HEAD = 1,
    KILN_ATTN_HEAD_DIM = 2,
    KILN_GELU_TANH = 0,    /* gelu: 1 = tanh approximation (gelu_pytorch_tanh) */
    KILN_FOLD_ROWS_R = 0,  /* fold_rows: rows per output row */
    KILN_ROPEM_N_HEAD = 0, /* rope_multi: like rope's first two slots, then */
    KILN_ROPEM_HEAD_DIM = 1,
    KILN_ROPEM_LAYOUT = 2,  /* KILN_ROPEM_INTERLEAVED or KILN_ROPEM_AXIAL */
    KILN_ROPEM_SECTION = 3, /* slots 3, 4, 5: interleaved's frequencies per stream (t, h, w) */
};
/* rope_multi layouts. Frequency j of the hd/2 turns pairs (j, j + hd/2).
 * INTERLEAVED (Qwen3-VL's M-RoPE, streams t, h, w): frequency theta^(-2j/hd),
 * position of stream h when j % 3 == 1 and j < 3 sec_h, of w when j % 3 == 2
 * and j < 3 sec_w, else of t. AXIAL (Qwen3-VL's vision rope, streams row,
 * col): j < hd/4 turns by the row at theta^(-4j/hd), the rest by the column
 * at theta^(-4(j - hd/4)/hd). */
enum { KILN_ROPEM_INTERLEAVED = 0, KILN_ROPEM_AXIAL = 1 };
enum { KILN_ROPE_ADJACENT = 0, KILN_ROPE_NEOX = 1 }; /* pairs (2i, 2i+1) | (i, i + n_rot/2) */

/* A tensor as kernels see it: a view, no ownership. */
typedef struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS];
    void *data; /* NULL at compile time */
} kiln_tensor;

typedef struct kiln_op_info {
    const char *name;
    int min_in, max_in;
    /* Output dtype and shape from the inputs. With in[i]->data NULL (compile
     * time) a data-dependent size takes its upper bound. Returns 0, or -1
     * with a message in err naming the rule. */
    int (*shape)(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out, char *err,
                 size_t cap);
    /* Scratch bytes the kernel needs (may be NULL = none). */
    uint64_t (*scratch)(const kiln_node *n, const kiln_tensor *const *in);
    /* FLOPs for the actual shapes. Bytes moved = inputs + output (computed
     * by kiln_op_bytes), except where an op reads less than its inputs. */
    double (*flops)(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out);
} kiln_op_info;

/* A value's dtype and (largest) shape as a tensor view without data. */
kiln_tensor kiln_value_view(const kiln_value *v);

/* Scratch a matmul (or logits) node gets for its activations in a backend's
 * own format: KILN_ACT_BLOCK_BYTES for every 32 values of each of `rows`
 * rows of k values (k rounded up to 32), at least. A backend's quantized
 * activation blocks must fit: e.g. 32 int8 + two f32 = 40 bytes. */
#define KILN_ACT_BLOCK_BYTES 40
uint64_t kiln_matmul_act_bytes(int64_t rows, int64_t k);

const kiln_op_info *kiln_op_get(int op); /* NULL when out of range */
const char *kiln_op_name(int op);        /* "?" when out of range */
int kiln_op_from_name(const char *name); /* -1 when unknown */
double kiln_op_bytes(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out);
uint64_t kiln_tensor_bytes(const kiln_tensor *t);

/* The input of a node that is a weight matrix (matmul, logits: 1;
 * get_rows: 0), or -1. */
static inline int kiln_node_weight_slot(const kiln_node *n) {
    return n->op == KILN_OP_GET_ROWS                              ? 0
           : (n->op == KILN_OP_MATMUL || n->op == KILN_OP_LOGITS) ? 1
                                                                  : -1;
}

#endif /* KILN_OPS_H */
