/* trace.c: profile recording (kiln_trace.h) and the trace file
 * (docs/TRACE.md). The executor (session.c) calls kiln_trace_node for each
 * node it runs one by one, kiln_trace_partition for each of the program's
 * partitions it ran, and kiln_trace_method when a call ends; all append
 * fixed-size records (partitions are held until the call ends, so a call's
 * events stay in the order nodes, partitions, method). Everything textual
 * is produced by kiln_trace_write. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "kiln/kiln_trace.h"
#include "runtime/runtime.h"

enum { EV_METHOD, EV_PARTITION, EV_NODE, EV_OP };

typedef struct trace_ev {
    uint8_t kind;
    uint8_t fallback;
    uint8_t ok; /* method: the call succeeded */
    int16_t backend;
    int32_t method;
    int32_t node;          /* node index; partition: its first node */
    int32_t node_last;     /* partition: its last node */
    int32_t partition;     /* node: its partition within the call */
    int64_t call;          /* the method call it belongs to, from 0 */
    int64_t tokens;        /* method: T */
    uint64_t t0, t1;       /* ns since the trace was created */
    uint64_t flops, bytes; /* node: counts by the op's cost rules */
    uint64_t host_ns;      /* partition: a delegate's time on the host (0: none) */
    const char *unit;      /* the backend's own string, lives as long as the program */
    /* op: its name, type and cycles (strings the delegate's); node, op: 1
     * when the times are apportioned by cycles, not measured */
    const char *name, *type;
    uint64_t cycles;
    uint8_t estimated;
    /* partition of a profiled delegate: what it measured (exec_ns 0: none) */
    uint64_t exec_ns, vtcm_ns, power_ns;
    int32_t threads;
} trace_ev;

typedef struct { /* an op a delegate reported, until its partition ends */
    int node;
    const char *name, *type;
    uint64_t cycles;
} trace_op;

#define TRACE_BLOCK 4096

typedef struct trace_block {
    struct trace_block *next;
    int n;
    trace_ev ev[TRACE_BLOCK];
} trace_block;

