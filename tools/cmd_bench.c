/* cmd_bench.c: `kiln bench`, llama-bench for a program: prompt processing
 * (ppN) and token generation (tgN) rates over repetitions and thread counts,
 * as a table, CSV or JSON; `kiln bench --machine` measures the machine
 * itself (src/devtools/machine.c) and stores it for the profiler. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "devtools/devtools.h"

enum { OUT_TABLE, OUT_CSV, OUT_JSON };

typedef struct {
    const char *model, *trace, *backend, *qnn_lib;
    kiln_cli_ints pp, tg, threads; /* threads.n 0: the default */
    int reps, format, machine;
    long long mem_mib;
} options;

#define OPT(field) offsetof(options, field)

static const char *const FORMATS[] = {"table", "csv", "json", NULL};

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .help = "program to measure (required unless --machine)"},
    {KILN_CLI_INTS, "-p, --n-prompt", "LIST", OPT(pp), .lo = 0, .hi = 1 << 20,
     .help = "prompt lengths, comma-separated (default 512; 0 = none)"},
    {KILN_CLI_INTS, "-n, --n-gen", "LIST", OPT(tg), .lo = 0, .hi = 1 << 20,
     .help = "generation lengths (default 128; 0 = none)"},
    {KILN_CLI_INTS, "-t, --threads", "LIST", OPT(threads), .lo = 1, .hi = KILN_MAX_THREADS,
     .help = "thread counts (default: $KILN_THREADS, else the cores)"},
    KILN_CLI_BACKEND(OPT(backend)),
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_INT, "-r, --repetitions", "N", OPT(reps), .lo = 1, .hi = 1000,
     .help = "timed runs per test (default 5)"},
    {KILN_CLI_CHOICE, "-o, --output", "FMT", OPT(format), .choices = FORMATS,
     .help = "table (default), csv, or json (llama-bench's field names)"},
    {KILN_CLI_SET, "--machine", NULL, OPT(machine), .lo = 1,
     .help = "measure memory read bandwidth and peak f32 FMA and int8\n"
             "dot rates on 1 and N threads (N: the largest -t), print\n"
             "them and store them in $KILN_CACHE/machine.json\n"
             "(default cache ~/.cache/kiln)"},
    {KILN_CLI_I64, "--mem-mib", "N", OPT(mem_mib), .lo = 1, .hi = 1 << 20,
     .help = "--machine: size of the buffer streamed (default 1024)"},
    {KILN_CLI_STR, "--trace", "FILE", OPT(trace), .path = KILN_CLI_OUT_FILE,
     .help = "record a profile of every method call, warm-ups\n"
             "included (docs/TRACE.md; one -t value)"},
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->pp = (kiln_cli_ints){{512}, 1};
    o->tg = (kiln_cli_ints){{128}, 1};
    o->reps = 5;
    o->format = OUT_TABLE;
    o->mem_mib = 1024;
}

static const kiln_cli_command COMMAND = {
    .name = "bench",
    .about = "usage: kiln bench -m MODEL.kiln [options]\n"
             "       kiln bench --machine [-t N]\n"
             "\n"
             "Measures a program as llama-bench does: ppN prefills N random tokens\n"
             "(in one call when the program's prefill method takes N tokens, else in\n"
             "calls of its prefill size), tgN runs N one-token decode steps from an\n"
             "empty cache. Each test runs once to warm up, then -r times, each from a\n"
             "cleared KV cache; t/s is the mean and standard deviation of the runs.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln bench -m smollm2.kiln -p 128,512 -n 128 -t 1,4\n"
             "  kiln bench --machine -t 8\n",
    .column = 23,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .stray = "unexpected argument '%s' (the model goes after -m)",
};

static int default_threads(void) {
    const char *env = getenv("KILN_THREADS");
    long long v;
    if (env && *env && !kiln_cli_int(env, 1, KILN_MAX_THREADS, &v)) return (int)v;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > KILN_MAX_THREADS ? KILN_MAX_THREADS : (int)n;
}

static uint64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux: KiB */
}

/* ---- --machine -------------------------------------------------------------- */

