/* tensors.c: the tensor folder of docs/TENSORS.md: NumPy .npy files (read
 * with every field checked, written as numpy.save writes them) and the
 * manifest.json that names them (read with src/base/json.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "ir/graph.h"
#include "devtools/tensors.h"

/* ---- dtypes ------------------------------------------------------------------ */

static const struct {
    const char *name;  /* manifest name */
    const char *descr; /* NumPy's type string without the byte order */
    size_t size;
} g_types[KILN_NPY_DTYPE_COUNT] = {
    [KILN_NPY_F32] = {"f32", "f4", 4},   [KILN_NPY_F16] = {"f16", "f2", 2},
    [KILN_NPY_BF16] = {"bf16", "u2", 2}, [KILN_NPY_F64] = {"f64", "f8", 8},
    [KILN_NPY_I32] = {"i32", "i4", 4},   [KILN_NPY_I64] = {"i64", "i8", 8},
};

static int dtype_ok(kiln_npy_dtype t) {
    return (unsigned)t < KILN_NPY_DTYPE_COUNT;
}

const char *kiln_npy_dtype_name(kiln_npy_dtype t) {
    return dtype_ok(t) ? g_types[t].name : NULL;
}

size_t kiln_npy_dtype_size(kiln_npy_dtype t) {
    return dtype_ok(t) ? g_types[t].size : 0;
}

int kiln_npy_dtype_from_name(const char *name) {
    for (int i = 0; name && i < KILN_NPY_DTYPE_COUNT; i++)
        if (!strcmp(name, g_types[i].name)) return i;
    return -1;
}

int kiln_npy_dtype_to_kiln(kiln_npy_dtype t, kiln_dtype *out) {
    switch (t) {
    case KILN_NPY_F32:
        *out = KILN_F32;
        return 0;
    case KILN_NPY_F16:
        *out = KILN_F16;
        return 0;
    case KILN_NPY_BF16:
        *out = KILN_BF16;
        return 0;
    case KILN_NPY_I32:
        *out = KILN_I32;
        return 0;
    default:
        return -1;
    }
}

int kiln_npy_dtype_from_kiln(kiln_dtype t, kiln_npy_dtype *out) {
    switch (t) {
    case KILN_F32:
        *out = KILN_NPY_F32;
        return 0;
    case KILN_F16:
        *out = KILN_NPY_F16;
        return 0;
    case KILN_BF16:
        *out = KILN_NPY_BF16;
        return 0;
    case KILN_I32:
        *out = KILN_NPY_I32;
        return 0;
    default:
        return -1;
    }
}

/* "[2, 3]", "[]" for a scalar. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t l = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && l < cap; i++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (l < cap) snprintf(buf + l, cap - l, "]");
    return buf;
}

/* Elements * size with overflow checks; 0 on success. */
static int array_bytes(kiln_npy_dtype t, int ndim, const int64_t *shape, uint64_t *out) {
    uint64_t n = kiln_npy_dtype_size(t);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !kiln_mul_ok(n, (uint64_t)shape[i], &n)) return -1;
    if (n > (uint64_t)SIZE_MAX / 2) return -1;
    *out = n;
    return 0;
}

/* ---- .npy: reading ------------------------------------------------------------- */

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* NumPy itself refuses headers past 10000 bytes by default */

/* The header: a Python dict literal as NumPy writes it,
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
typedef struct hdr {
    const char *s;
    size_t len, pos;
    size_t base; /* file offset of s[0], for messages */
    const char *what;
} hdr;

static kiln_status hdr_fail(const hdr *h, const char *fmt, ...) KILN_PRINTF(2, 3);
static kiln_status hdr_fail(const hdr *h, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_error(KILN_ERR_FORMAT, "%s: bad header at byte %zu: %s", h->what, h->base + h->pos,
                      msg);
}

static void hdr_ws(hdr *h) {
    while (h->pos < h->len && (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' ||
                               h->s[h->pos] == '\n' || h->s[h->pos] == '\r'))
        h->pos++;
}

static int hdr_peek(const hdr *h) {
    return h->pos < h->len ? (unsigned char)h->s[h->pos] : -1;
}

