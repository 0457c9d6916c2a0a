/* make_seeds.c: writes the fuzzers' seed corpus, built through the real
 * writers by the test fixtures: small llama2.c checkpoints and tokenizers
 * (for fuzz_llama2c), the same models as GGUF files in f32, f16, q8_0 and
 * q4_0 (for fuzz_gguf), and small compiled programs (for fuzz_program).
 *
 *   make_seeds DIR   ->  DIR/llama2c/..., DIR/gguf/..., DIR/program/... */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fixtures.h"
#include "gguf_writer.h"
#include "harness.h"
#include "kiln/kiln.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    char l2c[1024], gguf[1024], prog[1024], path[1200], tok[1200];
    snprintf(l2c, sizeof l2c, "%s/llama2c", argv[1]);
    snprintf(gguf, sizeof gguf, "%s/gguf", argv[1]);
    snprintf(prog, sizeof prog, "%s/program", argv[1]);
    mkdir(argv[1], 0755);
    mkdir(l2c, 0755);
    mkdir(gguf, 0755);
    mkdir(prog, 0755);
    /* dim, hidden, layers, heads, kv_heads, vocab, seq, shared, seed */
    static const kt_l2c_config models[] = {
        {8, 8, 1, 2, 1, 8, 8, 1, 1},    /* the smallest: shared classifier */
        {8, 12, 2, 2, 2, 16, 8, 0, 2},  /* stored classifier, two layers */
        {12, 10, 1, 3, 1, 12, 6, 1, 3}, /* MQA, odd widths */
        {32, 32, 1, 4, 2, 8, 4, 0, 4},  /* widths of whole q8_0 / q4_0 blocks */
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        snprintf(path, sizeof path, "%s/model%zu.bin", l2c, i);
        rc |= kt_write_llama2c(path, &models[i]);
        snprintf(tok, sizeof tok, "%s/tok%d.bin", l2c, models[i].vocab);
        rc |= kt_write_tokenizer(tok, models[i].vocab);
        char out[1300];
        snprintf(out, sizeof out, "%s/model%zu.kiln", prog, i);
        if (kt_compile(path, i == 1 ? NULL : tok, out, 4, 8, NULL)) {
            fprintf(stderr, "make_seeds: %s\n", kiln_last_error());
            rc = 1;
        }
    }
    /* GGUF: every model in f32 and f16, the block-wide one also quantized. */
    static const struct {
        size_t model;
        uint32_t type;
        const char *name;
    } ggufs[] = {{0, 0, "f32"}, {1, 1, "f16"}, {2, 0, "f32"}, {3, 8, "q8_0"}, {3, 2, "q4_0"}};
    for (size_t i = 0; i < sizeof ggufs / sizeof *ggufs; i++) {
        size_t len;
        uint8_t *b = kt_llama2c_bytes(&models[ggufs[i].model], &len);
        kt_gguf *g = b ? kt_gguf_from_llama2c(b, ggufs[i].type) : NULL;
        snprintf(path, sizeof path, "%s/model%zu-%s.gguf", gguf, ggufs[i].model, ggufs[i].name);
        rc |= !g || kt_gguf_write(g, path);
        if (g) kt_gguf_free(g);
        free(b);
    }
    snprintf(tok, sizeof tok, "%s/tok300.bin", l2c);
    rc |= kt_write_tokenizer(tok, 300);
    if (rc) fprintf(stderr, "make_seeds: could not write every seed\n");
    return rc ? 1 : 0;
}
