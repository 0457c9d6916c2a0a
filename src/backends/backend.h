/* backend.h: the interface every backend implements, and the registry.
 *
 * At compile time the partitioner asks each requested backend, in order,
 * whether it supports a node; the first that does gets it, and a node no
 * requested backend supports runs on `ref` as a fallback. Maximal runs of
 * nodes on one backend are the method's partitions (kiln_partition, stored
 * in the program). Then each backend's prepare sees the whole module with
 * its partitions: the cpu backend repacks the weights it reads; a delegate
 * compiles its partitions into one blob stored in the program.
 *
 * At run time a program resolves each backend name once (open), a
 * delegate loads its blob (load), and the executor walks the partitions:
 * a backend with `execute` runs a whole partition in one call; the others
 * (ref, cpu, test) run node by node through `exec`, the path the debugger
 * also uses. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "ir/ops.h"

/* What the compiler passes to prepare. */
typedef struct kiln_prepare_options {
    int no_pack; /* --no-pack: weights stay as imported */
    void (*log)(void *user, const char *line);
    void *log_user;
} kiln_prepare_options;

/* What a delegate's execute reports for the trace (docs/TRACE.md). */
typedef struct kiln_exec_report {
    /* in: the call is traced: measure inside the delegate and report each
     * op through op() (a delegate may not, or may profile nothing) */
    int profile;
    void (*op)(void *user, int node, const char *name, const char *type, uint64_t cycles);
    void *user;
    /* out: the part of the call spent on the host around the accelerator's
     * own (binding, copies, cache writes) */
    uint64_t host_ns;
    /* out, when profiled (exec_ns > 0): the accelerator's call, from
     * exec_t0 (CLOCK_MONOTONIC ns), exec_ns long by the delegate's own
     * measure; its cycles, the time it waited to acquire its memory (VTCM)
     * and to power on, and the hardware threads it used (0: not said) */
    uint64_t exec_t0, exec_ns, cycles, vtcm_ns, power_ns;
    int threads;
} kiln_exec_report;
/* op(): node is the index of the Kiln node the op was lowered from (-1: an
 * op of the delegate's own, such as a graph's input or output); name and
 * type (the delegate's op kind, "" when unknown) live as long as the
 * program; ops come in the order they ran. */

typedef struct kiln_backend {
    const char *name;
    /* Compile time: parses the backend's options ("refuse=rms_norm") into
     * module metadata the runtime will see; may be NULL (no options). */
    kiln_status (*configure)(kiln_module *m, const char *options);
    /* Compile time: 1 when this backend runs the node. */
    int (*supports)(const kiln_module *m, const kiln_graph *g, const kiln_node *n);
    /* Run time: per-program context made when a program opens (may be NULL).
     * options is never NULL (zeroes = defaults). The context is shared by
     * every session of the program, which may execute from several threads
     * at once: exec must be safe for that. */
    kiln_status (*open)(const kiln_module *m, const kiln_open_options *options, void **ctx);
    void (*close)(void *ctx);
    /* Runs one node; in[]/out carry actual shapes and data; scratch is the
     * method's planned scratch. Errors name the rule (the executor adds the
     * method and node). */
    kiln_status (*exec)(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                        kiln_tensor *out, void *scratch, uint64_t scratch_bytes);
    /* The compute unit a node runs on, e.g. "scalar f32" or
     * "avx512-vnni q4_0 x q8 dot"; ctx is the program's context from open. */
    const char *(*unit)(void *ctx, const kiln_node *n, const kiln_tensor *const *in);
    /* Threads a node may run on (NULL: 1), for the trace. */
    int (*threads)(void *ctx);
    /* Compile time, after partitioning (may be NULL): `b` is this backend's
     * index in m->backends. May change the module's constants (repacking
     * what its own nodes read), and may add one blob (kiln_module_add_blob)
     * naming its partitions (kiln_partition.blob, .graph). */
    kiln_status (*prepare)(kiln_module *m, int b, const kiln_prepare_options *o);
    /* Run time, after open, for a backend with a blob: checks and loads it
     * (errors name what does not match). NULL: the backend has no blobs. */
    kiln_status (*load)(void *ctx, const kiln_module *m, int b, const kiln_blob *blob);
    /* Runs a whole partition (NULL: node by node through exec). vals holds
     * every value of the method with its data and actual shape; the
     * partition's boundary outputs are written. rep (never NULL, zeroed but
     * for its inputs) receives what the trace shows of the call. */
    kiln_status (*execute)(void *ctx, const kiln_graph *g, const kiln_partition *p,
                           kiln_tensor *vals, void *scratch, uint64_t scratch_bytes,
                           kiln_exec_report *rep);
    /* Compile time (may be NULL: the check's threshold): the cosine against
     * ref that what leaves one of this delegate's partitions must reach in
     * `kiln compile --check`, for the precision the module's options give
     * it. A --check-threshold the user gives wins. */
    double (*check_cos)(const kiln_module *m);
    /* Run time, for a delegate (may be NULL): runs one node alone, as exec
     * does, through the same lowering as its partitions (QNN builds a graph
     * of that node on first use, so the first call of each node is slow).
     * For the debugging engine: a node given exactly the reference's
     * inputs, which tells a wrong lowering from error carried in. The
     * executor calls it only when the program was opened with this backend
     * for every node (kiln_open_options.backend: no blob, node by node). */
    kiln_status (*exec_alone)(void *ctx, const kiln_graph *g, const kiln_node *n,
                              const kiln_tensor *const *in, kiln_tensor *out, void *scratch,
                              uint64_t scratch_bytes);
    /* Compile time (may be NULL: no): 1 when this backend's prepare needs
     * activation ranges from a calibration run (the compiler's calibrate
     * pass, compiler/passes.h, runs ref over a text and stores them as the
     * module's "calibration.*" metadata before prepare). */
    int (*wants_ranges)(const kiln_module *m);
} kiln_backend;

