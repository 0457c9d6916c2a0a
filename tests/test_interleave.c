/* test_interleave.c: any method of a session, in any order, gives what a
 * fresh session computes for the same token history. Threads share one
 * program, each with its own session, and run random mixes of `prefill`
 * (any chunk length, last-row or all-row logits), `decode` and reset; after
 * every call the logits are compared, bit for bit (ref's rows do not depend
 * on batching), with a from-scratch prefill of the whole history. Also: calls
 * past the context are refused and change nothing, a session can start over
 * without a reset, and two programs opened from one file run side by side. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln.h"

#define CTX 48    /* --max-seq: small, so histories fill it and resets happen */
#define PREFILL 8 /* --prefill */
#define VOCAB 97
#define THREADS 4
#define CALLS 300 /* per thread */

static const kt_l2c_config MODEL = {32, 64, 2, 4, 2, VOCAB, CTX, 0, 21};

/* Method and input indices of an LLM program, found by name. */
typedef struct {
    int pre, dec;
    int pre_tokens, pre_pos, pre_all, dec_tokens, dec_pos;
    int pre_max, vocab, ctx;
} llm;

static int input_index(const kiln_program *p, int method, const char *name) {
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info info;
        if (!kiln_method_input_info(p, method, i, &info) && !strcmp(info.name, name)) return i;
    }
    return -1;
}

static int find_llm(const kiln_program *p, llm *m) {
    kiln_tensor_info tin, tout;
    int64_t ctx;
    if (kiln_program_find_method(p, "prefill", &m->pre) ||
        kiln_program_find_method(p, "decode", &m->dec) ||
        kiln_program_meta_int(p, "llm.context_length", &ctx))
        return -1;
    m->pre_tokens = input_index(p, m->pre, "tokens");
    m->pre_pos = input_index(p, m->pre, "pos");
    m->pre_all = input_index(p, m->pre, "all_logits");
    m->dec_tokens = input_index(p, m->dec, "tokens");
    m->dec_pos = input_index(p, m->dec, "pos");
    if (m->pre_tokens < 0 || m->pre_pos < 0 || m->pre_all < 0 || m->dec_tokens < 0 ||
        m->dec_pos < 0 || kiln_method_input_info(p, m->pre, m->pre_tokens, &tin) ||
        kiln_method_output_info(p, m->dec, 0, &tout))
        return -1;
    m->pre_max = (int)tin.shape[0];
    m->vocab = (int)tout.shape[1];
    m->ctx = (int)ctx;
    return 0;
}

static const char *compile_model(void) {
    static char path[600];
    if (!path[0]) {
        if (kt_write_llama2c(kt_path("il.bin"), &MODEL)) return NULL;
        if (kt_compile(kt_path("il.bin"), NULL, kt_path("il.kiln"), PREFILL, CTX, NULL)) {
            fprintf(stderr, "  compile: %s\n", kiln_last_error());
            return NULL;
        }
        snprintf(path, sizeof path, "%s", kt_path("il.kiln"));
    }
    return path;
}

/* prefill tokens[0..n) at pos; set_all: also set all_logits (else the
 * value set last stays). */
static kiln_status prefill(kiln_session *s, const llm *m, const int32_t *tokens, int n, int pos,
                           int all, int set_all) {
    int64_t len = n, one = 1;
    int32_t p = pos, a = all;
    kiln_status st;
    if ((st = kiln_session_set_input(s, m->pre, m->pre_tokens, tokens, KILN_I32, 1, &len)) ||
        (st = kiln_session_set_input(s, m->pre, m->pre_pos, &p, KILN_I32, 1, &one)) ||
        (set_all && (st = kiln_session_set_input(s, m->pre, m->pre_all, &a, KILN_I32, 1, &one))))
        return st;
    return kiln_session_execute(s, m->pre);
}

static kiln_status decode(kiln_session *s, const llm *m, int32_t token, int pos) {
    int64_t one = 1;
    int32_t p = pos;
    kiln_status st;
    if ((st = kiln_session_set_input(s, m->dec, m->dec_tokens, &token, KILN_I32, 1, &one)) ||
        (st = kiln_session_set_input(s, m->dec, m->dec_pos, &p, KILN_I32, 1, &one)))
        return st;
    return kiln_session_execute(s, m->dec);
}

