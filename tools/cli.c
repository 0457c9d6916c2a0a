/* cli.c: shared helpers of the `kiln` command. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
