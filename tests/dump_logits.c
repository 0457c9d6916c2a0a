/* dump_logits.c: Kiln's logits for a token sequence, in the dump format of
 * scripts/llama_ref.c, so scripts/compare_logits.sh can set them beside
 * llama.cpp's. The first n_prompt tokens go through `prefill` (chunks of at
 * most its token count, all_logits = 1), every later token through `decode`.
 *   dump_logits PROGRAM.kiln (--ids "1 2 3" [--n-prompt P] | --like REF.bin) -o OUT.bin
 * --like takes the tokens and n_prompt from another dump (llama_ref's).
 * File: "KLNLOGIT", u32 version 1, n_vocab, n_rows, n_prompt; i32 token[n_rows];
 * f32 logits[n_rows][n_vocab]; row i = logits after token[i] at position i. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int fail(const char *what) {
    fprintf(stderr, "dump_logits: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* Index of the input called `name`, or -1. */
static int input_index(const kiln_program *p, int method, const char *name) {
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info info;
        if (kiln_method_input_info(p, method, i, &info) == KILN_OK && !strcmp(info.name, name))
            return i;
    }
    return -1;
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
    int pre, dec;
    int64_t vocab, pmax;
    if (kiln_program_find_method(p, "prefill", &pre) ||
        kiln_program_find_method(p, "decode", &dec) ||
        kiln_program_meta_int(p, "llm.vocab_size", &vocab) ||
        kiln_program_meta_int(p, "llm.prefill_max_tokens", &pmax))
        return fail(prog);
    int pt = input_index(p, pre, "tokens"), pp = input_index(p, pre, "pos"),
        pa = input_index(p, pre, "all_logits");
    int dt = input_index(p, dec, "tokens"), dp = input_index(p, dec, "pos");
    if (pt < 0 || pp < 0 || pa < 0 || dt < 0 || dp < 0) {
        fprintf(stderr, "dump_logits: %s lacks the prefill/decode inputs tokens, pos, all_logits\n",
                prog);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    uint32_t hdr[4] = {1, (uint32_t)vocab, n, n_prompt};
    if (!f || fwrite("KLNLOGIT", 1, 8, f) != 8 || fwrite(hdr, 4, 4, f) != 4 ||
        fwrite(ids, 4, n, f) != n) {
        fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
        return 1;
    }
    int64_t one = 1;
    int32_t all = 1;
    for (uint32_t done = 0; done < n;) {
        int method = done < n_prompt ? pre : dec;
        int64_t t = method == pre ? (int64_t)(n_prompt - done < pmax ? n_prompt - done : pmax) : 1;
        int32_t pos = (int32_t)done;
        kiln_status st =
            kiln_session_set_input(s, method, method == pre ? pt : dt, ids + done, KILN_I32, 1, &t);
        if (!st)
            st =
                kiln_session_set_input(s, method, method == pre ? pp : dp, &pos, KILN_I32, 1, &one);
        if (!st && method == pre) st = kiln_session_set_input(s, pre, pa, &all, KILN_I32, 1, &one);
        if (!st) st = kiln_session_execute(s, method);
        const void *data;
        int64_t shape[KILN_MAX_DIMS];
        int ndim;
        if (!st) st = kiln_session_get_output(s, method, 0, &data, NULL, &ndim, shape);
        if (st) return fail("execute");
        if (ndim != 2 || shape[0] != t || shape[1] != vocab) {
            fprintf(stderr, "dump_logits: logits of shape [%lld, %lld], expected [%lld, %lld]\n",
                    (long long)shape[0], (long long)(ndim > 1 ? shape[1] : 0), (long long)t,
                    (long long)vocab);
            return 1;
        }
        if (fwrite(data, sizeof(float) * (size_t)vocab, (size_t)t, f) != (size_t)t) {
            fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
            return 1;
        }
        done += (uint32_t)t;
    }
    if (fclose(f)) {
        fprintf(stderr, "dump_logits: cannot write '%s'\n", out);
        return 1;
    }
    free(ids);
    kiln_session_destroy(s);
    kiln_program_close(p);
    return 0;
}