/* The logits output of `method`, checked to be f32 [rows, vocab]. */
static const float *logits_of(kiln_session *s, const llm *m, int method, int rows) {
    const void *data;
    kiln_dtype dt;
    int nd;
    int64_t shape[KILN_MAX_DIMS];
    if (kiln_session_get_output(s, method, 0, &data, &dt, &nd, shape)) return NULL;
    if (dt != KILN_F32 || nd != 2 || shape[0] != rows || shape[1] != m->vocab) {
        fprintf(stderr, "  output is %s with %d dims [%lld, %lld], expected f32 [%d, %d]\n",
                kiln_dtype_name(dt), nd, (long long)shape[0], (long long)shape[1], rows, m->vocab);
        return NULL;
    }
    return data;
}

/* rows[0..n) = the logits of every position of hist[0..n), computed from
 * scratch: reset, then prefill from 0 in chunks of the method's maximum
 * with all rows out. */
static kiln_status fresh_rows(kiln_session *chk, const llm *m, const int32_t *hist, int n,
                              float *rows) {
    kiln_status st = kiln_session_reset(chk);
    for (int done = 0; !st && done < n;) {
        int len = n - done < m->pre_max ? n - done : m->pre_max;
        if ((st = prefill(chk, m, hist + done, len, done, 1, 1))) return st;
        const float *l = logits_of(chk, m, m->pre, len);
        if (!l) return KILN_ERR_BACKEND;
        memcpy(rows + (size_t)done * m->vocab, l, sizeof(float) * (size_t)len * (size_t)m->vocab);
        done += len;
    }
    return st;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d;
    }
    return md;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- one thread's random walk ------------------------------------------------------ */

typedef struct {
    const kiln_program *prog;       /* the program under test */
    const kiln_program *check_prog; /* the program fresh results come from */
    int iterations;
    unsigned long long seed;
    /* results */
    int failed;
    char err[1024];
    int n_calls, n_prefill, n_decode, n_reset, n_overlong, n_checks;
    uint64_t digest; /* of every output, in order */
} walker;

enum { OP_RESET, OP_PREFILL, OP_DECODE };
static const char *const OP_NAME[] = {"reset", "prefill", "decode"};

#define WFAIL(...)                                                                                 \
    do {                                                                                           \
        snprintf(w->err, sizeof w->err, __VA_ARGS__);                                              \
        w->failed = 1;                                                                             \
        goto done;                                                                                 \
    } while (0)

