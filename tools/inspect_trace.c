/* inspect_trace.c: reads a trace file (docs/TRACE.md) for `kiln inspect`,
 * line by line through the strict JSON parser, and refuses what the format
 * says a reader must refuse, naming the file, the line and the rule: a
 * foreign first line or version, a line that is not a JSON object, an
 * unknown event, a missing or mistyped field (integers must be written as
 * integers and fit their field's range), events out of call order or
 * outside their parent, a missing end line or a wrong event count. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "devtools/devtools.h"
#include "inspect_trace.h"

/* ---- messages ---------------------------------------------------------------------- */

static kiln_status fail(const insp_trace *t, int64_t line, const char *fmt, ...) KILN_PRINTF(3, 4);
static kiln_status fail(const insp_trace *t, int64_t line, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_error(KILN_ERR_FORMAT, "'%s' line %lld: %s", t->path, (long long)line, msg);
}

/* The parser's "WHAT: byte B (line 1, column C): MSG" for one line becomes
 * "'file' line N, column C: RULE: MSG". */
static kiln_status parse_fail(kiln_status st, const char *what, const char *rule) {
    if (st != KILN_ERR_FORMAT) return st;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    size_t wl = strlen(what), byte, ln, col;
    int n = 0;
    if (!strncmp(msg, what, wl) &&
        sscanf(msg + wl, ": byte %zu (line %zu, column %zu): %n", &byte, &ln, &col, &n) == 3 && n)
        return kiln_error(st, "%s, column %zu: %s: %s", what, col, rule, msg + wl + n);
    return kiln_error(st, "%s: %s", msg, rule);
}

/* ---- interned strings ------------------------------------------------------------- */

