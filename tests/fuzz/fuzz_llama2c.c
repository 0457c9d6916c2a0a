/* fuzz_llama2c.c: libFuzzer target for the llama2.c readers. The bytes are
 * imported as a checkpoint (from memory: a kiln_file_map filled by hand), as
 * they are and cut or padded to the size their header asks for, and, when
 * they import, built, verified and planned as the compiler would; the
 * same bytes are then loaded as a tokenizer.bin (through a file) with a few
 * small vocabularies and, when they load, used to encode and decode. Any
 * crash, sanitizer report or leak is a bug in the library. */
#include <string.h>

#include "fuzz_common.h"
#include "import/llama2c.h"
#include "kiln/kiln_llm.h"

static void import_checkpoint(const uint8_t *data, size_t size) {
    kiln_file_map map = {data, size, 0};
    kiln_module m;
    kiln_llama_config cfg;
    memset(&m, 0, sizeof m);
    fz_clear_error();
    kiln_status st = kiln_llama2c_import(&map, "fuzz.bin", &cfg, &m);
    if (!st) st = fz_build_and_plan(&m, &cfg);
    if (st) fz_check_failure(st);
    kiln_module_free(&m);
}

static void load_tokenizer(const uint8_t *data, size_t size) {
    char path[512];
    if (fz_write_temp(data, size, "bin", path, sizeof path)) return;
    static const int vocabs[] = {0, 1, 4, 8, 300}; /* 0: every record in the file */
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        kiln_tokenizer *tok;
        fz_clear_error();
        kiln_status st = kiln_tokenizer_load_llama2c(path, vocabs[v], &tok);
        if (st) {
            fz_check_failure(st);
            continue;
        }
        static const char text[] =
            "Once upon a time, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 the end.\xff";
        int32_t ids[128];
        int n = 0;
        if (kiln_tokenizer_encode(tok, text, sizeof text - 1, 1, ids, 128, &n) == KILN_OK)
            for (int i = 0; i < n; i++) {
                size_t len;
                if (!kiln_tokenizer_decode(tok, i ? ids[i - 1] : -1, ids[i], &len)) abort();
            }
        for (int id = -1; id <= kiln_tokenizer_vocab_size(tok); id++) {
            size_t len;
            kiln_tokenizer_decode(tok, 1, id, &len);
        }
        kiln_tokenizer_free(tok);
    }
    unlink(path);
}

/* The file size the header asks for (llama2.c's layout), or 0 when the
 * header is not plausible or asks for more than `limit` bytes. */
static size_t fitted_size(const uint8_t *data, size_t size, size_t limit) {
    int32_t h[7];
    if (size < sizeof h) return 0;
    memcpy(h, data, sizeof h);
    for (int i = 0; i < 7; i++)
        if (h[i] == 0 || h[i] == INT32_MIN || (h[i] < 0 && i != 5)) return 0;
    if (h[0] % h[3]) return 0;
    double dim = h[0], hid = h[1], L = h[2], V = h[5] < 0 ? -(double)h[5] : h[5];
    double hs = dim / h[3], kvd = hs * h[4];
    double floats = V * dim + 2 * L * dim + 2 * L * dim * dim + 2 * L * dim * kvd +
                    3 * L * dim * hid + dim + h[6] * hs + (h[5] < 0 ? V * dim : 0);
    double bytes = 28 + 4 * floats;
    return bytes <= (double)limit ? (size_t)bytes : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    import_checkpoint(data, size);
    /* Again with the file cut or zero-padded to the size its header asks
     * for, so mutated headers reach the graph builder and the planner. */
    size_t fit = fitted_size(data, size, 4u << 20);
    if (fit && fit != size) {
        uint8_t *b = calloc(1, fit);
        if (b) {
            memcpy(b, data, size < fit ? size : fit);
            import_checkpoint(b, fit);
            free(b);
        }
    }
    load_tokenizer(data, size);
    return 0;
}
