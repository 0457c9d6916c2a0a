/* cli.c: shared helpers of the `kiln` command. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

volatile sig_atomic_t kiln_cli_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    if (kiln_cli_interrupted) _exit(KILN_EXIT_INTERRUPTED); /* second Ctrl-C: now */
    kiln_cli_interrupted = 1;
}

void kiln_cli_install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int kiln_cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kiln %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'kiln %s --help')\n", cmd);
    return KILN_EXIT_USAGE;
}

int kiln_cli_fail(const char *cmd, kiln_status st) {
    if (st == KILN_ERR_CANCELLED || kiln_cli_interrupted) {
        fprintf(stderr, "kiln %s: interrupted\n", cmd);
        return KILN_EXIT_INTERRUPTED;
    }
    fprintf(stderr, "kiln %s: error: %s\n", cmd, kiln_last_error());
    return KILN_EXIT_FAIL;
}

int kiln_cli_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int kiln_cli_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

const char *kiln_cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        kiln_cli_usage_error(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int kiln_cli_progress(void *user, const char *stage, uint64_t done, uint64_t total) {
    static int last = -1;
    if (kiln_cli_interrupted) return 1;
    if (!isatty(2) || !total) return 0;
    int pct = (int)(done * 100 / total);
    if (pct != last) {
        last = pct;
        int bar = pct / 4;
        fprintf(stderr, "\r%-8s [%.*s%*s] %3d%%", stage, bar, "#########################", 25 - bar, "", pct);
        if (done >= total) fprintf(stderr, "\n");
        fflush(stderr);
    }
    (void)user;
    return 0;
}

/* ---- generation flags ------------------------------------------------------- */

void kiln_cli_sampling_init(kiln_cli_sampling *s) {
    s->n_predict = -1;
    s->seed = -1;
    s->top_k = 40;
    s->repeat_last_n = 64;
    s->temp = 0.8;
    s->top_p = 0.95;
    s->min_p = 0.05;
    s->repeat_penalty = 1.0;
    s->n_threads = 0;
}

int kiln_cli_sampling_flag(const char *cmd, int argc, char **argv, int *i, kiln_cli_sampling *s) {
    const char *a = argv[*i], *val;
    int is_n = !strcmp(a, "-n") || !strcmp(a, "--n-predict");
    int is_t = !strcmp(a, "-t") || !strcmp(a, "--threads");
    if (!is_n && !is_t && strcmp(a, "--temp") && strcmp(a, "--seed") && strcmp(a, "--top-k") &&
        strcmp(a, "--top-p") && strcmp(a, "--min-p") && strcmp(a, "--repeat-penalty") &&
        strcmp(a, "--repeat-last-n"))
        return 0;
    if (!(val = kiln_cli_value(cmd, argc, argv, i))) return -1;
    if (is_n) {
        if (kiln_cli_int(val, -1, 1 << 24, &s->n_predict))
            return kiln_cli_usage_error(cmd, "-n must be -1 or a count >= 0, got '%s'", val), -1;
    } else if (is_t) {
        if (kiln_cli_int(val, 1, KILN_MAX_THREADS, &s->n_threads))
            return kiln_cli_usage_error(cmd, "-t must be a thread count in 1..%d, got '%s'",
                                        KILN_MAX_THREADS, val), -1;
    } else if (!strcmp(a, "--temp")) {
        if (kiln_cli_float(val, 0, 100, &s->temp))
            return kiln_cli_usage_error(cmd, "--temp must be a number in 0..100, got '%s'", val), -1;
    } else if (!strcmp(a, "--seed")) {
        if (kiln_cli_int(val, -1, (long long)0x7fffffffffffffffLL, &s->seed))
            return kiln_cli_usage_error(cmd, "--seed must be -1 or a non-negative integer, got '%s'", val), -1;
    } else if (!strcmp(a, "--top-k")) {
        if (kiln_cli_int(val, 0, 0x7fffffff, &s->top_k))
            return kiln_cli_usage_error(cmd, "--top-k must be an integer >= 0 (0 = off), got '%s'", val), -1;
    } else if (!strcmp(a, "--top-p")) {
        if (kiln_cli_float(val, 0, 1, &s->top_p) || !(s->top_p > 0))
            return kiln_cli_usage_error(cmd, "--top-p must be a number in (0, 1], got '%s'", val), -1;
    } else if (!strcmp(a, "--min-p")) {
        if (kiln_cli_float(val, 0, 1, &s->min_p))
            return kiln_cli_usage_error(cmd, "--min-p must be a number in [0, 1], got '%s'", val), -1;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (kiln_cli_float(val, 0, 1e30, &s->repeat_penalty) || !(s->repeat_penalty > 0))
            return kiln_cli_usage_error(cmd, "--repeat-penalty must be a number > 0 (1 = off), got '%s'", val), -1;
    } else {
        if (kiln_cli_int(val, -1, 0x7fffffff, &s->repeat_last_n))
            return kiln_cli_usage_error(cmd, "--repeat-last-n must be -1 (whole context) or an integer >= 0, got '%s'",
                                        val), -1;
    }
    return 1;
}

void kiln_cli_sampling_apply(const char *cmd, kiln_cli_sampling *s, kiln_generate_options *o) {
    o->n_predict = (int)s->n_predict;
    o->temperature = (float)s->temp;
    o->top_k = (int)s->top_k;
    o->top_p = (float)s->top_p;
    o->min_p = (float)s->min_p;
    o->repeat_penalty = (float)s->repeat_penalty;
    o->repeat_last_n = (int)s->repeat_last_n;
    if (s->seed < 0) {
        s->seed = (long long)((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0x7fffffffffffLL;
        if (s->temp > 0) fprintf(stderr, "kiln %s: seed %lld\n", cmd, s->seed);
    }
    o->seed = (uint64_t)s->seed;
}

kiln_status kiln_cli_open_program(const char *path, const kiln_cli_sampling *s, kiln_program **out) {
    kiln_open_options o;
    memset(&o, 0, sizeof o);
    o.n_threads = (int)s->n_threads;
    return kiln_program_open_with(path, &o, out);
}
