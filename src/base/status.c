/* status.c: error messages (thread-local), allocation hooks, version and
 * dtype facts, and the clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"

static _Thread_local char g_msg[2048];
static _Thread_local kiln_status g_status;

kiln_status kiln_last_status(void) { return g_status; }

const char *kiln_strerror(kiln_status status) {
    switch (status) {
    case KILN_OK: return "ok";
    case KILN_ERR_IO: return "i/o error";
    case KILN_ERR_FORMAT: return "format error";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_INVALID_ARG: return "invalid argument";
    case KILN_ERR_NOMEM: return "out of memory";
    case KILN_ERR_BACKEND: return "backend error";
    case KILN_ERR_VERSION: return "format version mismatch";
    case KILN_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

const char *kiln_last_error(void) { return g_msg; }

const char *kiln_version(void) { return KILN_VERSION_STRING; }

kiln_status kiln_error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    g_status = status;
    return status;
}

kiln_status kiln_error_wrap(kiln_status status, const char *fmt, ...) {
    char prefix[512], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    /* Truncation keeps the start of the message, which names the most. */
    size_t n = strlen(prefix);
    memcpy(g_msg, prefix, n);
    if (n + 2 < sizeof g_msg) {
        memcpy(g_msg + n, ": ", 2);
        size_t room = sizeof g_msg - n - 3, m = strlen(old);
        if (m > room) m = room;
        memcpy(g_msg + n + 2, old, m);
        g_msg[n + 2 + m] = 0;
    } else {
        g_msg[n] = 0;
    }
    g_status = status;
    return status;
}

/* ---- allocation ---------------------------------------------------------- */

static _Thread_local long g_fail_after;

void kiln_fail_alloc_after(long n) { g_fail_after = n; }

static int inject_failure(void) {
    if (g_fail_after > 0 && --g_fail_after == 0) return 1;
    return 0;
}

void *kiln_malloc(size_t size) { return inject_failure() ? NULL : malloc(size ? size : 1); }
void *kiln_calloc(size_t n, size_t size) {
    return inject_failure() ? NULL : calloc(n ? n : 1, size ? size : 1);
}
void *kiln_realloc(void *p, size_t size) {
    return inject_failure() ? NULL : realloc(p, size ? size : 1);
}
void kiln_free(void *p) { free(p); }

char *kiln_strndup(const char *s, size_t n) {
    char *d = kiln_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
char *kiln_strdup(const char *s) { return kiln_strndup(s, strlen(s)); }

/* calloc, not aligned_alloc + memset: for large blocks calloc maps fresh
 * zero pages without touching them, so a session's arena (sized for the
 * largest prefill and for all-row logits) costs resident memory only where
 * a call writes. The block calloc returned is kept just before the aligned
 * pointer. */
void *kiln_aligned_alloc(size_t size) {
    if (inject_failure()) return NULL;
    size = kiln_align_up(size ? size : 1, 64);
    if (size > SIZE_MAX - 64 - sizeof(void *)) return NULL;
    char *raw = calloc(1, size + 64 + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)(raw + sizeof(void *)) + 63) & ~(uintptr_t)63;
    memcpy((char *)a - sizeof(void *), &raw, sizeof raw);
    return (void *)a;
}
void kiln_aligned_free(void *p) {
    if (!p) return;
    void *raw;
    memcpy(&raw, (char *)p - sizeof(void *), sizeof raw);
    free(raw);
}

int kiln_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (a && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
int kiln_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

double kiln_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- dtypes -------------------------------------------------------------- */

typedef struct {
    const char *name;
    int block;       /* elements per block */
    int block_bytes; /* bytes per block */
    int group;       /* rows interleaved per group */
} dtype_row;

static const dtype_row *dtype_info(kiln_dtype t) {
    /* Block layouts are the public GGML ones: Q8_0 = f16 scale + 32 int8;
     * Q4_0 = f16 scale + 16 bytes of nibbles; Q4_1 adds an f16 minimum;
     * Q4_K and Q6_K are 256-element super-blocks. */
    static const dtype_row f32 = {"f32", 1, 4, 1}, f16 = {"f16", 1, 2, 1}, bf16 = {"bf16", 1, 2, 1},
                           i32 = {"i32", 1, 4, 1}, q8_0 = {"q8_0", 32, 34, 1}, q4_0 = {"q4_0", 32, 18, 1},
                           q4_1 = {"q4_1", 32, 20, 1}, q4_k = {"q4_K", 256, 144, 1},
                           q6_k = {"q6_K", 256, 210, 1}, q4_0x8 = {"q4_0x8", 32, 18, 8},
                           q4_1x8 = {"q4_1x8", 32, 20, 8};
    switch (t) {
    case KILN_F32: return &f32;
    case KILN_F16: return &f16;
    case KILN_BF16: return &bf16;
    case KILN_I32: return &i32;
    case KILN_Q8_0: return &q8_0;
    case KILN_Q4_0: return &q4_0;
    case KILN_Q4_1: return &q4_1;
    case KILN_Q4_K: return &q4_k;
    case KILN_Q6_K: return &q6_k;
    case KILN_Q4_0_X8: return &q4_0x8;
    case KILN_Q4_1_X8: return &q4_1x8;
    }
    return NULL;
}

int kiln_dtype_valid(uint32_t v) { return dtype_info((kiln_dtype)v) != NULL; }

const char *kiln_dtype_name(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->name : NULL;
}

int kiln_dtype_block(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->block : 0;
}

int kiln_dtype_row_group(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->group : 0;
}

size_t kiln_dtype_row_bytes(kiln_dtype dtype, int64_t n) {
    const dtype_row *r = dtype_info(dtype);
    if (!r || n < 0 || n % r->block) return 0;
    return (size_t)(n / r->block) * (size_t)r->block_bytes;
}