static void walk(walker *w) {
    llm m, cm;
    kiln_session *s = NULL, *chk = NULL;
    float *rows = NULL;
    int32_t hist[CTX];
    int n = 0, last_all = -1; /* all_logits as last set; -1: must be set */
    unsigned long long rs = w->seed;
    w->digest = 0xcbf29ce484222325ull;
    if (find_llm(w->prog, &m) || find_llm(w->check_prog, &cm)) WFAIL("not an LLM program");
    if (m.ctx != CTX || m.pre_max != PREFILL)
        WFAIL("program has context %d, prefill %d", m.ctx, m.pre_max);
    if (kiln_session_create(w->prog, &s) || kiln_session_create(w->check_prog, &chk))
        WFAIL("session: %s", kiln_last_error());
    if (!(rows = malloc(sizeof(float) * CTX * (size_t)m.vocab))) WFAIL("out of memory");
    for (int it = 0; it < w->iterations; it++) {
        unsigned r = kt_rand(&rs) % 100;
        int op = r < 3 ? OP_RESET : r < 51 ? OP_PREFILL : OP_DECODE;
        int len = op == OP_PREFILL ? 1 + (int)(kt_rand(&rs) % (unsigned)m.pre_max) : 1;
        int all = op == OP_PREFILL ? (int)(kt_rand(&rs) & 1) : 0;
        int32_t toks[PREFILL];
        for (int i = 0; i < len; i++)
            toks[i] = (int32_t)(kt_rand(&rs) % (unsigned)m.vocab);
        if (op != OP_RESET && n + len > m.ctx) {
            /* Past the context. Sometimes try it: it must be refused with a
             * message and leave the history intact, which the decode that
             * then continues it checks. Otherwise start over. */
            if (kt_rand(&rs) % 3 == 0) {
                kiln_status st = op == OP_PREFILL ? prefill(s, &m, toks, len, n, all, 1)
                                                  : decode(s, &m, toks[0], n);
                w->n_calls++;
                w->n_overlong++;
                if (st != KILN_ERR_INVALID_ARG || !strstr(kiln_last_error(), "context"))
                    WFAIL("call %d: %s of %d at position %d (context %d) gave status %d: \"%s\"",
                          w->n_calls, OP_NAME[op], len, n, m.ctx, st, kiln_last_error());
                if (op == OP_PREFILL) last_all = all; /* set before the execute failed */
                op = n < m.ctx ? OP_DECODE : OP_RESET;
                len = 1;
                all = 0;
            } else {
                op = OP_RESET;
            }
        }
        w->n_calls++;
        if (op == OP_RESET) {
            if (kiln_session_reset(s)) WFAIL("reset: %s", kiln_last_error());
            n = 0;
            last_all = -1; /* inputs are not promised to outlive a reset */
            w->n_reset++;
            continue;
        }
        kiln_status st;
        const float *out;
        int out_rows = op == OP_PREFILL && all ? len : 1;
        if (op == OP_PREFILL) {
            st = prefill(s, &m, toks, len, n, all, all != last_all);
            last_all = all;
            w->n_prefill++;
        } else {
            st = decode(s, &m, toks[0], n);
            w->n_decode++;
        }
        if (st)
            WFAIL("call %d: %s of %d at position %d: %s", w->n_calls, OP_NAME[op], len, n,
                  kiln_last_error());
        if (!(out = logits_of(s, &m, op == OP_PREFILL ? m.pre : m.dec, out_rows)))
            WFAIL("call %d: %s of %d (all_logits %d) at position %d: bad output", w->n_calls,
                  OP_NAME[op], len, all, n);
        memcpy(hist + n, toks, sizeof *toks * (size_t)len);
        n += len;
        w->digest = fnv(w->digest, out, sizeof(float) * (size_t)out_rows * (size_t)m.vocab);
        /* Now the same history from scratch; every 50th check in a session
         * made just for it, otherwise in the checker, reset. */
        kiln_session *fresh = chk;
        if (w->n_checks % 50 == 49 && kiln_session_create(w->check_prog, &fresh))
            WFAIL("session: %s", kiln_last_error());
        st = fresh_rows(fresh, &cm, hist, n, rows);
        if (fresh != chk) kiln_session_destroy(fresh);
        if (st) WFAIL("call %d: fresh prefill of %d tokens: %s", w->n_calls, n, kiln_last_error());
        w->n_checks++;
        const float *want = rows + (size_t)(n - out_rows) * (size_t)m.vocab;
        size_t count = (size_t)out_rows * (size_t)m.vocab;
        if (memcmp(out, want, sizeof(float) * count)) {
            int row = 0;
            while (!memcmp(out + (size_t)row * m.vocab, want + (size_t)row * m.vocab,
                           sizeof(float) * (size_t)m.vocab))
                row++;
            WFAIL("call %d: %s of %d (all_logits %d) at position %d differs from a fresh session "
                  "from row %d "
                  "(position %d): max |diff| %.3g over the %d rows",
                  w->n_calls, OP_NAME[op], len, all, n - len, row, n - out_rows + row,
                  max_abs_diff(out, want, count), out_rows);
        }
    }
done:
    free(rows);
    kiln_session_destroy(s);
    kiln_session_destroy(chk);
}

static void *walk_thread(void *arg) {
    walk(arg);
    return NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs the walkers on threads; 0 when all passed (reports each failure). */
static int run_walkers(walker *w, int n) {
    pthread_t th[THREADS];
    int started = 0, failed = 0;
    double t0 = now_ms();
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, walk_thread, &w[started])) break;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (started < n) {
        fprintf(stderr, "  could not start thread %d\n", started);
        return -1;
    }
    int calls = 0, pre = 0, dec = 0, res = 0, over = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].failed) {
            fprintf(stderr, "  thread %d (seed %llu): %s\n", i, w[i].seed, w[i].err);
            failed++;
        }
        calls += w[i].n_calls;
        pre += w[i].n_prefill;
        dec += w[i].n_decode;
        res += w[i].n_reset;
        over += w[i].n_overlong;
    }
    printf("  %d threads: %d calls (%d prefill, %d decode, %d reset, %d refused past the context), "
           "each checked, in %.0f ms\n",
           n, calls, pre, dec, res, over, now_ms() - t0);
    return failed;
}

