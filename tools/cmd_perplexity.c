/* cmd_perplexity.c: `kiln perplexity -m MODEL.kiln -f TEXT`: the perplexity
 * of a text as llama.cpp's llama-perplexity measures it (same chunks, same
 * scored positions, same standard error), and with --kl-base the KL
 * divergence of a base program's next-token distributions from the model's,
 * both run side by side on the same chunks. Public API only. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct {
    const char *model, *text, *base, *qnn_lib;
    long long ctx, limit;
    kiln_open_options open;
} options;

#define OPT(field) offsetof(options, field)

static int is_even(const void *v) {
    return *(const long long *)v % 2 == 0;
}

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .help = "compiled program (required)"},
    {KILN_CLI_STR, "-f, --file", "TEXT", OPT(text), .path = KILN_CLI_IN_FILE,
     .help = "text file (required); at least 2 x ctx tokens"},
    {KILN_CLI_I64, "-c, --ctx", "N", OPT(ctx), .alias = "--ctx-size", .lo = 16, .hi = 1 << 24,
     .valid = is_even, .rule = "must be an even number of tokens >= 16",
     .help = "tokens per chunk: even, 16 .. the program's context\n"
             "(default 512); a chunk longer than the program's\n"
             "prefill size runs in several prefill calls"},
    {KILN_CLI_I64, "--limit", "N", OPT(limit), .alias = "--chunks", .lo = 1, .hi = 0x7fffffff,
     .rule = "must be a number of chunks >= 1",
     .help = "at most N chunks (llama.cpp: --chunks; default: all)"},
    {KILN_CLI_STR, "--kl-base", "FILE", OPT(base), .path = KILN_CLI_IN_FILE,
     .help = "a second program with the same tokenizer (e.g. the\n"
             "F16 model when -m is a quantized one), run on the\n"
             "same chunks: reports mean KL divergence (base ||\n"
             "model), PPL ratio, token probability differences\n"
             "and top-1 agreement ('Same top p'), as llama.cpp's\n"
             "--kl-divergence does"},
    KILN_CLI_THREADS(OPT(open.n_threads)),
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->limit = -1;
}

static const kiln_cli_command COMMAND = {
    .name = "perplexity",
    .about = "usage: kiln perplexity -m MODEL.kiln -f TEXT [options]\n"
             "\n"
             "Perplexity as llama.cpp's llama-perplexity computes it: the whole file is\n"
             "tokenized (BOS first when the tokenizer adds one; special-token text is\n"
             "plain text), cut into chunks of --ctx tokens, and each chunk runs from an\n"
             "empty KV cache (its first token replaced by BOS when the tokenizer adds\n"
             "one). Only the second half of each chunk is scored: the logits at\n"
             "positions ctx/2 .. ctx-2 predicting the next token. stdout gets the\n"
             "running perplexity after each chunk ([1]12.3456,[2]...) and\n"
             "'Final estimate: PPL = X +/- Y', Y being the standard error.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln perplexity -m smollm2.kiln -f wiki.test.raw --ctx 512\n"
             "  kiln perplexity -m q4_0.kiln --kl-base f16.kiln -f wiki.test.raw --limit 20\n",
    .column = 23,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .unknown = "unknown argument '%s'",
};

static const char *CMD = "perplexity";

/* Prints "kiln perplexity: error: ..." and returns 1 (failure). */
static int fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kiln %s: error: ", CMD);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return KILN_EXIT_FAIL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The whole file (or pipe) in memory, NUL-terminated; NULL with errno set. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (ferror(f)) {
            int e = errno ? errno : EIO;
            free(buf);
            fclose(f);
            errno = e;
            return NULL;
        }
        if (feof(f)) break;
        char *b = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
        if (!b) {
            free(buf);
            buf = NULL;
            errno = cap < ((size_t)1 << 30) ? ENOMEM : EFBIG;
            break;
        }
        buf = b;
        cap *= 2;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- a program and its prefill method ---------------------------------------- */

typedef struct {
    const char *path;
    kiln_program *prog;
    kiln_session *sess;
    kiln_tokenizer *tok;
    kiln_llm *lm;
    int prefill_max; /* most tokens one prefill call takes */
    int ctx;         /* positions the cache holds */
    int vocab;       /* width of a logits row */
} ppl_model;