static int run_machine(const char *cmd, int n_threads, long long mem_mib) {
    char path[4200];
    kiln_status st = kiln_machine_default_path(path, sizeof path, 1);
    if (st) return kiln_cli_fail(cmd, st);
    fprintf(stderr, "kiln bench: measuring (a %lld MiB buffer, 1 and %d threads)...\n", mem_mib,
            n_threads);
    kiln_machine_info mi;
    if ((st = kiln_machine_measure(n_threads, (uint64_t)mem_mib << 20, &mi)))
        return kiln_cli_fail(cmd, st);
    printf("cpu: %s\n", mi.cpu_model);
    printf("kernels: f32 %s, int8 %s\n", mi.f32_kernel, mi.i8_kernel);
    char backend[160];
    kiln_machine_cpu_backend(backend, sizeof backend);
    printf("cpu backend: %s\n", backend);
    printf("| threads | memory read GB/s | f32 FMA GFLOP/s | int8 dot GOP/s |\n");
    printf("| ------: | ---------------: | --------------: | -------------: |\n");
    const kiln_machine_rates *r[2] = {&mi.one, &mi.all};
    for (int i = 0; i < (n_threads > 1 ? 2 : 1); i++)
        printf("| %7d | %16.2f | %15.2f | %14.2f |\n", r[i]->n_threads, r[i]->mem_read_gbps,
               r[i]->f32_gflops, r[i]->i8_gops);
    /* Compute rates that do not grow with the threads mean the other cores
     * were busy (or are SMT siblings): peaks taken then understate the
     * machine, and every roofline share built on them overstates. */
    if (n_threads > 1 &&
        (mi.all.f32_gflops < 1.25 * mi.one.f32_gflops || mi.all.i8_gops < 1.25 * mi.one.i8_gops))
        fprintf(stderr,
                "kiln bench: warning: %d threads compute less than 1.25x one thread's rate "
                "(f32 %.2fx, int8 %.2fx): other processes were likely using the cores, or "
                "they share execution units; measure again on an idle machine\n",
                n_threads, mi.all.f32_gflops / mi.one.f32_gflops, mi.all.i8_gops / mi.one.i8_gops);
    if ((st = kiln_machine_save(&mi, path))) return kiln_cli_fail(cmd, st);
    printf("saved %s\n", path);
    return KILN_EXIT_OK;
}

/* ---- the model ---------------------------------------------------------------- */

typedef struct {
    const char *path;
    uint64_t size, params;   /* weight bytes and elements */
    char backend[256];       /* backends the nodes use, "cpu+ref" */
    const char *cpu_kernels; /* the cpu backend's kernel table, NULL if KILN_CPU names none here */
    const char *type_k, *type_v;
    int64_t ctx, vocab, prefill_max; /* the LLM limits (kiln_llm) */
} model_info;

static void describe(const kiln_program *p, const kiln_llm *lm, model_info *mi) {
    const kiln_module *m = kiln_program_module(p);
    const kiln_llm_limits *lim = kiln_llm_get_limits(lm);
    mi->ctx = lim->context;
    mi->vocab = lim->vocab;
    mi->prefill_max = lim->prefill_max;
    mi->size = mi->params = 0;
    for (int i = 0; i < m->n_consts; i++) {
        mi->size += m->consts[i].nbytes;
        mi->params += kiln_shape_elems(m->consts[i].ndim, m->consts[i].ne);
    }
    kiln_program_backends_used(p, -1, mi->backend, sizeof mi->backend);
    mi->cpu_kernels = kiln_machine_cpu_table(); /* as kiln bench --machine names it */
    mi->type_k = mi->type_v = "?";
    for (int i = 0; i < m->n_states; i++) {
        if (!strncmp(m->states[i].name, "kv_cache.k.", 11))
            mi->type_k = kiln_dtype_name(m->states[i].dtype);
        if (!strncmp(m->states[i].name, "kv_cache.v.", 11))
            mi->type_v = kiln_dtype_name(m->states[i].dtype);
    }
}

/* ---- the tests ------------------------------------------------------------------ */

typedef struct {
    int n_prompt, n_gen, n_threads, n_batch; /* n_batch: tokens per prefill call (1 for tg) */
    int reps;
    double samples[1000]; /* tokens per second of each timed run */
    double avg, sd;
    uint64_t peak_rss;
} result;

/* One run of test r: prefill r->n_prompt tokens in calls of at most
 * prefill_max, or r->n_gen decode steps from position 0 (only `limit` of
 * them for a warm-up). Returns the seconds, or -1 on error. */