TEST(threads_interleave_methods_on_one_program) {
    const char *path = compile_model();
    ASSERT(path);
    kiln_program *p;
    ASSERT_OK(kiln_program_open(path, &p));
    walker w[THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < THREADS; i++) {
        w[i].prog = w[i].check_prog = p;
        w[i].iterations = CALLS;
        w[i].seed = 1000 + (unsigned long long)i;
    }
    int failed = run_walkers(w, THREADS);
    kiln_program_close(p);
    ASSERT_MSG(failed == 0, "%d of %d threads failed", failed, THREADS);
    int calls = 0, over = 0;
    for (int i = 0; i < THREADS; i++) {
        calls += w[i].n_calls;
        over += w[i].n_overlong;
    }
    ASSERT(calls >= 1000);
    ASSERT(over > 0);
}

/* Two programs opened from one file, used at once: walkers with the same
 * seed on either give the same outputs, checked against the other one. */
TEST(two_programs_from_one_file_run_concurrently) {
    const char *path = compile_model();
    ASSERT(path);
    kiln_program *a, *b;
    ASSERT_OK(kiln_program_open(path, &a));
    ASSERT_OK(kiln_program_open(path, &b));
    walker w[THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < THREADS; i++) {
        w[i].prog = i < 2 ? a : b;
        w[i].check_prog = i < 2 ? b : a;
        w[i].iterations = 120;
        w[i].seed = 7 + (unsigned long long)(i % 2);
    }
    int failed = run_walkers(w, THREADS);
    ASSERT_MSG(failed == 0, "%d of %d threads failed", failed, THREADS);
    ASSERT_EQ_U(w[0].digest, w[2].digest);
    ASSERT_EQ_U(w[1].digest, w[3].digest);
    ASSERT(w[0].digest != w[1].digest);
    /* Closing one leaves the other working. */
    kiln_session *s;
    ASSERT_OK(kiln_session_create(b, &s));
    kiln_program_close(a);
    llm m;
    ASSERT(find_llm(b, &m) == 0);
    ASSERT_OK(decode(s, &m, 5, 0));
    ASSERT(logits_of(s, &m, m.dec, 1));
    kiln_session_destroy(s);
    kiln_program_close(b);
}

/* Calls past the context (or before position 0) are refused with
 * INVALID_ARG and a message, and the session goes on as if they were never
 * made. */
TEST(calls_past_the_context_are_refused) {
    const char *path = compile_model();
    ASSERT(path);
    kiln_program *p;
    kiln_session *s, *chk;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_session_create(p, &chk));
    llm m;
    ASSERT(find_llm(p, &m) == 0);
    ASSERT_EQ_I(m.ctx, CTX);
    int32_t hist[CTX];
    for (int i = 0; i < CTX; i++)
        hist[i] = (i * 13 + 3) % VOCAB;
    for (int pos = 0; pos < 40; pos += PREFILL)
        ASSERT_OK(prefill(s, &m, hist + pos, PREFILL, pos, 0, 1));
    /* 40 + 9 > 48 cannot even be given (9 > the prefill maximum of 8). */
    int64_t nine = 9;
    ASSERT_EQ_I(kiln_session_set_input(s, m.pre, m.pre_tokens, hist, KILN_I32, 1, &nine),
                KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "tokens");
    /* 41 + 8 > 48. */
    ASSERT_EQ_I(prefill(s, &m, hist + 40, PREFILL, 41, 1, 1), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "context");
    ASSERT_CONTAINS(kiln_last_error(), "48");
    ASSERT_EQ_I(decode(s, &m, 1, CTX), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "context");
    ASSERT_EQ_I(decode(s, &m, 1, 1 << 30), KILN_ERR_INVALID_ARG);
    ASSERT(kiln_last_error()[0]);
    ASSERT_EQ_I(decode(s, &m, 1, -1), KILN_ERR_INVALID_ARG);
    ASSERT(kiln_last_error()[0]);
    ASSERT_EQ_I(prefill(s, &m, hist, 2, -2, 1, 1), KILN_ERR_INVALID_ARG);
    ASSERT(kiln_last_error()[0]);
    /* The session is intact: 40..47 in one call fill the context exactly
     * and match a fresh session. */
    float *rows = malloc(sizeof(float) * CTX * VOCAB);
    ASSERT(rows);
    ASSERT_OK(prefill(s, &m, hist + 40, PREFILL, 40, 1, 1));
    const float *out = logits_of(s, &m, m.pre, PREFILL);
    ASSERT(out);
    ASSERT_OK(fresh_rows(chk, &m, hist, CTX, rows));
    double d = max_abs_diff(out, rows + 40 * VOCAB, PREFILL * VOCAB);
    ASSERT_MSG(memcmp(out, rows + 40 * VOCAB, sizeof(float) * PREFILL * VOCAB) == 0,
               "after refused calls: max |diff| %.3g from a fresh session", d);
    /* Full now: one more token is refused. */
    ASSERT_EQ_I(decode(s, &m, 1, CTX), KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(prefill(s, &m, hist, 1, CTX, 0, 1), KILN_ERR_INVALID_ARG);
    free(rows);
    kiln_session_destroy(s);
    kiln_session_destroy(chk);
    kiln_program_close(p);
}

