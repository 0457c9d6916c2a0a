/* cli.c: what the subcommands of `kiln` share: messages and exit codes,
 * signals, the progress bar, and the table-driven argument parser (the
 * tables, the help they print, the paths they name) with the flags
 * `generate` and `chat` share, and --qnn-lib. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

volatile sig_atomic_t kiln_cli_interrupted;

/* First SIGINT, SIGTERM or SIGHUP: remembered; the command stops at its
 * next check, removes what it was writing and exits 128 + the signal. A
 * second one: the temporary files go now, and so does the process. */
static void on_signal(int sig) {
    if (kiln_cli_interrupted) {
        kiln_remove_temp_files();
        _exit(128 + kiln_cli_interrupted);
    }
    kiln_cli_interrupted = sig;
}

/* stdout or a pipe closed by its reader (`kiln generate | head`): nothing
 * more can be said, so go quietly, as a process killed by SIGPIPE would
 * (141), and leave no temporary file. */
static void on_sigpipe(int sig) {
    (void)sig;
    kiln_remove_temp_files();
    _exit(128 + SIGPIPE);
}

void kiln_cli_install_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = sigs[i] == SIGPIPE ? on_sigpipe : on_signal;
        sigemptyset(&sa.sa_mask);
        /* no SA_RESTART: a read of stdin (chat) returns at the signal */
        sigaction(sigs[i], &sa, NULL);
        sigaddset(&set, sigs[i]);
    }
    /* a parent may have blocked them; they are ours to take now */
    sigprocmask(SIG_UNBLOCK, &set, NULL);
}

static int g_stdout_errno; /* why stdout first failed; 0: not known (yet) */

int kiln_cli_stdout_failed(void) {
    if (!ferror(stdout)) return 0;
    if (!g_stdout_errno) g_stdout_errno = errno ? errno : -1;
    return 1;
}

int kiln_cli_flush(void) {
    errno = 0;
    int bad = fflush(stdout) != 0;
    return kiln_cli_stdout_failed() || bad;
}

int kiln_cli_finish(const char *cmd, int rc) {
    if (kiln_cli_interrupted) return KILN_EXIT_INTERRUPTED;
    if (kiln_cli_flush()) {
        int e = g_stdout_errno > 0 ? g_stdout_errno : 0;
        if (e == EPIPE) return 128 + SIGPIPE; /* SIGPIPE was held off: the same, quietly */
        fprintf(stderr, "kiln %s: error: cannot write standard output%s%s\n", cmd, e ? ": " : "",
                e ? strerror(e) : "");
        return rc ? rc : KILN_EXIT_FAIL;
    }
    return rc;
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
        int sig = kiln_cli_interrupted ? (int)kiln_cli_interrupted : SIGINT;
        fprintf(stderr, "kiln %s: interrupted (%s)\n", cmd,
                sig == SIGTERM  ? "SIGTERM"
                : sig == SIGHUP ? "SIGHUP"
                                : "SIGINT");
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

/* Parses a finite float in [lo, hi]; 0 on success. */
static int parse_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* The value after a flag: argv[++*i], or NULL (usage error printed). */
static const char *flag_value(const char *cmd, int argc, char **argv, int *i) {
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
        fprintf(stderr, "\r%-8s [%.*s%*s] %3d%%", stage, bar, "#########################", 25 - bar,
                "", pct);
        if (done >= total) fprintf(stderr, "\n");
        fflush(stderr);
    }
    (void)user;
    return 0;
}

/* ---- the parser -------------------------------------------------------------- */

/* Index of `a` among the ", "-separated names, or -1. */
static int name_index(const char *names, const char *a) {
    size_t n = strlen(a);
    for (int k = 0; names && *names; k++) {
        const char *end = strchr(names, ',');
        size_t len = end ? (size_t)(end - names) : strlen(names);
        if (len == n && !memcmp(names, a, n)) return k;
        if (!end) break;
        names = end + 1;
        while (*names == ' ')
            names++;
    }
    return -1;
}

/* The flag named `a` in table t (its tables included), its destinations'
 * base in *base and the index of the name in *which; NULL if none. */
