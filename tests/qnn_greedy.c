/* qnn_greedy.c: a program as compiled (a delegate's, e.g. QNN's) beside the
 * same program on ref, greedy, in lockstep: both get the same prompt, then
 * each step the delegate's choice. Prints every step's cosine of the two
 * logits rows and, at the first step whose choices differ, ref's top-2
 * margin there.
 *   qnn_greedy PROGRAM (-p TEXT | --ids I,J,..) -n STEPS [--margin M]
 *              [--cosine C] [--chunk K]
 * (--ids: the prompt as token ids, for programs without a tokenizer.)
 * Exit 0 when the choices agree up to the first step where ref's margin is
 * under M (default 0.05 logits: a tie to within fp16's error), and every
 * cosine before it reaches C (default 0.999); 1 otherwise; 2 on an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_llm.h"

static int fail(const char *what) {
    fprintf(stderr, "qnn_greedy: %s: %s\n", what, kiln_last_error());
    return 2;
}

static void top2(const float *x, int n, int *best, float *margin) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a])
            b = a, a = i;
        else if (b < 0 || x[i] > x[b])
            b = i;
    *best = a;
    *margin = b < 0 ? INFINITY : x[a] - x[b];
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

int main(int argc, char **argv) {
    const char *path = NULL, *prompt = "", *id_list = NULL;
    int steps = 16, chunk = 0;
    double want_margin = 0.05, want_cos = 0.999;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--margin") && i + 1 < argc)
            want_margin = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cosine") && i + 1 < argc)
            want_cos = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            id_list = argv[++i];
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            chunk = atoi(argv[++i]);
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "usage: qnn_greedy PROGRAM (-p TEXT | --ids I,J,..) -n STEPS "
                            "[--margin M] [--cosine C] [--chunk K]\n");
            return 2;
        }
    }
    if (!path || steps < 1) return fprintf(stderr, "qnn_greedy: a program and -n >= 1\n"), 2;
    kiln_program *pd = NULL, *pr = NULL;
    kiln_open_options ro = {.backend = "ref"};
    if (kiln_program_open(path, &pd)) return fail("open");
    if (kiln_program_open_with(path, &ro, &pr)) return fail("open on ref");
    kiln_llm *ld = NULL, *lr = NULL;
    kiln_tokenizer *tok = NULL;
    kiln_session *sd = NULL, *sr = NULL;
    if (kiln_llm_bind(pd, &ld) || kiln_llm_bind(pr, &lr)) return fail("bind");
    if (!id_list && kiln_tokenizer_from_program(pd, &tok)) return fail("tokenizer");
    if (kiln_session_create(pd, &sd) || kiln_session_create(pr, &sr)) return fail("session");
    size_t len = strlen(id_list ? id_list : prompt);
    int cap = (int)(2 * len + 2), n = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return fail("out of memory");
    if (id_list) {
        for (const char *c = id_list; *c && n < cap;) {
            char *end;
            long v = strtol(c, &end, 10);
            if (end == c || v < 0 || v >= kiln_llm_get_limits(ld)->vocab || (*end && *end != ','))
                return fprintf(stderr, "qnn_greedy: --ids '%s': not ids in the vocabulary\n",
                               id_list),
                       2;
            ids[n++] = (int32_t)v;
            c = *end ? end + 1 : end;
        }
    } else if (kiln_tokenizer_encode(tok, prompt, len, 1, ids, cap, &n))
        return fail("encode");
    int vocab = kiln_llm_get_limits(ld)->vocab;
    const float *yd = NULL, *yr = NULL;
    if (kiln_llm_prefill(sd, ld, ids, n, 0, chunk, &yd)) return fail("prefill");
    if (kiln_llm_prefill(sr, lr, ids, n, 0, chunk, &yr)) return fail("prefill on ref");
    double worst = 1.0;
    int rc = 0, pos = n;
    for (int s = 0; s < steps; s++) {
        int a, b;
        float ma, mb;
        top2(yd, vocab, &a, &ma);
        top2(yr, vocab, &b, &mb);
        double c = cosine(yd, yr, vocab);
        if (c < worst) worst = c;
        if (getenv("QNN_GREEDY_VERBOSE")) printf("step %d: cosine %.6f\n", s, c);
        if (c < want_cos) {
            printf("step %d: cosine %.6f under %.6f\n", s, c, want_cos);
            rc = 1;
            break;
        }
        if (a != b) {
            printf("step %d: delegate chose %d, ref %d; ref's top-2 margin %.4f (%s %.2f)\n", s, a,
                   b, mb, mb < want_margin ? "a tie under" : "NOT under", want_margin);
            if (mb >= want_margin) rc = 1;
            break;
        }
        if (s + 1 == steps) break;
        if (kiln_llm_decode(sd, ld, a, pos, &yd)) return fail("decode");
        if (kiln_llm_decode(sr, lr, a, pos, &yr)) return fail("decode on ref");
        pos++;
    }
    printf("prompt %d tokens, worst cosine %.6f: %s\n", n, worst, rc ? "FAIL" : "ok");
    free(ids);
    kiln_session_destroy(sd);
    kiln_session_destroy(sr);
    kiln_tokenizer_free(tok);
    kiln_llm_free(ld);
    kiln_llm_free(lr);
    kiln_program_close(pd);
    kiln_program_close(pr);
    return rc;
}