/* Opens a program, its tokenizer and a session, and binds it as an LLM
 * whose prefill gives every row's logits. 0 or an exit code. */
static int model_open(ppl_model *m, const char *path, const kiln_open_options *open) {
    kiln_status st;
    m->path = path;
    if ((st = kiln_program_open_with(path, open, &m->prog)) ||
        (st = kiln_tokenizer_from_program(m->prog, &m->tok)) ||
        (st = kiln_llm_bind(m->prog, &m->lm)))
        return kiln_cli_fail(CMD, st);
    const kiln_llm_limits *lim = kiln_llm_get_limits(m->lm);
    if (!lim->all_logits)
        return fail("'%s': method 'prefill' has no 'all_logits' input, so it cannot give the "
                    "logits of every position (recompile the program with this kiln)",
                    path);
    m->prefill_max = lim->prefill_max;
    m->vocab = lim->vocab;
    m->ctx = lim->context;
    if (kiln_tokenizer_vocab_size(m->tok) > m->vocab)
        return fail("'%s': the tokenizer has %d tokens, more than the %d logits of a row", path,
                    kiln_tokenizer_vocab_size(m->tok), m->vocab);
    if ((st = kiln_session_create(m->prog, &m->sess))) return kiln_cli_fail(CMD, st);
    return 0;
}

static void model_close(ppl_model *m) {
    kiln_session_destroy(m->sess);
    kiln_llm_free(m->lm);
    kiln_tokenizer_free(m->tok);
    kiln_program_close(m->prog);
}

static int keep_rows(void *user, int first, int len, const float *logits) {
    *(const float **)user = logits;
    return 0;
}

/* Runs tokens[0..n) (n <= prefill_max: one call) through prefill at
 * position pos; with `all` every row's logits come out (else only the
 * last). *logits is borrowed from the session until its next execute. 0 or
 * an exit code (message printed). */
static int model_run(ppl_model *m, const int32_t *tokens, int n, int pos, int all,
                     const float **logits) {
    if (kiln_cli_interrupted) return kiln_cli_fail(CMD, KILN_ERR_CANCELLED);
    kiln_status st =
        all ? kiln_llm_prefill_rows(m->sess, m->lm, tokens, n, pos, n, keep_rows, (void *)logits)
            : kiln_llm_prefill(m->sess, m->lm, tokens, n, pos, n, logits);
    return st ? kiln_cli_fail(CMD, st) : 0;
}

/* ---- tokens ----------------------------------------------------------------- */

/* Whether encoding with the tokenizer's specials puts BOS first and/or EOS
 * last (told apart on the empty text, which encodes to just those). */
static void tok_specials(const kiln_tokenizer *tok, int *add_bos, int *add_eos) {
    int32_t ids[8];
    int n = 0;
    if (kiln_tokenizer_encode_flags(tok, "", 0, KILN_TOKENIZE_ADD_SPECIAL, ids, 8, &n)) n = 0;
    *add_bos = n >= 1 && ids[0] == kiln_tokenizer_bos(tok);
    *add_eos = n >= 2 || (n == 1 && !*add_bos);
}

/* The text's ids as llama.cpp's common_tokenize(text, add_special = true,
 * parse_special = false) gives them, less a trailing EOS (llama-perplexity
 * refuses tokenizers that add one). *ids is malloc'ed. 0 or an exit code. */
static int tokenize(const kiln_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                    int *n) {
    const unsigned flags = KILN_TOKENIZE_ADD_SPECIAL | KILN_TOKENIZE_PLAIN_SPECIAL;
    int add_bos, add_eos, cap = len + 16 < 0x7fffffff ? (int)len + 16 : 0x7fffffff;
    kiln_status st;
    tok_specials(tok, &add_bos, &add_eos);
    for (;;) {
        if (!(*ids = malloc(sizeof **ids * (size_t)cap)))
            return fail("out of memory for %d token ids", cap);
        st = kiln_tokenizer_encode_flags(tok, text, len, flags, *ids, cap, n);
        if (st != KILN_ERR_INVALID_ARG || *n <= cap) break;
        free(*ids); /* SentencePiece can need more than a token a byte: the count is known now */
        cap = *n;
    }
    if (st) {
        free(*ids);
        *ids = NULL;
        return kiln_cli_fail(CMD, st);
    }
    if (add_eos && *n > 0 && (*ids)[*n - 1] == kiln_tokenizer_eos(tok)) --*n;
    return 0;
}

