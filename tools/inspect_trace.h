/* inspect_trace.h: `kiln inspect`'s model of a trace file (docs/TRACE.md):
 * the reader that checks it line by line (inspect_trace.c), the breakdown
 * tables built from it (cmd_inspect.c) and the Chrome / HTML writers
 * (inspect_html.c). */
#ifndef KILN_INSPECT_TRACE_H
#define KILN_INSPECT_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "kiln/kiln.h"
#include "devtools/devtools.h"

/* ---- the trace as read ------------------------------------------------------------- */

typedef struct insp_node { /* "ev":"node" */
    int64_t call, line;
    uint64_t t0, t1; /* ns */
    double flops, bytes;
    int32_t partition, node_id;
    int32_t name, op, unit; /* string ids (insp_trace.str) */
    int16_t method, backend;
    uint8_t fallback;
    uint8_t estimated; /* a delegate's node: its time apportioned from its ops' cycles */
} insp_node;

typedef struct insp_op { /* "ev":"op" (version 2): one op inside a delegate */
    int64_t call, line;
    uint64_t t0, t1; /* apportioned by cycles: estimated */
    uint64_t cycles;
    int32_t partition, node_id; /* node_id -1: the delegate's own op */
    int32_t name, type;         /* string ids */
    int16_t method;
    int64_t node_ev; /* the node event holding it (index in nodes), -1: none */
} insp_op;

typedef struct insp_part { /* "ev":"partition" */
    int64_t call, line;
    uint64_t t0, t1;
    uint64_t host_ns; /* a delegate's time on the host inside it (0: none given) */
    /* a profiled delegate's own figures (version 2; delegate_ns 0: none) */
    uint64_t delegate_ns, cycles, vtcm_ns, power_ns;
    int64_t hw_threads;
    int32_t partition, first_node, last_node;
    int16_t method, backend;
    uint8_t fallback;
} insp_part;

typedef struct insp_call { /* "ev":"method": one per call, in call order */
    int64_t tokens, line;
    uint64_t t0, t1;
    int64_t first_node, n_nodes; /* its node events: nodes[first_node ..) */
    int64_t first_part, n_parts; /* its partition events */
    int64_t first_op, n_ops;     /* its op events */
    int16_t method;
    uint8_t ok;
} insp_call;

typedef struct insp_memory { /* "ev":"memory", bytes */
    int64_t weights_file, weights_mapped, weights_resident, state, state_used, state_positions;
    int64_t arena, input, peak_rss;
    int has_used; /* state_used / state_positions were written */
} insp_memory;

typedef struct insp_trace {
    const char *path;
    char *kiln, *program, *clock; /* header */
    int64_t version, format_version, header_calls;
    int64_t threads; /* header "threads" (0 when an older writer left it out) */
    char **methods, **backends;
    int n_methods, n_backends;
    char **str; /* interned node names, ops and units */
    int n_str, cap_str;
    int32_t *hash; /* open addressing over str: -1 empty */
    int hash_cap;
    insp_node *nodes;
    insp_part *parts;
    insp_call *calls;
    insp_op *ops;
    int64_t n_nodes, n_parts, n_calls, cap_nodes, cap_parts, cap_calls, n_ops, cap_ops;
    int64_t n_events, n_lines;
    int64_t dropped; /* end "dropped": events the writer lost to memory (0 when absent) */
    insp_memory mem;
} insp_trace;

/* Reads and checks `path`. On failure the message names the file, the line
 * and the rule broken; *t is left empty (insp_trace_free is still safe). */
kiln_status insp_trace_read(const char *path, insp_trace *t);
void insp_trace_free(insp_trace *t);

static inline double insp_ms(uint64_t ns) {
    return (double)ns / 1e6;
}

/* ---- the report -------------------------------------------------------------------- */

enum { BY_OP, BY_NODE, BY_BACKEND, BY_METHOD };
enum { ROW_METHOD, ROW_PARTITION, ROW_OP, ROW_NODE, ROW_EXECUTOR, ROW_REST, ROW_DELEGATE_OP };

/* One table row. Durations are ms; a row without a value has NAN. */
typedef struct insp_row {
    int depth; /* 0 method, 1 backend (its partitions), 2 op / node, 3 a delegate's ops */
    int kind;  /* ROW_* */
    const char *name;
    int method, backend;   /* -1: none */
    const char *op, *unit; /* NULL: none; "(mixed)" when the row spans several */
    int fallback;          /* -1: none */
    int64_t calls;         /* events aggregated (method calls, partitions, nodes) */
    double p10, p50, p90, avg, min, max, total;
    double pct; /* of the parent row's total */
    double flops, bytes;
    double peak_ns; /* sum over its nodes of flops / peak rate of the node's unit */
    int has_cost;   /* flops/bytes known (rows built from nodes) */
} insp_row;

typedef struct insp_peaks {
    int have;
    char source[4200];
    kiln_machine_info m;
    const kiln_machine_rates *r; /* the rates used: all threads */
} insp_peaks;

/* Per method (header order): its calls' durations. */
typedef struct insp_method_stat {
    int method;
    int64_t calls, failed, tokens; /* tokens: -1 when no call gave a count */
    double p10, p50, p90, avg, min, max, total;
    double flops, bytes;
} insp_method_stat;

typedef struct insp_report {
    const insp_trace *t;
    int by, top;
    insp_row *rows;
    int64_t n_rows;
    insp_method_stat *methods;
    int n_methods;
    double all_ms;          /* all method calls */
    double fallback_ms;     /* nodes run as fallbacks */
    int64_t fallback_nodes; /* node events */
    char fallback_ops[512]; /* "rms_norm, swiglu" */
    const insp_peaks *peaks;
} insp_report;

/* Builds the rows of `by` (BY_*), at most `top` leaves per group (0: all). */
kiln_status insp_report_build(const insp_trace *t, const insp_peaks *peaks, int by, int top,
                              insp_report *r);
void insp_report_free(insp_report *r);

/* The roofline of a row: arithmetic intensity, which bound, % of that peak.
 * 0 when the row has no cost or there are no peaks. */
typedef struct insp_roof {
    double gflops, gbps, intensity, peak_gflops, pct;
    int memory_bound;
} insp_roof;
int insp_row_roof(const insp_row *row, const insp_peaks *peaks, insp_roof *out);
/* The peak compute rate (10^9/s) of a node's unit: int8 for the quantized
 * dot kernels (" x q8"), f32 otherwise. */
double insp_unit_peak(const char *unit, const insp_peaks *peaks);

const char *insp_kind_name(int kind);

/* Writes JSON string literal safe inside HTML <script> (escapes <, >, &). */
void insp_json_str(FILE *f, const char *s, int html);

/* Writers (inspect_html.c); KILN_ERR_IO names the path. */
kiln_status insp_write_chrome(const insp_trace *t, const char *path);
kiln_status insp_write_html(const insp_report *r, const insp_report *by_op, const char *path);

#endif