struct kiln_trace {
    const kiln_program *prog;
    uint64_t origin;
    trace_block *head, *tail;
    int64_t n_events, n_calls;
    trace_ev *pend; /* the current call's partitions, written when it ends */
    int n_pend, cap_pend;
    int64_t dropped; /* events lost to a failed allocation */
    int64_t positions;
    trace_op *ops; /* the running partition's, from its delegate */
    int n_ops, cap_ops, ops_lost;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t kiln_trace_now(const kiln_trace *t) {
    return now_ns() - t->origin;
}

kiln_status kiln_trace_create(kiln_trace **out) {
    *out = NULL;
    kiln_trace *t = kiln_calloc(1, sizeof *t);
    if (!t) return kiln_error(KILN_ERR_NOMEM, "out of memory creating a trace");
    t->origin = now_ns();
    *out = t;
    return KILN_OK;
}

void kiln_trace_free(kiln_trace *t) {
    if (!t) return;
    for (trace_block *b = t->head, *n; b; b = n) {
        n = b->next;
        kiln_free(b);
    }
    kiln_free(t->pend);
    kiln_free(t->ops);
    kiln_free(t);
}

void kiln_trace_set_positions(kiln_trace *t, int64_t positions) {
    if (t) t->positions = positions > 0 ? positions : 0;
}

int64_t kiln_trace_event_count(const kiln_trace *t) {
    return t ? t->n_events : 0;
}

kiln_status kiln_session_set_trace(kiln_session *s, kiln_trace *t) {
    if (!s) return kiln_error(KILN_ERR_INVALID_ARG, "no session given");
    if (t && t->prog && t->prog != s->prog)
        return kiln_error(KILN_ERR_INVALID_ARG, "this trace records another program's sessions");
    if (t) t->prog = s->prog;
    s->trace = t;
    return KILN_OK;
}

/* The next free record, or NULL when out of memory (the event is dropped and
 * counted nowhere: a trace never makes a call fail). */
static trace_ev *push(kiln_trace *t) {
    if (!t->tail || t->tail->n == TRACE_BLOCK) {
        trace_block *b = kiln_malloc(sizeof *b);
        if (!b) {
            t->dropped++;
            return NULL;
        }
        b->next = NULL;
        b->n = 0;
        if (t->tail)
            t->tail->next = b;
        else
            t->head = b;
        t->tail = b;
    }
    t->n_events++;
    return &t->tail->ev[t->tail->n++];
}

void kiln_trace_call_begin(kiln_trace *t) {
    t->n_pend = 0;
}

/* The cost rules count in doubles, always whole numbers; the format writes
 * unsigned 64-bit integers (docs/TRACE.md), so round and saturate. */
static uint64_t count_u64(double v) {
    if (!(v > 0)) return 0;
    if (v >= 18446744073709551615.0) return UINT64_MAX; /* that double is 2^64 */
    return (uint64_t)(v + 0.5);
}

/* A node's record (NULL when out of memory: dropped). */
static trace_ev *record_node(kiln_trace *t, const kiln_program *p, int method, int part, int index,
                             const kiln_node *n, const kiln_tensor *const *in,
                             const kiln_tensor *out, uint64_t t0, uint64_t t1) {
    trace_ev *e = push(t);
    if (!e) return NULL;
    const kiln_op_info *info = kiln_op_get(n->op);
    const kiln_backend *b = p->backends[n->backend];
    memset(e, 0, sizeof *e);
    e->kind = EV_NODE;
    e->method = method;
    e->node = index;
    e->partition = part;
    e->backend = (int16_t)n->backend;
    e->fallback = (uint8_t)p->fallback[n->backend];
    e->call = t->n_calls;
    e->t0 = t0;
    e->t1 = t1;
    e->flops = count_u64(info->flops ? info->flops(n, in, out) : 0);
    e->bytes = count_u64(kiln_op_bytes(n, in, out));
    e->unit = b->unit ? b->unit(p->backend_ctx[n->backend], n, in) : b->name;
    return e;
}

void kiln_trace_node(kiln_trace *t, const kiln_program *p, int method, int part, int index,
                     const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out,
                     uint64_t t0, uint64_t t1) {
    record_node(t, p, method, part, index, n, in, out, t0, t1);
}

static void take_op(void *user, int node, const char *name, const char *type, uint64_t cycles) {
    kiln_trace *t = user;
    if (t->n_ops == t->cap_ops) {
        int cap = t->cap_ops ? 2 * t->cap_ops : 256;
        trace_op *n = kiln_realloc(t->ops, sizeof *n * (size_t)cap);
        if (!n) {
            t->ops_lost++;
            return;
        }
        t->ops = n;
        t->cap_ops = cap;
    }
    t->ops[t->n_ops++] = (trace_op){node, name ? name : "", type ? type : "", cycles};
}

void kiln_trace_partition_begin(kiln_trace *t, kiln_exec_report *rep) {
    t->n_ops = t->ops_lost = 0;
    rep->profile = 1;
    rep->op = take_op;
    rep->user = t;
}

/* A profiled delegate's ops, laid out one after another over its execute
 * time by their cycles (estimated), each run of ops of one Kiln node under a
 * node event spanning them; ops of no node lie directly under the
 * partition. Children come before their parent. */
static void delegate_events(kiln_trace *t, const kiln_program *p, int method, int part,
                            const kiln_tensor *vals, uint64_t t0, uint64_t t1,
                            const kiln_exec_report *rep) {
    const kiln_graph *g = &p->mod.methods[method];
    uint64_t total = 0;
    for (int i = 0; i < t->n_ops; i++)
        total += t->ops[i].cycles;
    uint64_t base = rep->exec_t0 > t->origin ? rep->exec_t0 - t->origin : t0, span = rep->exec_ns;
    if (base < t0 || base > t1) base = t0;
    if (span > t1 - base) span = t1 - base;
    uint64_t at = base, cum = 0;
    for (int i = 0; i < t->n_ops;) {
        int node = t->ops[i].node, j = i;
        uint64_t node_t0 = at;
        for (; j < t->n_ops && (j == i || (node >= 0 && t->ops[j].node == node)); j++) {
            cum += t->ops[j].cycles;
            uint64_t end = base + (uint64_t)(total ? (unsigned __int128)span * cum / total
                                                   : (unsigned __int128)span * (j + 1) / t->n_ops);
            trace_ev *e = push(t);
            if (e)
                *e = (trace_ev){.kind = EV_OP,
                                .method = method,
                                .node = t->ops[j].node,
                                .partition = part,
                                .call = t->n_calls,
                                .t0 = at,
                                .t1 = end,
                                .name = t->ops[j].name,
                                .type = t->ops[j].type,
                                .cycles = t->ops[j].cycles,
                                .estimated = 1};
            at = end;
        }
        if (node >= 0 && node < g->n_nodes) {
            const kiln_node *n = &g->nodes[node];
            const kiln_tensor *in[KILN_MAX_INPUTS];
            for (int k = 0; k < n->n_in; k++)
                in[k] = &vals[n->in[k]];
            trace_ev *e = record_node(t, p, method, part, node, n, in, &vals[n->out], node_t0, at);
            if (e) e->estimated = 1;
        }
        i = j;
    }
}

void kiln_trace_partition(kiln_trace *t, const kiln_program *p, int method, int part,
                          const kiln_partition *pt, const kiln_tensor *vals, uint64_t t0,
                          uint64_t t1, const kiln_exec_report *rep) {
    if (rep->exec_ns && t->n_ops) delegate_events(t, p, method, part, vals, t0, t1, rep);
    t->dropped += t->ops_lost;
    t->n_ops = t->ops_lost = 0;
    if (t->n_pend == t->cap_pend) {
        int cap = t->cap_pend ? 2 * t->cap_pend : 16;
        trace_ev *np = kiln_realloc(t->pend, sizeof *np * (size_t)cap);
        if (!np) {
            t->dropped++;
            return;
        }
        t->pend = np;
        t->cap_pend = cap;
    }
    t->pend[t->n_pend++] = (trace_ev){.kind = EV_PARTITION,
                                      .fallback = (uint8_t)p->fallback[pt->backend],
                                      .backend = (int16_t)pt->backend,
                                      .method = method,
                                      .node = pt->first,
                                      .node_last = pt->first + pt->n_nodes - 1,
                                      .partition = part,
                                      .call = t->n_calls,
                                      .t0 = t0,
                                      .t1 = t1,
                                      .host_ns = rep->host_ns,
                                      .exec_ns = rep->exec_ns,
                                      .cycles = rep->cycles,
                                      .vtcm_ns = rep->vtcm_ns,
                                      .power_ns = rep->power_ns,
                                      .threads = rep->threads};
}

void kiln_trace_method(kiln_trace *t, int method, int64_t tokens, uint64_t t0, uint64_t t1,
                       int ok) {
    for (int i = 0; i < t->n_pend; i++) {
        trace_ev *slot = push(t);
        if (slot) *slot = t->pend[i];
    }
    t->n_pend = 0;
    trace_ev *e = push(t);
    if (e) {
        memset(e, 0, sizeof *e);
        e->kind = EV_METHOD;
        e->method = method;
        e->tokens = tokens;
        e->call = t->n_calls;
        e->t0 = t0;
        e->t1 = t1;
        e->ok = (uint8_t)ok;
    }
    t->n_calls++;
}

/* ---- writing ------------------------------------------------------------------ */

static uint64_t resident_bytes(const void *addr, size_t len) {
    if (!addr || !len) return 0;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0) return 0;
    uintptr_t a = (uintptr_t)addr, start = a & ~((uintptr_t)ps - 1);
    size_t span = (size_t)(a + len - start), pages = (span + (size_t)ps - 1) / (size_t)ps;
    unsigned char *vec = kiln_malloc(pages);
    if (!vec) return 0;
    uint64_t n = 0;
    if (mincore((void *)start, span, vec) == 0)
        for (size_t i = 0; i < pages; i++)
            n += vec[i] & 1;
    kiln_free(vec);
    n *= (uint64_t)ps;
    return n > len ? len : n;
}