static const kiln_cli_flag *find_flag(const kiln_cli_flag *t, char *opts, const char *a,
                                      char **base, int *which) {
    for (; t->kind != KILN_CLI_END; t++) {
        if (t->kind == KILN_CLI_TABLE) {
            const kiln_cli_flag *f = find_flag(t->table, opts + t->at, a, base, which);
            if (f) return f;
        } else if (!(t->bits & KILN_CLI_POSITIONAL)) {
            int k = name_index(t->names, a);
            if (k < 0 && name_index(t->alias, a) >= 0) k = 0;
            if (k >= 0) {
                *base = opts;
                *which = k;
                return t;
            }
        }
    }
    return NULL;
}

static const kiln_cli_flag *find_positional(const kiln_cli_flag *t, char *opts, char **base) {
    for (; t->kind != KILN_CLI_END; t++) {
        const kiln_cli_flag *f = NULL;
        if (t->kind == KILN_CLI_TABLE)
            f = find_positional(t->table, opts + t->at, base);
        else if (t->bits & KILN_CLI_POSITIONAL)
            *base = opts, f = t;
        if (f) return f;
    }
    return NULL;
}

static long long range_int(double v) {
    return v >= 0x1p63    ? 0x7fffffffffffffffLL
           : v <= -0x1p63 ? -0x7fffffffffffffffLL - 1
                          : (long long)v;
}

static int is_int_kind(kiln_cli_kind k) {
    return k == KILN_CLI_INT || k == KILN_CLI_I64 || k == KILN_CLI_INTS;
}

/* A float as the help shows it: 0.95, and 1.0 for a whole one. */
static void put_float(char *buf, size_t cap, double v) {
    snprintf(buf, cap, v == floor(v) && fabs(v) < 1e15 ? "%.1f" : "%g", v);
}

/* The value at `dest` as text, for "{default}". */
static void put_default(char *buf, size_t cap, const kiln_cli_flag *f, const char *dest) {
    buf[0] = 0;
    switch (f->kind) {
    case KILN_CLI_SET:
    case KILN_CLI_SWITCH:
    case KILN_CLI_INT:
        snprintf(buf, cap, "%d", *(const int *)dest);
        break;
    case KILN_CLI_I64:
        snprintf(buf, cap, "%lld", *(const long long *)dest);
        break;
    case KILN_CLI_FLOAT:
        put_float(buf, cap, *(const float *)dest);
        break;
    case KILN_CLI_DOUBLE:
        put_float(buf, cap, *(const double *)dest);
        break;
    case KILN_CLI_STR:
    case KILN_CLI_NAME:
        snprintf(buf, cap, "%s", *(const char *const *)dest ? *(const char *const *)dest : "");
        break;
    case KILN_CLI_CHOICE:
        snprintf(buf, cap, "%s", f->choices[*(const int *)dest]);
        break;
    default:
        break;
    }
}

/* Copies text into buf with "{range}" and "{default}" (dest: the
 * destination's value; NULL: left as is) filled in. */
static void expand(char *buf, size_t cap, const char *text, const kiln_cli_flag *f,
                   const char *dest) {
    size_t n = 0;
    buf[0] = 0;
    while (*text && n + 1 < cap) {
        char part[96];
        const char *put = NULL;
        size_t skip = 1;
        if (!strncmp(text, "{range}", 7)) {
            const char *fmt = f->bits & KILN_CLI_OPEN_LO ? "(%s, %s]" : "%s..%s";
            char lo[40], hi[40];
            if (is_int_kind(f->kind)) {
                snprintf(lo, sizeof lo, "%lld", range_int(f->lo));
                snprintf(hi, sizeof hi, "%lld", range_int(f->hi));
            } else {
                snprintf(lo, sizeof lo, "%g", f->lo);
                snprintf(hi, sizeof hi, "%g", f->hi);
            }
            snprintf(part, sizeof part, fmt, lo, hi);
            put = part, skip = 7;
        } else if (dest && !strncmp(text, "{default}", 9)) {
            put_default(part, sizeof part, f, dest);
            put = part, skip = 9;
        }
        if (put)
            n += (size_t)snprintf(buf + n, cap - n, "%s", put);
        else
            buf[n++] = *text, buf[n] = 0;
        if (n >= cap) n = cap - 1;
        text += skip;
    }
}

