/* alloc.c: every allocation of the library goes through here, so there is
 * one place to hook it and tests can make the n-th one fail
 * (kiln_fail_alloc_after); also the string copies and 64-byte aligned blocks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static _Thread_local long g_fail_after;

void kiln_fail_alloc_after(long n) {
    g_fail_after = n;
}

static int inject_failure(void) {
    if (g_fail_after > 0 && --g_fail_after == 0) return 1;
    return 0;
}

void *kiln_malloc(size_t size) {
    return inject_failure() ? NULL : malloc(size ? size : 1);
}
void *kiln_calloc(size_t n, size_t size) {
    return inject_failure() ? NULL : calloc(n ? n : 1, size ? size : 1);
}
void *kiln_realloc(void *p, size_t size) {
    return inject_failure() ? NULL : realloc(p, size ? size : 1);
}
void kiln_free(void *p) {
    free(p);
}

char *kiln_strndup(const char *s, size_t n) {
    char *d = kiln_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
char *kiln_strdup(const char *s) {
    return kiln_strndup(s, strlen(s));
}

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
