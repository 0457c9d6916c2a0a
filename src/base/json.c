/* json.c: a strict recursive-descent JSON parser building a tree in one
 * arena, and the typed member getters importers use. Strict: no comments,
 * no trailing commas, no leading zeros, no raw control characters, no
 * invalid UTF-8, no lone surrogates, no repeated member names. */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* ---- arena ----------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    /* data follows, 16-aligned */
} arena_block;

#define BLOCK_HEAD ((sizeof(arena_block) + 15) & ~(size_t)15)
#define BLOCK_MIN ((size_t)64 << 10)

typedef struct arena {
    arena_block *head;
} arena;

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
        if (cap > SIZE_MAX - BLOCK_HEAD) return NULL;
        b = kiln_malloc(BLOCK_HEAD + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)b + BLOCK_HEAD + b->used;
    b->used += n;
    return p;
}

static void arena_free(arena *a) {
    while (a && a->head) {
        arena_block *n = a->head->next;
        kiln_free(a->head);
        a->head = n;
    }
}

/* ---- parser ---------------------------------------------------------------- */

typedef struct parser {
    const char *p;
    size_t len, pos;
    const char *what;
    int max_depth;
    arena *a;
    kiln_status failed; /* 0 or the first failure's status */
} parser;

/* Describes the character at `at` for messages: 'x', byte 0x01, end of input. */
static const char *describe(const parser *ps, size_t at, char *buf, size_t cap) {
    if (at >= ps->len) return "end of input";
    unsigned char c = (unsigned char)ps->p[at];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, cap, "'%c'", c);
    else
        snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static void fail_at(parser *ps, size_t at, kiln_status st, const char *fmt, ...) KILN_PRINTF(4, 5);
static void fail_at(parser *ps, size_t at, kiln_status st, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = st;
    if (st == KILN_ERR_NOMEM) {
        kiln_error(st, "%s: out of memory parsing JSON", ps->what);
        return;
    }
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < ps->len; i++) {
        if (ps->p[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln_error(st, "%s: byte %zu (line %zu, column %zu): %s", ps->what, at, line, col, msg);
}

/* "expected X, found Y" at the current position. */
static void expected(parser *ps, const char *what) {
    char buf[32];
    fail_at(ps, ps->pos, KILN_ERR_FORMAT, "expected %s, found %s", what,
            describe(ps, ps->pos, buf, sizeof buf));
}

static void nomem(parser *ps) {
    fail_at(ps, ps->pos, KILN_ERR_NOMEM, "out of memory");
}

static void skip_ws(parser *ps) {
    while (ps->pos < ps->len) {
        char c = ps->p[ps->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        ps->pos++;
    }
}

static int peek(const parser *ps) {
    return ps->pos < ps->len ? (unsigned char)ps->p[ps->pos] : -1;
}

static int literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if (ps->len - ps->pos < n || memcmp(ps->p + ps->pos, word, n) != 0) return 0;
    ps->pos += n;
    return 1;
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c == 0xe0)
        k = 3, lo = 0xa0;
    else if (c == 0xed)
        k = 3, hi = 0x9f; /* no UTF-16 surrogates */
    else if (c >= 0xe1 && c <= 0xef)
        k = 3;
    else if (c == 0xf0)
        k = 4, lo = 0x90;
    else if (c == 0xf4)
        k = 4, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3)
        k = 4;
    else
        return 0;
    if (n < k) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return k;
}