/* "must be an integer in {range}", "must be a, b or c", ... */
static void default_rule(char *buf, size_t cap, const kiln_cli_flag *f) {
    if (f->kind == KILN_CLI_CHOICE || f->kind == KILN_CLI_NAME) {
        size_t n = (size_t)snprintf(buf, cap, "must be ");
        for (int k = 0; f->choices[k] && n < cap; k++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s",
                                  k == 0              ? ""
                                  : f->choices[k + 1] ? ", "
                                                      : " or ",
                                  f->choices[k]);
    } else {
        snprintf(buf, cap, "%s",
                 is_int_kind(f->kind) ? "must be an integer in {range}"
                                      : "must be a number in {range}");
    }
}

/* "kiln CMD: NAME RULE, got 'VALUE'"; returns 2. */
static int bad_value(const char *cmd, const kiln_cli_flag *f, const char *typed, const char *val) {
    char rule[256], text[512];
    default_rule(rule, sizeof rule, f);
    expand(text, sizeof text, f->rule ? f->rule : rule, f, NULL);
    return kiln_cli_usage_error(cmd, "%s %s, got '%s'", f->shown ? f->shown : typed, text, val);
}

/* "a,b,c" of integers in [lo, hi] into a list; 0, or 2 after the message. */
static int parse_ints(const char *cmd, const kiln_cli_flag *f, const char *flag, const char *s,
                      kiln_cli_ints *out) {
    char buf[1024];
    long long lo = range_int(f->lo), hi = range_int(f->hi);
    size_t l = strlen(s);
    if (!l || l >= sizeof buf || s[0] == ',' || s[l - 1] == ',' || strstr(s, ",,"))
        return kiln_cli_usage_error(cmd, "%s needs a comma-separated list of integers, got '%s'",
                                    flag, s);
    strcpy(buf, s);
    out->n = 0;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        long long v;
        if (kiln_cli_int(item, lo, hi, &v))
            return kiln_cli_usage_error(cmd, "%s takes integers in %lld..%lld, got '%s'", flag, lo,
                                        hi, item);
        if (out->n == KILN_CLI_MAX_LIST)
            return kiln_cli_usage_error(cmd, "%s: at most %d values", flag, KILN_CLI_MAX_LIST);
        out->v[out->n++] = (int)v;
    }
    return 0;
}

/* Stores the value of flag f (typed as `typed`, name index `which`) at
 * base + f->at; 0, or 2 after the message. */
static int store(const char *cmd, const kiln_cli_flag *f, const char *typed, int which,
                 const char *val, char *base) {
    void *dest = base + f->at;
    long long v;
    double d;
    if (val && !*val && (f->bits & KILN_CLI_NONEMPTY))
        return kiln_cli_usage_error(cmd, "%s needs a value, got ''", typed);
    switch (f->kind) {
    case KILN_CLI_SET:
        *(int *)dest = (int)f->lo;
        break;
    case KILN_CLI_SWITCH:
        *(int *)dest = which == 0;
        break;
    case KILN_CLI_INT:
    case KILN_CLI_I64:
        if (kiln_cli_int(val, range_int(f->lo), range_int(f->hi), &v))
            return bad_value(cmd, f, typed, val);
        if (f->kind == KILN_CLI_INT)
            *(int *)dest = (int)v;
        else
            *(long long *)dest = v;
        break;
    case KILN_CLI_FLOAT:
    case KILN_CLI_DOUBLE:
        if (parse_float(val, f->lo, f->hi, &d) || ((f->bits & KILN_CLI_OPEN_LO) && !(d > f->lo)))
            return bad_value(cmd, f, typed, val);
        if (f->kind == KILN_CLI_FLOAT)
            *(float *)dest = (float)d;
        else
            *(double *)dest = d;
        break;
    case KILN_CLI_STR:
        if ((f->bits & KILN_CLI_POSITIONAL) && *(const char **)dest)
            return kiln_cli_usage_error(cmd,
                                        f->rule ? f->rule : "one argument only ('%s' and '%s')",
                                        *(const char **)dest, val);
        *(const char **)dest = val;
        break;
    case KILN_CLI_CHOICE:
    case KILN_CLI_NAME: {
        int k = 0;
        while (f->choices[k] && strcmp(f->choices[k], val))
            k++;
        if (!f->choices[k]) return bad_value(cmd, f, typed, val);
        if (f->kind == KILN_CLI_CHOICE)
            *(int *)dest = k;
        else
            *(const char **)dest = f->choices[k];
        break;
    }
    case KILN_CLI_STRS: {
        kiln_cli_strs *l = dest;
        int cap = (int)(sizeof l->v / sizeof *l->v);
        if (l->n == cap)
            return kiln_cli_usage_error(cmd, "%s given more than %d times", typed, cap);
        l->v[l->n++] = val;
        break;
    }
    case KILN_CLI_INTS:
        return parse_ints(cmd, f, typed, val, dest);
    default:
        break;
    }
    if (f->valid && !f->valid(dest)) return bad_value(cmd, f, typed, val);
    return 0;
}

