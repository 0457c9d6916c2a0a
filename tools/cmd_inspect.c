/* cmd_inspect.c: `kiln inspect`, the trace reader: where the time of a
 * recorded run went (per method, then nested method > backend > op or node),
 * how close each op came to the machine's roofline, the fallbacks, the
 * memory; as a table, CSV or JSON, and as a Chrome trace or an HTML report.
 * Reading: inspect_trace.c; the tables: inspect_report.c; Chrome and HTML:
 * inspect_html.c. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "inspect_trace.h"

static const char *CMD = "inspect";

typedef struct {
    const char *path, *peaks, *chrome, *html;
    int by, format; /* BY_*; 0 table, 1 csv, 2 json */
    long long top;
} options;

#define OPT(field) offsetof(options, field)

static const char *const BYS[] = {"op", "node", "backend", "method", NULL}; /* BY_* */
static const char *const FORMATS[] = {"table", "csv", "json", NULL};

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "TRACE", NULL, OPT(path), .path = KILN_CLI_IN_FILE, .bits = KILN_CLI_POSITIONAL,
     .rule = "one trace at a time ('%s' and '%s')"},
    {KILN_CLI_CHOICE, "--by", "op|node|backend|method", OPT(by), .choices = BYS,
     .help = "the breakdown's rows (default op: one row per\n"
             "op and compute unit)"},
    {KILN_CLI_CHOICE, "--format", "table|csv|json", OPT(format), .choices = FORMATS,
     .help = "output (default table); csv: one line per row;\n"
             "json: one object with methods, rows, fallback,\n"
             "memory and peaks"},
    {KILN_CLI_I64, "--top", "N", OPT(top), .lo = 0, .hi = 1 << 30,
     .rule = "must be a count >= 0 (0 = all)",
     .help = "at most N rows per group, the rest summed in one\n"
             "\"(other rows)\" row (default 0: all)"},
    {KILN_CLI_STR, "--peaks", "FILE", OPT(peaks), .path = KILN_CLI_IN_FILE,
     .help = "the machine's peaks (machine.json of kiln bench\n"
             "--machine) instead of the cached ones"},
    {KILN_CLI_STR, "--chrome", "FILE", OPT(chrome), .path = KILN_CLI_OUT_FILE,
     .help = "write the trace as Chrome trace events (open in\n"
             "https://ui.perfetto.dev or chrome://tracing)"},
    {KILN_CLI_STR, "--html", "FILE", OPT(html), .path = KILN_CLI_OUT_FILE,
     .help = "write a self-contained HTML report: timeline,\n"
             "time by op and backend, roofline, memory, tables"},
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->by = BY_OP;
}

static const kiln_cli_command COMMAND = {
    .name = "inspect",
    .about = "usage: kiln inspect TRACE [options]\n"
             "\n"
             "Reads a trace (kiln generate|run|bench --trace FILE; docs/TRACE.md) and\n"
             "prints where the time went: per method its calls (p10/p50/p90/avg/min/max\n"
             "ms), then a breakdown nested method > backend (its partitions) > op or\n"
             "node, each row with its share of the row it sits under (a method's share\n"
             "of all method time), so nothing is counted twice; \"(executor)\" and\n"
             "\"(between nodes)\" rows are the time outside partitions and between nodes.\n"
             "Then the time spent in fallback ops, and the memory.\n"
             "\n"
             "Roofline: GFLOP/s and GB/s achieved against the peaks of `kiln bench\n"
             "--machine` ($KILN_CACHE/machine.json, default ~/.cache/kiln; its\n"
             "one-thread rates for a one-thread trace, else all-thread) or --peaks. A row\n"
             "is memory-bound when its flops per byte are below the ridge point (peak\n"
             "flops / peak bandwidth), and \"% peak\" is achieved / that bound's peak;\n"
             "the quantized matmul kernels (units \"... x q8 ...\") are held to the int8\n"
             "peak, all else to the f32 peak.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln generate -m smollm2.kiln -p \"Once upon a time\" -n 64 --trace run.trace\n"
             "  kiln inspect run.trace\n"
             "  kiln inspect run.trace --by node --top 5\n"
             "  kiln inspect run.trace --format json > run.json\n"
             "  kiln inspect run.trace --chrome run.json --html run.html\n",
    .column = 25,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
};

