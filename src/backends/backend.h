/* backend.h: the interface every backend implements, and the registry.
 *
 * At compile time the partitioner asks each requested backend, in order,
 * whether it supports a node; the first that does gets it, and a node no
 * requested backend supports runs on `ref` as a fallback. At run time a
 * program resolves each backend name once (open), then the executor calls
 * exec per node. Consecutive nodes on one backend form a partition. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "ir/ops.h"

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
} kiln_backend;

const kiln_backend *kiln_backend_find(const char *name);
/* The reference backend: the oracle and the fallback. */
const kiln_backend *kiln_backend_ref(void);
/* The default backend list when the user names none. */
const char *kiln_backend_default(void);

/* The ref kernels, shared by backends that wrap ref (e.g. test). */
kiln_status kiln_ref_exec(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                          kiln_tensor *out, void *scratch, uint64_t scratch_bytes);

extern const kiln_backend kiln_backend_ref_impl;
extern const kiln_backend kiln_backend_test_impl;
extern const kiln_backend kiln_backend_cpu_impl;

#endif /* KILN_BACKEND_H */