/* A short description of what is at the cursor, for messages. */
static const char *hdr_found(const hdr *h, char *buf, size_t cap) {
    if (h->pos >= h->len) return "the end of the header";
    size_t n = 0;
    buf[n++] = '\'';
    for (size_t i = h->pos; i < h->len && n + 6 < cap && i < h->pos + 16; i++) {
        unsigned char c = (unsigned char)h->s[i];
        n += (size_t)snprintf(buf + n, cap - n, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
    }
    snprintf(buf + n, cap - n, "'");
    return buf;
}

static kiln_status hdr_expect(hdr *h, char c, const char *where) {
    hdr_ws(h);
    if (hdr_peek(h) == c) {
        h->pos++;
        return KILN_OK;
    }
    char buf[96];
    return hdr_fail(h, "expected '%c' %s, found %s", c, where, hdr_found(h, buf, sizeof buf));
}

/* A Python string literal ('...' or "...") without escapes, at most cap-1 bytes. */
static kiln_status hdr_string(hdr *h, char *out, size_t cap, const char *what) {
    hdr_ws(h);
    int q = hdr_peek(h);
    char buf[96];
    if (q != '\'' && q != '"')
        return hdr_fail(h, "expected %s (a quoted string), found %s", what,
                        hdr_found(h, buf, sizeof buf));
    size_t start = ++h->pos, n = 0;
    for (;; h->pos++) {
        if (h->pos >= h->len) {
            h->pos = start - 1;
            return hdr_fail(h, "unterminated string");
        }
        unsigned char c = (unsigned char)h->s[h->pos];
        if (c == q) break;
        if (c == '\\' || c < 0x20 || c >= 0x7f)
            return hdr_fail(h, "%s holds a byte 0x%02x that NumPy's headers never hold", what, c);
        if (n + 1 >= cap) {
            h->pos = start - 1;
            return hdr_fail(h, "%s is longer than %zu bytes", what, cap - 1);
        }
        out[n++] = (char)c;
    }
    h->pos++;
    out[n] = 0;
    return KILN_OK;
}

/* 'descr': '<f4' and friends. */
static kiln_status hdr_descr(hdr *h, kiln_npy_dtype *out) {
    char d[40];
    hdr_ws(h);
    size_t at = h->pos;
    if (hdr_peek(h) == '[')
        return hdr_fail(h, "'descr' is a list (a structured array): Kiln reads plain arrays only");
    kiln_status st = hdr_string(h, d, sizeof d, "'descr'");
    if (st) return st;
    size_t end = h->pos;
    h->pos = at;
    char order = d[0];
    const char *type = d + 1;
    if (order == '>')
        st = hdr_fail(h, "descr '%s' is big-endian: Kiln reads little-endian data only ('<%s')", d,
                      type);
    else if (order != '<' && order != '|' && order != '=')
        st = hdr_fail(h, "descr '%s' has no byte order ('<', '|' or '=') first", d);
    if (st) return st;
    for (int i = 0; i < KILN_NPY_DTYPE_COUNT; i++)
        if (!strcmp(type, g_types[i].descr)) {
            /* '=' is the writer's native order, little-endian on every machine Kiln runs on;
             * '|' (no order) is only for one-byte types, none of which Kiln reads. */
            if (order == '|')
                return hdr_fail(h, "descr '%s' has no byte order for a %zu-byte type", d,
                                g_types[i].size);
            *out = (kiln_npy_dtype)i;
            h->pos = end;
            return KILN_OK;
        }
    return hdr_fail(
        h,
        "descr '%s' is not a type Kiln reads: '<f4' (f32), '<f2' (f16), '<u2' (bf16 bits), "
        "'<f8' (f64), '<i4' (i32), '<i8' (i64)",
        d);
}

static kiln_status hdr_bool(hdr *h, int *out) {
    hdr_ws(h);
    if (h->len - h->pos >= 4 && !memcmp(h->s + h->pos, "True", 4)) {
        h->pos += 4;
        *out = 1;
    } else if (h->len - h->pos >= 5 && !memcmp(h->s + h->pos, "False", 5)) {
        h->pos += 5;
        *out = 0;
    } else {
        char buf[96];
        return hdr_fail(h, "'fortran_order' should be True or False, found %s",
                        hdr_found(h, buf, sizeof buf));
    }
    return KILN_OK;
}

/* 'shape': (2, 3) | (5,) | () */
static kiln_status hdr_shape(hdr *h, int *ndim, int64_t *shape) {
    kiln_status st = hdr_expect(h, '(', "to open 'shape' (a tuple)");
    if (st) return st;
    int n = 0, trailing_comma = 0;
    char buf[96];
    for (;;) {
        hdr_ws(h);
        if (hdr_peek(h) == ')') break;
        int c = hdr_peek(h);
        if (c < '0' || c > '9')
            return hdr_fail(h, "expected a dimension (a non-negative integer) in 'shape', found %s",
                            hdr_found(h, buf, sizeof buf));
        uint64_t v = 0;
        size_t start = h->pos;
        while ((c = hdr_peek(h)) >= '0' && c <= '9') {
            if (v > ((uint64_t)1 << 62) / 10) {
                h->pos = start;
                return hdr_fail(h, "dimension %zu of 'shape' is too large", (size_t)n);
            }
            v = v * 10 + (uint64_t)(c - '0');
            h->pos++;
        }
        if (hdr_peek(h) == 'L') h->pos++; /* Python 2's long literals (old files) */
        if (n == KILN_MAX_DIMS) {
            h->pos = start;
            return hdr_fail(h, "'shape' has more than %d dimensions", KILN_MAX_DIMS);
        }
        shape[n++] = (int64_t)v;
        trailing_comma = 0;
        hdr_ws(h);
        if (hdr_peek(h) == ',') {
            h->pos++;
            trailing_comma = 1;
            continue;
        }
        if (hdr_peek(h) != ')')
            return hdr_fail(h, "expected ',' or ')' in 'shape', found %s",
                            hdr_found(h, buf, sizeof buf));
    }
    if (n == 1 && !trailing_comma)
        return hdr_fail(h, "'shape' (%lld) is not a tuple (a one-element tuple is written (%lld,))",
                        (long long)shape[0], (long long)shape[0]);
    h->pos++; /* ')' */
    *ndim = n;
    return KILN_OK;
}

static kiln_status parse_header(hdr *h, kiln_npy *out) {
    int seen[3] = {0, 0, 0}, fortran = 0;
    kiln_status st = hdr_expect(h, '{', "at the start of the header (a Python dict)");
    if (st) return st;
    for (;;) {
        hdr_ws(h);
        if (hdr_peek(h) == '}') break;
        char key[32];
        size_t at = h->pos;
        if ((st = hdr_string(h, key, sizeof key, "a key"))) return st;
        int k = !strcmp(key, "descr")           ? 0
                : !strcmp(key, "fortran_order") ? 1
                : !strcmp(key, "shape")         ? 2
                                                : -1;
        if (k < 0 || seen[k]) {
            h->pos = at;
            return hdr_fail(
                h, "%s key '%s' (the header holds exactly 'descr', 'fortran_order' and 'shape')",
                k < 0 ? "unknown" : "repeated", key);
        }
        seen[k] = 1;
        if ((st = hdr_expect(h, ':', "after a key"))) return st;
        st = k == 0   ? hdr_descr(h, &out->dtype)
             : k == 1 ? hdr_bool(h, &fortran)
                      : hdr_shape(h, &out->ndim, out->shape);
        if (st) return st;
        hdr_ws(h);
        if (hdr_peek(h) == ',') {
            h->pos++;
            continue;
        }
        if (hdr_peek(h) != '}') {
            char buf[96];
            return hdr_fail(h, "expected ',' or '}' after a value, found %s",
                            hdr_found(h, buf, sizeof buf));
        }
    }
    h->pos++; /* '}' */
    hdr_ws(h);
    if (h->pos < h->len)
        return hdr_fail(h, "bytes after the dict (only spaces and a newline may follow it)");
    static const char *names[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return hdr_fail(h, "key '%s' is missing", names[k]);
    if (fortran)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: 'fortran_order' is True: Kiln reads C order only (save "
                          "numpy.ascontiguousarray(a))",
                          h->what);
    return KILN_OK;
}

/* The file name in quotes, for messages. */
static void quoted(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "'%s'", name);
}

kiln_status kiln_npy_parse(const void *bytes, size_t len, const char *what, kiln_npy *out) {
    memset(out, 0, sizeof *out);
    char w[1100];
    quoted(what ? what : ".npy data", w, sizeof w);
    const uint8_t *b = bytes;
    if (len < 10)
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: truncated: %zu bytes, but an .npy file starts with 10 (magic, version, "
            "header length)",
            w, len);
    if (memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN))
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: bad magic: not an .npy file (the first 6 bytes should be \\x93NUMPY, found "
            "%02x %02x %02x %02x %02x %02x)",
            w, b[0], b[1], b[2], b[3], b[4], b[5]);
    int major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: .npy format version %d.%d: Kiln reads 1.0, 2.0 and 3.0", w, major,
                          minor);
    size_t pre = major == 1 ? 10 : 12;
    if (len < pre)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: truncated: %zu bytes, a version %d.0 header length needs %zu", w,
                          len, major, pre);
    uint64_t hlen = major == 1 ? (uint64_t)b[8] | (uint64_t)b[9] << 8
                               : (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
                                     (uint64_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return kiln_error(KILN_ERR_FORMAT, "%s: header length %llu is more than %u bytes", w,
                          (unsigned long long)hlen, NPY_MAX_HEADER);
    if (hlen > len - pre)
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: truncated: the header declares %llu bytes, the file has %zu after byte %zu", w,
            (unsigned long long)hlen, len - pre, pre);
    hdr h = {(const char *)b + pre, (size_t)hlen, 0, pre, w};
    kiln_status st = parse_header(&h, out);
    if (st) return st;
    uint64_t need;
    char sh[200];
    shape_str(out->ndim, out->shape, sh, sizeof sh);
    if (array_bytes(out->dtype, out->ndim, out->shape, &need))
        return kiln_error(KILN_ERR_FORMAT, "%s: shape %s of %s is too large", w, sh,
                          kiln_npy_dtype_name(out->dtype));
    size_t off = pre + (size_t)hlen, have = len - off;
    if (have < need)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: truncated: the data is %zu bytes, shape %s of %s needs %llu", w,
                          have, sh, kiln_npy_dtype_name(out->dtype), (unsigned long long)need);
    if (have > need)
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: %llu bytes after the data of shape %s of %s (%llu bytes): not one array", w,
            (unsigned long long)(have - need), sh, kiln_npy_dtype_name(out->dtype),
            (unsigned long long)need);
    out->nbytes = need;
    out->data = b + off;
    return KILN_OK;
}