/* Both programs must read and write the same ids: same logits width, same
 * BOS/EOS, every id decoding to the same bytes, and the text encoding to
 * the same ids. 0 or an exit code (message printed). */
static int same_vocab(const ppl_model *a, const ppl_model *b, const int32_t *ids, int n_ids,
                      const char *text, size_t len) {
    int na = kiln_tokenizer_vocab_size(a->tok), nb = kiln_tokenizer_vocab_size(b->tok);
    const char *why = "both programs must use the same tokenizer";
    if (a->vocab != b->vocab || na != nb)
        return fail("--kl-base: '%s' has a vocabulary of %d tokens (%d logits), '%s' of %d tokens "
                    "(%d logits); %s",
                    b->path, nb, b->vocab, a->path, na, a->vocab, why);
    if (kiln_tokenizer_bos(a->tok) != kiln_tokenizer_bos(b->tok) ||
        kiln_tokenizer_eos(a->tok) != kiln_tokenizer_eos(b->tok))
        return fail("--kl-base: '%s' has BOS %d / EOS %d, '%s' BOS %d / EOS %d; %s", b->path,
                    kiln_tokenizer_bos(b->tok), kiln_tokenizer_eos(b->tok), a->path,
                    kiln_tokenizer_bos(a->tok), kiln_tokenizer_eos(a->tok), why);
    for (int id = 0; id < na; id++) {
        size_t la = 0, lb = 0;
        const char *sa = kiln_tokenizer_decode(a->tok, -1, id, &la),
                   *sb = kiln_tokenizer_decode(b->tok, -1, id, &lb);
        if (!sa != !sb || la != lb || (la && memcmp(sa, sb, la)))
            return fail("--kl-base: token %d is '%.*s' in '%s' but '%.*s' in '%s'; %s", id,
                        sb ? (int)(lb < 40 ? lb : 40) : 0, sb ? sb : "", b->path,
                        sa ? (int)(la < 40 ? la : 40) : 0, sa ? sa : "", a->path, why);
    }
    int32_t *bids = NULL;
    int nb_ids = 0;
    int rc = tokenize(b->tok, text, len, &bids, &nb_ids);
    if (rc) return rc;
    int i = 0;
    while (i < n_ids && i < nb_ids && ids[i] == bids[i])
        i++;
    free(bids);
    if (i < n_ids || nb_ids != n_ids)
        return fail("--kl-base: the text tokenizes differently with '%s' (%d tokens) and '%s' "
                    "(%d tokens), first at token %d; %s",
                    b->path, nb_ids, a->path, n_ids, i, why);
    return 0;
}

/* ---- statistics ------------------------------------------------------------- */

/* Sums over scored tokens, as llama-perplexity keeps them. "Base" is the
 * --kl-base program's distribution P, "model" (Q) the -m program's. */
typedef struct {
    double nll, nll2;           /* -log Q(next) and its square */
    double nll_base, nll_base2; /* -log P(next) */
    double nll_nll_base;        /* product, for the covariance */
    double kld, kld2;           /* KL(P || Q) of the row */
    double dp, dp2, dp4;        /* Q(next) - P(next) and its powers */
    long long same_top, count;
} ppl_sums;

/* A logits row's largest value (its first index) and log(sum(exp(l - max))),
 * the exponentials in float and their sum in double, as llama.cpp does. */
static double row_lse(const float *l, int n, float *max, int *imax) {
    float mx = l[0];
    int im = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > mx) {
            mx = l[i];
            im = i;
        }
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += expf(l[i] - mx);
    *max = mx;
    if (imax) *imax = im;
    return log(sum);
}

/* Scores one row of model logits q predicting `next`; with a base row b,
 * also the KL divergence and the rest. Returns the row's KL divergence
 * (0 without base) and the probability difference in *dp. */
