/* bench_methods.c: times the prefill and decode methods of a program, the
 * way llama-bench does pp/tg: a warm-up, then R repetitions each from a reset
 * session, random tokens; prints median and spread of tokens/s.
 *   bench_methods MODEL.kiln [PP=128] [TG=128] [R=5]
 * (Stands in until `kiln bench` lands with the cpu backend.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kiln/kiln.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_methods MODEL.kiln [PP] [TG] [R]\n");
        return 2;
    }
    int pp = argc > 2 ? atoi(argv[2]) : 128, tg = argc > 3 ? atoi(argv[3]) : 128;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    kiln_program *p;
    kiln_session *s;
    if (kiln_program_open(argv[1], &p) || kiln_session_create(p, &s)) {
        fprintf(stderr, "error: %s\n", kiln_last_error());
        return 1;
    }
    int pre, dec;
    int64_t vocab, ctx, pmax;
    if (kiln_program_find_method(p, "prefill", &pre) || kiln_program_find_method(p, "decode", &dec) ||
        kiln_program_meta_int(p, "llm.vocab_size", &vocab) || kiln_program_meta_int(p, "llm.context_length", &ctx) ||
        kiln_program_meta_int(p, "llm.prefill_max_tokens", &pmax)) {
        fprintf(stderr, "error: %s\n", kiln_last_error());
        return 1;
    }
    if (pp + tg > ctx) {
        fprintf(stderr, "error: pp %d + tg %d exceeds the context %lld\n", pp, tg, (long long)ctx);
        return 1;
    }
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(pp + tg));
    unsigned long long st = 12345;
    for (int i = 0; i < pp + tg; i++) {
        st = st * 6364136223846793005ull + 1;
        toks[i] = (int32_t)((st >> 33) % (unsigned long long)vocab);
    }
    double *pp_tps = calloc((size_t)reps + 1, sizeof(double)), *tg_tps = calloc((size_t)reps + 1, sizeof(double));
    int64_t one = 1;
    int32_t zero = 0;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        kiln_session_reset(s);
        double t0 = kiln_now_ms();
        for (int done = 0; done < pp;) {
            int64_t n = pp - done < pmax ? pp - done : pmax;
            int32_t pos = done;
            kiln_session_set_input(s, pre, 0, toks + done, KILN_I32, 1, &n);
            kiln_session_set_input(s, pre, 1, &pos, KILN_I32, 1, &one);
            kiln_session_set_input(s, pre, 2, &zero, KILN_I32, 1, &one);
            if (kiln_session_execute(s, pre)) goto fail;
            done += (int)n;
        }
        double t1 = kiln_now_ms();
        for (int i = 0; i < tg; i++) {
            int32_t pos = pp + i;
            kiln_session_set_input(s, dec, 0, toks + pp + i, KILN_I32, 1, &one);
            kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one);
            if (kiln_session_execute(s, dec)) goto fail;
        }
        double t2 = kiln_now_ms();
        if (r >= 0) {
            pp_tps[r] = pp / ((t1 - t0) / 1e3);
            tg_tps[r] = tg / ((t2 - t1) / 1e3);
        }
    }
    qsort(pp_tps, (size_t)reps, sizeof(double), cmp);
    qsort(tg_tps, (size_t)reps, sizeof(double), cmp);
    printf("| %s | pp%d | %.1f | %.1f .. %.1f |\n", argv[1], pp, pp_tps[reps / 2], pp_tps[0], pp_tps[reps - 1]);
    printf("| %s | tg%d | %.1f | %.1f .. %.1f |\n", argv[1], tg, tg_tps[reps / 2], tg_tps[0], tg_tps[reps - 1]);
    return 0;
fail:
    fprintf(stderr, "error: %s\n", kiln_last_error());
    return 1;
}