kiln_status kiln_npy_read(const char *path, kiln_npy *out) {
    memset(out, 0, sizeof *out);
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    kiln_npy a;
    st = kiln_npy_parse(map.data, map.size, path, &a);
    if (!st) {
        a.owned = kiln_malloc(a.nbytes ? (size_t)a.nbytes : 1);
        if (!a.owned)
            st = kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s' (%llu bytes)", path,
                            (unsigned long long)a.nbytes);
        else {
            if (a.nbytes) memcpy(a.owned, a.data, (size_t)a.nbytes);
            a.data = a.owned;
            *out = a;
        }
    }
    kiln_file_map_close(&map);
    return st;
}

void kiln_npy_free(kiln_npy *a) {
    if (!a) return;
    kiln_free(a->owned);
    memset(a, 0, sizeof *a);
}

/* ---- .npy: writing ----------------------------------------------------------------- */

/* numpy.lib.format: headers end on a multiple of 64 bytes, and leave room
 * for the growth axis (axis 0 in C order) to reach 21 digits in place. */
#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21

kiln_status kiln_npy_encode(kiln_wbuf *b, kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                            const void *data) {
    uint64_t nbytes;
    if (!dtype_ok(dtype) || ndim < 0 || ndim > KILN_MAX_DIMS || (ndim && !shape) ||
        array_bytes(dtype, ndim, shape, &nbytes) || (nbytes && !data))
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "cannot write an .npy file: bad dtype %d or shape (%d dims)", (int)dtype,
                          ndim);
    char dict[512];
    size_t n =
        (size_t)snprintf(dict, sizeof dict, "{'descr': '<%s', 'fortran_order': False, 'shape': (",
                         g_types[dtype].descr);
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", ndim == 1 ? "," : "");
    if (ndim > 0) {
        char d0[32];
        int l0 = snprintf(d0, sizeof d0, "%lld", (long long)shape[0]);
        for (int i = l0; i < NPY_GROWTH_DIGITS; i++)
            dict[n++] = ' ';
    }
    /* version 1.0: magic(6) + version(2) + u16 length; + '\n' at the end */
    size_t pre = 10, total = pre + n + 1;
    size_t pad = (NPY_ALIGN - total % NPY_ALIGN) % NPY_ALIGN;
    size_t hlen = n + pad + 1;
    kiln_wbuf_bytes(b, NPY_MAGIC, NPY_MAGIC_LEN);
    kiln_wbuf_u8(b, 1);
    kiln_wbuf_u8(b, 0);
    kiln_wbuf_u8(b, (uint8_t)(hlen & 0xff));
    kiln_wbuf_u8(b, (uint8_t)(hlen >> 8));
    kiln_wbuf_bytes(b, dict, n);
    for (size_t i = 0; i < pad; i++)
        kiln_wbuf_u8(b, ' ');
    kiln_wbuf_u8(b, '\n');
    /* Data: Kiln runs on little-endian machines only (the program format is
     * mapped in place), so memory order is file order. */
    if (nbytes) kiln_wbuf_bytes(b, data, (size_t)nbytes);
    if (b->failed)
        return kiln_error(KILN_ERR_NOMEM, "out of memory writing an .npy file (%llu bytes)",
                          (unsigned long long)nbytes);
    return KILN_OK;
}

