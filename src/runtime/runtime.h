/* runtime.h: the program and session objects behind kiln.h. Internal. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include "backends/backend.h"
#include "format/format.h"
#include "runtime/introspect.h"

/* Called by the executor around every node of an execute (the hook of the
 * debugging engine, devtools/debugger.c): phase 0 before the node runs (its
 * inputs are ready, out's shape is set, its data not yet written), phase 1
 * after. in/out are the session's own tensors, valid during the call only.
 * A nonzero return stops the call with KILN_ERR_CANCELLED. */
typedef int (*kiln_node_observer)(void *user, int method, int node, const kiln_tensor *const *in,
                                  const kiln_tensor *out, int phase);

struct kiln_program {
    char *path;
    kiln_file_map map;
    kiln_module mod;
    kiln_section sections[KILN_MAX_SECTIONS];
    int n_sections;
    const kiln_backend **backends; /* resolved from mod.backends */
    void **backend_ctx;
    int *fallback;              /* per backend index: 1 when it is ref standing in */
    uint64_t *input_offset;     /* per method: first input's offset in the input block */
    uint64_t input_block_bytes; /* all methods' inputs */
    uint64_t arena_bytes;       /* largest method arena */
    int describe_only;          /* kiln_open_options.describe_only: no sessions */
};

struct kiln_session {
    const kiln_program *prog;
    void **state;                /* per state buffer */
    uint8_t *arena;              /* shared by all methods, sized for the largest */
    uint8_t *inputs;             /* per-method input slots (inputs survive other methods) */
    kiln_tensor **vals;          /* per method: one view per value, data resolved at create */
    uint8_t **input_set;         /* per method, per input: set since creation */
    int last_method;             /* the method whose outputs the arena holds, or -1 */
    struct kiln_trace *trace;    /* kiln_session_set_trace; NULL = not recording */
    kiln_node_observer observer; /* kiln_session_set_observer; NULL = none */
    void *observer_user;
};

/* trace.c, called by the executor while a trace is attached. Times are ns
 * since the trace was created (kiln_trace_now). */
uint64_t kiln_trace_now(const struct kiln_trace *t);
void kiln_trace_call_begin(struct kiln_trace *t);
void kiln_trace_node(struct kiln_trace *t, const kiln_program *p, int method, int part, int index,
                     const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out,
                     uint64_t t0, uint64_t t1);
/* Before a partition runs: asks a delegate to profile the call, its ops
 * collected by the trace. After it: the partition, with what a delegate
 * reported (rep): its host time, and the ops it profiled, laid out over its
 * execute time by their cycles, under node events of their Kiln nodes
 * (vals: the method's values, for the nodes' cost rules). */
void kiln_trace_partition_begin(struct kiln_trace *t, kiln_exec_report *rep);
void kiln_trace_partition(struct kiln_trace *t, const kiln_program *p, int method, int part,
                          const kiln_partition *pt, const kiln_tensor *vals, uint64_t t0,
                          uint64_t t1, const kiln_exec_report *rep);
void kiln_trace_method(struct kiln_trace *t, int method, int64_t tokens, uint64_t t0, uint64_t t1,
                       int ok);

/* Index of the input named `name` of `method`, or -1. */
int kiln_method_input_index(const kiln_program *p, int method, const char *name);

/* Sets (fn NULL: clears) the session's node observer. */
void kiln_session_set_observer(kiln_session *s, kiln_node_observer fn, void *user);

/* Runs node `node` of `method` alone on the backend the program gave it,
 * on the caller's tensors (out's shape computed here; out->data must hold
 * it) with the caller's scratch (at least kiln_method_scratch_bytes). For
 * the debugging engine (devtools/debugger.c): a node given exactly the
 * reference's inputs. The caller's state is never written: a kv_store,
 * which writes its cache in place, is given a copy of the cache in
 * out->data and writes there. */
kiln_status kiln_program_exec_node(const kiln_program *p, int method, int node,
                                   const kiln_tensor *const *in, kiln_tensor *out, void *scratch,
                                   uint64_t scratch_bytes);
/* Scratch bytes a method's nodes may use. */
uint64_t kiln_method_scratch_bytes(const kiln_program *p, int method);

const kiln_backend *kiln_program_node_backend(const kiln_program *p, const kiln_node *n);

#endif
