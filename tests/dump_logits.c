/* dump_logits.c: Kiln's logits for a token sequence, in the dump format of
 * scripts/llama_ref.c, so scripts/compare_logits.sh can set them beside
 * llama.cpp's. The first n_prompt tokens go through `prefill` (chunks of at
 * most its token count, every row's logits), every later token through
 * `decode` (kiln_llm.h).
 *   dump_logits PROGRAM.kiln (--ids "1 2 3" [--n-prompt P] | --like REF.bin) -o OUT.bin
 * --like takes the tokens and n_prompt from another dump (llama_ref's).
 * File: "KLNLOGIT", u32 version 1, n_vocab, n_rows, n_prompt; i32 token[n_rows];
 * f32 logits[n_rows][n_vocab]; row i = logits after token[i] at position i. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_llm.h"

static int fail(const char *what) {
    fprintf(stderr, "dump_logits: %s: %s\n", what, kiln_last_error());
    return 1;
}

typedef struct {
    FILE *f;
    int vocab;
} row_sink;

/* Writes each prefill chunk's rows of logits; non-zero (stop) when it cannot. */
static int write_rows(void *user, int first, int len, const float *logits) {
    row_sink *r = user;
    return fwrite(logits, sizeof(float) * (size_t)r->vocab, (size_t)len, r->f) != (size_t)len;
}

static int32_t *parse_ids(const char *s, uint32_t *n) {
    uint32_t cap = 64, k = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    while (ids) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return NULL;
        }
        if (k == cap) {
            int32_t *t = realloc(ids, sizeof *ids * (cap *= 2));
            if (!t) free(ids);
            ids = t;
            if (!ids) break;
        }
        ids[k++] = (int32_t)v;
        s = end;
    }
    *n = k;
    return ids;
}

/* Reads the token list and n_prompt of a dump file. */
static int32_t *read_like(const char *path, uint32_t *n, uint32_t *n_prompt) {
    FILE *f = fopen(path, "rb");
    char magic[8];
    uint32_t hdr[4];
    int32_t *ids = NULL;
    if (f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "KLNLOGIT", 8) &&
        fread(hdr, 4, 4, f) == 4 && hdr[0] == 1 && hdr[2] > 0 && hdr[3] <= hdr[2] &&
        hdr[2] < (1u << 24) && (ids = malloc(sizeof *ids * hdr[2])) &&
        fread(ids, 4, hdr[2], f) == hdr[2]) {
        *n = hdr[2];
        *n_prompt = hdr[3];
    } else {
        free(ids);
        ids = NULL;
    }
    if (f) fclose(f);
    return ids;
}

int main(int argc, char **argv) {
    const char *prog = NULL, *ids_arg = NULL, *like = NULL, *out = NULL;
    long n_prompt_arg = -1;
    for (int i = 1; i < argc; i++) {
        int has = i + 1 < argc;
        if (!strcmp(argv[i], "--ids") && has)
            ids_arg = argv[++i];
        else if (!strcmp(argv[i], "--n-prompt") && has)
            n_prompt_arg = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--like") && has)
            like = argv[++i];
        else if (!strcmp(argv[i], "-o") && has)
            out = argv[++i];
        else if (!prog && argv[i][0] != '-')
            prog = argv[i];
        else {
            fprintf(stderr, "dump_logits: unexpected argument '%s'\n", argv[i]);
            prog = NULL;
            break;
        }
    }
    if (!prog || !out || !ids_arg == !like) {
        fprintf(stderr, "usage: dump_logits PROGRAM.kiln (--ids \"1 2 3\" [--n-prompt P] | --like "
                        "REF.bin) -o OUT.bin\n");
        return 2;
    }
    uint32_t n = 0, n_prompt = 0;
    int32_t *ids = like ? read_like(like, &n, &n_prompt) : parse_ids(ids_arg, &n);
    if (!ids || n == 0) {
        fprintf(stderr, "dump_logits: no usable token ids (%s)\n", like ? like : "--ids");
        return 2;
    }
    if (!like) n_prompt = n_prompt_arg < 0 || n_prompt_arg > (long)n ? n : (uint32_t)n_prompt_arg;
    if (n_prompt == 0) n_prompt = 1; /* the first token always goes through prefill */

    kiln_program *p;
    kiln_session *s;
    if (kiln_program_open(prog, &p)) return fail(prog);
    if (kiln_session_create(p, &s)) return fail("session");
    kiln_llm *lm;
    if (kiln_llm_bind(p, &lm)) return fail(prog);
    int vocab = kiln_llm_get_limits(lm)->vocab;
    FILE *f = fopen(out, "wb");
    uint32_t hdr[4] = {1, (uint32_t)vocab, n, n_prompt};
    if (!f || fwrite("KLNLOGIT", 1, 8, f) != 8 || fwrite(hdr, 4, 4, f) != 4 ||
        fwrite(ids, 4, n, f) != n) {
        fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
        return 1;
    }
    row_sink sink = {f, vocab};
    kiln_status st = kiln_llm_prefill_rows(s, lm, ids, (int)n_prompt, 0, 0, write_rows, &sink);
    for (uint32_t i = n_prompt; !st && i < n; i++) {
        const float *row;
        if (!(st = kiln_llm_decode(s, lm, ids[i], (int)i, &row)) &&
            fwrite(row, sizeof(float), (size_t)vocab, f) != (size_t)vocab)
            st = KILN_ERR_IO;
    }
    if (st == KILN_ERR_CANCELLED || st == KILN_ERR_IO) {
        fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
        return 1;
    }
    if (st) return fail("execute");
    kiln_llm_free(lm);
    if (fclose(f)) {
        fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
        return 1;
    }
    free(ids);
    kiln_session_destroy(s);
    kiln_program_close(p);
    return 0;
}
