/* test_trace.c: the trace (kiln_trace.h, docs/TRACE.md) of a known program,
 * read back through the JSON parser: every node of every call present once,
 * nesting (node within its partition within its method, in time too, and
 * children's time within the parent's), partitions as maximal runs of one
 * backend, fallback nodes flagged when a backend refuses an op, the memory
 * figures, the end count; and the errors. */
#include <stdio.h>

#include "base/json.h"
#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln_trace.h"
#include "runtime/runtime.h"

#define VOCAB 64
#define CTX 32
static const kt_l2c_config MODEL = {64, 96, 2, 4, 2, VOCAB, CTX, 0, 9};

static const char *program(const char *backends, const char *name) {
    static char paths[4][600];
    static int n;
    char *out = paths[n++ & 3];
    snprintf(out, 600, "%s", kt_path(name));
    if (kt_write_llama2c(kt_path("m.bin"), &MODEL) ||
        kt_compile(kt_path("m.bin"), NULL, out, 8, CTX, backends))
        return NULL;
    return out;
}

/* Runs prefill of 5 tokens then 3 decodes with a trace attached, writes
 * it; *pp: the open program (NULL after a failed assertion). */
static void traced_run(const char *prog_path, const char *trace_path, kiln_program **pp) {
    kiln_program *p;
    kiln_session *s;
    kiln_trace *t;
    *pp = NULL;
    ASSERT_OK(kiln_program_open(prog_path, &p));
    int pre, dec;
    ASSERT_OK(kiln_program_find_method(p, "prefill", &pre));
    ASSERT_OK(kiln_program_find_method(p, "decode", &dec));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_trace_create(&t));
    ASSERT_OK(kiln_session_set_trace(s, t));
    int32_t toks[5] = {1, 2, 3, 4, 5}, pos = 0, all = 0;
    int64_t five = 5, one = 1;
    ASSERT_OK(kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &five));
    ASSERT_OK(kiln_session_set_input(s, pre, 1, &pos, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_execute(s, pre));
    for (int i = 0; i < 3; i++) {
        int32_t tok = 7 + i, p2 = 5 + i;
        ASSERT_OK(kiln_session_set_input(s, dec, 0, &tok, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_set_input(s, dec, 1, &p2, KILN_I32, 1, &one));
        ASSERT_OK(kiln_session_execute(s, dec));
    }
    kiln_trace_set_positions(t, 8);
    int64_t n = kiln_trace_event_count(t);
    ASSERT_OK(kiln_session_set_trace(s, NULL)); /* detached: records nothing more */
    ASSERT_OK(kiln_session_execute(s, dec));
    ASSERT_EQ_I(kiln_trace_event_count(t), n);
    ASSERT_OK(kiln_trace_write(t, s, trace_path));
    kiln_trace_free(t);
    kiln_session_destroy(s);
    *pp = p;
}

typedef struct {
    kiln_json_doc doc[8192];
    const kiln_json *line[8192];
    int n;
} lines;

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static int read_lines(const char *path, lines *L) {
    size_t len;
    char *text = slurp(path, &len);
    if (!text) return -1;
    L->n = 0;
    for (char *p = text, *e; *p && L->n < 8192; p = e + 1) {
        e = strchr(p, '\n');
        if (!e) break;
        if (kiln_json_parse(p, (size_t)(e - p), "trace line", 0, &L->doc[L->n])) {
            free(text);
            return -1;
        }
        L->line[L->n] = L->doc[L->n].root;
        L->n++;
    }
    free(text);
    return 0;
}

static void free_lines(lines *L) {
    for (int i = 0; i < L->n; i++)
        kiln_json_free(&L->doc[i]);
}

static int64_t num(const kiln_json *o, const char *k) {
    double v = -1;
    if (kiln_json_get_num(o, "event", k, 1, &v)) return -999999;
    return (int64_t)v;
}

static const char *str(const kiln_json *o, const char *k) {
    const char *s = NULL;
    if (kiln_json_get_str(o, "event", k, 1, &s, NULL)) return "";
    return s;
}

static int flag(const kiln_json *o, const char *k) {
    int b = -1;
    if (kiln_json_get_bool(o, "event", k, 1, &b)) return -1;
    return b;
}

/* Checks the structure against the program; *fallback: the number of
 * fallback node events. */
static void check_structure(const lines *L, const kiln_program *p, int *fallback_out) {
    const kiln_json *h = L->line[0];
    ASSERT_EQ_I((int)num(h, "kiln_trace"), 2);
    ASSERT_EQ_I((int)num(h, "calls"), 4);
    int calls = 4, fallback = 0;
    const kiln_json *end = L->line[L->n - 1], *mem = L->line[L->n - 2];
    ASSERT_STR_EQ(str(end, "ev"), "end");
    ASSERT_EQ_I((int)num(end, "events"), L->n - 3);
    ASSERT_STR_EQ(str(mem, "ev"), "memory");
    uint64_t state = 0;
    for (int i = 0; i < p->mod.n_states; i++)
        state += p->mod.states[i].nbytes;
    ASSERT_EQ_I(num(mem, "state_bytes"), (int64_t)state);
    ASSERT_EQ_I(num(mem, "state_used_bytes"), (int64_t)(state / CTX * 8));
    ASSERT(num(mem, "weights_file_bytes") > 0 && num(mem, "peak_rss_bytes") > 0);
    ASSERT(num(mem, "weights_resident_bytes") <= num(mem, "weights_file_bytes"));
    ASSERT_EQ_I(num(mem, "arena_bytes"), (int64_t)p->arena_bytes);
    for (int c = 0; c < calls; c++) {
        const kiln_json *m = NULL;
        int mi = -1;
        for (int i = 1; i < L->n - 2; i++)
            if (num(L->line[i], "call") == c && !strcmp(str(L->line[i], "ev"), "method"))
                m = L->line[i];
        ASSERT_MSG(m, "call %d has no method event", c);
        const char *mname = str(m, "method");
        ASSERT_OK(kiln_program_find_method(p, mname, &mi));
        ASSERT_STR_EQ(mname, c == 0 ? "prefill" : "decode");
        ASSERT_EQ_I((int)num(m, "tokens"), (c == 0 ? 5 : 1));
        ASSERT_EQ_I(flag(m, "ok"), 1);
        const kiln_graph *g = &p->mod.methods[mi];
        int64_t m0 = num(m, "start_ns"), m1 = num(m, "end_ns");
        ASSERT(m0 >= 0 && m1 >= m0);
        static int seen[4096];
        memset(seen, 0, sizeof seen);
        int64_t part_sum = 0, n_parts = 0;
        for (int i = 1; i < L->n - 2; i++) {
            const kiln_json *e = L->line[i];
            if (num(e, "call") != c) continue;
            const char *ev = str(e, "ev");
            int64_t s0 = num(e, "start_ns"), s1 = num(e, "end_ns");
            ASSERT(s0 >= m0 && s1 <= m1 && s1 >= s0); /* within the method */
            if (!strcmp(ev, "partition")) {
                n_parts++;
                part_sum += s1 - s0;
                int first = (int)num(e, "first_node"), last = (int)num(e, "last_node");
                const char *be = str(e, "backend");
                /* a maximal run of one backend: its nodes all on it, its neighbours not */
                for (int k = first; k <= last; k++)
                    ASSERT_STR_EQ(p->mod.backends[g->nodes[k].backend], be);
                if (first > 0) ASSERT(g->nodes[first - 1].backend != g->nodes[first].backend);
                if (last + 1 < g->n_nodes)
                    ASSERT(g->nodes[last + 1].backend != g->nodes[last].backend);
                int64_t node_sum = 0;
                for (int j = 1; j < L->n - 2; j++) {
                    const kiln_json *x = L->line[j];
                    if (num(x, "call") != c || strcmp(str(x, "ev"), "node") ||
                        num(x, "partition") != num(e, "partition"))
                        continue;
                    int id = (int)num(x, "node_id");
                    ASSERT(id >= first && id <= last);
                    ASSERT(num(x, "start_ns") >= s0 && num(x, "end_ns") <= s1);
                    node_sum += num(x, "end_ns") - num(x, "start_ns");
                }
                ASSERT(node_sum <= s1 - s0);
            } else if (!strcmp(ev, "node")) {
                int id = (int)num(e, "node_id");
                ASSERT(id >= 0 && id < g->n_nodes);
                seen[id]++;
                const kiln_node *n = &g->nodes[id];
                ASSERT_STR_EQ(str(e, "name"), n->name);
                ASSERT_STR_EQ(str(e, "op"), kiln_op_get(n->op)->name);
                ASSERT_STR_EQ(str(e, "backend"), p->mod.backends[n->backend]);
                ASSERT(*str(e, "unit"));
                ASSERT_EQ_I(flag(e, "fallback"), kiln_program_node_is_fallback(p, n));
                fallback += flag(e, "fallback");
                ASSERT(num(e, "bytes") > 0);
                if (n->op == KILN_OP_MATMUL) ASSERT(num(e, "flops") > 0);
            }
        }
        for (int k = 0; k < g->n_nodes; k++)
            ASSERT_MSG(seen[k] == 1, "call %d: node %d seen %d times", c, k, seen[k]);
        ASSERT(n_parts >= 1 && part_sum <= m1 - m0);
    }
    *fallback_out = fallback;
}

TEST(trace_of_a_known_program) {
    const char *path = program("cpu", "cpu.kiln");
    ASSERT(path);
    kiln_program *p;
    traced_run(path, kt_path("cpu.trace"), &p);
    ASSERT(p);
    static lines L;
    ASSERT_EQ_I(read_lines(kt_path("cpu.trace"), &L), 0);
    int fb = -1;
    check_structure(&L, p, &fb);
    ASSERT(!kt_failed_here);
    ASSERT_EQ_I(fb, 0);
    /* every node on cpu: one partition per call */
    int parts = 0;
    for (int i = 0; i < L.n; i++)
        parts += !strcmp(str(L.line[i], "ev"), "partition");
    ASSERT_EQ_I(parts, 4);
    free_lines(&L);
    kiln_program_close(p);
}

TEST(fallback_nodes_flagged) {
    const char *path = program("test:refuse=rms_norm", "fb.kiln");
    ASSERT(path);
    kiln_program *p;
    traced_run(path, kt_path("fb.trace"), &p);
    ASSERT(p);
    static lines L;
    ASSERT_EQ_I(read_lines(kt_path("fb.trace"), &L), 0);
    int fb = -1;
    check_structure(&L, p, &fb);
    ASSERT(!kt_failed_here);
    /* 2 layers x 2 norms + the final norm, in each of 4 calls */
    ASSERT_EQ_I(fb, 4 * 5);
    for (int i = 0; i < L.n; i++)
        if (!strcmp(str(L.line[i], "ev"), "node"))
            ASSERT_EQ_I(flag(L.line[i], "fallback"), !strcmp(str(L.line[i], "op"), "rms_norm"));
    free_lines(&L);
    kiln_program_close(p);
}

TEST(trace_errors) {
    const char *a = program("cpu", "a.kiln"), *b = program("ref", "b.kiln");
    ASSERT(a && b);
    kiln_program *pa, *pb;
    kiln_session *sa, *sb;
    kiln_trace *t;
    ASSERT_OK(kiln_program_open(a, &pa));
    ASSERT_OK(kiln_program_open(b, &pb));
    ASSERT_OK(kiln_session_create(pa, &sa));
    ASSERT_OK(kiln_session_create(pb, &sb));
    ASSERT_OK(kiln_trace_create(&t));
    ASSERT_EQ_I(kiln_trace_write(t, NULL, kt_path("x.trace")),
                KILN_ERR_INVALID_ARG); /* never attached */
    ASSERT_OK(kiln_session_set_trace(sa, t));
    ASSERT_EQ_I(kiln_session_set_trace(sb, t), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "another program");
    ASSERT_EQ_I(kiln_trace_write(t, sb, kt_path("x.trace")), KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(kiln_trace_write(t, sa, "/nonexistent-dir/x.trace"), KILN_ERR_IO);
    ASSERT_CONTAINS(kiln_last_error(), "/nonexistent-dir/x.trace");
    /* a failing call: its method event says ok=false */
    int dec;
    ASSERT_OK(kiln_program_find_method(pa, "decode", &dec));
    int32_t tok = VOCAB + 3, pos = 0; /* outside the vocabulary */
    int64_t one = 1;
    ASSERT_OK(kiln_session_set_input(sa, dec, 0, &tok, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_set_input(sa, dec, 1, &pos, KILN_I32, 1, &one));
    ASSERT(kiln_session_execute(sa, dec) != KILN_OK);
    ASSERT_OK(kiln_trace_write(t, sa, kt_path("failed.trace")));
    static lines L;
    ASSERT_EQ_I(read_lines(kt_path("failed.trace"), &L), 0);
    const kiln_json *m = L.line[L.n - 3];
    ASSERT_STR_EQ(str(m, "ev"), "method");
    ASSERT_EQ_I(flag(m, "ok"), 0);
    free_lines(&L);
    kiln_session_set_trace(sa, NULL);
    kiln_trace_free(t);
    kiln_session_destroy(sa);
    kiln_session_destroy(sb);
    kiln_program_close(pa);
    kiln_program_close(pb);
}

TEST_MAIN(trace_of_a_known_program, fallback_nodes_flagged, trace_errors)
