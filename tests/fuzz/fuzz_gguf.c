/* fuzz_gguf.c: libFuzzer target for the GGUF reader. The bytes are parsed
 * as a GGUF container from memory, every metadata key read through the
 * typed getters, then imported from a file as the compiler would (config,
 * tensor checks, conversions) and, when they import, built, verified and
 * planned. Any crash, sanitizer report or leak is a bug in the library. */
#include <string.h>

#include "fuzz_common.h"
#include "import/gguf.h"
#include "import/import.h"

static void parse(const uint8_t *data, size_t size) {
    kiln_gguf g;
    fz_clear_error();
    kiln_status st = kiln_gguf_parse(data, size, "fuzz.gguf", &g);
    if (st)
        fz_check_failure(st);
    else
        for (uint64_t i = 0; i < g.n_kv; i++) {
            const char *key = g.kv[i].key, *s;
            int64_t v;
            double f;
            uint64_t len;
            fz_clear_error();
            if ((st = kiln_gguf_get_int(&g, "fuzz.gguf", key, 1, &v))) fz_check_failure(st);
            fz_clear_error();
            if ((st = kiln_gguf_get_float(&g, "fuzz.gguf", key, 1, &f))) fz_check_failure(st);
            fz_clear_error();
            if ((st = kiln_gguf_get_str(&g, "fuzz.gguf", key, 1, &s, &len))) fz_check_failure(st);
        }
    kiln_gguf_free(&g);
}

static void import(const uint8_t *data, size_t size) {
    char path[512];
    if (fz_write_temp(data, size, "gguf", path, sizeof path)) return;
    kiln_import imp;
    kiln_module m;
    memset(&imp, 0, sizeof imp);
    memset(&m, 0, sizeof m);
    fz_clear_error();
    kiln_status st = kiln_gguf_import(&imp, path, &m);
    if (!st) st = fz_build_and_plan(&m, &imp.cfg);
    if (st) fz_check_failure(st);
    kiln_module_free(&m);
    kiln_import_close(&imp);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse(data, size);
    import(data, size);
    return 0;
}