static void write_event(FILE *f, const kiln_program *p, const trace_ev *e) {
    const kiln_module *m = &p->mod;
    const kiln_graph *g = &m->methods[e->method];
    if (e->kind == EV_METHOD) {
        fprintf(f, "{\"ev\":\"method\",\"call\":%lld,\"method\":", (long long)e->call);
        kiln_json_fput_str(f, g->name);
        fprintf(f, ",\"tokens\":%lld,\"start_ns\":%llu,\"end_ns\":%llu,\"ok\":%s}\n",
                (long long)e->tokens, (unsigned long long)e->t0, (unsigned long long)e->t1,
                e->ok ? "true" : "false");
        return;
    }
    const char *backend = m->backends[e->backend];
    if (e->kind == EV_PARTITION) {
        fprintf(f, "{\"ev\":\"partition\",\"call\":%lld,\"method\":", (long long)e->call);
        kiln_json_fput_str(f, g->name);
        fprintf(f, ",\"partition\":%d,\"backend\":", e->partition);
        kiln_json_fput_str(f, backend);
        fprintf(f,
                ",\"fallback\":%s,\"first_node\":%d,\"last_node\":%d,\"start_ns\":%llu,\"end_ns\":%"
                "llu",
                e->fallback ? "true" : "false", e->node, e->node_last, (unsigned long long)e->t0,
                (unsigned long long)e->t1);
        if (e->host_ns) fprintf(f, ",\"host_ns\":%llu", (unsigned long long)e->host_ns);
        if (e->exec_ns)
            fprintf(f,
                    ",\"delegate_ns\":%llu,\"cycles\":%llu,\"vtcm_acquire_ns\":%llu,"
                    "\"power_on_ns\":%llu,\"hw_threads\":%d",
                    (unsigned long long)e->exec_ns, (unsigned long long)e->cycles,
                    (unsigned long long)e->vtcm_ns, (unsigned long long)e->power_ns, e->threads);
        fputs("}\n", f);
        return;
    }
    if (e->kind == EV_OP) {
        fprintf(f, "{\"ev\":\"op\",\"call\":%lld,\"method\":", (long long)e->call);
        kiln_json_fput_str(f, g->name);
        fprintf(f, ",\"partition\":%d,", e->partition);
        if (e->node >= 0) fprintf(f, "\"node_id\":%d,", e->node);
        fputs("\"name\":", f);
        kiln_json_fput_str(f, e->name);
        fputs(",\"type\":", f);
        kiln_json_fput_str(f, e->type);
        fprintf(f, ",\"cycles\":%llu,\"start_ns\":%llu,\"end_ns\":%llu,\"estimated\":true}\n",
                (unsigned long long)e->cycles, (unsigned long long)e->t0,
                (unsigned long long)e->t1);
        return;
    }
    const kiln_node *n = &g->nodes[e->node];
    fprintf(f, "{\"ev\":\"node\",\"call\":%lld,\"method\":", (long long)e->call);
    kiln_json_fput_str(f, g->name);
    fprintf(f, ",\"partition\":%d,\"node_id\":%d,\"name\":", e->partition, e->node);
    kiln_json_fput_str(f, n->name);
    fputs(",\"op\":", f);
    kiln_json_fput_str(f, kiln_op_get(n->op)->name);
    fputs(",\"backend\":", f);
    kiln_json_fput_str(f, backend);
    fputs(",\"unit\":", f);
    kiln_json_fput_str(f, e->unit ? e->unit : backend);
    fprintf(f,
            ",\"fallback\":%s,\"start_ns\":%llu,\"end_ns\":%llu,\"flops\":%llu,\"bytes\":%llu%s}\n",
            e->fallback ? "true" : "false", (unsigned long long)e->t0, (unsigned long long)e->t1,
            (unsigned long long)e->flops, (unsigned long long)e->bytes,
            e->estimated ? ",\"estimated\":true" : "");
}

