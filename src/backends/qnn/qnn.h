/* qnn.h: the QNN HTP delegate's parts (inside the library only).
 *   qnn_lib.c    finds and loads libQnnHtp.so once per process; handles;
 *                errors and log lines
 *   qnn_lower.c  Kiln nodes -> QNN ops (fp16 on the HTP), one graph per
 *                partition, and validation of single nodes
 *   qnn_blob.c   the blob: Kiln's table of graphs and their tensors, then
 *                QNN's context binary
 *   qnn_delegate.c  the kiln_backend: configure, supports, prepare, load,
 *                execute */
#ifndef KILN_QNN_H
#define KILN_QNN_H

#include "backends/backend.h"
#include "backends/qnn/qnn_abi.h"

/* The oldest core API whose layouts qnn_abi.h declares. */
#define QNN_CORE_MAJOR 2
#define QNN_CORE_MINOR_MIN 40

typedef struct qnn_lib {
    void *dl;
    const qnn_fn *fn;
    qnn_api_version api;
    const char *build_id; /* e.g. "v2.51.0.260219..." */
    char dir[4096];
} qnn_lib;

/* Loads the library once (thread-safe); errors name the folders tried. */
kiln_status qnn_lib_get(const qnn_lib **out);
/* A failed QNN call as a Kiln error: the call, the code, QNN's message and
 * the last error line it logged. */
kiln_status qnn_fail(const qnn_lib *l, const char *call, qnn_err e);
void qnn_clear_log(void);
/* Standard output away from the HTP emulator's banner: around calls that
 * may start it (qnn_lib.c says why). */
int qnn_quiet_begin(void);
void qnn_quiet_end(int saved);

/* The handles one compile or one open program uses. */
typedef struct qnn_rt {
    const qnn_lib *lib;
    qnn_handle log, be, dev;
    int soc;
} qnn_rt;
kiln_status qnn_rt_open(qnn_rt *rt, int soc);
void qnn_rt_close(qnn_rt *rt); /* safe on a zeroed or half-made rt */

int qnn_soc_from_name(const char *name); /* -1 when unknown */
const char *qnn_soc_name(int id);        /* NULL when unknown */
const char *qnn_soc_unit(int id);        /* "HTP v75 fp16 (SM8650)" */
void qnn_soc_names(char *buf, size_t cap);
#define QNN_SOC_DEFAULT 57 /* SM8650, Hexagon v75 */

/* ---- a graph's tensors as the host binds them ----------------------------- */

/* What a graph input or output is to the executor. */
typedef enum qnn_role {
    QNN_IN_VALUE = 0,     /* a Kiln value: activations f32 [Tm, X], token ids i32 [Tm] */
    QNN_IN_STATE = 1,     /* a state (the KV cache), read whole: [S, W] */
    QNN_IN_POSITIONS = 2, /* i32 [Tm]: pos + i, clamped to S - 1 */
    QNN_IN_MASK_NEW = 3,  /* f16 [Tm, S + Tm]: cache rows < pos, then causal over the new rows */
    QNN_IN_MASK_ALL = 4,  /* f16 [Tm, S]: rows <= pos + i (the cache already written) */
    QNN_OUT_VALUE = 5,    /* a Kiln value, f32 [Tm, X] */
    QNN_OUT_KV_ROWS = 6,  /* the rows a kv_store writes, [Tm, W] in the cache's dtype */
    QNN_OUT_LOGITS = 7,   /* f32 [Tm, V]: the real rows (or the last) are kept */
    QNN_ROLE_COUNT
} qnn_role;

#define QNN_MAX_RANK 4
typedef struct qnn_io {
    qnn_role role;
    int32_t value; /* the Kiln value (for KV rows: the kv_store's view) */
    uint32_t id;   /* the tensor id QNN assigned */
    uint32_t dtype, rank;
    uint32_t dims[QNN_MAX_RANK];
    char *name;
} qnn_io;

