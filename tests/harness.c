/* harness.c: the test runner and fixture helpers. */
#include "harness.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int kt_failed_here, kt_skipped_here;
const char *kt_current;

static char g_tmp[256];

static void rm_tmp(void) {
    if (!g_tmp[0]) return;
    DIR *d = opendir(g_tmp);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_tmp, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_tmp);
}

const char *kt_tmpdir(void) {
    if (!g_tmp[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmp, sizeof g_tmp, "%s/kiln-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(g_tmp)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(rm_tmp);
    }
    return g_tmp;
}

const char *kt_path(const char *name) {
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 512, "%s/%s", kt_tmpdir(), name);
    return b;
}

char *kt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len) *len = (size_t)n;
    }
    return b;
}

int kt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

const char *kt_shared_data(void) {
    static char path[1024];
    const char *env = getenv("KILN_SHARED_DATA");
    struct stat st;
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
#ifdef KILN_SOURCE_DIR
        snprintf(path, sizeof path, "%s/../shared/data", KILN_SOURCE_DIR);
#else
        return NULL;
#endif
    }
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? path : NULL;
}

unsigned kt_rand(unsigned long long *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(*s >> 33);
}

float kt_randf(unsigned long long *s) {
    return (float)kt_rand(s) / 2147483648.0f * 2.0f - 1.0f;
}

int kt_run(const kt_test *tests, int n, int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    const char *only = argc > 1 ? argv[1] : NULL;
    for (int i = 0; i < n; i++) {
        if (only && strcmp(only, tests[i].name)) continue;
        kt_failed_here = kt_skipped_here = 0;
        kt_current = tests[i].name;
        tests[i].fn();
        const char *verdict = kt_failed_here ? "FAIL" : kt_skipped_here ? "skip" : "ok";
        printf("%-4s %s\n", verdict, tests[i].name);
        fflush(stdout);
        if (kt_failed_here)
            failed++;
        else if (kt_skipped_here)
            skipped++;
        else
            passed++;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