/* Writes a whole file (kiln_outfile: complete or not there). */
static kiln_status write_file(const char *path, const void *data, size_t len) {
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return st;
    if (len && fwrite(data, 1, len, out.f) != len) {
        st = kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        kiln_outfile_discard(&out);
        return st;
    }
    return kiln_outfile_commit(&out);
}

kiln_status kiln_npy_write(const char *path, kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                           const void *data) {
    kiln_wbuf b = {0};
    kiln_status st = kiln_npy_encode(&b, dtype, ndim, shape, data);
    if (!st) st = write_file(path, b.data, b.len);
    kiln_wbuf_free(&b);
    return st;
}

/* ---- folders: shared ------------------------------------------------------------------ */

#define MANIFEST "manifest.json"
#define MANIFEST_MAX ((size_t)256 << 20)
#define FORMAT_NAME "kiln-tensors"
#define FORMAT_VERSION 1

/* dir + "/" + name, allocated; NULL when out of memory (message set). */
static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = kiln_malloc(a + b + 2);
    if (!p) {
        kiln_error(KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(p, dir, a);
    size_t n = a;
    if (n && p[n - 1] != '/') p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

static int str_eq(const char *a, const char *b) {
    return a == b || (a && b && !strcmp(a, b));
}

static void entry_free(kiln_tensor_entry *e) {
    kiln_free(e->name);
    kiln_free(e->file);
    kiln_free(e->method);
    kiln_free(e->role);
    kiln_free(e->node);
    kiln_free(e->op);
    kiln_free(e->data);
    memset(e, 0, sizeof *e);
}

void kiln_tensor_folder_free(kiln_tensor_folder *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++)
        entry_free(&f->items[i]);
    kiln_free(f->items);
    kiln_free(f->dir);
    memset(f, 0, sizeof *f);
}

static kiln_tensor_entry *push(kiln_tensor_folder *f) {
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 16;
        kiln_tensor_entry *p = kiln_realloc(f->items, (size_t)cap * sizeof *p);
        if (!p) {
            kiln_error(KILN_ERR_NOMEM, "out of memory listing tensors");
            return NULL;
        }
        f->items = p;
        f->cap = cap;
    }
    kiln_tensor_entry *e = &f->items[f->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* The index of the entry with this (method, role, node, name), or -1. */
static int find_exact(const kiln_tensor_folder *f, const char *method, const char *role,
                      const char *node, const char *name) {
    for (int i = 0; i < f->n; i++) {
        const kiln_tensor_entry *e = &f->items[i];
        if (str_eq(e->name, name) && str_eq(e->method, method) && str_eq(e->role, role) &&
            str_eq(e->node, node))
            return i;
    }
    return -1;
}

const kiln_tensor_entry *kiln_tensor_folder_find(const kiln_tensor_folder *f, const char *method,
                                                 const char *role, const char *node,
                                                 const char *name) {
    const kiln_tensor_entry *best = NULL;
    int best_score = -1;
    for (int i = 0; f && i < f->n; i++) {
        const kiln_tensor_entry *e = &f->items[i];
        if (strcmp(e->name, name) || !str_eq(e->node, node)) continue;
        if (e->method && (!method || strcmp(e->method, method))) continue;
        if (e->role && (!role || strcmp(e->role, role))) continue;
        int score = (e->method != NULL) * 2 + (e->role != NULL);
        if (score > best_score) {
            best = e;
            best_score = score;
        }
    }
    return best;
}

/* "method 'prefill', role 'input', " for messages. */
static const char *entry_where(const kiln_tensor_entry *e, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    if (e->method) n += (size_t)snprintf(buf + n, cap - n, ", method '%s'", e->method);
    if (e->role && n < cap) n += (size_t)snprintf(buf + n, cap - n, ", role '%s'", e->role);
    if (e->node && n < cap) snprintf(buf + n, cap - n, ", node '%s'", e->node);
    return buf;
}

/* ---- folders: reading ------------------------------------------------------------------ */

/* An optional string member: NULL when absent or null. */
static kiln_status opt_str(const kiln_json *o, const char *what, const char *key, char **out) {
    const char *s = NULL;
    size_t len = 0;
    kiln_status st = kiln_json_get_str(o, what, key, 0, &s, &len);
    if (st) return st;
    if (!s) return KILN_OK;
    if (strlen(s) != len)
        return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' holds a NUL character", what, key);
    if (!(*out = kiln_strdup(s))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

/* A file name must stay inside the folder: no '/', not "." or "..". */
static int plain_file_name(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static kiln_status parse_entry(const kiln_json *o, const char *mwhat, int index,
                               kiln_tensor_entry *e) {
    char what[1300];
    snprintf(what, sizeof what, "%s: tensor %d", mwhat, index);
    if (o->type != KILN_JSON_OBJECT)
        return kiln_error(KILN_ERR_FORMAT, "%s should be an object, found %s (byte %zu)", what,
                          kiln_json_type_name(o->type), o->offset);
    const char *name = NULL, *file = NULL, *dtype = NULL;
    size_t name_len = 0, file_len = 0;
    kiln_status st = kiln_json_get_str(o, what, "name", 1, &name, &name_len);
    if (st) return st;
    if (!*name || strlen(name) != name_len)
        return kiln_error(KILN_ERR_FORMAT, "%s: 'name' is empty or holds a NUL character", what);
    snprintf(what, sizeof what, "%s: tensor %d ('%s')", mwhat, index, name);
    if ((st = kiln_json_get_str(o, what, "file", 1, &file, &file_len)) ||
        (st = kiln_json_get_str(o, what, "dtype", 1, &dtype, NULL)))
        return st;
    if (strlen(file) != file_len || !plain_file_name(file))
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: file '%s' is not a plain file name inside the folder (no '/', not '.' or '..')",
            what, file);
    int t = kiln_npy_dtype_from_name(dtype);
    if (t < 0)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: dtype '%s' is not one of f32, f16, bf16, f64, i32, i64", what,
                          dtype);
    e->dtype = (kiln_npy_dtype)t;
    const kiln_json *shape;
    if ((st = kiln_json_get_arr(o, what, "shape", 1, &shape))) return st;
    if (shape->len > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_FORMAT, "%s: shape has %zu dimensions, at most %d", what,
                          shape->len, KILN_MAX_DIMS);
    e->ndim = (int)shape->len;
    for (size_t i = 0; i < shape->len; i++) {
        const kiln_json *d = &shape->items[i];
        if (d->type != KILN_JSON_NUMBER || !d->is_int || d->i < 0)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: shape[%zu] should be a non-negative integer (byte %zu)", what, i,
                              d->offset);
        e->shape[i] = d->i;
    }
    uint64_t nbytes;
    if (array_bytes(e->dtype, e->ndim, e->shape, &nbytes))
        return kiln_error(KILN_ERR_FORMAT, "%s: shape is too large", what);
    e->nbytes = nbytes;
    if (!(e->name = kiln_strdup(name)) || !(e->file = kiln_strdup(file)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    if ((st = opt_str(o, what, "method", &e->method)) ||
        (st = opt_str(o, what, "role", &e->role)) || (st = opt_str(o, what, "node", &e->node)) ||
        (st = opt_str(o, what, "op", &e->op)))
        return st;
    return KILN_OK;
}

kiln_status kiln_tensor_manifest_parse(const char *text, size_t len, const char *what,
                                       const char *dir, kiln_tensor_folder *out) {
    memset(out, 0, sizeof *out);
    char w[1200];
    quoted(what, w, sizeof w);
    kiln_json_doc doc = {0};
    kiln_status st = kiln_json_parse(text, len, w, 16, &doc);
    if (st) return st;
    const kiln_json *root = doc.root, *list = NULL;
    const char *format = NULL;
    int64_t version = FORMAT_VERSION;
    if (root->type != KILN_JSON_OBJECT) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: should be a JSON object, found %s", w,
                        kiln_json_type_name(root->type));
        goto done;
    }
    if ((st = kiln_json_get_str(root, w, "format", 0, &format, NULL)) ||
        (st = kiln_json_get_int(root, w, "version", 0, &version)) ||
        (st = kiln_json_get_arr(root, w, "tensors", 1, &list)))
        goto done;
    if (format && strcmp(format, FORMAT_NAME)) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: format '%s' is not '%s'", w, format, FORMAT_NAME);
        goto done;
    }
    if (version != FORMAT_VERSION) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: version %lld: Kiln reads version %d", w,
                        (long long)version, FORMAT_VERSION);
        goto done;
    }
    if (list->len > KILN_TENSORS_MAX) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: %zu tensors, at most %d", w, list->len,
                        KILN_TENSORS_MAX);
        goto done;
    }
    if (!(out->dir = kiln_strdup(dir ? dir : "."))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < list->len; i++) {
        kiln_tensor_entry *e = push(out);
        if (!e) {
            st = KILN_ERR_NOMEM;
            goto done;
        }
        if ((st = parse_entry(&list->items[i], w, (int)i, e))) goto done;
        int j = find_exact(out, e->method, e->role, e->node, e->name);
        if (j < out->n - 1) {
            char where[300];
            st = kiln_error(KILN_ERR_FORMAT, "%s: tensors %d and %zu are both '%s'%s", w, j, i,
                            e->name, entry_where(e, where, sizeof where));
            goto done;
        }
    }
