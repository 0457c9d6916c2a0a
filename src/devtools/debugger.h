/* debugger.h: the debugging engine behind `kiln debug` (tools/cmd_debug.c)
 * and `kiln compile --check` (src/compiler/check.c). One program is opened
 * twice, on the backend under test and on a reference backend
 * (kiln_open_options.backend), and calls run on both with the same inputs
 * and the same history. Per node the engine says how far the backend's
 * output is from the reference's (the error carried in so far) and, when
 * asked, the node's OWN error: the node run alone on the backend given
 * exactly the reference's inputs (kiln_program_exec_node, from the
 * reference session's node observer), which tells a wrong kernel from
 * error carried in by earlier nodes. A third program may run beside them
 * (an f32 build of the same model), compared with the reference node by
 * node name.
 *
 * The compiler driver calls this engine for --check: the one place a stage
 * of the data flow reaches into src/devtools. The check is a developer aid
 * the compiler offers, and one copy of the lockstep machinery serves both
 * reports; the runtime never calls it. Internal: never installed. A
 * debugger is used by one thread at a time. */
#ifndef KILN_DEBUGGER_H
#define KILN_DEBUGGER_H

#include "devtools/compare.h"
#include "ir/graph.h"
#include "kiln/kiln_llm.h"

typedef struct kiln_debugger kiln_debugger;

/* The programs a debugger runs, in the order each call runs on them:
 * AGAINST, BACKEND, REFERENCE. */
typedef enum kiln_debug_side {
    KILN_DEBUG_BACKEND = 0,   /* the program under test */
    KILN_DEBUG_REFERENCE = 1, /* the same program, every node on the reference backend */
    KILN_DEBUG_AGAINST = 2,   /* kiln_debugger_against's program, once opened */
    KILN_DEBUG_SIDES
} kiln_debug_side;

typedef struct kiln_debugger_options {
    const char *backend;   /* every node of the program under test on this backend; NULL: as
                            * compiled */
    const char *reference; /* the reference backend; NULL: "ref" */
    int n_threads;         /* kiln_open_options.n_threads of both */
    /* Each side's name at the head of its errors ("reference: method 'decode', node ...");
     * NULL: "backend", "reference", "against". */
    const char *label[KILN_DEBUG_SIDES];
    /* Polled before and after every node and before every history call; non-zero stops with
     * KILN_ERR_CANCELLED ("interrupted"). May be NULL. */
    int (*cancel)(void *user);
    void *cancel_user;
} kiln_debugger_options;

/* Opens the program at `path` on both sides and a session on each. Errors
 * are the program's open errors (kiln_program_open_with) and
 * KILN_ERR_NOMEM. Close with kiln_debugger_close (NULL is a no-op). */
kiln_status kiln_debugger_open(const char *path, const kiln_debugger_options *options,
                               kiln_debugger **out);
void kiln_debugger_close(kiln_debugger *d);

/* A side's program: borrowed, lives as long as the debugger; NULL for
 * AGAINST until kiln_debugger_against opened it. Both sides hold the same
 * methods, nodes and inputs (the same file), so a method or node index of
 * one is that of the other. */
const kiln_program *kiln_debugger_program(const kiln_debugger *d, kiln_debug_side which);
/* The program under test bound as a language model (kiln_llm.h); NULL when
 * it does not bind. Borrowed, lives as long as the debugger. */
const kiln_llm *kiln_debugger_llm(const kiln_debugger *d);
/* The cosine the delegates the program under test runs on ask of their
 * nodes for their precision (kiln_backend.check_cos: QNN's 0.999 for fp16,
 * 0.99 for 16a8w, ...), the lowest when several; 0 when none asks. */
double kiln_debugger_bar(const kiln_debugger *d);

/* Opens the program at `path` (default options: on its own backends) as
 * AGAINST, for `method` of the program under test: its method of the same
 * name, with the same inputs (name, dtype, shape), runs beside the other
 * two, and each node's reference output is compared with the AGAINST output
 * of the node of the same name. *matched: the nodes that have one.
 * KILN_ERR_INVALID_ARG when the method is missing or its inputs differ. */
kiln_status kiln_debugger_against(kiln_debugger *d, const char *path, int method, int *matched);

/* Sets input `input` of `method` on every side, as kiln_session_set_input
 * does. */
kiln_status kiln_debugger_set_input(kiln_debugger *d, int method, int input, const void *data,
                                    kiln_dtype dtype, int ndim, const int64_t *shape);

/* A language model's history: empties every side's cache, then prefills
 * ids[0..n) at positions 0.. (kiln_llm_prefill, in calls of at most the
 * prefill size), each side on its own backend. n = 0 only empties.
 * KILN_ERR_UNSUPPORTED when the program is no language model; a failing
 * call is wrapped with the side's label and the call's tokens. */