/* The string at ps->pos (on the opening quote), decoded into the arena. */
static void parse_string(parser *ps, kiln_json *out) {
    size_t start = ps->pos++;
    size_t end = ps->pos;
    while (end < ps->len && ps->p[end] != '"')
        end += ps->p[end] == '\\' ? 2 : 1;
    if (end >= ps->len) {
        fail_at(ps, start, KILN_ERR_FORMAT, "string starting here has no closing '\"'");
        return;
    }
    /* Decoding never grows: an escape of n bytes yields at most n bytes. */
    char *o = arena_alloc(ps->a, end - ps->pos + 1);
    if (!o) {
        nomem(ps);
        return;
    }
    size_t n = 0;
    while (ps->pos < end) {
        unsigned char c = (unsigned char)ps->p[ps->pos];
        if (c < 0x20) {
            fail_at(ps, ps->pos, KILN_ERR_FORMAT,
                    "control character 0x%02x inside a string (must be escaped)", c);
            return;
        }
        if (c != '\\') {
            size_t k = utf8_len((const unsigned char *)ps->p + ps->pos, end - ps->pos);
            if (!k) {
                fail_at(ps, ps->pos, KILN_ERR_FORMAT, "invalid UTF-8 byte 0x%02x inside a string",
                        c);
                return;
            }
            memcpy(o + n, ps->p + ps->pos, k);
            n += k;
            ps->pos += k;
            continue;
        }
        size_t esc = ps->pos;
        char e = ps->p[ps->pos + 1];
        ps->pos += 2;
        switch (e) {
        case '"':
            o[n++] = '"';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '/':
            o[n++] = '/';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            if (end - ps->pos < 4 || !hex4(ps->p + ps->pos, &cp)) {
                fail_at(ps, esc, KILN_ERR_FORMAT, "expected 4 hex digits after '\\u'");
                return;
            }
            ps->pos += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                fail_at(ps, esc, KILN_ERR_FORMAT, "lone low surrogate \\u%04X", cp);
                return;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - ps->pos < 6 || ps->p[ps->pos] != '\\' || ps->p[ps->pos + 1] != 'u' ||
                    !hex4(ps->p + ps->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                    fail_at(ps, esc, KILN_ERR_FORMAT,
                            "high surrogate \\u%04X is not followed by a low surrogate "
                            "\\uDC00..\\uDFFF",
                            cp);
                    return;
                }
                ps->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default: {
            char buf[32];
            fail_at(ps, esc, KILN_ERR_FORMAT,
                    "expected an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX), found '\\' "
                    "then %s",
                    describe(ps, esc + 1, buf, sizeof buf));
            return;
        }
        }
    }
    o[n] = 0;
    ps->pos = end + 1;
    out->type = KILN_JSON_STRING;
    out->s = o;
    out->len = n;
}

static int is_digit(int c) {
    return c >= '0' && c <= '9';
}

static void parse_number(parser *ps, kiln_json *out) {
    size_t start = ps->pos;
    int neg = peek(ps) == '-', integral = 1;
    if (neg) ps->pos++;
    if (peek(ps) == '0') {
        ps->pos++;
        if (is_digit(peek(ps))) {
            fail_at(ps, ps->pos, KILN_ERR_FORMAT, "number with a leading zero");
            return;
        }
    } else if (is_digit(peek(ps))) {
        while (is_digit(peek(ps)))
            ps->pos++;
    } else {
        expected(ps, "a digit");
        return;
    }
    if (peek(ps) == '.') {
        integral = 0;
        ps->pos++;
        if (!is_digit(peek(ps))) {
            expected(ps, "a digit after '.'");
            return;
        }
        while (is_digit(peek(ps)))
            ps->pos++;
    }
    if (peek(ps) == 'e' || peek(ps) == 'E') {
        integral = 0;
        ps->pos++;
        if (peek(ps) == '+' || peek(ps) == '-') ps->pos++;
        if (!is_digit(peek(ps))) {
            expected(ps, "a digit in the exponent");
            return;
        }
        while (is_digit(peek(ps)))
            ps->pos++;
    }
    size_t n = ps->pos - start;
    char small[64], *buf = n < sizeof small ? small : kiln_malloc(n + 1);
    if (!buf) {
        nomem(ps);
        return;
    }
    memcpy(buf, ps->p + start, n);
    buf[n] = 0;
    /* strtod reads the locale's decimal point; JSON's is always '.'. */
    const struct lconv *lc = localeconv();
    char dp = lc && lc->decimal_point && lc->decimal_point[0] ? lc->decimal_point[0] : '.';
    if (dp != '.') {
        char *d = strchr(buf, '.');
        if (d) *d = dp;
    }
    double v = strtod(buf, NULL);
    out->type = KILN_JSON_NUMBER;
    out->num = v;
    if (!isfinite(v)) {
        if (buf != small) kiln_free(buf);
        fail_at(ps, start, KILN_ERR_FORMAT, "number %.*s%s is out of the range of a double",
                (int)(n > 40 ? 40 : n), ps->p + start, n > 40 ? "..." : "");
        return;
    }
    if (integral) { /* exact, also beyond 2^53 */
        uint64_t u = 0;
        int fits = 1; /* in 64 bits, unsigned */
        for (size_t i = neg; i < n && fits; i++) {
            unsigned d = (unsigned)(buf[i] - '0');
            if (u > (UINT64_MAX - d) / 10)
                fits = 0;
            else
                u = u * 10 + d;
        }
        out->int_syntax = 1;
        if (fits && !neg) {
            out->is_u64 = 1;
            out->u = u;
        }
        if (fits && u <= (neg ? (uint64_t)1 << 63 : (uint64_t)INT64_MAX)) {
            out->is_int = 1;
            out->i = neg ? (u == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)u) : (int64_t)u;
        }
    } else if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0) {
        out->is_int = 1; /* 1e3, 2.0 */
        out->i = (int64_t)v;
    }
    if (buf != small) kiln_free(buf);
}

