/* devtools.h: the library internals the `kiln` command (tools/) may use, and
 * the one internal header it includes besides the public ones. The tools
 * link libkiln.a; nothing here is installed or exported from libkiln.so.
 *
 * What a tool may reach, and why it is not public API:
 *   - base.h: kiln_error & co. and kiln_now_ms, so the tools report errors
 *     and time things as the library does;
 *   - json.h: the strict JSON DOM (inspect reads traces, chat reads message
 *     files, info/bench write JSON strings);
 *   - the read-only module (ir/graph.h, ir/ops.h) behind a program, for
 *     `kiln info` and `kiln bench`, which print what a program holds:
 *     constants, states, nodes, backends;
 *   - the developer aids of src/devtools: machine peaks, tensor folders,
 *     tensor comparison, the seeded random tokens of run/debug/check;
 *   - the debugging engine (debugger.h), so that `kiln debug` runs the
 *     program on two backends in lockstep and reads per node errors without
 *     the executor's hooks (the node observer, kiln_program_exec_node),
 *     which stay behind it in runtime.h; and whether a backend exists
 *     (kiln_backend_available, introspect.h), so that a name is checked
 *     before anything opens.
 * The runtime's own objects (runtime.h: the program and session structs,
 * the executor's hooks) stay out of the tools' reach. */
#ifndef KILN_DEVTOOLS_H
#define KILN_DEVTOOLS_H

#include "base/base.h"
#include "base/json.h"
#include "devtools/compare.h"
#include "devtools/debugger.h"
#include "devtools/machine.h"
#include "devtools/random.h"
#include "devtools/tensors.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "runtime/introspect.h"

#endif
