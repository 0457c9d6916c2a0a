/* bench_tokenizer.c: times kiln_tokenizer_encode on generated text (story
 * words, punctuation, newlines, now and then accented letters, CJK and
 * emoji; the same text on every run) with each tokenizer of the shared data
 * that is present: stories260K's tok512.bin (llama2.c), llama.cpp's
 * llama-spm GGUF (SentencePiece) and gpt-2 GGUF (byte-level BPE). Median of
 * R runs (after one warm-up) by the wall clock and by this thread's CPU
 * time, and MB/s (10^6 bytes) by the wall clock.
 *   bench_tokenizer [-r R] [-s BYTES[,BYTES...]] [-d DATA_DIR] [TOKENIZER...]
 * DATA_DIR: the shared data folder (default $KILN_SHARED_DATA, else
 * ../shared/data); sizes default to 14000,28800,1000000; TOKENIZER: llama2c,
 * gguf-spm, gguf-bpe (default all). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"
#include "kiln/kiln_llm.h"

static double now_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static unsigned long long g_seed = 1;
static unsigned rnd(void) {
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(g_seed >> 33);
}

/* n bytes of story-like text (the last character may be cut): words of
 * WORDS in random order, now and then followed by punctuation. */
static const char WORDS[] =
    "Once upon a time there was little girl named Lily Tom she he loved to "
    "play with her ball in the park One day saw big dog and it happy They "
    "went home mom said friend tree sun very wanted jumped smiled because "
    "but so caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80";

static char *make_text(size_t n) {
    static const char *const punct[] = {".", ",", "!", "?", "\"", ":", "\n", " -"};
    size_t start[128], nw = 0;
    for (size_t i = 0; i < sizeof WORDS - 1 && nw < 128; i++)
        if (i == 0 || WORDS[i - 1] == ' ') start[nw++] = i;
    char *s = malloc(n + 64);
    size_t k = 0;
    while (s && k < n) {
        const char *w = WORDS + start[rnd() % nw];
        size_t l = strcspn(w, " ");
        memcpy(s + k, w, l);
        k += l;
        if (rnd() % 6 == 0) {
            const char *p = punct[rnd() % (sizeof punct / sizeof *punct)];
            memcpy(s + k, p, strlen(p));
            k += strlen(p);
        }
        s[k++] = ' ';
    }
    return s;
}

/* Times encoding text[0..n) with t; prints one row. */
static void bench_one(const char *name, const kiln_tokenizer *t, const char *text, size_t n,
                      int reps) {
    int cap = (int)(2 * n + 2), got = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    double ts[32], tc[32];
    if (!ids || kiln_tokenizer_encode(t, text, n, 1, ids, cap, &got)) { /* warm-up */
        printf("%-10s %9zu  failed: %s\n", name, n, ids ? kiln_last_error() : "out of memory");
        free(ids);
        return;
    }
    for (int i = 0; i < reps; i++) {
        double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
        kiln_tokenizer_encode(t, text, n, 1, ids, cap, &got);
        tc[i] = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        ts[i] = now_s(CLOCK_MONOTONIC) - t0;
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp);
    qsort(tc, (size_t)reps, sizeof *tc, cmp);
    double wall = ts[reps / 2];
    printf("%-10s %9zu %9d %10.4f %10.4f %10.4g\n", name, n, got, wall, tc[reps / 2],
           (double)n * 1e-6 / wall);
    fflush(stdout);
    free(ids);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name, *rel;
    } toks[] = {
        {"llama2c", "models/stories260K/tok512.bin"},
        {"gguf-spm", "tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"},
        {"gguf-bpe", "tokenizers/llama.cpp-vocab/ggml-vocab-gpt-2.gguf"},
    };
    int reps = 5;
    size_t sizes[16] = {14000, 28800, 1000000};
    int nsizes = 3;
    const char *want[8];
    int nwant = 0;
    const char *dir = getenv("KILN_SHARED_DATA");
    if (!dir || !*dir) dir = "../shared/data";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            nsizes = 0;
            for (char *p = argv[++i]; *p && nsizes < 16; p += *p == ',')
                sizes[nsizes++] = (size_t)strtoull(p, &p, 10);
        } else if (!strcmp(argv[i], "-d") && i + 1 < argc) {
            dir = argv[++i];
        } else if (nwant < 8) {
            want[nwant++] = argv[i];
        }
    }
    if (reps < 1 || reps > 32) reps = 5;
    size_t most = 0;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > most) most = sizes[i];
    char *text = make_text(most);
    if (!text) return 1;
    printf("%-10s %9s %9s %10s %10s %10s\n", "tokenizer", "bytes", "tokens", "median s", "(cpu)",
           "MB/s");
    for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
        int sel = nwant == 0;
        for (int i = 0; i < nwant; i++)
            sel |= !strcmp(want[i], toks[k].name);
        if (!sel) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, toks[k].rel);
        kiln_tokenizer *t = NULL;
        if (kiln_tokenizer_load(path, &t)) {
            printf("%-10s (skipped: %s)\n", toks[k].name, kiln_last_error());
            continue;
        }
        for (int i = 0; i < nsizes; i++)
            bench_one(toks[k].name, t, text, sizes[i], reps);
        kiln_tokenizer_free(t);
    }
    free(text);
    return 0;
}