static int key_cmp(const void *a, const void *b) {
    const kiln_json *x = *(const kiln_json *const *)a, *y = *(const kiln_json *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static void parse_value(parser *ps, int depth, kiln_json *out);

/* A growing list of parsed elements, copied into the arena when complete. */
typedef struct {
    kiln_json *v;
    size_t n, cap;
} vec;

static kiln_json *vec_push(vec *v) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        kiln_json *p = kiln_realloc(v->v, cap * sizeof *p);
        if (!p) return NULL;
        v->v = p;
        v->cap = cap;
    }
    kiln_json *e = &v->v[v->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static kiln_json *vec_to_arena(parser *ps, const vec *v) {
    kiln_json *p = arena_alloc(ps->a, (v->n ? v->n : 1) * sizeof *p);
    if (!p) return NULL;
    if (v->n) memcpy(p, v->v, v->n * sizeof *p);
    return p;
}

static void parse_array(parser *ps, int depth, kiln_json *out) {
    vec items = {0};
    ps->pos++; /* '[' */
    skip_ws(ps);
    if (peek(ps) != ']') {
        for (;;) {
            kiln_json *e = vec_push(&items);
            if (!e) {
                nomem(ps);
                goto done;
            }
            skip_ws(ps);
            parse_value(ps, depth, e);
            if (ps->failed) goto done;
            skip_ws(ps);
            if (peek(ps) == ',') {
                ps->pos++;
                continue;
            }
            if (peek(ps) == ']') break;
            expected(ps, "',' or ']' after an array element");
            goto done;
        }
    }
    ps->pos++; /* ']' */
    out->type = KILN_JSON_ARRAY;
    out->len = items.n;
    if (!(out->items = vec_to_arena(ps, &items))) nomem(ps);
done:
    kiln_free(items.v);
}

static void parse_object(parser *ps, int depth, kiln_json *out) {
    vec keys = {0}, vals = {0};
    const kiln_json **order = NULL;
    ps->pos++; /* '{' */
    skip_ws(ps);
    if (peek(ps) != '}') {
        for (;;) {
            skip_ws(ps);
            if (peek(ps) != '"') {
                expected(ps, keys.n ? "a member name (a string) after ','"
                                    : "a member name (a string) or '}'");
                goto done;
            }
            kiln_json *k = vec_push(&keys), *v = vec_push(&vals);
            if (!k || !v) {
                nomem(ps);
                goto done;
            }
            k->offset = ps->pos;
            parse_string(ps, k);
            if (ps->failed) goto done;
            skip_ws(ps);
            if (peek(ps) != ':') {
                expected(ps, "':' after a member name");
                goto done;
            }
            ps->pos++;
            skip_ws(ps);
            parse_value(ps, depth, v);
            if (ps->failed) goto done;
            skip_ws(ps);
            if (peek(ps) == ',') {
                ps->pos++;
                continue;
            }
            if (peek(ps) == '}') break;
            expected(ps, "',' or '}' after an object member");
            goto done;
        }
    }
    ps->pos++; /* '}' */
    if (keys.n > UINT32_MAX) {
        fail_at(ps, out->offset, KILN_ERR_FORMAT, "object with more than 2^32 members");
        goto done;
    }
    out->type = KILN_JSON_OBJECT;
    out->len = keys.n;
    if (!(out->keys = vec_to_arena(ps, &keys)) || !(out->items = vec_to_arena(ps, &vals)) ||
        !(out->sorted = arena_alloc(ps->a, (keys.n ? keys.n : 1) * sizeof *out->sorted)) ||
        !(order = kiln_malloc((keys.n ? keys.n : 1) * sizeof *order))) {
        nomem(ps);
        goto done;
    }
    for (size_t i = 0; i < keys.n; i++)
        order[i] = &out->keys[i];
    qsort(order, keys.n, sizeof *order, key_cmp);
    for (size_t i = 0; i < keys.n; i++) {
        if (i && key_cmp(&order[i - 1], &order[i]) == 0) {
            const kiln_json *later =
                order[i]->offset > order[i - 1]->offset ? order[i] : order[i - 1];
            fail_at(ps, later->offset, KILN_ERR_FORMAT,
                    "member name \"%.100s\" appears twice in one object", later->s);
            goto done;
        }
        out->sorted[i] = (uint32_t)(order[i] - out->keys);
    }
done:
    kiln_free(order);
    kiln_free(keys.v);
    kiln_free(vals.v);
}

static void parse_value(parser *ps, int depth, kiln_json *out) {
    memset(out, 0, sizeof *out);
    out->offset = ps->pos;
    int c = peek(ps);
    if (c == '{' || c == '[') {
        if (depth >= ps->max_depth) {
            fail_at(ps, ps->pos, KILN_ERR_FORMAT, "arrays and objects nested deeper than %d",
                    ps->max_depth);
            return;
        }
        if (c == '{')
            parse_object(ps, depth + 1, out);
        else
            parse_array(ps, depth + 1, out);
    } else if (c == '"') {
        parse_string(ps, out);
    } else if (c == '-' || is_digit(c)) {
        parse_number(ps, out);
    } else if (literal(ps, "true")) {
        out->type = KILN_JSON_BOOL;
        out->b = 1;
    } else if (literal(ps, "false")) {
        out->type = KILN_JSON_BOOL;
    } else if (literal(ps, "null")) {
        out->type = KILN_JSON_NULL;
    } else {
        expected(ps, "a value (object, array, string, number, true, false or null)");
    }
}

kiln_status kiln_json_parse(const char *text, size_t len, const char *what, int max_depth,
                            kiln_json_doc *doc) {
    memset(doc, 0, sizeof *doc);
    arena *a = kiln_calloc(1, sizeof *a);
    if (!a) return kiln_error(KILN_ERR_NOMEM, "%s: out of memory parsing JSON", what);
    parser ps = {text ? text : "",
                 text ? len : 0,
                 0,
                 what,
                 max_depth > 0 ? max_depth : KILN_JSON_MAX_DEPTH,
                 a,
                 0};
    kiln_json *root = arena_alloc(a, sizeof *root);
    if (!root) {
        nomem(&ps);
    } else {
        skip_ws(&ps);
        parse_value(&ps, 0, root);
        skip_ws(&ps);
        if (!ps.failed && ps.pos != ps.len)
            expected(&ps, "the end of input after the top-level value");
    }
    if (ps.failed) {
        arena_free(a);
        kiln_free(a);
        return ps.failed;
    }
    doc->root = root;
    doc->arena = a;
    return KILN_OK;
}

void kiln_json_free(kiln_json_doc *doc) {
    if (!doc) return;
    arena_free(doc->arena);
    kiln_free(doc->arena);
    doc->arena = NULL;
    doc->root = NULL;
}

/* ---- lookups --------------------------------------------------------------- */

const char *kiln_json_type_name(kiln_json_type t) {
    switch (t) {
    case KILN_JSON_NULL:
        return "null";
    case KILN_JSON_BOOL:
        return "a boolean";
    case KILN_JSON_NUMBER:
        return "a number";
    case KILN_JSON_STRING:
        return "a string";
    case KILN_JSON_ARRAY:
        return "an array";
    case KILN_JSON_OBJECT:
        return "an object";
    }
    return "an unknown value";
}

const kiln_json *kiln_json_get(const kiln_json *obj, const char *key) {
    if (!obj || obj->type != KILN_JSON_OBJECT || !key) return NULL;
    kiln_json probe = {0};
    probe.s = key;
    probe.len = strlen(key);
    const kiln_json *pp = &probe;
    size_t lo = 0, hi = obj->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const kiln_json *k = &obj->keys[obj->sorted[mid]];
        int c = key_cmp(&pp, &k);
        if (c == 0) return &obj->items[obj->sorted[mid]];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The member, NULL when absent or null; *st set when required and missing. */
static const kiln_json *member(const kiln_json *obj, const char *what, const char *key,
                               int required, kiln_status *st) {
    const kiln_json *v = kiln_json_get(obj, key);
    *st = KILN_OK;
    if (v && v->type != KILN_JSON_NULL) return v;
    if (required) *st = kiln_error(KILN_ERR_FORMAT, "%s: key '%s' is missing", what, key);
    return NULL;
}

static kiln_status wrong(const char *what, const char *key, const char *want, const kiln_json *v) {
    const char *found = kiln_json_type_name(v->type);
    if (v->type == KILN_JSON_NUMBER && !strcmp(want, "an integer"))
        found = v->num == floor(v->num) ? "an integer beyond the int64 range"
                                        : "a number with a fraction";
    return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' should be %s, found %s (byte %zu)", what, key,
                      want, found, v->offset);
}

kiln_status kiln_json_get_int(const kiln_json *obj, const char *what, const char *key, int required,
                              int64_t *out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_NUMBER || !v->is_int) return wrong(what, key, "an integer", v);
    *out = v->i;
    return KILN_OK;
}

/* What a number member holds, for the strict getters' messages. */
static const char *describe_int(const kiln_json *v, char *buf, size_t cap) {
    if (v->type != KILN_JSON_NUMBER) return kiln_json_type_name(v->type);
    if (!v->int_syntax) return "a number with a fraction or an exponent";
    if (v->is_u64)
        snprintf(buf, cap, "%llu", (unsigned long long)v->u);
    else if (v->is_int)
        snprintf(buf, cap, "%lld", (long long)v->i);
    else
        return "an integer beyond 64 bits";
    return buf;
}

kiln_status kiln_json_get_i64(const kiln_json *obj, const char *what, const char *key, int required,
                              int64_t min, int64_t max, int64_t *out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type == KILN_JSON_NUMBER && v->int_syntax && v->is_int && v->i >= min && v->i <= max) {
        *out = v->i;
        return KILN_OK;
    }
    char range[64] = "", found[32];
    if (min != INT64_MIN || max != INT64_MAX)
        snprintf(range, sizeof range, " in %lld..%lld", (long long)min, (long long)max);
    return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' should be an integer%s, found %s (byte %zu)",
                      what, key, range, describe_int(v, found, sizeof found), v->offset);
}