kiln_status kiln_debugger_history(kiln_debugger *d, const int32_t *ids, int n);

/* ---- a run: per-node callbacks ------------------------------------------ */

/* What a run computes (kiln_debug_hooks.run). */
#define KILN_DEBUG_RUN_BACKEND (1u << 0)   /* the call runs on the program under test */
#define KILN_DEBUG_RUN_REFERENCE (1u << 1) /* ... on the reference */
#define KILN_DEBUG_RUN_AGAINST (1u << 2)   /* ... on kiln_debugger_against's program */
/* With RUN_REFERENCE: each node's own error (every node that writes an
 * activation or the cache). */
#define KILN_DEBUG_OWN (1u << 3)
/* With OWN: not for nodes the program under test runs on ref (their own
 * error against a ref reference is nil by construction). */
#define KILN_DEBUG_OWN_OFF_REF (1u << 4)

/* A node output's compared part: all of it, but for a kv_store, whose
 * output is the whole cache: the rows the call's attention reads,
 * 0 .. pos + T (out), or those it writes, pos .. pos + T (own). */
typedef struct kiln_debug_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS];
    const void *data;
} kiln_debug_tensor;

typedef struct kiln_debug_cmp {
    int valid;    /* 0: not compared */
    int mismatch; /* the shapes differ: no figures */
    kiln_cmp v;   /* a against the reference r (compare.h): NaN where a value is not finite */
} kiln_debug_cmp;

/* What a run says about one node on one side, as that side's run finishes
 * the node. Everything here is borrowed for the callback only. */
typedef struct kiln_debug_node {
    kiln_debug_side side;  /* BACKEND or REFERENCE (AGAINST's nodes are not called back) */
    int method, index;     /* the node: its method and index (the same on both sides) */
    const kiln_node *node; /* its node in the program under test (backend: that program's) */
    kiln_debug_tensor out; /* this side's output, the part compared */
    double ms;             /* this side's time on the node (an own run not counted) */
    /* side BACKEND: */
    const char *unit; /* the compute unit the node ran on, or NULL (kiln_program_node_unit) */
    int fallback;     /* on ref standing in for the backend asked for */
    /* side REFERENCE: */
    kiln_debug_cmp carried; /* the backend's output (a) against this one: when the backend ran
                             * the same call in this run */
    kiln_debug_cmp own;     /* the node alone on the backend given this side's inputs (a)
                             * against this output: KILN_DEBUG_OWN */
    kiln_status own_status; /* the own run's failure (own not valid then), else KILN_OK */
    const char *own_error;  /* ... its message */
    kiln_debug_cmp against; /* this output (a) against AGAINST's node of the same name */
} kiln_debug_node;

typedef struct kiln_debug_hooks {
    unsigned run; /* KILN_DEBUG_RUN_* and KILN_DEBUG_OWN* */
    /* Per node per side (may be NULL). A non-OK return (its message set
     * with kiln_error) stops the run with that status and message. */
    kiln_status (*node)(void *user, const kiln_debug_node *node);
    /* After each call on each side (may be NULL); stops the same way. */
    kiln_status (*call)(void *user, kiln_debug_side side, int method);
    void *user;
} kiln_debug_hooks;

/* Runs `method` (its inputs set) on the sides h->run names, one after the
 * other (AGAINST, BACKEND, REFERENCE), each with the history it holds. A
 * failure is wrapped with the side's label. */
kiln_status kiln_debugger_execute(kiln_debugger *d, int method, const kiln_debug_hooks *h);

/* ---- sample calls (a language model) ------------------------------------ */

#define KILN_DEBUG_SAMPLE_PREFILL 8 /* tokens of the sample prefill (at most the method's) */
#define KILN_DEBUG_SAMPLE_DECODES 3 /* decode calls after it */

/* The sample calls' sizes: *n_prefill tokens, then *n_decode decodes (fewer
 * than the defaults where the prefill size or the context is smaller).
 * KILN_ERR_UNSUPPORTED when the program is no language model. */
kiln_status kiln_debugger_samples(const kiln_debugger *d, int *n_prefill, int *n_decode);

/* Runs the sample calls on the sides h->run names, call by call: from an
 * empty cache, a prefill at position 0 (the last row's logits), then the
 * decodes after it, of random valid tokens (kiln_token_at), or of the
 * calibration text's tokens the calibration did not use when the program
 * holds enough of them (calibration.held_out: a program quantized from
 * ranges is judged on text, as it will run, not on random ids, whose
 * activations no text reaches). */
kiln_status kiln_debugger_run_samples(kiln_debugger *d, const kiln_debug_hooks *h);
/* 1 when the sample calls run on the calibration text's held-out tokens. */
int kiln_debugger_samples_from_text(const kiln_debugger *d);

#endif