done:
    kiln_json_free(&doc);
    if (st) kiln_tensor_folder_free(out);
    return st;
}

kiln_status kiln_tensor_folder_read(const char *dir, kiln_tensor_folder *out) {
    memset(out, 0, sizeof *out);
    char *mpath = join(dir, MANIFEST);
    if (!mpath) return KILN_ERR_NOMEM;
    kiln_file_map map;
    struct stat sb;
    kiln_status st;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        st = kiln_error(KILN_ERR_IO, "'%s' is not a folder", dir);
        kiln_free(mpath);
        return st;
    }
    if ((st = kiln_file_map_open(mpath, &map))) {
        st = kiln_error_wrap(st,
                             "reading the tensor folder '%s' (it needs a %s, see docs/TENSORS.md)",
                             dir, MANIFEST);
        kiln_free(mpath);
        return st;
    }
    if (map.size > MANIFEST_MAX)
        st = kiln_error(KILN_ERR_FORMAT, "'%s': %zu bytes, more than a manifest may hold (%zu)",
                        mpath, map.size, MANIFEST_MAX);
    else
        st = kiln_tensor_manifest_parse((const char *)map.data, map.size, mpath, dir, out);
    kiln_file_map_close(&map);
    for (int i = 0; !st && i < out->n; i++) {
        kiln_tensor_entry *e = &out->items[i];
        char *path = join(dir, e->file);
        if (!path) {
            st = KILN_ERR_NOMEM;
            break;
        }
        kiln_npy a;
        st = kiln_npy_read(path, &a);
        if (st) {
            char where[300];
            st = kiln_error_wrap(st, "'%s': tensor %d ('%s'%s)", mpath, i, e->name,
                                 entry_where(e, where, sizeof where));
        } else if (a.dtype != e->dtype || a.ndim != e->ndim ||
                   memcmp(a.shape, e->shape, (size_t)a.ndim * sizeof *a.shape)) {
            char s1[200], s2[200];
            st = kiln_error(
                KILN_ERR_FORMAT,
                "'%s': the manifest says tensor '%s' is %s %s, the file holds %s %s", path, e->name,
                kiln_npy_dtype_name(e->dtype), shape_str(e->ndim, e->shape, s1, sizeof s1),
                kiln_npy_dtype_name(a.dtype), shape_str(a.ndim, a.shape, s2, sizeof s2));
            kiln_npy_free(&a);
        } else {
            e->data = a.owned; /* taken over */
            e->nbytes = a.nbytes;
        }
        kiln_free(path);
    }
    kiln_free(mpath);
    if (st) kiln_tensor_folder_free(out);
    return st;
}

