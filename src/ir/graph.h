/* graph.h: the graph IR shared by the compiler and the runtime.
 *
 * A module is what a program file holds: metadata, a tokenizer blob,
 * constants (stored once), state buffers, and methods. A method is a graph:
 * a table of values and a list of nodes in execution order, each node with
 * one output value. The compiler builds modules; the reader rebuilds the same
 * structures from a file, and the verifier checks them in both places.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdint.h>

#include "base/base.h"

#define KILN_MAX_INPUTS 4
#define KILN_MAX_IATTR 8
#define KILN_MAX_FATTR 4
#define KILN_NAME_MAX 256
/* Most values or nodes in one method. The verifier's memory-plan check is
 * quadratic in values; this bound keeps opening any file well under a
 * second (a 100-layer Llama has about 3000 values). */
#define KILN_MAX_GRAPH 32768

/* Where a value's memory comes from. */
typedef enum kiln_value_kind {
    KILN_VAL_INPUT = 0, /* bound by the caller, kept in the session's input block */
    KILN_VAL_CONST = 1, /* a constant of the module (ref = its index) */
    KILN_VAL_STATE = 2, /* a state buffer of the session (ref = its index) */
    KILN_VAL_ACT = 3,   /* produced by a node, lives in the arena */
    KILN_VAL_VIEW = 4,  /* produced by a node that writes into a state (ref = state index) */
} kiln_value_kind;

typedef struct kiln_value {
    char *name;
    kiln_value_kind kind;
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS]; /* shape, outermost first; dynamic dims hold their maximum */
    uint32_t dyn_mask;         /* inputs only: bit d set = dim d is the token count */
    int32_t ref;               /* const or state index for CONST / STATE / VIEW */
    uint64_t offset;           /* arena offset for ACT (0 for other kinds) */
} kiln_value;

typedef struct kiln_node {
    char *name; /* stable, e.g. "blk.3.attn_q" */
    int op;     /* kiln_op */
    int n_in;
    int32_t in[KILN_MAX_INPUTS]; /* value indices */
    int32_t out;                 /* value index */
    int32_t iattr[KILN_MAX_IATTR];
    float fattr[KILN_MAX_FATTR];
    int backend; /* index into the module's backend list */
} kiln_node;

/* A partition: a maximal run of consecutive nodes of one method on one
 * backend, stored in the program. Its boundary inputs are the values its
 * nodes read that come from outside it (method inputs, states, earlier
 * nodes; constants are not listed: a delegate has them in its blob); its
 * boundary outputs are the values its nodes make that a later node or the
 * method's outputs read, and the state views it writes. A delegate's blob
 * knows the partition by `graph`. */
typedef struct kiln_partition {
    int backend;        /* index into the module's backend list */
    int first, n_nodes; /* nodes [first, first + n_nodes) */
    int n_in, n_out;
    int32_t *in, *out; /* value indices, ascending */
    int blob;          /* index into the module's blobs, or -1 */
    char *graph;       /* the blob's name for it; NULL when there is no blob */
} kiln_partition;

typedef struct kiln_graph {
    char *name;
    int max_tokens; /* the largest token count a call may bind */
    int n_values, n_nodes, n_inputs, n_outputs;
    kiln_value *values;
    kiln_node *nodes;
    int32_t *inputs, *outputs; /* value indices */
    uint64_t arena_bytes;      /* activations + scratch, planned */
    uint64_t scratch_offset;   /* node scratch lives at [scratch_offset, arena_bytes) */
    int n_parts;               /* every node lies in exactly one, in order */
    kiln_partition *parts;
    int cap_values, cap_nodes; /* builder capacity */
} kiln_graph;

typedef struct kiln_const {
    char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS];
    uint64_t nbytes;
    const void
        *data; /* borrowed: the checkpoint's map at compile time, the program's at run time */
    uint64_t file_offset; /* offset inside the weights section (reader/writer) */
    void *owned;          /* data the module owns (converted weights), freed with it */
} kiln_const;

typedef struct kiln_state {
    char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS];
    uint64_t nbytes;
} kiln_state;

/* Metadata: typed key/value pairs. */
typedef enum kiln_meta_type {
    KILN_META_INT = 1,
    KILN_META_FLOAT = 2,
    KILN_META_STR = 3,
    KILN_META_INT_ARRAY = 4,
    KILN_META_FLOAT_ARRAY = 5,
    KILN_META_STR_ARRAY = 6,
} kiln_meta_type;

typedef struct kiln_meta {
    char *key;
    kiln_meta_type type;
    int64_t i;
    double f;
    char *s;
    uint32_t n; /* array length */
    int64_t *ia;
    double *fa;
    char **sa;
} kiln_meta;

/* What a backend's prepare made for the program (a delegate's compiled
 * graphs: QNN's context binary), stored in the blobs section. The program's
 * methods and weights checksums are recorded beside it when it is written,
 * and compared when it is loaded: a blob never runs with another program. */
