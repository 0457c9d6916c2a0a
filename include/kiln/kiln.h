/* kiln.h: the Kiln runtime C API.
 *
 * A program (`.kiln` file) holds constants (weights, stored once), state
 * buffers (the KV cache) and several methods (e.g. `prefill`, `decode`).
 * A session owns the state and an activation arena; any method of a session
 * runs in any order, any number of times, and state persists until reset.
 *
 * Errors are values: every fallible function returns a kiln_status (KILN_OK
 * is 0, errors are negative) and leaves a message for kiln_last_error() on
 * the calling thread. Nothing in the library exits or aborts on bad input.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

/* KILN_API marks every function of the public API, in these four headers
 * and nowhere else: the library is built with hidden visibility, so
 * libkiln.so exports exactly these (tests/test_exports.sh checks it) and
 * the internals stay free to change. With GCC and clang it is default
 * visibility on both sides of the library: an embedder defines nothing,
 * and the declarations keep their visibility even when included under
 * `#pragma GCC visibility push(hidden)`. Other compilers get it empty.
 * Defining KILN_API before including kiln.h replaces it: for instance
 * `__attribute__((visibility("hidden")))` when linking the static libkiln.a
 * into a shared library that should not export Kiln's API. */
#ifndef KILN_API
#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"
/* Version of the program-file layout this library writes and reads. */
#define KILN_FORMAT_VERSION 7
/* Most dimensions a tensor may have. */
#define KILN_MAX_DIMS 4
/* Most threads one program computes with (kiln_open_options.n_threads). */
#define KILN_MAX_THREADS 256

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_IO = -1,          /* a file could not be opened, read or written */
    KILN_ERR_FORMAT = -2,      /* a file is damaged or not of the expected kind */
    KILN_ERR_UNSUPPORTED = -3, /* valid, but not something Kiln implements */
    KILN_ERR_INVALID_ARG = -4, /* an argument or input is out of range */
    KILN_ERR_NOMEM = -5,       /* an allocation failed */
    KILN_ERR_BACKEND = -6,     /* a backend failed to prepare or execute */
    KILN_ERR_VERSION = -7,     /* a program written by another format version */
    KILN_ERR_CANCELLED = -8,   /* a callback asked to stop */
} kiln_status;

/* Short constant text for a status ("format error"). Thread-safe. */
KILN_API const char *kiln_strerror(kiln_status status);

/* The message of the last failed call on this thread: what went wrong and
 * where (file, offset, tensor, node, rule). Valid until the next failing
 * call on the same thread. Never NULL. Thread-safe (thread-local). */
KILN_API const char *kiln_last_error(void);

/* Library version, "0.1.0". */
KILN_API const char *kiln_version(void);

/* Removes the temporary files the library is writing at this moment (a
 * program kiln_compile has not yet renamed into place, a trace, a dump):
 * the library writes every file under a temporary name and renames it only
 * when complete, so after this call an interrupted write leaves nothing.
 * Async-signal-safe: for an application's SIGINT/SIGTERM handler, before it
 * calls _exit. The writes themselves then fail; call it only on the way out. */
KILN_API void kiln_remove_temp_files(void);

typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F16 = 1,
    KILN_BF16 = 2,
    KILN_I32 = 3,
    KILN_Q8_0 = 8,
    KILN_Q4_0 = 9,
    KILN_Q4_1 = 10,
    KILN_Q4_K = 11,
    KILN_Q6_K = 12,
    /* q4_0 blocks of 8 rows interleaved (packed at compile time for the cpu
     * kernels; docs/FORMAT.md §6.1): a [N, K] weight with N % 8 == 0. */
    KILN_Q4_0_X8 = 13,
    KILN_Q4_1_X8 = 14, /* q4_1 likewise */
    KILN_Q8_0_X8 = 15, /* q8_0 likewise */
    KILN_Q4_K_X8 = 16, /* q4_K likewise, per super-block of 256 columns */
    KILN_Q6_K_X8 = 17, /* q6_K likewise */
} kiln_dtype;