static uint64_t hash_str(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int rehash(insp_trace *t, int cap) {
    int32_t *h = malloc(sizeof *h * (size_t)cap);
    if (!h) return -1;
    for (int i = 0; i < cap; i++)
        h[i] = -1;
    for (int k = 0; k < t->n_str; k++) {
        uint64_t i = hash_str(t->str[k], strlen(t->str[k])) & (uint64_t)(cap - 1);
        while (h[i] >= 0)
            i = (i + 1) & (uint64_t)(cap - 1);
        h[i] = k;
    }
    free(t->hash);
    t->hash = h;
    t->hash_cap = cap;
    return 0;
}

/* The id of s (n bytes, no NUL inside), added when new; -1 out of memory. */
static int32_t intern(insp_trace *t, const char *s, size_t n) {
    if (2 * (t->n_str + 1) > t->hash_cap && rehash(t, t->hash_cap ? 2 * t->hash_cap : 256))
        return -1;
    uint64_t i = hash_str(s, n) & (uint64_t)(t->hash_cap - 1);
    for (; t->hash[i] >= 0; i = (i + 1) & (uint64_t)(t->hash_cap - 1)) {
        const char *c = t->str[t->hash[i]];
        if (!strncmp(c, s, n) && c[n] == 0) return t->hash[i];
    }
    if (t->n_str == t->cap_str) {
        int cap = t->cap_str ? 2 * t->cap_str : 256;
        char **p = realloc(t->str, sizeof *p * (size_t)cap);
        if (!p) return -1;
        t->str = p;
        t->cap_str = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    t->str[t->n_str] = c;
    t->hash[i] = t->n_str;
    return t->n_str++;
}

static int grow(void **p, int64_t *cap, int64_t n, size_t size) {
    if (n < *cap) return 0;
    int64_t c = *cap ? 2 * *cap : 1024;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

void insp_trace_free(insp_trace *t) {
    if (!t) return;
    free(t->kiln);
    free(t->program);
    free(t->clock);
    for (int i = 0; i < t->n_methods; i++)
        free(t->methods[i]);
    for (int i = 0; i < t->n_backends; i++)
        free(t->backends[i]);
    for (int i = 0; i < t->n_str; i++)
        free(t->str[i]);
    free(t->methods);
    free(t->backends);
    free(t->str);
    free(t->hash);
    free(t->nodes);
    free(t->parts);
    free(t->ops);
    free(t->calls);
    const char *path = t->path;
    memset(t, 0, sizeof *t);
    t->path = path;
}

/* ---- fields ----------------------------------------------------------------------- */

/* A string without NUL bytes (names are C strings everywhere after this). */
static kiln_status get_str(const insp_trace *t, int64_t line, const kiln_json *o, const char *what,
                           const char *key, const char **out, size_t *len) {
    kiln_status st = kiln_json_get_str(o, what, key, 1, out, len);
    if (!st && strlen(*out) != *len) return fail(t, line, "key '%s' holds a NUL character", key);
    return st;
}

/* Integers are strict (docs/TRACE.md): written as integers, no fraction or
 * exponent, within the field's range; the JSON getters name the line (in
 * `what`), the key, the range and what was found. */
static kiln_status get_uint(const kiln_json *o, const char *what, const char *key, int64_t max,
                            int64_t *out) {
    return kiln_json_get_i64(o, what, key, 1, 0, max, out);
}

/* flops and bytes: unsigned 64-bit counts, kept as doubles for the sums. */
static kiln_status get_count(const kiln_json *o, const char *what, const char *key, double *out) {
    uint64_t u;
    kiln_status st = kiln_json_get_u64(o, what, key, 1, UINT64_MAX, &u);
    if (!st) *out = (double)u;
    return st;
}

/* Index of the string member `key` among names[n], or an error. */
static kiln_status get_name(const insp_trace *t, int64_t line, const kiln_json *o, const char *what,
                            const char *key, char *const *names, int n, const char *list,
                            int16_t *out) {
    const char *s;
    size_t len;
    kiln_status st = get_str(t, line, o, what, key, &s, &len);
    if (st) return st;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) {
            *out = (int16_t)i;
            return KILN_OK;
        }
    return fail(t, line, "%s '%.200s' is not one of the header's %s", key, s, list);
}

static kiln_status get_names(const insp_trace *t, const kiln_json *h, const char *what,
                             const char *key, char ***out, int *n_out) {
    const kiln_json *a;
    kiln_status st = kiln_json_get_arr(h, what, key, 1, &a);
    if (st) return st;
    if (a->len > 256) return fail(t, 1, "the header lists %zu %s (at most 256)", a->len, key);
    *out = calloc(a->len ? a->len : 1, sizeof **out);
    if (!*out) return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    for (size_t i = 0; i < a->len; i++) {
        const kiln_json *v = &a->items[i];
        if (v->type != KILN_JSON_STRING || strlen(v->s) != v->len)
            return fail(t, 1, "header key '%s': item %zu should be a string, found %s", key, i,
                        kiln_json_type_name(v->type));
        if (!((*out)[i] = strdup(v->s)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
        *n_out = (int)i + 1;
    }
    return KILN_OK;
}

static kiln_status read_header(insp_trace *t, const kiln_json *h, const char *what) {
    int64_t v = 0;
    kiln_status st = kiln_json_get_i64(h, what, "kiln_trace", 0, INT64_MIN, INT64_MAX, &v);
    if (st) return st;
    if (!kiln_json_get(h, "kiln_trace"))
        return fail(t, 1,
                    "not a Kiln trace: the first line is a JSON object without \"kiln_trace\" "
                    "(docs/TRACE.md)");
    if (v != 1 && v != 2)
        return kiln_error(KILN_ERR_VERSION,
                          "'%s' line 1: trace format version %lld; this kiln reads versions 1 "
                          "and 2",
                          t->path, (long long)v);
    t->version = v;
    const char *s[3];
    size_t len;
    static const char *const keys[3] = {"kiln", "program", "clock"};
    for (int i = 0; i < 3; i++)
        if ((st = get_str(t, 1, h, what, keys[i], &s[i], &len))) return st;
    if (!(t->kiln = strdup(s[0])) || !(t->program = strdup(s[1])) || !(t->clock = strdup(s[2])))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    if ((st = get_uint(h, what, "format_version", INT32_MAX, &t->format_version)) ||
        (st = get_uint(h, what, "calls", INT64_MAX, &t->header_calls)) ||
        (kiln_json_get(h, "threads") &&
         (st = get_uint(h, what, "threads", 1 << 20, &t->threads))) ||
        (st = get_names(t, h, what, "methods", &t->methods, &t->n_methods)) ||
        (st = get_names(t, h, what, "backends", &t->backends, &t->n_backends)))
        return st;
    return KILN_OK;
}

/* ---- events ------------------------------------------------------------------------ */

typedef struct reader {
    insp_trace *t;
    int64_t line;
    const char *what; /* "'file' line N" */
    int16_t method;   /* the open call's method, -1 before its first event */
    int phase;        /* the open call: 0 nodes so far, 1 partitions */
    int memory, end;  /* lines seen */
} reader;

static kiln_status common(reader *r, const kiln_json *o, const char *what, int64_t *call,
                          int16_t *method, uint64_t *t0, uint64_t *t1) {
    insp_trace *t = r->t;
    uint64_t s, e;
    kiln_status st;
    if ((st = get_uint(o, what, "call", INT64_MAX, call)) ||
        (st = get_name(t, r->line, o, what, "method", t->methods, t->n_methods, "methods",
                       method)) ||
        (st = kiln_json_get_u64(o, what, "start_ns", 1, UINT64_MAX, &s)) ||
        (st = kiln_json_get_u64(o, what, "end_ns", 1, UINT64_MAX, &e)))
        return st;
    if (e < s)
        return fail(t, r->line, "end_ns %llu is before start_ns %llu", (unsigned long long)e,
                    (unsigned long long)s);
    if (*call != t->n_calls)
        return fail(t, r->line,
                    "an event of call %lld where call %lld's come (events go call by call: its "
                    "nodes, its partitions, then its method event)",
                    (long long)*call, (long long)t->n_calls);
    if (r->method >= 0 && *method != r->method)
        return fail(t, r->line, "call %lld is a call of '%s', this event says '%s'",
                    (long long)*call, t->methods[r->method], t->methods[*method]);
    r->method = *method;
    *t0 = s;
    *t1 = e;
    return KILN_OK;
}

static kiln_status read_node(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    const char *what = r->what;
    if (r->phase) return fail(t, r->line, "a node event after its call's partition events");
    if (grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes, sizeof *t->nodes))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    insp_node n;
    memset(&n, 0, sizeof n);
    n.line = r->line;
    int64_t part, id;
    const char *s[3];
    size_t len[3];
    int fb, est = 0;
    kiln_status st;
    if ((st = common(r, o, what, &n.call, &n.method, &n.t0, &n.t1)) ||
        (st = get_uint(o, what, "partition", INT32_MAX, &part)) ||
        (st = get_uint(o, what, "node_id", INT32_MAX, &id)) ||
        (st = kiln_json_get_bool(o, what, "estimated", 0, &est)) ||
        (st = get_str(t, r->line, o, what, "name", &s[0], &len[0])) ||
        (st = get_str(t, r->line, o, what, "op", &s[1], &len[1])) ||
        (st = get_name(t, r->line, o, what, "backend", t->backends, t->n_backends, "backends",
                       &n.backend)) ||
        (st = get_str(t, r->line, o, what, "unit", &s[2], &len[2])) ||
        (st = kiln_json_get_bool(o, what, "fallback", 1, &fb)) ||
        (st = get_count(o, what, "flops", &n.flops)) ||
        (st = get_count(o, what, "bytes", &n.bytes)))
        return st;
    n.partition = (int32_t)part;
    n.node_id = (int32_t)id;
    n.fallback = (uint8_t)fb;
    n.estimated = (uint8_t)est;
    if ((n.name = intern(t, s[0], len[0])) < 0 || (n.op = intern(t, s[1], len[1])) < 0 ||
        (n.unit = intern(t, s[2], len[2])) < 0)
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    t->nodes[t->n_nodes++] = n;
    return KILN_OK;
}

static kiln_status read_op(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    const char *what = r->what;
    if (t->version < 2) return fail(t, r->line, "an op event in a version 1 trace");
    if (r->phase) return fail(t, r->line, "an op event after its call's partition events");
    if (grow((void **)&t->ops, &t->cap_ops, t->n_ops, sizeof *t->ops))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    insp_op x;
    memset(&x, 0, sizeof x);
    x.line = r->line;
    int64_t part, id = -1;
    const char *s[2];
    size_t len[2];
    int est;
    kiln_status st;
    if ((st = common(r, o, what, &x.call, &x.method, &x.t0, &x.t1)) ||
        (st = get_uint(o, what, "partition", INT32_MAX, &part)) ||
        (kiln_json_get(o, "node_id") && (st = get_uint(o, what, "node_id", INT32_MAX, &id))) ||
        (st = get_str(t, r->line, o, what, "name", &s[0], &len[0])) ||
        (st = get_str(t, r->line, o, what, "type", &s[1], &len[1])) ||
        (st = kiln_json_get_u64(o, what, "cycles", 1, UINT64_MAX, &x.cycles)) ||
        (st = kiln_json_get_bool(o, what, "estimated", 1, &est)))
        return st;
    x.partition = (int32_t)part;
    x.node_id = (int32_t)id;
    x.node_ev = -1;
    if ((x.name = intern(t, s[0], len[0])) < 0 || (x.type = intern(t, s[1], len[1])) < 0)
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    t->ops[t->n_ops++] = x;
    return KILN_OK;
}

static kiln_status read_part(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    const char *what = r->what;
    if (grow((void **)&t->parts, &t->cap_parts, t->n_parts, sizeof *t->parts))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    insp_part p;
    memset(&p, 0, sizeof p);
    p.line = r->line;
    int64_t part, first, last;
    int fb;
    kiln_status st;
    if ((st = common(r, o, what, &p.call, &p.method, &p.t0, &p.t1)) ||
        (st = get_uint(o, what, "partition", INT32_MAX, &part)) ||
        (st = get_name(t, r->line, o, what, "backend", t->backends, t->n_backends, "backends",
                       &p.backend)) ||
        (st = kiln_json_get_bool(o, what, "fallback", 1, &fb)) ||
        (st = get_uint(o, what, "first_node", INT32_MAX, &first)) ||
        (st = get_uint(o, what, "last_node", INT32_MAX, &last)) ||
        (st = kiln_json_get_u64(o, what, "host_ns", 0, UINT64_MAX, &p.host_ns)))
        return st;
    if (p.host_ns > p.t1 - p.t0)
        return fail(t, r->line, "host_ns %llu is more than the partition's %llu ns",
                    (unsigned long long)p.host_ns, (unsigned long long)(p.t1 - p.t0));
    if (kiln_json_get(o, "delegate_ns")) { /* a profiled delegate's figures, all of them */
        if ((st = kiln_json_get_u64(o, what, "delegate_ns", 1, UINT64_MAX, &p.delegate_ns)) ||
            (st = kiln_json_get_u64(o, what, "cycles", 1, UINT64_MAX, &p.cycles)) ||
            (st = kiln_json_get_u64(o, what, "vtcm_acquire_ns", 1, UINT64_MAX, &p.vtcm_ns)) ||
            (st = kiln_json_get_u64(o, what, "power_on_ns", 1, UINT64_MAX, &p.power_ns)) ||
            (st = get_uint(o, what, "hw_threads", 1 << 20, &p.hw_threads)))
            return st;
        if (p.delegate_ns + p.host_ns > p.t1 - p.t0)
            return fail(t, r->line,
                        "delegate_ns %llu and host_ns %llu are more than the partition's %llu ns",
                        (unsigned long long)p.delegate_ns, (unsigned long long)p.host_ns,
                        (unsigned long long)(p.t1 - p.t0));
    }
    if (last < first)
        return fail(t, r->line, "last_node %lld is before first_node %lld", (long long)last,
                    (long long)first);
    p.partition = (int32_t)part;
    p.first_node = (int32_t)first;
    p.last_node = (int32_t)last;
    p.fallback = (uint8_t)fb;
    r->phase = 1;
    t->parts[t->n_parts++] = p;
    return KILN_OK;
}

/* The method event closes its call: every node lies in a partition of the
 * call (same number and backend, inside its node range and its time), and
 * every partition inside the method's time. */
static kiln_status close_call(reader *r, insp_call *c) {
    insp_trace *t = r->t;
    for (int64_t k = c->first_part; k < t->n_parts; k++) {
        const insp_part *p = &t->parts[k];
        if (p->t0 < c->t0 || p->t1 > c->t1)
            return fail(t, p->line,
                        "partition %d [%llu, %llu] ns lies outside its method call [%llu, %llu] "
                        "(line %lld)",
                        p->partition, (unsigned long long)p->t0, (unsigned long long)p->t1,
                        (unsigned long long)c->t0, (unsigned long long)c->t1, (long long)r->line);
    }
    /* Each op inside its partition, and inside its node's event. */
    int64_t node_hint = 0;
    for (int64_t k = c->first_op; k < t->n_ops; k++) {
        insp_op *x = &t->ops[k];
        const insp_part *p = NULL;
        for (int64_t j = c->first_part; j < t->n_parts && !p; j++)
            if (t->parts[j].partition == x->partition) p = &t->parts[j];
        if (!p || x->t0 < p->t0 || x->t1 > p->t1)
            return fail(t, x->line, "op '%s' does not lie in a partition %d of call %lld",
                        t->str[x->name], x->partition, (long long)x->call);
        if (x->node_id < 0) continue;
        const insp_node *n = NULL; /* from where the last op's node was: ops come in order */
        for (int64_t j = 0; j < c->n_nodes && !n; j++) {
            int64_t i = c->first_node + (node_hint + j) % c->n_nodes;
            const insp_node *y = &t->nodes[i];
            if (y->node_id == x->node_id && y->partition == x->partition && y->t0 <= x->t0 &&
                x->t1 <= y->t1)
                n = y, node_hint = i - c->first_node, x->node_ev = i;
        }
        if (!n)
            return fail(t, x->line,
                        "op '%s' names node %d, whose event in call %lld does not hold it",
                        t->str[x->name], x->node_id, (long long)x->call);
    }
    int64_t hint = c->first_part;
    for (int64_t k = c->first_node; k < t->n_nodes; k++) {
        const insp_node *n = &t->nodes[k];
        const insp_part *p = NULL;
        for (int64_t j = 0; j < c->n_parts && !p; j++) {
            int64_t i = c->first_part + (hint - c->first_part + j) % c->n_parts;
            if (t->parts[i].partition == n->partition) p = &t->parts[(hint = i)];
        }
        if (!p)
            return fail(t, n->line,
                        "node '%s' names partition %d, which call %lld has no event for",
                        t->str[n->name], n->partition, (long long)n->call);
        if (p->backend != n->backend || n->node_id < p->first_node || n->node_id > p->last_node ||
            n->t0 < p->t0 || n->t1 > p->t1)
            return fail(t, n->line,
                        "node '%s' (id %d, %s, [%llu, %llu] ns) does not lie in its partition %d "
                        "(line %lld: nodes %d..%d, %s, [%llu, %llu] ns)",
                        t->str[n->name], n->node_id, t->backends[n->backend],
                        (unsigned long long)n->t0, (unsigned long long)n->t1, p->partition,
                        (long long)p->line, p->first_node, p->last_node, t->backends[p->backend],
                        (unsigned long long)p->t0, (unsigned long long)p->t1);
    }
    return KILN_OK;
}

static kiln_status read_method(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    const char *what = r->what;
    if (grow((void **)&t->calls, &t->cap_calls, t->n_calls, sizeof *t->calls))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", t->path);
    insp_call c;
    memset(&c, 0, sizeof c);
    c.line = r->line;
    int64_t call;
    int ok;
    kiln_status st;
    if ((st = common(r, o, what, &call, &c.method, &c.t0, &c.t1)) ||
        (st = kiln_json_get_i64(o, what, "tokens", 1, INT64_MIN, INT64_MAX, &c.tokens)) ||
        (st = kiln_json_get_bool(o, what, "ok", 1, &ok)))
        return st;
    c.ok = (uint8_t)ok;
    /* this call's events are the tail of each array */
    c.first_node = t->n_nodes;
    while (c.first_node > 0 && t->nodes[c.first_node - 1].call == call)
        c.first_node--;
    c.n_nodes = t->n_nodes - c.first_node;
    c.first_part = t->n_parts;
    while (c.first_part > 0 && t->parts[c.first_part - 1].call == call)
        c.first_part--;
    c.n_parts = t->n_parts - c.first_part;
    c.first_op = t->n_ops;
    while (c.first_op > 0 && t->ops[c.first_op - 1].call == call)
        c.first_op--;
    c.n_ops = t->n_ops - c.first_op;
    if ((st = close_call(r, &c))) return st;
    t->calls[t->n_calls++] = c;
    r->method = -1;
    r->phase = 0;
    return KILN_OK;
}

static kiln_status read_memory(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    static const char *const keys[] = {
        "weights_file_bytes", "weights_mapped_bytes", "weights_resident_bytes", "state_bytes",
        "arena_bytes",        "input_bytes",          "peak_rss_bytes"};
    int64_t *dst[] = {&t->mem.weights_file, &t->mem.weights_mapped, &t->mem.weights_resident,
                      &t->mem.state,        &t->mem.arena,          &t->mem.input,
                      &t->mem.peak_rss};
    kiln_status st;
    if (r->memory)
        return fail(t, r->line, "a second memory line (the first is line %d)", r->memory);
    if (r->method >= 0)
        return fail(t, r->line, "the memory line comes before call %lld's method event",
                    (long long)t->n_calls);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if ((st = get_uint(o, r->what, keys[i], INT64_MAX, dst[i]))) return st;
    if (kiln_json_get(o, "state_used_bytes") || kiln_json_get(o, "state_positions")) {
        if ((st = get_uint(o, r->what, "state_used_bytes", INT64_MAX, &t->mem.state_used)) ||
            (st = get_uint(o, r->what, "state_positions", INT64_MAX, &t->mem.state_positions)))
            return st;
        t->mem.has_used = 1;
    }
    r->memory = (int)(r->line < INT32_MAX ? r->line : INT32_MAX);
    return KILN_OK;
}

static kiln_status read_end(reader *r, const kiln_json *o) {
    insp_trace *t = r->t;
    int64_t n;
    kiln_status st;
    if ((st = get_uint(o, r->what, "events", INT64_MAX, &n)) ||
        (st = kiln_json_get_i64(o, r->what, "dropped", 0, 0, INT64_MAX, &t->dropped)))
        return st;
    if (!r->memory) return fail(t, r->line, "the end line comes without a memory line before it");
    if (n != t->n_events)
        return fail(t, r->line,
                    "the end line says %lld events, %lld event lines were read (a truncated or "
                    "edited trace)",
                    (long long)n, (long long)t->n_events);
    if (t->header_calls != t->n_calls)
        return fail(t, r->line, "the header says %lld calls, %lld method events were read",
                    (long long)t->header_calls, (long long)t->n_calls);
    r->end = 1;
    return KILN_OK;
}

static kiln_status read_line(reader *r, const char *p, size_t n) {
    insp_trace *t = r->t;
    char what[4200];
    snprintf(what, sizeof what, "'%s' line %lld", t->path, (long long)r->line);
    r->what = what;
    if (r->end)
        return fail(t, r->line, "a line after the end line (line %lld)", (long long)r->line - 1);
    kiln_json_doc doc;
    kiln_status st = kiln_json_parse(p, n, what, 8, &doc);
    if (st)
        return parse_fail(st, what,
                          r->line == 1 ? "not a Kiln trace (line 1 must be its JSON header)"
                                       : "not JSON (each line of a trace is one JSON object)");
    const kiln_json *o = doc.root;
    if (o->type != KILN_JSON_OBJECT) {
        st = fail(t, r->line, "%s: each line of a trace is one JSON object, found %s",
                  r->line == 1 ? "not a Kiln trace" : "not an event", kiln_json_type_name(o->type));
    } else if (r->line == 1) {
        st = read_header(t, o, what);
    } else {
        const char *ev;
        size_t len;
        st = get_str(t, r->line, o, what, "ev", &ev, &len);
        int is_event = !st && (!strcmp(ev, "node") || !strcmp(ev, "partition") ||
                               !strcmp(ev, "method") || !strcmp(ev, "op"));
        if (!st && is_event && r->memory)
            st = fail(t, r->line, "a %s event after the memory line (line %d)", ev, r->memory);
        if (st)
            ;
        else if (!strcmp(ev, "node"))
            st = read_node(r, o);
        else if (!strcmp(ev, "partition"))
            st = read_part(r, o);
        else if (!strcmp(ev, "op"))
            st = read_op(r, o);
        else if (!strcmp(ev, "method"))
            st = read_method(r, o);
        else if (!strcmp(ev, "memory"))
            st = read_memory(r, o);
        else if (!strcmp(ev, "end"))
            st = read_end(r, o);
        else
            st = fail(t, r->line,
                      "unknown event \"ev\":\"%.100s\" (version 2 has op, node, partition, "
                      "method, memory and end)",
                      ev);
        if (!st && is_event) t->n_events++;
    }
    kiln_json_free(&doc);
    return st;
}

kiln_status insp_trace_read(const char *path, insp_trace *t) {
    memset(t, 0, sizeof *t);
    t->path = path;
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    reader r = {t, 0, NULL, -1, 0, 0, 0};
    /* an empty file maps to no address: no pointer arithmetic on it */
    const char *p = (const char *)map.data, *end = map.size ? p + map.size : p;
    if (!map.size) st = kiln_error(KILN_ERR_FORMAT, "'%s' is empty: not a Kiln trace", path);
    while (!st && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        r.line++;
        st = read_line(&r, p, (size_t)(e - p));
        p = nl ? nl + 1 : end;
    }
    if (!st && !r.end)
        st = kiln_error(KILN_ERR_FORMAT,
                        "'%s' line %lld: the file ends without its end line (a truncated trace: "
                        "the writer did not finish)",
                        path, (long long)r.line);
    t->n_lines = r.line;
    kiln_file_map_close(&map);
    if (st) insp_trace_free(t);
    return st;
}