static double run_once(kiln_session *s, const kiln_llm *lm, const result *r, const int32_t *toks,
                       int limit) {
    kiln_status st = kiln_session_reset(s);
    double t0 = kiln_now_ms();
    if (r->n_prompt) {
        if (!st) st = kiln_llm_prefill(s, lm, toks, r->n_prompt, 0, r->n_batch, NULL);
    } else {
        int n = r->n_gen < limit ? r->n_gen : limit;
        for (int i = 0; i < n && !st && !kiln_cli_interrupted; i++)
            st = kiln_llm_decode(s, lm, toks[i], i, NULL);
    }
    double t = (kiln_now_ms() - t0) / 1e3;
    return st ? -1 : t;
}

static kiln_status run_test(kiln_session *s, const kiln_llm *lm, result *r, const int32_t *toks) {
    int n = r->n_prompt ? r->n_prompt : r->n_gen;
    /* llama-bench's warm-up: the whole prompt, or one generated token */
    if (run_once(s, lm, r, toks, 1) < 0) return kiln_last_status();
    double sum = 0;
    for (int i = 0; i < r->reps; i++) {
        if (kiln_cli_interrupted) return KILN_ERR_CANCELLED;
        double t = run_once(s, lm, r, toks, n);
        if (t < 0) return kiln_last_status();
        r->samples[i] = n / (t > 1e-9 ? t : 1e-9);
        sum += r->samples[i];
    }
    r->avg = sum / r->reps;
    double ss = 0;
    for (int i = 0; i < r->reps; i++)
        ss += (r->samples[i] - r->avg) * (r->samples[i] - r->avg);
    r->sd = r->reps > 1 ? sqrt(ss / (r->reps - 1)) : 0;
    r->peak_rss = peak_rss_bytes();
    return KILN_OK;
}

/* ---- output ---------------------------------------------------------------------- */

static void fmt_size(char *buf, size_t cap, uint64_t b) {
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else
        snprintf(buf, cap, "%.2f MiB", b / 1048576.0);
}

static void fmt_params(char *buf, size_t cap, uint64_t n) {
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.2f M", n / 1e6);
    else
        snprintf(buf, cap, "%.2f K", n / 1e3);
}

static void json_str(const char *s) {
    kiln_json_fput_str(stdout, s);
}

static void csv_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static int g_model_w = 5;

static void print_header(int fmt) {
    if (fmt == OUT_TABLE) {
        printf("| %-*s | %10s | %10s | %-10s | %7s | %13s | %20s |\n", g_model_w, "model", "size",
               "params", "backend", "threads", "test", "t/s");
        printf("| ");
        for (int i = 0; i < g_model_w; i++)
            putchar('-');
        printf(" | ---------: | ---------: | ---------- | ------: | ------------: | "
               "-------------------: |\n");
    } else if (fmt == OUT_CSV) {
        printf("model_filename,model_size,model_n_params,backend,n_threads,type_k,type_v,n_batch,n_"
               "prompt,n_gen,"
               "avg_ts,stddev_ts,samples_ts,peak_rss_bytes\n");
    } else {
        printf("[");
    }
}

static void print_result(int fmt, const model_info *mi, const result *r, int first) {
    char test[32], size[32], params[32], ts[64];
    if (r->n_prompt)
        snprintf(test, sizeof test, "pp%d", r->n_prompt);
    else
        snprintf(test, sizeof test, "tg%d", r->n_gen);
    if (fmt == OUT_TABLE) {
        const char *base = strrchr(mi->path, '/') ? strrchr(mi->path, '/') + 1 : mi->path;
        fmt_size(size, sizeof size, mi->size);
        fmt_params(params, sizeof params, mi->params);
        snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg, r->sd);
        /* "±" is two bytes, one column */
        printf("| %-*s | %10s | %10s | %-10s | %7d | %13s | %21s |\n", g_model_w, base, size,
               params, mi->backend, r->n_threads, test, ts);
    } else if (fmt == OUT_CSV) {
        csv_str(mi->path);
        printf(",%llu,%llu,", (unsigned long long)mi->size, (unsigned long long)mi->params);
        csv_str(mi->backend);
        printf(",%d,%s,%s,%d,%d,%d,%.6f,%.6f,\"", r->n_threads, mi->type_k, mi->type_v, r->n_batch,
               r->n_prompt, r->n_gen, r->avg, r->sd);
        for (int i = 0; i < r->reps; i++)
            printf("%s%.6f", i ? " " : "", r->samples[i]);
        printf("\",%llu\n", (unsigned long long)r->peak_rss);
    } else {
        printf("%s\n  {\n    \"model_filename\": ", first ? "" : ",");
        json_str(mi->path);
        printf(",\n    \"model_size\": %llu,\n    \"model_n_params\": %llu,\n    \"backend\": ",
               (unsigned long long)mi->size, (unsigned long long)mi->params);
        json_str(mi->backend);
        printf(",\n    \"cpu_kernels\": ");
        if (mi->cpu_kernels)
            json_str(mi->cpu_kernels);
        else
            printf("null");
        printf(",\n    \"n_threads\": %d,\n    \"type_k\": \"%s\",\n    \"type_v\": \"%s\",\n    "
               "\"n_batch\": %d,\n"
               "    \"n_prompt\": %d,\n    \"n_gen\": %d,\n    \"avg_ts\": %.6f,\n    "
               "\"stddev_ts\": %.6f,\n"
               "    \"samples_ts\": [",
               r->n_threads, mi->type_k, mi->type_v, r->n_batch, r->n_prompt, r->n_gen, r->avg,
               r->sd);
        for (int i = 0; i < r->reps; i++)
            printf("%s%.6f", i ? ", " : "", r->samples[i]);
        printf("],\n    \"peak_rss_bytes\": %llu\n  }", (unsigned long long)r->peak_rss);
    }
    kiln_cli_flush();
}

