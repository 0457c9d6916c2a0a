/* passes.h: the compiler's passes over a module, in the order the driver
 * (compile.c) runs them: prune -> verify -> partition -> quantize (then
 * verify and partition again, as backends' choices may depend on dtypes) ->
 * calibrate (when asked) -> each backend's prepare (cpu: pack) -> plan ->
 * verify with the plan. Each
 * changes the module in place and leaves it valid for the next; on failure
 * the message names the tensor, backend or method. Internal: never
 * installed. */
#ifndef KILN_COMPILER_PASSES_H
#define KILN_COMPILER_PASSES_H

#include "ir/graph.h"
#include "ir/ops.h"
#include "kiln/kiln_compile.h"

/* prune.c. Reads every method's values; drops the constants no method
 * reads (freeing what they own) and renumbers the graphs' references to
 * the rest, which keep their order. Errors: KILN_ERR_NOMEM. */
kiln_status kiln_module_prune_consts(kiln_module *m);

/* quantize.c. Reads o->quant ("keep" or NULL: nothing to do; f32, f16,
 * q8_0, q4_0), o->quant_fallback and o->log. Converts every 2-dim constant
 * that some node reads as its weight (kiln_node_weight_slot) to that dtype
 * through f32 rows, owning the new data, and updates the dtype of the
 * graphs' values that refer to it; a weight that only nodes partitioned to
 * a delegate (a backend without exec) read is left as imported. Logs a
 * summary, and each weight kept as it was; *converted: how many it
 * converted. Errors: KILN_ERR_INVALID_ARG for an unknown format, or for a
 * weight whose rows are not whole blocks of it unless quant_fallback (then
 * kept and logged); KILN_ERR_NOMEM; a conversion's own error, wrapped with
 * the tensor's name. */
kiln_status kiln_module_quantize(kiln_module *m, const kiln_compile_options *o, int *converted);

/* partition.c. Reads `spec` ("a:opts,b", at most 8 backends, in order of
 * preference) and each backend's supports(). Lets each backend's configure()
 * store its options as metadata, adds the backends to the module's list,
 * sets every node's backend to the first listed one that supports it (ref,
 * added when needed, for a node none supports), and stores the spec as
 * kiln.backends.requested. Errors: KILN_ERR_INVALID_ARG for a list too long,
 * empty, naming an unknown backend, or giving options to one that takes
 * none; a backend's configure() error; KILN_ERR_NOMEM. */
kiln_status kiln_module_partition(kiln_module *m, const char *spec);

/* calibrate.c. Runs when a backend of m->backends has wants_ranges()
 * returning 1 (backend.h), or when o->calibrate or o->calibrate_tokens is
 * set; otherwise does nothing. Reads the text (o->calibrate, NULL: a
 * built-in one) and takes its first N tokens (o->calibrate_tokens, 0: 128
 * or the context if less) as generation encodes a prompt; plans the
 * methods, writes the module to a temporary file beside o->output, opens it
 * with every node on ref (no backend library or blob needed), and runs the
 * first N - D tokens through prefill in chunks of its size and the last D
 * (N / 8, in 1..16) through decode. Records, through the node observer, the
 * [lo, hi] of every f32 node output (state views, i.e. kv_store outputs,
 * and method inputs are not) and of every attention's scaled scores q.k /
 * div over the positions each query attends to; merges them by value name
 * across methods, and stores them as metadata: "calibration.names" (value
 * names, and "scores:NODE" for an attention's scores), "calibration.ranges"
 * (lo, hi per name), "calibration.tokens" (N), "calibration.text" (the
 * file's basename or "built-in"). Logs a summary through o->log and
 * reports progress as stage "calibrate". Removes its temporary file.
 * Errors: KILN_ERR_INVALID_ARG naming the text when it is empty or only
 * whitespace, has fewer than N tokens, or N is outside 8..1048576 or past
 * the context; the file's KILN_ERR_IO; KILN_ERR_UNSUPPORTED when the
 * module has no tokenizer; a non-finite value, or the write, open or run
 * failing, wrapped with "calibration"; KILN_ERR_CANCELLED when progress
 * asks; KILN_ERR_NOMEM. */
kiln_status kiln_module_calibrate(kiln_module *m, const kiln_compile_options *o);

/* partition.c. Each backend's prepare (backend.h), in the module's order:
 * the cpu backend repacks the weights its nodes read (--no-pack: not), a
 * delegate adds its blob. Errors are the backend's, wrapped with its name. */
kiln_status kiln_module_prepare(kiln_module *m, const kiln_compile_options *o);

/* plan.c. Reads one method's values, nodes and their scratch rules
 * (src/ir/liveness.h, which the verifier checks the plan against). Gives
 * every activation an arena offset by liveness (largest first, each at the
 * lowest 64-aligned offset clear of every placed value alive at the same
 * time), and sets the method's scratch_offset (the end of the values) and
 * arena_bytes (plus the most scratch any node needs). `m` is unused.
 * Errors: KILN_ERR_NOMEM naming the method. */
kiln_status kiln_graph_plan(kiln_graph *g, const kiln_module *m);

#endif
