/* buf.c: the little-endian byte buffers every on-disk format goes through.
 * Writers grow; readers check every byte they take against what is left. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

void kiln_wbuf_free(kiln_wbuf *b) {
    kiln_free(b->data);
    memset(b, 0, sizeof *b);
}

void kiln_wbuf_bytes(kiln_wbuf *b, const void *p, size_t n) {
    if (b->failed) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = kiln_realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* The host is little-endian on every target Kiln supports (x86-64, ARM64);
 * the static check below keeps it honest. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Kiln's file formats assume a little-endian host"
#endif

void kiln_wbuf_u8(kiln_wbuf *b, uint8_t v) {
    kiln_wbuf_bytes(b, &v, 1);
}
void kiln_wbuf_u32(kiln_wbuf *b, uint32_t v) {
    kiln_wbuf_bytes(b, &v, 4);
}
void kiln_wbuf_i32(kiln_wbuf *b, int32_t v) {
    kiln_wbuf_bytes(b, &v, 4);
}
void kiln_wbuf_u64(kiln_wbuf *b, uint64_t v) {
    kiln_wbuf_bytes(b, &v, 8);
}
void kiln_wbuf_f32(kiln_wbuf *b, float v) {
    kiln_wbuf_bytes(b, &v, 4);
}
void kiln_wbuf_f64(kiln_wbuf *b, double v) {
    kiln_wbuf_bytes(b, &v, 8);
}
void kiln_wbuf_strn(kiln_wbuf *b, const char *s, size_t n) {
    kiln_wbuf_u32(b, (uint32_t)n);
    kiln_wbuf_bytes(b, s, n);
}
void kiln_wbuf_str(kiln_wbuf *b, const char *s) {
    kiln_wbuf_strn(b, s, strlen(s));
}

/* ---- reader -------------------------------------------------------------- */

void kiln_rbuf_init(kiln_rbuf *r, const void *data, size_t len, uint64_t base, const char *what) {
    r->data = data;
    r->len = len;
    r->pos = 0;
    r->base = base;
    r->what = what;
    r->failed = 0;
}

void kiln_rbuf_fail(kiln_rbuf *r, const char *fmt, ...) {
    if (r->failed) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln_error(KILN_ERR_FORMAT, "%s, offset %llu: %s", r->what,
               (unsigned long long)(r->base + r->pos), msg);
    r->failed = KILN_ERR_FORMAT;
}

static const uint8_t *take(kiln_rbuf *r, const char *field, size_t n) {
    if (r->failed) return NULL;
    if (n > r->len - r->pos) {
        kiln_rbuf_fail(r, "field '%s' needs %zu bytes but only %zu are left", field, n,
                       r->len - r->pos);
        return NULL;
    }
    const uint8_t *p = r->data + r->pos;
    r->pos += n;
    return p;
}

#define READ_SCALAR(type, fname)                                                                   \
    type fname(kiln_rbuf *r, const char *field) {                                                  \
        type v = 0;                                                                                \
        const uint8_t *p = take(r, field, sizeof v);                                               \
        if (p) memcpy(&v, p, sizeof v);                                                            \
        return v;                                                                                  \
    }
READ_SCALAR(uint8_t, kiln_rbuf_u8)
READ_SCALAR(uint32_t, kiln_rbuf_u32)
READ_SCALAR(int32_t, kiln_rbuf_i32)
READ_SCALAR(uint64_t, kiln_rbuf_u64)
READ_SCALAR(float, kiln_rbuf_f32)
READ_SCALAR(double, kiln_rbuf_f64)

const void *kiln_rbuf_bytes(kiln_rbuf *r, const char *field, size_t n) {
    return take(r, field, n);
}

const char *kiln_rbuf_str(kiln_rbuf *r, const char *field, uint32_t max_len, uint32_t *len) {
    uint32_t n = kiln_rbuf_u32(r, field);
    if (r->failed) return NULL;
    if (n > max_len) {
        r->pos -= 4;
        kiln_rbuf_fail(r, "string '%s' has length %u, more than the limit %u", field, n, max_len);
        return NULL;
    }
    const char *p = (const char *)take(r, field, n);
    if (p && len) *len = n;
    return p;
}

char *kiln_rbuf_strdup(kiln_rbuf *r, const char *field, uint32_t max_len) {
    uint32_t n = 0;
    const char *p = kiln_rbuf_str(r, field, max_len, &n);
    if (!p) return NULL;
    if (memchr(p, 0, n)) {
        kiln_rbuf_fail(r, "string '%s' contains a NUL byte", field);
        return NULL;
    }
    char *s = kiln_strndup(p, n);
    if (!s) {
        kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", field);
        r->failed = KILN_ERR_NOMEM;
    }
    return s;
}

uint32_t kiln_rbuf_count(kiln_rbuf *r, const char *field, uint32_t min_item_bytes) {
    uint32_t n = kiln_rbuf_u32(r, field);
    if (r->failed) return 0;
    if (min_item_bytes && (uint64_t)n * min_item_bytes > r->len - r->pos) {
        r->pos -= 4;
        kiln_rbuf_fail(r, "count '%s' = %u cannot fit in the %zu bytes left (at least %u each)",
                       field, n, r->len - r->pos - 4, min_item_bytes);
        return 0;
    }
    return n;
}

kiln_status kiln_rbuf_status(const kiln_rbuf *r) {
    return (kiln_status)r->failed;
}