/* ---- the command ------------------------------------------------------------------- */

/* --machine: the largest -t (default: the default thread count). */
static int bench_machine(const options *o) {
    const char *cmd = COMMAND.name;
    if (o->model)
        return kiln_cli_usage_error(cmd, "--machine measures the machine, not a model: drop -m");
    if (o->backend)
        return kiln_cli_usage_error(cmd, "--backend applies to a model's runs, not --machine");
    int n = default_threads();
    if (o->threads.n) {
        n = 1;
        for (int i = 0; i < o->threads.n; i++)
            if (o->threads.v[i] > n) n = o->threads.v[i];
    }
    return run_machine(cmd, n, o->mem_mib);
}

/* The rules between flags; a thread count when none is given. 0, or 2
 * after the message. */
static int check_args(options *o) {
    const char *cmd = COMMAND.name;
    if (!o->model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");
    if (o->trace && o->threads.n > 1)
        return kiln_cli_usage_error(cmd, "--trace records one thread count: give one -t value");
    if (!o->threads.n) o->threads.v[o->threads.n++] = default_threads();
    int any = 0;
    for (int i = 0; i < o->pp.n; i++)
        any |= o->pp.v[i] > 0;
    for (int i = 0; i < o->tg.n; i++)
        any |= o->tg.v[i] > 0;
    if (!any) return kiln_cli_usage_error(cmd, "nothing to measure: every -p and -n is 0");
    return 0;
}

/* A run over the thread counts: the model, the tokens the tests take, what
 * has been printed. */
typedef struct {
    const options *o;
    model_info mi;
    int32_t *toks;     /* random ids, as many as the longest test */
    int first, header; /* no result printed yet; the header printed */
    char notes[KILN_CLI_MAX_LIST][128];
    int n_notes;
} bench;

/* The first program opened: what it is, whether the tests fit its context,
 * the random tokens (inside the vocabulary, the same every time); then the
 * header. */
static kiln_status bench_prepare(bench *b, const kiln_program *p, const kiln_llm *lm) {
    const options *o = b->o;
    describe(p, lm, &b->mi);
    int longest = 0;
    for (int i = 0; i < o->pp.n; i++)
        longest = o->pp.v[i] > longest ? o->pp.v[i] : longest;
    for (int i = 0; i < o->tg.n; i++)
        longest = o->tg.v[i] > longest ? o->tg.v[i] : longest;
    if (longest > b->mi.ctx)
        return kiln_error(
            KILN_ERR_INVALID_ARG,
            "a test of %d tokens does not fit the program's context of %lld positions", longest,
            (long long)b->mi.ctx);
    if (!(b->toks = malloc(sizeof(int32_t) * (size_t)(longest ? longest : 1))))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    unsigned long long rs = 1234;
    for (int i = 0; i < longest; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        b->toks[i] = (int32_t)((rs >> 33) % (unsigned long long)b->mi.vocab);
    }
    print_header(o->format);
    b->header = 1;
    return KILN_OK;
}

/* How ppN ran, for the table's notes. */
static void note_prefill(bench *b, int n) {
    int64_t max = b->mi.prefill_max;
    if (b->n_notes == KILN_CLI_MAX_LIST) return;
    if (n <= max)
        snprintf(b->notes[b->n_notes++], sizeof b->notes[0], "pp%d: one prefill call of %d tokens",
                 n, n);
    else
        snprintf(b->notes[b->n_notes++], sizeof b->notes[0],
                 "pp%d: %d prefill calls of up to %d tokens (the program's prefill size)", n,
                 (int)((n + max - 1) / max), (int)max);
}

/* Every test on one session of the program at thread count ti. */
static kiln_status bench_tests(bench *b, kiln_session *s, const kiln_llm *lm, int ti) {
    const options *o = b->o;
    kiln_status st = KILN_OK;
    for (int k = 0; k < o->pp.n + o->tg.n && !st; k++) {
        int is_pp = k < o->pp.n, n = is_pp ? o->pp.v[k] : o->tg.v[k - o->pp.n];
        if (!n) continue;
        result *r = calloc(1, sizeof *r);
        if (!r) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        r->n_prompt = is_pp ? n : 0;
        r->n_gen = is_pp ? 0 : n;
        r->n_threads = o->threads.v[ti];
        r->n_batch = is_pp ? (n < b->mi.prefill_max ? n : (int)b->mi.prefill_max) : 1;
        r->reps = o->reps;
        if (!(st = run_test(s, lm, r, b->toks))) {
            print_result(o->format, &b->mi, r, b->first);
            b->first = 0;
            if (is_pp && ti == 0) note_prefill(b, n);
        }
        free(r);
    }
    return st;
}

/* Opens the program at thread count ti and runs the tests on it, traced
 * with --trace. */
static kiln_status bench_threads(bench *b, int ti) {
    const options *o = b->o;
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    oo.n_threads = o->threads.v[ti];
    oo.backend = o->backend;
    kiln_program *p = NULL;
    kiln_session *s = NULL;
    kiln_llm *lm = NULL;
    kiln_trace *trace = NULL;
    int traced = 0;
    kiln_status st = kiln_program_open_with(o->model, &oo, &p);
    if (!st) st = kiln_llm_bind(p, &lm);
    if (!st && ti == 0) st = bench_prepare(b, p, lm);
    if (!st) st = kiln_session_create(p, &s);
    if (!st && o->trace && !(st = kiln_trace_create(&trace)))
        traced = !(st = kiln_session_set_trace(s, trace));
    if (!st) st = bench_tests(b, s, lm, ti);
    if (traced) { /* what was recorded, a failed test included */
        kiln_status ts = kiln_trace_write(trace, s, o->trace);
        if (!st) st = ts;
        if (!ts)
            fprintf(stderr, "kiln bench: trace of %lld events written to %s\n",
                    (long long)kiln_trace_event_count(trace), o->trace);
    }
    kiln_trace_free(trace);
    kiln_session_destroy(s);
    kiln_llm_free(lm);
    kiln_program_close(p);
    return st;
}

int kiln_cmd_bench(int argc, char **argv) {
    options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &o, &rc)) return rc;
    if (o.machine) return bench_machine(&o);
    if ((rc = check_args(&o)) || (rc = kiln_cli_qnn_lib(COMMAND.name, o.qnn_lib))) return rc;

    bench b;
    memset(&b, 0, sizeof b);
    b.o = &o;
    b.first = 1;
    b.mi.path = o.model;
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    g_model_w = (int)strlen(base) > 5 ? (int)strlen(base) : 5;
    kiln_status st = KILN_OK;
    for (int ti = 0; ti < o.threads.n && !st; ti++)
        st = bench_threads(&b, ti);
    if (st) {
        if (o.format == OUT_JSON && b.header) printf("\n]\n");
        kiln_cli_flush();
        rc = kiln_cli_fail(COMMAND.name, st);
    } else if (o.format == OUT_JSON) {
        printf("\n]\n");
    } else if (o.format == OUT_TABLE) {
        printf("\n");
        for (int i = 0; i < b.n_notes; i++)
            printf("%s\n", b.notes[i]);
        uint64_t rss = peak_rss_bytes();
        printf("peak RSS: %.1f MiB (%llu bytes)\n", rss / 1048576.0, (unsigned long long)rss);
    }
    free(b.toks);
    return rc;
}