const kiln_backend *kiln_backend_find(const char *name);
/* The built-in backends' names, "ref, test, cpu, testd". */
void kiln_backend_names(char *buf, size_t cap);
/* The reference backend: the oracle and the fallback. */
const kiln_backend *kiln_backend_ref(void);
/* The default backend list when the user names none. */
const char *kiln_backend_default(void);

/* The ref kernels, shared by backends that wrap ref (e.g. test). */
kiln_status kiln_ref_exec(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                          kiln_tensor *out, void *scratch, uint64_t scratch_bytes);
/* ref kernels in pieces, for a backend that splits the rows over threads
 * (cpu): rows t0..t1-1 of out, bit for bit as ref computes them.
 * rope_multi rotates out in place (out holding x; positions checked once
 * first with kiln_ref_rope_multi_check); layer_norm and gelu read in[0]. */
typedef void (*kiln_ref_rows_fn)(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                                 int64_t t0, int64_t t1);
kiln_status kiln_ref_rope_multi_check(const kiln_tensor *const *in);
void kiln_ref_rope_multi_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                              int64_t t0, int64_t t1);
void kiln_ref_layer_norm_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                              int64_t t0, int64_t t1);
void kiln_ref_gelu_rows(const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out,
                        int64_t t0, int64_t t1);

/* The refuse= option both test backends take (test/test_backend.c): a
 * "+"-separated op list, each a known op, stored under `key`; and whether
 * it names node n's op. */
kiln_status kiln_test_refuse_set(kiln_module *m, const char *backend, const char *key,
                                 const char *ops);
int kiln_test_refuses(const kiln_module *m, const char *key, const kiln_node *n);
/* The perturb= option both test backends take: when node n is the one
 * named (NULL: none), its f32 output is made visibly wrong in place. */
void kiln_test_perturb(const char *name, const kiln_node *n, kiln_tensor *out);

/* The cpu backend's prepare (cpu/pack.c). */
kiln_status kiln_cpu_prepare(kiln_module *m, int b, const kiln_prepare_options *o);

extern const kiln_backend kiln_backend_ref_impl;
extern const kiln_backend kiln_backend_test_impl;
extern const kiln_backend kiln_backend_cpu_impl;
extern const kiln_backend kiln_backend_testd_impl;
extern const kiln_backend kiln_backend_qnn_impl;

#endif /* KILN_BACKEND_H */
