/* check.h: `kiln compile --check`, the partition accuracy and speed check the
 * compiler runs on the program it has just written. Internal. */
#ifndef KILN_CHECK_H
#define KILN_CHECK_H

#include "ir/graph.h"
#include "kiln/kiln_compile.h"

/* Default pass threshold: a node passes when the cosine similarity of its
 * own output (run alone on its backend, given ref's inputs) against ref's is
 * at least this. Quantized cpu matmuls (8-bit activations) sit near 0.9999,
 * f32/f16 near 1 - 1e-9; a wrong kernel falls far below. */
#define KILN_CHECK_DEFAULT_COS 0.99

/* Runs sample calls (a prefill of a few random valid tokens at position 0,
 * then a few decodes) of the program at `path` as compiled and on ref, and
 * logs one line per partition (a run of consecutive nodes of one method on
 * one backend) through o->log: its worst node, cosine, relative error, the
 * times on its backend and on ref and their ratio, and the verdict.
 * `m` is the module `path` was written from (same methods and nodes).
 * o->check == 1: a failing partition is KILN_ERR_BACKEND naming the method,
 * partition, backend and worst node. o->check == 2: the failing nodes are
 * moved in `m` to the next backend in its list that supports them, else to
 * ref (added to the list when missing), said in the log, the methods are
 * partitioned again and *moved is set: the caller prepares and writes the
 * program again. Allocation failure is KILN_ERR_NOMEM; a progress callback
 * asking to stop is KILN_ERR_CANCELLED. The program file is closed again on
 * return. */
kiln_status kiln_check_partitions(const char *path, kiln_module *m, const kiln_compile_options *o,
                                  int *moved);

#endif