/* prefill, decode, prefill again in one session; then a second run from
 * position 0 without a reset, and one after a reset: each equals a fresh
 * session given the same history. */
TEST(second_run_in_one_session) {
    const char *path = compile_model();
    ASSERT(path);
    kiln_program *p;
    kiln_session *s, *chk;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_session_create(p, &chk));
    llm m;
    ASSERT(find_llm(p, &m) == 0);
    float *rows = malloc(sizeof(float) * CTX * VOCAB);
    ASSERT(rows);
    const float *out;
    int32_t h[CTX] = {1, 17, 33, 8,  90, /* prefill */ 44, /* decode */ 2,
                      3, 5,  7,  11, 13 /* prefill */};
    /* Run 1. */
    ASSERT_OK(prefill(s, &m, h, 5, 0, 0, 1));
    ASSERT((out = logits_of(s, &m, m.pre, 1)));
    ASSERT_OK(fresh_rows(chk, &m, h, 5, rows));
    ASSERT(memcmp(out, rows + 4 * VOCAB, sizeof(float) * VOCAB) == 0);
    ASSERT_OK(decode(s, &m, h[5], 5));
    ASSERT((out = logits_of(s, &m, m.dec, 1)));
    ASSERT_OK(fresh_rows(chk, &m, h, 6, rows));
    ASSERT(memcmp(out, rows + 5 * VOCAB, sizeof(float) * VOCAB) == 0);
    ASSERT_OK(prefill(s, &m, h + 6, 6, 6, 1, 1));
    ASSERT((out = logits_of(s, &m, m.pre, 6)));
    ASSERT_OK(fresh_rows(chk, &m, h, 12, rows));
    ASSERT_MSG(memcmp(out, rows + 6 * VOCAB, sizeof(float) * 6 * VOCAB) == 0,
               "prefill after decode: max |diff| %.3g",
               max_abs_diff(out, rows + 6 * VOCAB, 6 * VOCAB));
    /* Run 2 over run 1's cache, from position 0 (rows past the new history
     * are stale but never read). */
    int32_t g[CTX] = {1, 60, 61, 62, 63, 64, 65, 66, 67, 68};
    ASSERT_OK(prefill(s, &m, g, 7, 0, 1, 1));
    ASSERT((out = logits_of(s, &m, m.pre, 7)));
    ASSERT_OK(fresh_rows(chk, &m, g, 7, rows));
    ASSERT_MSG(memcmp(out, rows, sizeof(float) * 7 * VOCAB) == 0,
               "second run without reset: max |diff| %.3g", max_abs_diff(out, rows, 7 * VOCAB));
    ASSERT_OK(decode(s, &m, g[7], 7));
    ASSERT((out = logits_of(s, &m, m.dec, 1)));
    ASSERT_OK(fresh_rows(chk, &m, g, 8, rows));
    ASSERT(memcmp(out, rows + 7 * VOCAB, sizeof(float) * VOCAB) == 0);
    /* Run 3 after a reset, decode first. */
    ASSERT_OK(kiln_session_reset(s));
    ASSERT_OK(decode(s, &m, h[0], 0));
    ASSERT_OK(prefill(s, &m, h + 1, 3, 1, 1, 1));
    ASSERT((out = logits_of(s, &m, m.pre, 3)));
    ASSERT_OK(fresh_rows(chk, &m, h, 4, rows));
    ASSERT(memcmp(out, rows + VOCAB, sizeof(float) * 3 * VOCAB) == 0);
    free(rows);
    kiln_session_destroy(s);
    kiln_session_destroy(chk);
    kiln_program_close(p);
}

TEST_MAIN(second_run_in_one_session, calls_past_the_context_are_refused,
          threads_interleave_methods_on_one_program, two_programs_from_one_file_run_concurrently)