typedef struct qnn_graph_info {
    char *name;
    int method, part;
    int32_t pos_value, flag_value; /* -1: none */
    uint32_t rows;                 /* Tm: the static row count */
    uint32_t ctx_rows;             /* S: the cache rows (masks, positions) */
    int n_io;
    qnn_io *io;
    qnn_handle graph; /* at run time */
} qnn_graph_info;

void qnn_graph_info_free(qnn_graph_info *gi);

/* ---- lowering (qnn_lower.c) ---------------------------------------------- */

/* How a graph's matmul weights are stored (qnn:quant=): fp16, or int8 per
 * output channel, symmetric, the activations staying fp16 (weight-only
 * quantization). The value is stored in the program's metadata. */
enum {
    QNN_QUANT_FP16 = 0,
    QNN_QUANT_W8 = 1,
    /* all fixed point: activations uint16 (or uint8) per tensor, encodings
     * from the compiler's calibration ranges; weights int8 per channel */
    QNN_QUANT_16A8W = 2,
    QNN_QUANT_8A8W = 3,
    QNN_QUANT_16A4W = 4, /* ... weights int4 per channel (in int8 containers) */
    QNN_QUANT_COUNT
};
int qnn_quant_from_name(const char *name); /* -1 when unknown */
const char *qnn_quant_name(int mode);
const char *qnn_quant_weights(int mode);     /* what `kiln info` says of the weights */
const char *qnn_quant_activations(int mode); /* ... of the activations */
const char *qnn_quant_kv(int mode);          /* ... of the KV cache */
int qnn_quant_fixed(int mode);               /* 1: activations in fixed point */
/* In a fixed-point graph, a matmul or gated product whose calibrated range
 * (with its headroom) is wider than this computes in fp16 (qnn_lower.c). */
#define QNN_OUTLIER_RANGE 2048.0
typedef struct qnn_quant_opts {
    int mode;
    /* qnn:perturb=NODE, a test switch: that node's lowering is made wrong
     * (every 8th column of its output negated inside the graph), so the
     * debugger has a wrong lowering to find; NULL: none */
    const char *perturb;
    int n_quantized; /* out, counted per graph */
    /* out, per graph: nodes of a fixed-point graph computing in fp16 for
     * their outlier ranges, and the first ones' names */
    int n_outliers;
    char outliers[256];
} qnn_quant_opts;

/* Builds partition p of method g into a new QNN graph of ctx (already made
 * with rt), filling gi (gi->graph: the finalized graph). Every op is
 * validated first: a rejected one is an error naming the node, the QNN op
 * and the code. */
kiln_status qnn_lower_partition(const qnn_rt *rt, qnn_handle ctx, const kiln_module *m,
                                const kiln_graph *g, const kiln_partition *p, const char *name,
                                qnn_quant_opts *q, qnn_graph_info *gi);
/* Whether node n alone lowers to ops QNN validates; on no, why (the QNN op
 * and code) in why. */
int qnn_validate_node(const qnn_rt *rt, const kiln_module *m, const kiln_graph *g,
                      const kiln_node *n, char *why, size_t cap);

/* ---- the blob (qnn_blob.c) ------------------------------------------------ */

typedef struct qnn_blob_view {
    int soc;
    int n_graphs;
    qnn_graph_info *graphs;
    const uint8_t *binary; /* QNN's context binary, borrowed from the blob */
    uint64_t binary_size;
} qnn_blob_view;

/* Serializes the graph table and the context binary. */
kiln_status qnn_blob_write(int soc, const qnn_graph_info *graphs, int n_graphs, const void *binary,
                           uint64_t binary_size, uint8_t **out, uint64_t *out_size);
/* Parses a blob (bounds-checked); graphs are owned by the view. */
kiln_status qnn_blob_read(const uint8_t *data, uint64_t size, qnn_blob_view *v);
void qnn_blob_view_free(qnn_blob_view *v);

#endif /* KILN_QNN_H */