static double score_row(ppl_sums *s, const float *q, const float *b, int n, int next, float *dp) {
    float qmax, bmax;
    int qi, bi;
    double qlse = row_lse(q, n, &qmax, &qi);
    double nll = (double)qmax + qlse - (double)q[next];
    s->nll += nll;
    s->nll2 += nll * nll;
    s->count++;
    if (!b) return 0;
    double blse = row_lse(b, n, &bmax, &bi);
    double nll_b = (double)bmax + blse - (double)b[next];
    s->nll_base += nll_b;
    s->nll_base2 += nll_b * nll_b;
    s->nll_nll_base += nll * nll_b;
    /* KL(P || Q) = sum_i P_i (log P_i - log Q_i), every term in double
     * (llama.cpp rounds the base's log-probabilities to 16 bits in its file
     * and skips P_i < e^-16; the difference is far below the uncertainty). */
    double kl = 0, boff = (double)bmax + blse, qoff = (double)qmax + qlse;
    for (int i = 0; i < n; i++) {
        double lp = (double)b[i] - boff;
        kl += exp(lp) * (lp - ((double)q[i] - qoff));
    }
    s->kld += kl;
    s->kld2 += kl * kl;
    s->same_top += qi == bi;
    double d = exp(-nll) - exp(-nll_b);
    s->dp += d;
    s->dp2 += d * d;
    s->dp4 += d * d * d * d;
    *dp = (float)d;
    return kl;
}

/* llama.cpp's mean and its standard error; the error is 0 for 10 values or
 * fewer. */
static void mean_se(double sum, double sum2, long long count, double *mean, double *se) {
    *mean = count ? sum / (double)count : 0;
    double var = count ? sum2 / (double)count - *mean * *mean : 0;
    *se = var > 0 && count > 10 ? sqrt(var / (double)(count - 1)) : 0;
}

static double covariance(double suma, double sumb, double sumab, long long count) {
    if (count < 10) return 0;
    double c = (double)count;
    return (sumab / c - (suma / c) * (sumb / c)) / (c - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between sorted values, as llama.cpp's percentile. */
static double percentile(const float *v, long long n, double fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    double p = fraction * (double)(n - 1);
    long long i = (long long)p;
    p -= (double)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

static double median(const float *v, long long n) {
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2] + v[n / 2 - 1]);
}

/* One line of the --kl-base table: the running values after a chunk. */
static void print_kl_row(int chunk, const ppl_sums *s) {
    double lq, lqe, lb, lbe, kl, kle, ms, mse;
    mean_se(s->nll, s->nll2, s->count, &lq, &lqe);
    mean_se(s->nll_base, s->nll_base2, s->count, &lb, &lbe);
    mean_se(s->kld, s->kld2, s->count, &kl, &kle);
    mean_se(s->dp2, s->dp4, s->count, &ms, &mse);
    double cov = covariance(s->nll, s->nll_base, s->nll_nll_base, s->count);
    double ratio_e = lqe * lqe + lbe * lbe - 2 * cov;
    double rms = sqrt(ms), top = (double)s->same_top / (double)s->count;
    double top_e = s->count > 1 ? sqrt(top * (1 - top) / (double)(s->count - 1)) : 0;
    printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    "
           "%6.3f ± %6.3f %%\n",
           chunk, exp(lq), exp(lq) * lqe, lq - lb, ratio_e > 0 ? sqrt(ratio_e) : 0, kl, kle,
           100 * rms, rms > 0 ? 100 * 0.5 / rms * mse : 0, 100 * top, 100 * top_e);
}