/* An argument no flag is named: "--check=yes" where --check takes no value
 * says so (naming the "--check=..." flags there are); else the command's
 * unknown-option message. Returns 2. */
static int unknown_flag(const kiln_cli_command *c, char *opts, const char *a) {
    const char *eq = strchr(a, '=');
    char name[128], *base;
    int which;
    const kiln_cli_flag *f;
    if (eq && (size_t)(eq - a) < sizeof name) {
        snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
        f = find_flag(c->flags, opts, name, &base, &which);
        if (f && (f->kind == KILN_CLI_SET || f->kind == KILN_CLI_SWITCH)) {
            char others[256] = "";
            size_t n = 0, l = strlen(name);
            for (const kiln_cli_flag *g = c->flags; g->kind != KILN_CLI_END && n < sizeof others;
                 g++)
                if (g->names && !strncmp(g->names, name, l) && g->names[l] == '=')
                    n += (size_t)snprintf(others + n, sizeof others - n, " or '%s'", g->names + l);
            return kiln_cli_usage_error(c->name, "%s takes no value%s, got '%s'", name, others, a);
        }
    }
    return kiln_cli_usage_error(c->name, c->unknown ? c->unknown : "unknown option '%s'", a);
}

/* ---- paths ------------------------------------------------------------------- */

typedef struct {
    const kiln_cli_flag *f;
    const char *path;
} named_path;

/* The paths given, with their flags, into out[0..cap); returns the count. */
static int collect_paths(const kiln_cli_flag *t, const char *opts, named_path *out, int n,
                         int cap) {
    for (; t->kind != KILN_CLI_END; t++) {
        const char *dest = opts + t->at;
        if (t->kind == KILN_CLI_TABLE) {
            n = collect_paths(t->table, dest, out, n, cap);
        } else if (t->path && (t->kind == KILN_CLI_STR || t->kind == KILN_CLI_NAME)) {
            if (*(const char *const *)dest && n < cap)
                out[n++] = (named_path){t, *(const char *const *)dest};
        } else if (t->path && t->kind == KILN_CLI_STRS) {
            const kiln_cli_strs *l = (const kiln_cli_strs *)dest;
            for (int k = 0; k < l->n && n < cap; k++)
                out[n++] = (named_path){t, l->v[k]};
        }
    }
    return n;
}

/* The first of a flag's names: "-o" of "-o, --output". */
static void first_name(char *buf, size_t cap, const kiln_cli_flag *f) {
    size_t n = strcspn(f->names, ",");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), f->names);
}

/* 1 when `path` lies in the folder `dir` itself (links followed): a file
 * written there could land on it. Deeper down it could not. */
static int folder_holds(const struct stat *dir, const char *path) {
    char *real = realpath(path, NULL);
    if (!real) return 0; /* not there: the command says so itself */
    char *slash = strrchr(real, '/');
    if (slash) slash[slash == real] = '\0'; /* "/a/b" -> "/a"; "/a" -> "/" */
    struct stat s;
    int found = slash && !stat(real, &s) && s.st_dev == dir->st_dev && s.st_ino == dir->st_ino;
    free(real);
    return found;
}

/* An output must not be a file or folder another path names too (the same
 * device and inode, links followed; two outputs not made yet: the same
 * text): writing it would destroy what is read, or what another output
 * wrote. 0, or 2 after the message. */