/* ---- folders: writing ------------------------------------------------------------------ */

/* mkdir -p, in place (p is restored); 0 or -1 (errno set). */
static int make_dirs(char *p) {
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = -1;
        *s = c;
        if (rc || !c) break;
    }
    struct stat sb;
    if (!rc && (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        errno = ENOTDIR;
        rc = -1;
    }
    return rc;
}

kiln_status kiln_tensor_folder_create(const char *dir, kiln_tensor_folder *out) {
    memset(out, 0, sizeof *out);
    if (!dir || !*dir) return kiln_error(KILN_ERR_INVALID_ARG, "no folder given for the tensors");
    if (!(out->dir = kiln_strdup(dir))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (make_dirs(out->dir)) {
        kiln_status st =
            kiln_error(KILN_ERR_IO, "cannot create the folder '%s': %s", dir, strerror(errno));
        kiln_tensor_folder_free(out);
        return st;
    }
    return KILN_OK;
}

/* Appends s with every byte outside [A-Za-z0-9_.-] made '_' (at most 80). */
static void safe_append(char *buf, size_t cap, const char *s) {
    size_t n = strlen(buf);
    if (n && n + 1 < cap) buf[n++] = '.';
    for (size_t i = 0; s[i] && i < 80 && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || (c == '.' && n > 0);
        buf[n++] = ok ? (char)c : '_';
    }
    buf[n] = 0;
}

static int file_taken(const kiln_tensor_folder *f, const char *file) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->items[i].file, file)) return 1;
    return 0;
}

