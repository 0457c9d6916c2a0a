/* kiln_trace.h: recording a profile of a session's method calls.
 *
 * A trace records, for every method call of the sessions it is attached to,
 * one event for the call, one per partition (a run of consecutive nodes on
 * one backend: a delegate call) and one per node, each with its backend,
 * compute unit (the kernel variant that ran), fallback flag, start and end
 * in ns, FLOPs and bytes moved; and, when it is written, the memory the
 * program and the session use. The file format is docs/TRACE.md (JSON
 * lines); `kiln inspect` reads it.
 *
 * Recording appends fixed-size records to memory (a block of 4096 at a
 * time: the only allocation, once per 4096 events) and reads the clock
 * twice per node; names and text are produced only when the trace is
 * written. A session without a trace pays one pointer test per node.
 *
 *     kiln_trace *t;
 *     kiln_trace_create(&t);
 *     kiln_session_set_trace(session, t);
 *     ... kiln_session_execute(...) ...
 *     kiln_trace_write(t, session, "run.trace");   // before closing the program
 *     kiln_session_set_trace(session, NULL);
 *     kiln_trace_free(t);
 */
#ifndef KILN_TRACE_H
#define KILN_TRACE_H

#include <stdint.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_trace kiln_trace;

KILN_API kiln_status kiln_trace_create(kiln_trace **out);
KILN_API void kiln_trace_free(kiln_trace *t); /* NULL is a no-op */

/* Records every execute of `session` into t from now on; NULL stops.
 * A trace takes events from one program (the first session's): attaching
 * it to a session of another program is KILN_ERR_INVALID_ARG. Not
 * thread-safe: one session executes into a trace at a time. */
KILN_API kiln_status kiln_session_set_trace(kiln_session *session, kiln_trace *t);

/* The KV cache positions in use (e.g. prompt + generated tokens), for the
 * memory section's state_used_bytes; 0 (the default) leaves it out. */
KILN_API void kiln_trace_set_positions(kiln_trace *t, int64_t positions);

/* Events recorded so far. */
KILN_API int64_t kiln_trace_event_count(const kiln_trace *t);

/* Writes the trace to `path` (docs/TRACE.md): the header, every event, the
 * memory figures (of `session` when given: state buffers; always: the
 * program's weights, mapped and resident, its arena, the process's peak
 * RSS). The program the events came from must still be open. Recording
 * may go on afterwards; a later write writes everything again. */
KILN_API kiln_status kiln_trace_write(const kiln_trace *t, const kiln_session *session,
                                      const char *path);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TRACE_H */