/* Name of a dtype ("f32", "q4_0"), or NULL for a value that is not one. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);

/* Shape and type of a method input or output. A dimension equal to the
 * method's token count has dynamic = 1 in its bit of dynamic_mask, and
 * shape[] holds its largest allowed value. */
typedef struct kiln_tensor_info {
    const char *name; /* borrowed from the program */
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    uint32_t dynamic_mask;
} kiln_tensor_info;

typedef struct kiln_program kiln_program;
typedef struct kiln_session kiln_session;

/* ---- programs ----------------------------------------------------------- */

/* Opens and validates a program: header, section table, every non-weight
 * section's checksum and every method's graph. Constants are mapped, not
 * copied. On success *out owns the program; close it with
 * kiln_program_close. On failure *out is NULL and the status says why:
 * KILN_ERR_IO, KILN_ERR_FORMAT (names the field), KILN_ERR_VERSION (names the
 * version that wrote the file), KILN_ERR_UNSUPPORTED (a backend this build
 * lacks). A program is immutable: all functions taking a const program are
 * thread-safe. */
KILN_API kiln_status kiln_program_open(const char *path, kiln_program **out);

/* How a program runs on this machine; all zero = the defaults. */
typedef struct kiln_open_options {
    /* Threads the cpu backend computes with (the caller's thread counts as
     * one): 0 = $KILN_THREADS when set, else the number of cores this process may
     * run on (its CPU affinity). */
    int n_threads;
    /* Kernel variant of the cpu backend ("scalar", "avx2", "avx512",
     * "avx512-vnni", "avx512-amx", "neon", "dotprod", "i8mm", and the opt-in
     * "avx512-bf16", never chosen unless named): NULL = $KILN_CPU when set,
     * else the best this CPU runs. A variant the CPU cannot run is
     * KILN_ERR_UNSUPPORTED naming the variants it can. */
    const char *cpu_variant;
    /* Run every node on this backend ("cpu", "ref") instead of the ones the
     * compiler chose: NULL = as compiled. A node the backend cannot run is
     * KILN_ERR_UNSUPPORTED naming it. Nothing is a fallback then. (The
     * memory plan does not depend on the backend: every op's scratch rule
     * covers them all.) */
    const char *backend;
    /* 1: describe the program only (kiln info): every section and blob is
     * checked as usual, but no blob is handed to its delegate, so a program
     * compiled for QNN opens where Qualcomm's library is missing or cannot
     * load its binary (a weight-shared one off a device). Such a program
     * makes no sessions (KILN_ERR_UNSUPPORTED). */
    int describe_only;
} kiln_open_options;

/* Where the QNN delegate finds Qualcomm's runtime (libQnnHtp.so and the
 * libraries beside it): the folder given here, else $KILN_QNN_LIB, else the
 * cache folder scripts/fetch-qnn.sh fills ($XDG_CACHE_HOME/kiln/qnn, else
 * ~/.cache/kiln/qnn). Process-wide, because the library is: one copy is
 * loaded per process, on the first compile or open that needs it. Call it
 * before that; afterwards another folder is KILN_ERR_INVALID_ARG. NULL
 * restores the default order. Kiln never ships Qualcomm's libraries. */
KILN_API kiln_status kiln_qnn_set_library_dir(const char *dir);

/* kiln_program_open with options (NULL = all defaults). */
KILN_API kiln_status kiln_program_open_with(const char *path, const kiln_open_options *options,
                                            kiln_program **out);

/* Closes a program. Every session made from it must be destroyed first.
 * NULL is a no-op. */
KILN_API void kiln_program_close(kiln_program *program);

/* Recomputes the checksum of every section, weights included (what
 * `kiln info --verify` does). KILN_ERR_FORMAT names the first bad section. */
KILN_API kiln_status kiln_program_verify(const kiln_program *program);

KILN_API int kiln_program_method_count(const kiln_program *program);