kiln_status kiln_tensor_folder_add(kiln_tensor_folder *f, const kiln_tensor_desc *d,
                                   const void *data) {
    if (!f || !f->dir || !d || !d->name || !*d->name)
        return kiln_error(KILN_ERR_INVALID_ARG, "a tensor needs a folder and a name");
    if (find_exact(f, d->method, d->role, d->node, d->name) >= 0)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "tensor '%s' (method '%s', role '%s') is already in '%s'", d->name,
                          d->method ? d->method : "", d->role ? d->role : "", f->dir);
    /* method.node.name.npy, leaving out what is absent (and the name when it
     * is the node's); then .role, then -2, -3... until unique */
    char base[300] = "", file[340];
    if (d->method) safe_append(base, sizeof base, d->method);
    if (d->node) safe_append(base, sizeof base, d->node);
    if (!d->node || strcmp(d->node, d->name)) safe_append(base, sizeof base, d->name);
    snprintf(file, sizeof file, "%s.npy", base);
    if (file_taken(f, file) && d->role) {
        safe_append(base, sizeof base, d->role);
        snprintf(file, sizeof file, "%s.npy", base);
    }
    for (int k = 2; file_taken(f, file); k++)
        snprintf(file, sizeof file, "%s-%d.npy", base, k);

    kiln_tensor_entry *e = push(f);
    if (!e) return KILN_ERR_NOMEM;
    e->dtype = d->dtype;
    e->ndim = d->ndim;
    if (d->ndim > 0 && d->ndim <= KILN_MAX_DIMS && d->shape)
        memcpy(e->shape, d->shape, (size_t)d->ndim * sizeof *d->shape);
    kiln_status st = KILN_OK;
    if (!(e->name = kiln_strdup(d->name)) || !(e->file = kiln_strdup(file)) ||
        (d->method && !(e->method = kiln_strdup(d->method))) ||
        (d->role && !(e->role = kiln_strdup(d->role))) ||
        (d->node && !(e->node = kiln_strdup(d->node))) || (d->op && !(e->op = kiln_strdup(d->op))))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    char *path = st ? NULL : join(f->dir, file);
    if (!st && !path) st = KILN_ERR_NOMEM;
    if (!st) st = kiln_npy_write(path, d->dtype, d->ndim, d->shape, data);
    if (!st) array_bytes(e->dtype, e->ndim, e->shape, &e->nbytes);
    kiln_free(path);
    if (st) {
        entry_free(e);
        f->n--;
        return kiln_error_wrap(st, "writing tensor '%s'", d->name);
    }
    return KILN_OK;
}