kiln_status kiln_json_get_u64(const kiln_json *obj, const char *what, const char *key, int required,
                              uint64_t max, uint64_t *out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type == KILN_JSON_NUMBER && v->int_syntax && v->is_u64 && v->u <= max) {
        *out = v->u;
        return KILN_OK;
    }
    char found[32];
    return kiln_error(
        KILN_ERR_FORMAT, "%s: key '%s' should be an integer in 0..%llu, found %s (byte %zu)", what,
        key, (unsigned long long)max, describe_int(v, found, sizeof found), v->offset);
}

kiln_status kiln_json_get_num(const kiln_json *obj, const char *what, const char *key, int required,
                              double *out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_NUMBER) return wrong(what, key, "a number", v);
    *out = v->num;
    return KILN_OK;
}

kiln_status kiln_json_get_bool(const kiln_json *obj, const char *what, const char *key,
                               int required, int *out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_BOOL) return wrong(what, key, "true or false", v);
    *out = v->b;
    return KILN_OK;
}

kiln_status kiln_json_get_str(const kiln_json *obj, const char *what, const char *key, int required,
                              const char **out, size_t *len) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_STRING) return wrong(what, key, "a string", v);
    *out = v->s;
    if (len) *len = v->len;
    return KILN_OK;
}

kiln_status kiln_json_get_obj(const kiln_json *obj, const char *what, const char *key, int required,
                              const kiln_json **out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_OBJECT) return wrong(what, key, "an object", v);
    *out = v;
    return KILN_OK;
}

kiln_status kiln_json_get_arr(const kiln_json *obj, const char *what, const char *key, int required,
                              const kiln_json **out) {
    kiln_status st;
    const kiln_json *v = member(obj, what, key, required, &st);
    if (!v) return st;
    if (v->type != KILN_JSON_ARRAY) return wrong(what, key, "an array", v);
    *out = v;
    return KILN_OK;
}

void kiln_json_fput_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}