/* Name of method `index` (borrowed, lives as long as the program), or NULL
 * when the index is out of range. */
KILN_API const char *kiln_program_method_name(const kiln_program *program, int index);

/* Finds a method by name; KILN_ERR_INVALID_ARG when there is none. */
KILN_API kiln_status kiln_program_find_method(const kiln_program *program, const char *name,
                                              int *index);

KILN_API int kiln_method_input_count(const kiln_program *program, int method);
KILN_API int kiln_method_output_count(const kiln_program *program, int method);
/* Describes input or output `i` of a method; KILN_ERR_INVALID_ARG when an
 * index is out of range. Strings are borrowed from the program. */
KILN_API kiln_status kiln_method_input_info(const kiln_program *program, int method, int i,
                                            kiln_tensor_info *info);
KILN_API kiln_status kiln_method_output_info(const kiln_program *program, int method, int i,
                                             kiln_tensor_info *info);

/* Metadata stored by the compiler (e.g. "general.architecture",
 * "llm.context_length"). The string getter returns a borrowed string or NULL
 * when the key is missing or not a string; the integer getter returns
 * KILN_ERR_INVALID_ARG when the key is missing or not an integer. */
KILN_API const char *kiln_program_meta_str(const kiln_program *program, const char *key);
KILN_API kiln_status kiln_program_meta_int(const kiln_program *program, const char *key,
                                           int64_t *value);
/* An integer-array entry (e.g. "llm.end_token_ids"): *values (borrowed,
 * lives as long as the program) and *n; KILN_ERR_INVALID_ARG when the key
 * is missing or not an integer array. */
KILN_API kiln_status kiln_program_meta_ints(const kiln_program *program, const char *key,
                                            const int64_t **values, int *n);
/* The same for a float-array entry (e.g. "vision.image_normalize"). */
KILN_API kiln_status kiln_program_meta_floats(const kiln_program *program, const char *key,
                                              const double **values, int *n);

/* ---- sessions ----------------------------------------------------------- */

/* Creates a session: its state buffers (zeroed) and its activation arena,
 * sized for the largest method. Allocation happens here, never in execute.
 * Many sessions may share one program, also from different threads; one
 * session must not be used by two threads at once. */
KILN_API kiln_status kiln_session_create(const kiln_program *program, kiln_session **out);

/* Destroys a session; NULL is a no-op. */
KILN_API void kiln_session_destroy(kiln_session *session);

/* Zeroes every state buffer, as at creation. */
KILN_API kiln_status kiln_session_reset(kiln_session *session);

/* Copies `data` into input `input` of `method`. dtype and shape must match
 * the declared input; a dynamic dimension may be 1..its declared maximum.
 * The copy stays until this input is set again (other methods' calls and
 * kiln_session_reset, which zeroes state only, leave it in place).
 * KILN_ERR_INVALID_ARG names the input, the expected and the given
 * dtype/shape. */
KILN_API kiln_status kiln_session_set_input(kiln_session *session, int method, int input,
                                            const void *data, kiln_dtype dtype, int ndim,
                                            const int64_t *shape);

/* Runs a method on the inputs last set. Allocates nothing. On failure the
 * message names the method and the node. State changes made by nodes that
 * ran before a failure are kept. */
KILN_API kiln_status kiln_session_execute(kiln_session *session, int method);

/* Borrows output `output` of the last execute of `method`: a pointer into the
 * session's arena, valid until the next execute of any method of this
 * session, or destroy. shape receives the actual shape. KILN_ERR_INVALID_ARG
 * when `method` has not run, or another method ran after it (its outputs
 * were overwritten: the methods share one arena). */
KILN_API kiln_status kiln_session_get_output(kiln_session *session, int method, int output,
                                             const void **data, kiln_dtype *dtype, int *ndim,
                                             int64_t shape[KILN_MAX_DIMS]);

/* The program a session was made from (borrowed). */
KILN_API const kiln_program *kiln_session_program(const kiln_session *session);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
