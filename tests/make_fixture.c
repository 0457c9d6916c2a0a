/* make_fixture.c: writes a tiny random llama2.c model and tokenizer for the
 * command-line tests: make_fixture DIR [SEED] -> DIR/model.bin, DIR/tok.bin. */
#include <stdio.h>
#include <stdlib.h>

#include "fixtures.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: make_fixture DIR [SEED]\n");
        return 2;
    }
    kt_l2c_config c = {32, 48, 2, 4, 2, 300, 64, 1, argc > 2 ? strtoull(argv[2], NULL, 10) : 5};
    char p[4096];
    snprintf(p, sizeof p, "%s/model.bin", argv[1]);
    if (kt_write_llama2c(p, &c)) return 1;
    snprintf(p, sizeof p, "%s/tok.bin", argv[1]);
    return kt_write_tokenizer(p, c.vocab) ? 1 : 0;
}