static int check_paths(const kiln_cli_command *c, const char *opts) {
    named_path p[64];
    struct stat s[64];
    int there[64]; /* 1: a file or folder; -1: something else (/dev/null); 0: nothing yet */
    int n = collect_paths(c->flags, opts, p, 0, 64);
    for (int i = 0; i < n; i++)
        there[i] = stat(p[i].path, &s[i])                           ? 0
                   : S_ISREG(s[i].st_mode) || S_ISDIR(s[i].st_mode) ? 1
                                                                    : -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int out_j = (p[j].f->path & KILN_CLI_OUT) != 0, same;
            if (i == j || !(p[i].f->path & KILN_CLI_OUT) || (out_j && j < i))
                continue; /* a pair once */
            if (there[i] == 1 && there[j] == 1)
                same = s[i].st_dev == s[j].st_dev && s[i].st_ino == s[j].st_ino;
            else /* two outputs not made yet */
                same = out_j && !there[i] && !there[j] && !strcmp(p[i].path, p[j].path);
            char a[64], b[64];
            first_name(a, sizeof a, p[i].f);
            first_name(b, sizeof b, p[j].f);
            /* files written into an output folder must not land on what is read */
            if (!same && !out_j && there[i] == 1 && S_ISDIR(s[i].st_mode) &&
                folder_holds(&s[i], p[j].path))
                return kiln_cli_usage_error(c->name, "%s '%s' is a folder that holds %s '%s'", a,
                                            p[i].path, b, p[j].path);
            if (!same) continue;
            return kiln_cli_usage_error(c->name, "%s '%s' is the same %s as %s '%s'", a, p[i].path,
                                        there[i] == 1 && S_ISDIR(s[i].st_mode) ? "folder" : "file",
                                        b, p[j].path);
        }
    return 0;
}

/* ---- --qnn-lib ----------------------------------------------------------------- */

int kiln_cli_qnn_lib(const char *cmd, const char *dir) {
    struct stat s;
    if (!dir) return 0;
    if (stat(dir, &s)) {
        int e = errno;
        return kiln_cli_usage_error(cmd, "--qnn-lib '%s': %s", dir,
                                    e == ENOENT ? "no such folder" : strerror(e));
    }
    if (!S_ISDIR(s.st_mode))
        return kiln_cli_usage_error(cmd, "--qnn-lib '%s' is not a folder", dir);
    kiln_status st = kiln_qnn_set_library_dir(dir);
    return st ? kiln_cli_fail(cmd, st) : 0;
}

/* ---- the help ---------------------------------------------------------------- */

static void help_flag(FILE *out, const kiln_cli_flag *f, int column, const char *dest) {
    char left[160], text[2048];
    snprintf(left, sizeof left, "  %s%s%s", f->names, f->arg ? " " : "", f->arg ? f->arg : "");
    expand(text, sizeof text, f->help, f, dest);
    int len = (int)strlen(left);
    fprintf(out, "%s%*s", left, len < column ? column - len : 2, "");
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        fprintf(out, "%.*s\n", (int)n, line);
        if (!nl) break;
        line = nl + 1;
        fprintf(out, "%*s", column, "");
    }
}

static void help_flags(FILE *out, const kiln_cli_flag *t, int column, const char *defaults) {
    for (; t->kind != KILN_CLI_END; t++) {
        if (t->kind == KILN_CLI_TABLE)
            help_flags(out, t->table, column, defaults ? defaults + t->at : NULL);
        else if (t->help)
            help_flag(out, t, column, defaults ? defaults + t->at : NULL);
    }
}

/* Prints the help: about, the options from the table, notes. */
static void print_help(const kiln_cli_command *c, FILE *out) {
    /* the defaults, as the command's init sets them */
    char *defaults = c->size ? calloc(1, c->size) : NULL;
    if (defaults && c->init) c->init(defaults);
    fputs(c->about, out);
    fputs("options:\n", out);
    help_flags(out, c->flags, c->column, defaults);
    kiln_cli_flag h = {KILN_CLI_SET, "-h, --help", NULL, 0, .help = "this text"};
    help_flag(out, &h, c->column, NULL);
    if (c->notes) fputs(c->notes, out);
    free(defaults);
}