static void json_str(kiln_wbuf *b, const char *s) {
    kiln_wbuf_u8(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            kiln_wbuf_u8(b, '\\');
            kiln_wbuf_u8(b, *p);
        } else if (*p < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *p);
            kiln_wbuf_bytes(b, e, 6);
        } else {
            kiln_wbuf_u8(b, *p);
        }
    }
    kiln_wbuf_u8(b, '"');
}

static void json_key_str(kiln_wbuf *b, const char *key, const char *v) {
    if (!v) return;
    kiln_wbuf_bytes(b, ", \"", 3);
    kiln_wbuf_bytes(b, key, strlen(key));
    kiln_wbuf_bytes(b, "\": ", 3);
    json_str(b, v);
}

kiln_status kiln_tensor_folder_finish(kiln_tensor_folder *f) {
    if (!f || !f->dir) return kiln_error(KILN_ERR_INVALID_ARG, "no tensor folder to finish");
    kiln_wbuf b = {0};
    char line[128];
    int n = snprintf(line, sizeof line,
                     "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"tensors\": [", FORMAT_NAME,
                     FORMAT_VERSION);
    kiln_wbuf_bytes(&b, line, (size_t)n);
    for (int i = 0; i < f->n; i++) {
        const kiln_tensor_entry *e = &f->items[i];
        kiln_wbuf_bytes(&b, i ? ",\n    {\"name\": " : "\n    {\"name\": ", i ? 15 : 14);
        json_str(&b, e->name);
        json_key_str(&b, "method", e->method);
        json_key_str(&b, "role", e->role);
        json_key_str(&b, "node", e->node);
        json_key_str(&b, "op", e->op);
        json_key_str(&b, "dtype", kiln_npy_dtype_name(e->dtype));
        kiln_wbuf_bytes(&b, ", \"shape\": [", 12);
        for (int d = 0; d < e->ndim; d++) {
            n = snprintf(line, sizeof line, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
            kiln_wbuf_bytes(&b, line, (size_t)n);
        }
        kiln_wbuf_u8(&b, ']');
        json_key_str(&b, "file", e->file);
        kiln_wbuf_u8(&b, '}');
    }
    kiln_wbuf_bytes(&b, f->n ? "\n  ]\n}\n" : "]\n}\n", f->n ? 7 : 4);
    kiln_status st =
        b.failed ? kiln_error(KILN_ERR_NOMEM, "out of memory writing a manifest") : KILN_OK;
    char *path = st ? NULL : join(f->dir, MANIFEST);
    if (!st && !path) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (!st) st = write_file(path, b.data, b.len);
    kiln_free(path);
    kiln_wbuf_free(&b);
    return st;
}

/* ---- checking an input ------------------------------------------------------------------ */

const char *kiln_tensor_info_shape_str(const kiln_tensor_info *t, char *buf, size_t cap) {
    size_t l = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && l < cap; i++) {
        if (t->dynamic_mask >> i & 1)
            l += (size_t)snprintf(buf + l, cap - l, "%s1..%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        else
            l +=
                (size_t)snprintf(buf + l, cap - l, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    if (l < cap) snprintf(buf + l, cap - l, "]");
    return buf;
}

kiln_status kiln_tensor_check_input(const char *method, const kiln_tensor_info *want,
                                    kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                                    const char *source) {
    kiln_dtype kd;
    int ok = !kiln_npy_dtype_to_kiln(dtype, &kd) && kd == want->dtype && ndim == want->ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = want->dynamic_mask >> d & 1 ? shape[d] >= 1 && shape[d] <= want->shape[d]
                                         : shape[d] == want->shape[d];
    if (ok) return KILN_OK;
    char ws[200], gs[200];
    const char *gname = kiln_npy_dtype_name(dtype);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        snprintf(gs, sizeof gs, "(%d dims)", ndim);
    else
        shape_str(ndim, shape, gs, sizeof gs);
    return kiln_error(KILN_ERR_INVALID_ARG,
                      "method '%s' input '%s': expected %s %s, given %s %s%s%s%s", method,
                      want->name, kiln_dtype_name(want->dtype) ? kiln_dtype_name(want->dtype) : "?",
                      kiln_tensor_info_shape_str(want, ws, sizeof ws), gname ? gname : "?", gs,
                      source ? " (from '" : "", source ? source : "", source ? "')" : "");
}