/* ---- formatting ----------------------------------------------------------------------- */

static void fmt_ms(char *b, size_t cap, double v) {
    if (isnan(v))
        b[0] = 0;
    else
        snprintf(b, cap, v >= 100 ? "%.1f" : v >= 10 ? "%.2f" : v >= 1 ? "%.3f" : "%.4f", v);
}

static void fmt_rate(char *b, size_t cap, double v) {
    snprintf(b, cap, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
}

static void fmt_bytes(char *b, size_t cap, double v) {
    if (v >= 1 << 30)
        snprintf(b, cap, "%.2f GiB", v / (1 << 30));
    else if (v >= 1 << 20)
        snprintf(b, cap, "%.1f MiB", v / (1 << 20));
    else if (v >= 1 << 10)
        snprintf(b, cap, "%.1f KiB", v / (1 << 10));
    else
        snprintf(b, cap, "%.0f B", v);
}

/* ---- a text table ----------------------------------------------------------------------- */

#define CELL 120

typedef struct table {
    int ncol;
    const char *const *head;
    const char *align; /* 'l' or 'r' per column */
    char *cells;       /* rows x ncol x CELL */
    int *gap;          /* a blank line before this row */
    int64_t n, cap;
} table;

static char *cell(table *t, int64_t row, int col) {
    return t->cells + ((size_t)row * (size_t)t->ncol + (size_t)col) * CELL;
}

static int64_t table_row(table *t) {
    if (t->n == t->cap) {
        int64_t c = t->cap ? 2 * t->cap : 64;
        char *p = realloc(t->cells, (size_t)c * (size_t)t->ncol * CELL);
        int *g = realloc(t->gap, sizeof *g * (size_t)c);
        if (p) t->cells = p;
        if (g) t->gap = g;
        if (!p || !g) return -1;
        t->cap = c;
    }
    memset(cell(t, t->n, 0), 0, (size_t)t->ncol * CELL);
    t->gap[t->n] = 0;
    return t->n++;
}

static void table_print(const table *t) {
    int w[32] = {0};
    for (int c = 0; c < t->ncol; c++) {
        w[c] = (int)strlen(t->head[c]);
        for (int64_t r = 0; r < t->n; r++) {
            int l = (int)strlen(cell((table *)t, r, c));
            if (l > w[c]) w[c] = l;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        printf(" ");
        for (int c = 0; c < t->ncol; c++) {
            if (pass == 0)
                printf(" %*s", t->align[c] == 'l' ? -w[c] : w[c], t->head[c]);
            else
                printf(" %.*s", w[c],
                       "-----------------------------------------------------------"
                       "-------------------------------------------------------------");
        }
        printf("\n");
    }
    for (int64_t r = 0; r < t->n; r++) {
        if (t->gap[r]) printf("\n");
        /* trailing blanks trimmed: the last cells are often empty */
        char line[32 * (CELL + 2) + 8];
        size_t n = (size_t)snprintf(line, sizeof line, " ");
        for (int c = 0; c < t->ncol && n < sizeof line; c++)
            n += (size_t)snprintf(line + n, sizeof line - n, " %*s",
                                  t->align[c] == 'l' ? -w[c] : w[c], cell((table *)t, r, c));
        while (n > 0 && line[n - 1] == ' ')
            line[--n] = 0;
        printf("%s\n", line);
    }
}

static void table_free(table *t) {
    free(t->cells);
    free(t->gap);
}

/* ---- the report as text ----------------------------------------------------------------- */

static const char *by_name(int by) {
    static const char *const n[] = {"op", "node", "backend", "method"};
    return n[by];
}

static void print_peaks(const insp_peaks *pk) {
    if (!pk->have) {
        printf("peaks: none (%s): roofline columns left empty\n", pk->source);
        return;
    }
    const kiln_machine_rates *r = pk->r;
    printf("peaks: %s (%s, measured %s), %d threads: memory read %.1f GB/s, f32 %.1f GFLOP/s, "
           "int8 %.1f GOP/s; ridge points %.1f (f32) and %.1f (int8) flop/byte\n",
           pk->source, pk->m.cpu_model, pk->m.date[0] ? pk->m.date : "?", r->n_threads,
           r->mem_read_gbps, r->f32_gflops, r->i8_gops, r->f32_gflops / r->mem_read_gbps,
           r->i8_gops / r->mem_read_gbps);
}

static int print_methods(const insp_report *rp) {
    const insp_trace *t = rp->t;
    static const char *const head[] = {"method",   "calls",    "failed",  "tokens", "p10 ms",
                                       "p50 ms",   "p90 ms",   "avg ms",  "min ms", "max ms",
                                       "total ms", "% of all", "GFLOP/s", "GB/s"};
    table tb = {14, head, "lrrrrrrrrrrrrr", NULL, NULL, 0, 0};
    for (int i = 0; i < rp->n_methods; i++) {
        const insp_method_stat *s = &rp->methods[i];
        int64_t r = table_row(&tb);
        if (r < 0) return table_free(&tb), -1;
        snprintf(cell(&tb, r, 0), CELL, "%s", t->methods[s->method]);
        snprintf(cell(&tb, r, 1), CELL, "%lld", (long long)s->calls);
        snprintf(cell(&tb, r, 2), CELL, "%lld", (long long)s->failed);
        if (s->tokens >= 0)
            snprintf(cell(&tb, r, 3), CELL, "%lld", (long long)s->tokens);
        else
            snprintf(cell(&tb, r, 3), CELL, "-");
        double v[7] = {s->p10, s->p50, s->p90, s->avg, s->min, s->max, s->total};
        for (int k = 0; k < 7; k++)
            fmt_ms(cell(&tb, r, 4 + k), CELL, v[k]);
        snprintf(cell(&tb, r, 11), CELL, "%.1f", rp->all_ms > 0 ? 100 * s->total / rp->all_ms : 0);
        if (s->total > 0) {
            fmt_rate(cell(&tb, r, 12), CELL, s->flops / (s->total * 1e6));
            fmt_rate(cell(&tb, r, 13), CELL, s->bytes / (s->total * 1e6));
        }
    }
    printf("methods (%.2f ms in %lld calls)\n", rp->all_ms, (long long)t->n_calls);
    table_print(&tb);
    table_free(&tb);
    return 0;
}

static int print_rows(const insp_report *rp) {
    const insp_trace *t = rp->t;
    static const char *const head[] = {"name",     "kind",    "op",     "backend", "unit",
                                       "fallback", "calls",   "p50 ms", "avg ms",  "total ms",
                                       "% parent", "GFLOP/s", "GB/s",   "bound",   "% peak"};
    table tb = {15, head, "lllllllrrrrrrrlr", NULL, NULL, 0, 0};
    tb.align = "llllllrrrrrrrlr";
    for (int64_t i = 0; i < rp->n_rows; i++) {
        const insp_row *w = &rp->rows[i];
        int64_t r = table_row(&tb);
        if (r < 0) return table_free(&tb), -1;
        tb.gap[r] = w->depth == 0 && i > 0;
        snprintf(cell(&tb, r, 0), CELL, "%*s%.*s", 2 * w->depth, "", CELL - 8, w->name);
        snprintf(cell(&tb, r, 1), CELL, "%s", insp_kind_name(w->kind));
        snprintf(cell(&tb, r, 2), CELL, "%s", w->op ? w->op : "");
        snprintf(cell(&tb, r, 3), CELL, "%s", w->backend >= 0 ? t->backends[w->backend] : "");
        snprintf(cell(&tb, r, 4), CELL, "%s", w->unit ? w->unit : "");
        snprintf(cell(&tb, r, 5), CELL, "%s", w->fallback < 0 ? "" : w->fallback ? "yes" : "no");
        if (w->kind != ROW_EXECUTOR) snprintf(cell(&tb, r, 6), CELL, "%lld", (long long)w->calls);
        fmt_ms(cell(&tb, r, 7), CELL, w->p50);
        fmt_ms(cell(&tb, r, 8), CELL, w->avg);
        fmt_ms(cell(&tb, r, 9), CELL, w->total);
        snprintf(cell(&tb, r, 10), CELL, "%.1f", w->pct);
        insp_roof rf;
        int k = insp_row_roof(w, rp->peaks, &rf);
        if (k >= 1) {
            fmt_rate(cell(&tb, r, 11), CELL, rf.gflops);
            fmt_rate(cell(&tb, r, 12), CELL, rf.gbps);
        }
        if (k == 2) {
            snprintf(cell(&tb, r, 13), CELL, "%s", rf.memory_bound ? "memory" : "compute");
            snprintf(cell(&tb, r, 14), CELL, "%.1f", rf.pct);
        }
    }
    static const char *const nest[] = {"method > backend (its partitions) > op and unit",
                                       "method > backend (its partitions) > node",
                                       "method > backend (its partitions)", "method"};
    printf("by %s: %s; %% parent is the share of the row above it (a method's: of all method "
           "time)\n",
           by_name(rp->by), nest[rp->by]);
    table_print(&tb);
    table_free(&tb);
    /* above 100%: the op's byte count overstates its traffic, or its data
     * sat in the CPU's caches (the memory roof is DRAM bandwidth) */
    char over[256] = "";
    int n_over = 0;
    for (int64_t i = 0; i < rp->n_rows; i++) {
        const insp_row *w = &rp->rows[i];
        insp_roof rf;
        if (w->depth < 2 || insp_row_roof(w, rp->peaks, &rf) != 2 || !(rf.pct > 100)) continue;
        const char *name = w->op && strcmp(w->op, "(mixed)") ? w->op : w->name;
        size_t have = strlen(over), nl = strlen(name);
        int dup = 0;
        for (const char *p = over; (p = strstr(p, name)); p += nl)
            if ((p == over || p[-1] == ' ') && (p[nl] == ',' || p[nl] == 0)) dup = 1;
        n_over++;
        if (!dup && have + nl + 3 < sizeof over)
            snprintf(over + have, sizeof over - have, "%s%s", have ? ", " : "", name);
    }
    if (n_over)
        printf("note: %d rows pass 100%% of a peak (%s): their bytes by the op's cost rule "
               "overstate the traffic, or their data sat in the CPU caches (the memory roof is "
               "DRAM bandwidth)\n",
               n_over, over);
    return 0;
}

static void print_fallback(const insp_report *rp) {
    double share = rp->all_ms > 0 ? 100 * rp->fallback_ms / rp->all_ms : 0;
    if (!rp->fallback_nodes)
        printf("fallback: none (0 ms in fallback ops, 0.0%% of all method time)\n");
    else {
        char ms[32];
        fmt_ms(ms, sizeof ms, rp->fallback_ms);
        printf("fallback: %s ms in fallback ops (%s: %lld node calls), %.1f%% of all method "
               "time\n",
               ms, rp->fallback_ops, (long long)rp->fallback_nodes, share);
    }
}

/* The share of all method time spent in delegates' partitions (those that
 * report host time or their own), per delegate. */
static void print_delegates(const insp_trace *t, double all_ms) {
    for (int b = 0; b < t->n_backends; b++) {
        uint64_t part = 0, host = 0, own = 0, cycles = 0, vtcm = 0, power = 0;
        int64_t n = 0, threads = 0;
        for (int64_t k = 0; k < t->n_parts; k++) {
            const insp_part *p = &t->parts[k];
            if (p->backend != b || (!p->host_ns && !p->delegate_ns)) continue;
            n++;
            part += p->t1 - p->t0;
            host += p->host_ns;
            own += p->delegate_ns;
            cycles += p->cycles;
            vtcm += p->vtcm_ns;
            power += p->power_ns;
            if (p->hw_threads > threads) threads = p->hw_threads;
        }
        if (!n) continue;
        double ms = insp_ms(part);
        printf("delegate %s: %.2f ms in %lld partition calls, %.1f%% of all method time; host "
               "%.1f%% of it",
               t->backends[b], ms, (long long)n, all_ms > 0 ? 100 * ms / all_ms : 0,
               part ? 100.0 * (double)host / (double)part : 0);
        if (own)
            printf(", its own execute %.1f%% (%llu accelerator cycles; op times apportioned "
                   "by cycles)",
                   100.0 * (double)own / (double)part, (unsigned long long)cycles);
        /* what the accelerator says of its memory and units (QNN HTP: the
         * VTCM acquire, HVX/HMX power-on, HVX threads) */
        if (vtcm || power)
            printf("; memory (VTCM) acquire %.3f ms, power-on %.3f ms", insp_ms(vtcm),
                   insp_ms(power));
        if (threads) printf("; up to %lld hardware threads", (long long)threads);
        printf("\n");
    }
}

static void print_memory(const insp_trace *t) {
    const insp_memory *m = &t->mem;
    char a[32], b[32], c[32];
    printf("memory\n");
    fmt_bytes(a, sizeof a, (double)m->weights_file);
    fmt_bytes(b, sizeof b, (double)m->weights_mapped);
    fmt_bytes(c, sizeof c, (double)m->weights_resident);
    printf("  weights    %s in the file, %s mapped (the whole program), %s resident (%.0f%%)\n", a,
           b, c,
           m->weights_file ? 100.0 * (double)m->weights_resident / (double)m->weights_file : 0);
    fmt_bytes(a, sizeof a, (double)m->state);
    if (m->has_used) {
        fmt_bytes(b, sizeof b, (double)m->state_used);
        printf("  KV state   %s allocated, %s used by %lld positions at the end (%.1f%%)\n", a, b,
               (long long)m->state_positions,
               m->state ? 100.0 * (double)m->state_used / (double)m->state : 0);
    } else {
        printf("  KV state   %s allocated\n", a);
    }
    fmt_bytes(a, sizeof a, (double)m->arena);
    printf("  arena      %s (activations: the largest method's plan)\n", a);
    fmt_bytes(a, sizeof a, (double)m->input);
    printf("  inputs     %s (input slots)\n", a);
    fmt_bytes(a, sizeof a, (double)m->peak_rss);
    printf("  peak RSS   %s\n", a);
}

static int print_table(const insp_report *rp) {
    const insp_trace *t = rp->t;
    uint64_t span = t->n_calls ? t->calls[t->n_calls - 1].t1 - t->calls[0].t0 : 0;
    printf("trace %s: program %s (kiln %s, program format %lld), %lld calls, %lld events over "
           "%.1f ms\n",
           t->path, t->program, t->kiln, (long long)t->format_version, (long long)t->n_calls,
           (long long)t->n_events, insp_ms(span));
    if (t->dropped)
        printf("warning: the writer dropped %lld events (out of memory while recording): the "
               "figures below miss them\n",
               (long long)t->dropped);
    print_peaks(rp->peaks);
    printf("\n");
    if (print_methods(rp)) return -1;
    printf("\n");
    if (print_rows(rp)) return -1;
    printf("\n");
    print_fallback(rp);
    print_delegates(rp->t, rp->all_ms);
    printf("\n");
    print_memory(t);
    return 0;
}

/* ---- CSV and JSON ----------------------------------------------------------------------- */

static void csv_str(const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void num(FILE *f, double v, const char *fmt) {
    if (isfinite(v))
        fprintf(f, fmt, v);
    else if (f == stdout && fmt[0] == ',')
        fputc(',', f); /* csv: empty */
}

static void print_csv(const insp_report *rp) {
    const insp_trace *t = rp->t;
    printf("method,depth,name,kind,op,backend,unit,fallback,calls,p10_ms,p50_ms,p90_ms,avg_ms,"
           "min_ms,max_ms,total_ms,pct_of_parent,flops,bytes,gflops,gbps,intensity,bound,"
           "pct_of_peak\n");
    for (int64_t i = 0; i < rp->n_rows; i++) {
        const insp_row *w = &rp->rows[i];
        csv_str(t->methods[w->method]);
        printf(",%d,", w->depth);
        csv_str(w->name);
        printf(",%s,", insp_kind_name(w->kind));
        csv_str(w->op ? w->op : "");
        putchar(',');
        csv_str(w->backend >= 0 ? t->backends[w->backend] : "");
        putchar(',');
        csv_str(w->unit ? w->unit : "");
        printf(",%s", w->fallback < 0 ? "" : w->fallback ? "true" : "false");
        if (w->kind == ROW_EXECUTOR)
            printf(",");
        else
            printf(",%lld", (long long)w->calls);
        double v[8] = {w->p10, w->p50, w->p90, w->avg, w->min, w->max, w->total, w->pct};
        for (int k = 0; k < 8; k++)
            num(stdout, v[k], ",%.6f");
        insp_roof rf;
        int k = insp_row_roof(w, rp->peaks, &rf);
        if (w->has_cost)
            printf(",%.17g,%.17g", w->flops, w->bytes);
        else
            printf(",,");
        if (k >= 1) {
            printf(",%.6g,%.6g", rf.gflops, rf.gbps);
            num(stdout, rf.intensity, ",%.6g");
        } else {
            printf(",,,");
        }
        if (k == 2)
            printf(",%s,%.3f\n", rf.memory_bound ? "memory" : "compute", rf.pct);
        else
            printf(",,\n");
    }
}

/* "key":value or "key":null */
static void jnum(const char *key, double v, int last) {
    printf("\"%s\":", key);
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
    printf(last ? "" : ",");
}

/* --format json: the methods. */
static void json_methods(const insp_report *rp) {
    const insp_trace *t = rp->t;
    for (int i = 0; i < rp->n_methods; i++) {
        const insp_method_stat *s = &rp->methods[i];
        printf("%s\n{\"name\":", i ? "," : "");
        insp_json_str(stdout, t->methods[s->method], 0);
        printf(",\"calls\":%lld,\"failed\":%lld,", (long long)s->calls, (long long)s->failed);
        if (s->tokens >= 0)
            printf("\"tokens\":%lld,", (long long)s->tokens);
        else
            printf("\"tokens\":null,");
        jnum("p10_ms", s->p10, 0);
        jnum("p50_ms", s->p50, 0);
        jnum("p90_ms", s->p90, 0);
        jnum("avg_ms", s->avg, 0);
        jnum("min_ms", s->min, 0);
        jnum("max_ms", s->max, 0);
        jnum("total_ms", s->total, 0);
        jnum("pct_of_all", rp->all_ms > 0 ? 100 * s->total / rp->all_ms : 0, 0);
        jnum("flops", s->flops, 0);
        jnum("bytes", s->bytes, 1);
        printf("}");
    }
    printf("]");
}

/* --format json: the rows. */
static void json_rows(const insp_report *rp) {
    const insp_trace *t = rp->t;
    printf(",\n\"rows\":[");
    for (int64_t i = 0; i < rp->n_rows; i++) {
        const insp_row *w = &rp->rows[i];
        printf("%s\n{\"method\":", i ? "," : "");
        insp_json_str(stdout, t->methods[w->method], 0);
        printf(",\"depth\":%d,\"name\":", w->depth);
        insp_json_str(stdout, w->name, 0);
        printf(",\"kind\":\"%s\",\"op\":", insp_kind_name(w->kind));
        if (w->op)
            insp_json_str(stdout, w->op, 0);
        else
            printf("null");
        printf(",\"backend\":");
        if (w->backend >= 0)
            insp_json_str(stdout, t->backends[w->backend], 0);
        else
            printf("null");
        printf(",\"unit\":");
        if (w->unit)
            insp_json_str(stdout, w->unit, 0);
        else
            printf("null");
        printf(",\"fallback\":%s,", w->fallback < 0 ? "null" : w->fallback ? "true" : "false");
        if (w->kind == ROW_EXECUTOR)
            printf("\"calls\":null,");
        else
            printf("\"calls\":%lld,", (long long)w->calls);
        jnum("p10_ms", w->p10, 0);
        jnum("p50_ms", w->p50, 0);
        jnum("p90_ms", w->p90, 0);
        jnum("avg_ms", w->avg, 0);
        jnum("min_ms", w->min, 0);
        jnum("max_ms", w->max, 0);
        jnum("total_ms", w->total, 0);
        jnum("pct_of_parent", w->pct, 0);
        insp_roof rf;
        int k = insp_row_roof(w, rp->peaks, &rf);
        jnum("flops", w->has_cost ? w->flops : NAN, 0);
        jnum("bytes", w->has_cost ? w->bytes : NAN, 0);
        jnum("gflops", k >= 1 ? rf.gflops : NAN, 0);
        jnum("gbps", k >= 1 ? rf.gbps : NAN, 0);
        jnum("intensity", k >= 1 ? rf.intensity : NAN, 0);
        printf("\"bound\":%s,", k == 2 ? rf.memory_bound ? "\"memory\"" : "\"compute\"" : "null");
        jnum("pct_of_peak", k == 2 ? rf.pct : NAN, 1);
        printf("}");
    }
    printf("]");
}

/* --format json: the fallback, the memory and the peaks, closing the object. */
static void json_tail(const insp_report *rp) {
    const insp_trace *t = rp->t;
    const insp_memory *m = &t->mem;
    printf(",\n\"fallback\":{");
    jnum("ms", rp->fallback_ms, 0);
    jnum("pct_of_all", rp->all_ms > 0 ? 100 * rp->fallback_ms / rp->all_ms : 0, 0);
    printf("\"node_calls\":%lld,\"ops\":[", (long long)rp->fallback_nodes);
    /* fallback_ops is "a, b, c" */
    const char *p = rp->fallback_ops;
    for (int first = 1; *p; first = 0) {
        const char *e = strstr(p, ", ");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char op[256];
        snprintf(op, sizeof op, "%.*s", (int)(n < 255 ? n : 255), p);
        printf("%s", first ? "" : ",");
        insp_json_str(stdout, op, 0);
        p += n + (e ? 2 : 0);
    }
    printf("]},\n\"memory\":{\"weights_file_bytes\":%lld,\"weights_mapped_bytes\":%lld,"
           "\"weights_resident_bytes\":%lld,\"state_bytes\":%lld,",
           (long long)m->weights_file, (long long)m->weights_mapped, (long long)m->weights_resident,
           (long long)m->state);
    if (m->has_used)
        printf("\"state_used_bytes\":%lld,\"state_positions\":%lld,", (long long)m->state_used,
               (long long)m->state_positions);
    else
        printf("\"state_used_bytes\":null,\"state_positions\":null,");
    printf("\"arena_bytes\":%lld,\"input_bytes\":%lld,\"peak_rss_bytes\":%lld},\n\"peaks\":",
           (long long)m->arena, (long long)m->input, (long long)m->peak_rss);
    const insp_peaks *pk = rp->peaks;
    if (!pk->have) {
        printf("null");
    } else {
        printf("{\"source\":");
        insp_json_str(stdout, pk->source, 0);
        printf(",\"cpu_model\":");
        insp_json_str(stdout, pk->m.cpu_model, 0);
        printf(",\"date\":");
        insp_json_str(stdout, pk->m.date, 0);
        printf(",\"n_threads\":%d,", pk->r->n_threads);
        jnum("mem_read_gbps", pk->r->mem_read_gbps, 0);
        jnum("f32_gflops", pk->r->f32_gflops, 0);
        jnum("i8_gops", pk->r->i8_gops, 1);
        printf("}");
    }
    printf("}\n");
}

static void print_json(const insp_report *rp) {
    const insp_trace *t = rp->t;
    printf("{\"trace\":");
    insp_json_str(stdout, t->path, 0);
    printf(",\"program\":");
    insp_json_str(stdout, t->program, 0);
    printf(",\"kiln\":");
    insp_json_str(stdout, t->kiln, 0);
    printf(",\"calls\":%lld,\"events\":%lld,\"by\":\"%s\",\"all_ms\":%.17g,\n\"methods\":[",
           (long long)t->n_calls, (long long)t->n_events, by_name(rp->by), rp->all_ms);
    json_methods(rp);
    json_rows(rp);
    json_tail(rp);
}

/* ---- peaks ------------------------------------------------------------------------------- */

/* --peaks FILE must load; the cached file is used when it is there (a
 * damaged one is reported and skipped). 0, or an exit code. */
static int load_peaks(const char *given, insp_peaks *pk) {
    memset(pk, 0, sizeof *pk);
    if (given) {
        kiln_status st = kiln_machine_load(given, &pk->m);
        if (st) return kiln_cli_fail(CMD, st);
        snprintf(pk->source, sizeof pk->source, "%s", given);
    } else {
        char path[4096];
        if (kiln_machine_default_path(path, sizeof path, 0)) { /* reading: no folder made */
            snprintf(pk->source, sizeof pk->source, "%s; give --peaks FILE", kiln_last_error());
            return 0;
        }
        struct stat sb;
        if (stat(path, &sb) != 0) {
            snprintf(pk->source, sizeof pk->source,
                     "no %s: `kiln bench --machine` measures them, or give --peaks FILE", path);
            return 0;
        }
        kiln_status st = kiln_machine_load(path, &pk->m);
        if (st) {
            fprintf(stderr, "kiln inspect: warning: ignoring the machine's peaks: %s\n",
                    kiln_last_error());
            snprintf(pk->source, sizeof pk->source,
                     "%s is damaged, see the warning; `kiln bench --machine` remeasures", path);
            return 0;
        }
        snprintf(pk->source, sizeof pk->source, "%s", path);
    }
    pk->have = 1;
    pk->r = &pk->m.all;
    return 0;
}

/* ---- the command ------------------------------------------------------------------------- */

int kiln_cmd_inspect(int argc, char **argv) {
    options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &o, &rc)) return rc;
    const char *path = o.path, *peaks = o.peaks, *chrome = o.chrome, *html = o.html;
    int by = o.by, format = o.format;
    long long top = o.top;
    if (!path) return kiln_cli_usage_error(CMD, "no trace given");

    insp_peaks pk;
    rc = load_peaks(peaks, &pk);
    if (rc) return rc;
    insp_trace t;
    kiln_status st = insp_trace_read(path, &t);
    if (st) return kiln_cli_fail(CMD, st);
    if (pk.have && t.threads == 1) pk.r = &pk.m.one; /* a one-thread run: the one-thread peaks */
    insp_report rp, by_op;
    memset(&by_op, 0, sizeof by_op);
    if ((st = insp_report_build(&t, &pk, by, (int)top, &rp))) {
        insp_trace_free(&t);
        return kiln_cli_fail(CMD, st);
    }
    if (format == 0)
        rc = print_table(&rp) ? KILN_EXIT_FAIL : KILN_EXIT_OK;
    else if (format == 1)
        print_csv(&rp);
    else
        print_json(&rp);
    if (rc) fprintf(stderr, "kiln inspect: error: out of memory printing the table\n");
    kiln_cli_flush();
    if (!rc && kiln_cli_interrupted && (chrome || html))
        rc = kiln_cli_fail(CMD, KILN_ERR_CANCELLED); /* a signal: no file written after it */
    if (!rc && chrome) {
        if ((st = insp_write_chrome(&t, chrome)))
            rc = kiln_cli_fail(CMD, st);
        else
            fprintf(stderr, "kiln inspect: wrote Chrome trace events to %s\n", chrome);
    }
    if (!rc && html) {
        /* the roofline and time by op want every op row */
        int reuse = by == BY_OP && top == 0;
        st = reuse ? KILN_OK : insp_report_build(&t, &pk, BY_OP, 0, &by_op);
        if (!st) st = insp_write_html(&rp, reuse ? &rp : &by_op, html);
        if (st)
            rc = kiln_cli_fail(CMD, st);
        else
            fprintf(stderr, "kiln inspect: wrote the HTML report to %s\n", html);
    }
    insp_report_free(&by_op);
    insp_report_free(&rp);
    insp_trace_free(&t);
    return rc;
}