#define KILN_MAX_BLOB_PROPS 16
typedef struct kiln_blob {
    int backend;
    const uint8_t *data; /* borrowed (the program's map) or `owned` */
    uint64_t size;
    void *owned;
    uint32_t methods_crc, weights_crc; /* read from the file; the writer fills its own */
    uint32_t crc;                      /* of the payload: read from the file, checked at load */
    int n_props;                       /* what it was prepared for: "soc" = "SM8650" ... */
    char *prop_key[KILN_MAX_BLOB_PROPS], *prop_val[KILN_MAX_BLOB_PROPS];
} kiln_blob;

typedef struct kiln_module {
    int n_meta, n_consts, n_states, n_methods, n_backends, n_blobs;
    kiln_meta *meta;
    kiln_const *consts;
    kiln_state *states;
    kiln_graph *methods;
    char **backends; /* names; node.backend indexes this */
    kiln_blob *blobs;
    uint8_t *tokenizer; /* serialized tokenizer (see src/llm/tokenizer.c), owned */
    uint64_t tokenizer_len;
    int cap_meta, cap_consts, cap_states;
} kiln_module;

/* ---- building ----------------------------------------------------------- */
void kiln_module_free(kiln_module *m);
kiln_status kiln_module_add_backend(kiln_module *m, const char *name, int *index);
kiln_status kiln_meta_set_int(kiln_module *m, const char *key, int64_t v);
kiln_status kiln_meta_set_float(kiln_module *m, const char *key, double v);
kiln_status kiln_meta_set_str(kiln_module *m, const char *key, const char *v);
kiln_status kiln_meta_set_int_array(kiln_module *m, const char *key, const int64_t *v, uint32_t n);
/* Array setters that take ownership of `v` (from kiln_malloc), also on failure. */
kiln_status kiln_meta_set_int_array_owned(kiln_module *m, const char *key, int64_t *v, uint32_t n);
kiln_status kiln_meta_set_float_array_owned(kiln_module *m, const char *key, double *v, uint32_t n);
kiln_status kiln_meta_set_str_array_owned(kiln_module *m, const char *key, char **v, uint32_t n);
const kiln_meta *kiln_meta_find(const kiln_module *m, const char *key);
int64_t kiln_meta_int_or(const kiln_module *m, const char *key, int64_t fallback);

/* Adds a constant that borrows `data`; returns its index or -1 (error set). */
int kiln_module_add_const(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                          const int64_t *ne, const void *data);
/* Same, taking ownership of `data` (from kiln_malloc), also on failure. */
int kiln_module_add_const_owned(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *ne, void *data);
int kiln_module_add_state(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                          const int64_t *ne);
int kiln_module_find_const(const kiln_module *m, const char *name);
int kiln_module_find_state(const kiln_module *m, const char *name);

/* Adds an empty method graph; returns it or NULL (error set). */
kiln_graph *kiln_module_add_method(kiln_module *m, const char *name, int max_tokens);
void kiln_graph_free(kiln_graph *g);

/* Replaces g's partitions with the maximal runs of nodes on one backend,
 * their boundaries computed (no blobs). */
kiln_status kiln_graph_partition(kiln_graph *g);
/* The boundary of nodes [first, first + n): fills in/out (malloc'd, may be
 * NULL when empty) as kiln_partition describes them. */
kiln_status kiln_graph_boundary(const kiln_graph *g, int first, int n, int32_t **in, int *n_in,
                                int32_t **out, int *n_out);
void kiln_partition_clear(kiln_partition *p);
/* Adds a blob (taking `data`, malloc'd); *index receives its index. */
kiln_status kiln_module_add_blob(kiln_module *m, int backend, void *data, uint64_t size,
                                 int *index);
/* Frees every blob; partitions then name none. */
void kiln_module_drop_blobs(kiln_module *m);
kiln_status kiln_blob_set_prop(kiln_blob *b, const char *key, const char *value);
const char *kiln_blob_prop(const kiln_blob *b, const char *key);

/* Graph builders return a value index, or -1 with the error set. */
int kiln_graph_input(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *ne,
                     uint32_t dyn_mask);
int kiln_graph_const(kiln_graph *g, const kiln_module *m, const char *const_name);
int kiln_graph_state(kiln_graph *g, const kiln_module *m, const char *state_name);
/* Adds a node of `op` named `name` on `in`; infers the output's shape with
 * the op's rule (error naming the node when the inputs break it). */
int kiln_graph_node(kiln_graph *g, const kiln_module *m, int op, const char *name, int n_in,
                    const int32_t *in, const int32_t *iattr, const float *fattr);
kiln_status kiln_graph_output(kiln_graph *g, int value);

uint64_t kiln_shape_elems(int ndim, const int64_t *ne);
/* Bytes of a tensor of this dtype and shape (0 when rows break the block size). */
uint64_t kiln_shape_bytes(kiln_dtype dtype, int ndim, const int64_t *ne);
/* "[4, 64]" */
const char *kiln_shape_str(int ndim, const int64_t *ne, char *buf, size_t cap);

/* ---- checking ----------------------------------------------------------- */
/* Verifies a whole module (see verify.c): every node input exists and is
 * produced before use, shapes and dtypes follow each op's rule, inputs are
 * declared, constants have data, the memory plan fits. `with_plan`: also
 * check arena offsets (after planning). */
kiln_status kiln_module_verify(const kiln_module *m, int with_plan);

#endif /* KILN_GRAPH_H */