int kiln_cli_parse(const kiln_cli_command *c, int argc, char **argv, void *options, int *rc) {
    char *opts = options;
    if (c->init) c->init(options);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char *base = opts;
        int which = 0;
        const kiln_cli_flag *f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(c, stdout);
            *rc = KILN_EXIT_OK;
            return 0;
        }
        if (a[0] == '-' && a[1]) {
            if (!(f = find_flag(c->flags, opts, a, &base, &which))) {
                *rc = unknown_flag(c, opts, a);
                return 0;
            }
            if (f->kind != KILN_CLI_SET && f->kind != KILN_CLI_SWITCH &&
                !(val = flag_value(c->name, argc, argv, &i))) {
                *rc = KILN_EXIT_USAGE;
                return 0;
            }
        } else if ((f = find_positional(c->flags, opts, &base))) {
            val = a;
        } else {
            const char *msg = c->stray ? c->stray : c->unknown ? c->unknown : "unknown option '%s'";
            *rc = kiln_cli_usage_error(c->name, msg, a);
            return 0;
        }
        if ((*rc = store(c->name, f, a, which, val, base))) return 0;
    }
    if ((*rc = check_paths(c, opts))) return 0;
    return 1;
}

/* ---- the generation flags ------------------------------------------------------ */

const char *const kiln_cli_backends[] = {"cpu", "ref", NULL};

#define SMP(field) offsetof(kiln_cli_sampling, field)

const kiln_cli_flag kiln_cli_sampling_flags[] = {
    {KILN_CLI_INT, "-n, --n-predict", "N", SMP(gen.n_predict), .lo = -1, .hi = 1 << 24,
     .rule = "must be -1 or a count >= 0", .shown = "-n",
     .help = "most new tokens; -1 (default): until an end token or\n"
             "the context is full"},
    {KILN_CLI_FLOAT, "--temp", "T", SMP(gen.temperature), .lo = 0, .hi = 100,
     .help = "temperature; 0 = greedy, where only the repeat penalty\n"
             "applies (default {default})"},
    {KILN_CLI_INT, "--top-k", "N", SMP(gen.top_k), .lo = 0, .hi = 0x7fffffff,
     .rule = "must be an integer >= 0 (0 = off)",
     .help = "keep the N most likely tokens; 0 = off (default {default})"},
    {KILN_CLI_FLOAT, "--top-p", "P", SMP(gen.top_p), .lo = 0, .hi = 1, .bits = KILN_CLI_OPEN_LO,
     .help = "keep the most likely tokens up to probability P, in\n"
             "(0, 1]; 1 = off (default {default})"},
    {KILN_CLI_FLOAT, "--min-p", "P", SMP(gen.min_p), .lo = 0, .hi = 1,
     .rule = "must be a number in [0, 1]",
     .help = "drop tokens less likely than P times the best, in\n"
             "[0, 1]; 0 = off (default {default})"},
    {KILN_CLI_FLOAT, "--repeat-penalty", "F", SMP(gen.repeat_penalty), .lo = 0, .hi = 1e30,
     .bits = KILN_CLI_OPEN_LO, .rule = "must be a number > 0 (1 = off)",
     .help = "penalise tokens seen in the last N; > 0, 1 = off\n"
             "(default {default})"},
    {KILN_CLI_INT, "--repeat-last-n", "N", SMP(gen.repeat_last_n), .lo = -1, .hi = 0x7fffffff,
     .rule = "must be -1 (whole context) or an integer >= 0",
     .help = "the penalty's window; -1 = whole context, 0 = off\n"
             "(default {default})"},
    {KILN_CLI_I64, "--seed", "S", SMP(seed), .lo = -1, .hi = KILN_CLI_NO_MAX,
     .rule = "must be -1 or a non-negative integer",
     .help = "sampler seed; -1 (default) = random, printed on stderr"},
    KILN_CLI_THREADS(SMP(open.n_threads)),
    KILN_CLI_BACKEND(SMP(open.backend)),
    KILN_CLI_QNN_LIB(SMP(qnn_lib)),
    {KILN_CLI_END},
};

void kiln_cli_sampling_init(kiln_cli_sampling *s) {
    memset(s, 0, sizeof *s);
    kiln_generate_options_init(&s->gen);
    s->seed = -1;
}

void kiln_cli_sampling_seed(const char *cmd, kiln_cli_sampling *s) {
    if (s->seed < 0) {
        s->seed = (long long)((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0x7fffffffffffLL;
        if (s->gen.temperature > 0) fprintf(stderr, "kiln %s: seed %lld\n", cmd, s->seed);
    }
    s->gen.seed = (uint64_t)s->seed;
}