static void print_kl_summary(const ppl_sums *s, float *kld, float *dp) {
    long long n = s->count;
    double lq, lqe, lb, lbe, v, e;
    mean_se(s->nll, s->nll2, n, &lq, &lqe);
    mean_se(s->nll_base, s->nll_base2, n, &lb, &lbe);
    double pq = exp(lq), pqe = pq * lqe, pb = exp(lb), pbe = pb * lbe;
    double cov = covariance(s->nll, s->nll_base, s->nll_nll_base, n);
    double ratio_e2 = lqe * lqe + lbe * lbe - 2 * cov, ratio_e = ratio_e2 > 0 ? sqrt(ratio_e2) : 0;
    double diff_e2 = pqe * pqe + pbe * pbe - 2 * pq * pb * cov;
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", pq, pqe);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", pb, pbe);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n",
           lqe > 0 && lbe > 0 ? 100 * cov / (lqe * lbe) : 0);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lq - lb, ratio_e);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lq - lb),
           exp(lq - lb) * ratio_e);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", pq - pb,
           diff_e2 > 0 ? sqrt(diff_e2) : 0);

    qsort(kld, (size_t)n, sizeof *kld, cmp_float);
    qsort(dp, (size_t)n, sizeof *dp, cmp_float);
    mean_se(s->kld, s->kld2, n, &v, &e);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", v, e);
    printf("Maximum KLD: %10.6f\n", (double)kld[n - 1]);
    printf("99.9%%   KLD: %10.6f\n", percentile(kld, n, 0.999));
    printf("99.0%%   KLD: %10.6f\n", percentile(kld, n, 0.990));
    printf("95.0%%   KLD: %10.6f\n", percentile(kld, n, 0.950));
    printf("90.0%%   KLD: %10.6f\n", percentile(kld, n, 0.900));
    printf("Median  KLD: %10.6f\n", median(kld, n));
    printf("10.0%%   KLD: %10.6f\n", percentile(kld, n, 0.100));
    printf(" 5.0%%   KLD: %10.6f\n", percentile(kld, n, 0.050));
    printf(" 1.0%%   KLD: %10.6f\n", percentile(kld, n, 0.010));
    printf(" 0.1%%   KLD: %10.6f\n", percentile(kld, n, 0.001));
    printf("Minimum KLD: %10.6f\n", (double)kld[0]);

    mean_se(s->dp, s->dp2, n, &v, &e);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * v, 100 * e);
    printf("Maximum Δp: %6.3f%%\n", 100.0 * dp[n - 1]);
    printf("99.9%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.999));
    printf("99.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.990));
    printf("95.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.950));
    printf("90.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.900));
    printf("75.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.750));
    printf("Median  Δp: %6.3f%%\n", 100 * median(dp, n));
    printf("25.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.250));
    printf("10.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.100));
    printf(" 5.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.050));
    printf(" 1.0%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.010));
    printf(" 0.1%%   Δp: %6.3f%%\n", 100 * percentile(dp, n, 0.001));
    printf("Minimum Δp: %6.3f%%\n", 100.0 * dp[0]);
    mean_se(s->dp2, s->dp4, n, &v, &e);
    double rms = sqrt(v);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * e : 0);
    double top = (double)s->same_top / (double)n;
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top,
           n > 1 ? 100 * sqrt(top * (1 - top) / (double)(n - 1)) : 0);
}

/* ---- evaluation -------------------------------------------------------------- */

/* Runs one chunk (ctx tokens, BOS already in place) from an empty KV cache,
 * in prefill calls of at most `step` tokens, the base (if any) and the model
 * call by call: each program's logits stay in its own session's arena until
 * its next call, so no row is copied. `next` holds the chunk's original
 * tokens (next[pos + 1] is what position pos predicts). Per-token KL and
 * dp values go to kld_v/dp_v at the running count. 0 or an exit code. */
static int eval_chunk(ppl_model *model, ppl_model *base, const int32_t *chunk, const int32_t *next,
                      int ctx, int step, ppl_sums *sums, float *kld_v, float *dp_v) {
    kiln_status st;
    int rc, first = ctx / 2;
    if ((st = kiln_session_reset(model->sess)) || (base && (st = kiln_session_reset(base->sess))))
        return kiln_cli_fail(CMD, st);
    for (int p = 0; p < ctx; p += step) {
        int n = ctx - p < step ? ctx - p : step;
        /* The positions this call scores: [lo, hi) (the last one predicts nothing). */
        int lo = p > first ? p : first, hi = p + n < ctx - 1 ? p + n : ctx - 1;
        const float *q, *b = NULL;
        if ((base && (rc = model_run(base, chunk + p, n, p, hi > lo, &b))) ||
            (rc = model_run(model, chunk + p, n, p, hi > lo, &q)))
            return rc;
        for (int pos = lo; pos < hi; pos++) {
            size_t row = (size_t)(pos - p) * (size_t)model->vocab;
            long long at = sums->count;
            float dp = 0;
            double kl =
                score_row(sums, q + row, b ? b + row : NULL, model->vocab, next[pos + 1], &dp);
            if (b) {
                kld_v[at] = (float)kl;
                dp_v[at] = dp;
            }
        }
    }
    return 0;
}

/* ---- the command -------------------------------------------------------------- */

/* One evaluation: the programs, the text's ids and how they are cut. */
typedef struct {
    const options *o;
    ppl_model model, base;
    ppl_model *kl; /* &base with --kl-base, else NULL */
    int32_t *ids, *chunk;
    int n_ids, ctx, n_chunk, step, add_bos, bos;
    long long n_scored;  /* positions scored in all */
    float *kld_v, *dp_v; /* --kl-base: per scored position */
    ppl_sums sums;
} ppl_eval;

/* The plan on stderr (and the --kl-base table's header on stdout). */
static void print_plan(const ppl_eval *e) {
    int first = e->ctx / 2, per_chunk = e->ctx - 1 - first;
    int calls = (e->ctx + e->step - 1) / e->step;
    fprintf(
        stderr,
        "kiln %s: '%s': %d tokens (%s); %d chunk%s of %d tokens%s, each from an empty KV cache%s\n",
        CMD, e->o->text, e->n_ids, e->add_bos ? "BOS added" : "no BOS: the tokenizer adds none",
        e->n_chunk, e->n_chunk == 1 ? "" : "s", e->ctx,
        e->n_chunk < e->n_ids / e->ctx ? " (--limit)" : "",
        e->add_bos ? " with its first token replaced by BOS" : "");
    fprintf(
        stderr,
        "kiln %s: each chunk in %d prefill call%s of at most %d tokens%s; scoring positions %d..%d "
        "(%d tokens a chunk, %lld in all)\n",
        CMD, calls, calls > 1 ? "s" : "", e->step,
        e->kl ? " per program, the two programs call by call" : "", first, e->ctx - 2, per_chunk,
        e->n_scored);
    if (e->kl)
        printf("chunk             PPL               ln(PPL(Q)/PPL(base))          "
               "KL Divergence              Δp RMS            Same top p\n");
    kiln_cli_flush();
}

/* Opens the programs, tokenizes the text, checks that it and --ctx fit,
 * and plans the chunks. 0 or an exit code (message printed). */
static int prepare(ppl_eval *e, const char *text, size_t len) {
    const options *o = e->o;
    int rc, ctx = e->ctx, add_eos;
    if ((rc = model_open(&e->model, o->model, &o->open)) ||
        (o->base && (rc = model_open(&e->base, o->base, &o->open))))
        return rc;
    e->kl = o->base ? &e->base : NULL;
    const ppl_model *ms[2] = {&e->model, e->kl};
    for (int k = 0; k < 2; k++)
        if (ms[k] && ctx > ms[k]->ctx)
            return fail("--ctx %d is more than the context of '%s' (%d tokens); use a smaller "
                        "--ctx or compile the program with --max-seq %d",
                        ctx, ms[k]->path, ms[k]->ctx, ctx);
    if ((rc = tokenize(e->model.tok, text, len, &e->ids, &e->n_ids))) return rc;
    if (e->kl && (rc = same_vocab(&e->model, e->kl, e->ids, e->n_ids, text, len))) return rc;
    if (e->n_ids < 2 * ctx)
        return fail("'%s' tokenizes to %d token%s; --ctx %d needs at least %d (2 x ctx): give a "
                    "longer text or a smaller --ctx",
                    o->text, e->n_ids, e->n_ids == 1 ? "" : "s", ctx, 2 * ctx);
    e->bos = kiln_tokenizer_bos(e->model.tok);
    tok_specials(e->model.tok, &e->add_bos, &add_eos);
    e->n_chunk = e->n_ids / ctx;
    if (o->limit > 0 && o->limit < e->n_chunk) e->n_chunk = (int)o->limit;
    /* Calls of the smaller prefill size, so the two programs' rows line up. */
    e->step = e->model.prefill_max;
    if (e->kl && e->kl->prefill_max < e->step) e->step = e->kl->prefill_max;
    e->n_scored = (long long)e->n_chunk * (ctx - 1 - ctx / 2);
    if (!(e->chunk = malloc(sizeof *e->chunk * (size_t)ctx)) ||
        (e->kl && (!(e->kld_v = malloc(sizeof *e->kld_v * (size_t)e->n_scored)) ||
                   !(e->dp_v = malloc(sizeof *e->dp_v * (size_t)e->n_scored)))))
        return fail("out of memory for the values of %lld tokens", e->n_scored);
    print_plan(e);
    return 0;
}

/* Every chunk in turn, the running values printed after each. 0 or an
 * exit code. */
static int eval_chunks(ppl_eval *e) {
    int rc = 0, ctx = e->ctx, line_open = 0; /* a line of running values is unfinished */
    for (int c = 0; c < e->n_chunk; c++) {
        double tc = now_s();
        memcpy(e->chunk, e->ids + (size_t)c * ctx, sizeof *e->chunk * (size_t)ctx);
        if (e->add_bos) e->chunk[0] = e->bos;
        if ((rc = eval_chunk(&e->model, e->kl, e->chunk, e->ids + (size_t)c * ctx, ctx, e->step,
                             &e->sums, e->kld_v, e->dp_v)))
            break;
        if (c == 0) {
            double t = now_s() - tc;
            fprintf(stderr, "kiln %s: %.2f seconds per chunk, ETA %.2f minutes\n", CMD, t,
                    t * e->n_chunk / 60);
        }
        if (e->kl) {
            print_kl_row(c + 1, &e->sums);
        } else {
            printf("[%d]%.4f,", c + 1, exp(e->sums.nll / (double)e->sums.count));
            line_open = 1;
        }
        kiln_cli_flush();
    }
    if (line_open) printf("\n");
    if (rc) kiln_cli_flush();
    return rc;
}

/* The final estimate (and the --kl-base summary) on stdout, the times on
 * stderr. */
static void print_final(const ppl_eval *e, double t_load, double secs) {
    const ppl_sums *s = &e->sums;
    double mean = s->nll / (double)s->count, var = s->nll2 / (double)s->count - mean * mean;
    if (e->kl) print_kl_summary(s, e->kld_v, e->dp_v);
    /* llama-perplexity's standard error: sqrt(var(nll) / (count - 1)) x PPL. */
    if (e->kl) printf("\n");
    printf("Final estimate: PPL = %.4f +/- %.5f\n", exp(mean),
           var > 0 ? sqrt(var / (double)(s->count - 1)) * exp(mean) : 0);
    kiln_cli_flush();
    long long n_eval = (long long)e->n_chunk * e->ctx * (e->kl ? 2 : 1);
    fprintf(stderr,
            "kiln %s: %d chunk%s, %lld tokens scored; load and tokenize %.2f s, evaluation %.2f s "
            "(%.1f tokens/s%s)\n",
            CMD, e->n_chunk, e->n_chunk == 1 ? "" : "s", e->n_scored, t_load, secs,
            secs > 0 ? (double)n_eval / secs : 0, e->kl ? ", both programs" : "");
}

int kiln_cmd_perplexity(int argc, char **argv) {
    options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &o, &rc)) return rc;
    if (!o.model) return kiln_cli_usage_error(CMD, "no model given (-m FILE)");
    if (!o.text) return kiln_cli_usage_error(CMD, "no text given (-f FILE)");
    if ((rc = kiln_cli_qnn_lib(CMD, o.qnn_lib))) return rc;

    ppl_eval e;
    memset(&e, 0, sizeof e);
    e.o = &o;
    e.ctx = (int)o.ctx;
    size_t text_len = 0;
    char *text = read_file(o.text, &text_len);
    if (!text) return fail("cannot read '%s': %s", o.text, strerror(errno));
    double t_load = now_s();
    if (!(rc = prepare(&e, text, text_len))) {
        double t0 = now_s();
        t_load = t0 - t_load;
        if (!(rc = eval_chunks(&e))) print_final(&e, t_load, now_s() - t0);
    }
    free(e.dp_v);
    free(e.kld_v);
    free(e.chunk);
    free(e.ids);
    free(text);
    model_close(&e.base);
    model_close(&e.model);
    return rc;
}