kiln_status kiln_trace_write(const kiln_trace *t, const kiln_session *s, const char *path) {
    if (!t || !path) return kiln_error(KILN_ERR_INVALID_ARG, "no trace or path given");
    const kiln_program *p = t->prog ? t->prog : s ? s->prog : NULL;
    if (!p) return kiln_error(KILN_ERR_INVALID_ARG, "the trace was never attached to a session");
    if (s && s->prog != p)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the session is of another program than the trace's");
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return kiln_error_wrap(st, "trace");
    FILE *f = out.f;
    const kiln_module *m = &p->mod;
    fprintf(f,
            "{\"kiln_trace\":2,\"kiln\":\"%s\",\"format_version\":%d,\"program\":", kiln_version(),
            KILN_FORMAT_VERSION);
    kiln_json_fput_str(f, p->path);
    fputs(",\"clock\":\"monotonic\",\"methods\":[", f);
    for (int k = 0; k < m->n_methods; k++) {
        fputs(k ? "," : "", f);
        kiln_json_fput_str(f, m->methods[k].name);
    }
    fputs("],\"backends\":[", f);
    for (int b = 0; b < m->n_backends; b++) {
        fputs(b ? "," : "", f);
        kiln_json_fput_str(f, m->backends[b]);
    }
    int threads = 1;
    for (int b = 0; b < m->n_backends; b++) {
        int n = p->backends[b]->threads ? p->backends[b]->threads(p->backend_ctx[b]) : 1;
        if (n > threads) threads = n;
    }
    fprintf(f, "],\"threads\":%d,\"calls\":%lld}\n", threads, (long long)t->n_calls);
    int64_t written = 0;
    for (const trace_block *b = t->head; b; b = b->next)
        for (int i = 0; i < b->n; i++, written++)
            write_event(f, p, &b->ev[i]);

    /* memory */
    uint64_t weights = 0, weights_off = 0;
    for (int i = 0; i < p->n_sections; i++)
        if (p->sections[i].kind == KILN_SEC_WEIGHTS) {
            weights = p->sections[i].size;
            weights_off = p->sections[i].offset;
        }
    uint64_t state = 0, state_used = 0;
    for (int i = 0; i < m->n_states; i++) {
        const kiln_state *sv = &m->states[i];
        state += sv->nbytes;
        if (t->positions && sv->ndim >= 1 && sv->ne[0] > 0) {
            int64_t used = t->positions < sv->ne[0] ? t->positions : sv->ne[0];
            state_used += sv->nbytes / (uint64_t)sv->ne[0] * (uint64_t)used;
        }
    }
    struct rusage ru;
    uint64_t rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024 : 0;
    fprintf(f,
            "{\"ev\":\"memory\",\"weights_file_bytes\":%llu,\"weights_mapped_bytes\":%llu,"
            "\"weights_resident_bytes\":%llu,\"state_bytes\":%llu,",
            (unsigned long long)weights, (unsigned long long)p->map.size,
            (unsigned long long)resident_bytes(p->map.data ? p->map.data + weights_off : NULL,
                                               (size_t)weights),
            (unsigned long long)state);
    if (t->positions)
        fprintf(f, "\"state_used_bytes\":%llu,\"state_positions\":%lld,",
                (unsigned long long)state_used, (long long)t->positions);
    fprintf(f, "\"arena_bytes\":%llu,\"input_bytes\":%llu,\"peak_rss_bytes\":%llu}\n",
            (unsigned long long)p->arena_bytes, (unsigned long long)p->input_block_bytes,
            (unsigned long long)rss);
    fprintf(f, "{\"ev\":\"end\",\"events\":%lld,\"dropped\":%lld}\n", (long long)written,
            (long long)t->dropped);
    if ((st = kiln_outfile_commit(&out))) return kiln_error_wrap(st, "trace");
    return KILN_OK;
}
