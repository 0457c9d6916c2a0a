/* fuzz_tokenizer_json.c: libFuzzer target for the Hugging Face tokenizer
 * builder (src/import/tokenizer.c). The bytes are tokenizer.json, then
 * after a NUL byte (which JSON text cannot hold) tokenizer_config.json,
 * stored as the importer stores them (hf.tokenizer_json metadata) and built
 * into the program's tokenizer section; a tokenizer that builds is loaded
 * from that section and encodes the input's own text, each id decoded, and
 * streamed through a detokenizer, whose output must be the pieces' bytes.
 * Any crash, sanitizer report, leak or broken promise is a bug. */
#include <string.h>

#include "fuzz_common.h"
#include "import/import.h"
#include "kiln/kiln_llm.h"
#include "llm/tokenizer.h"

#define TEXT_MAX 2048

static void use(const kiln_module *m, const uint8_t *text, size_t len) {
    kiln_tokenizer *tok;
    fz_clear_error();
    kiln_status st =
        kiln_tokenizer_deserialize(m->tokenizer, (size_t)m->tokenizer_len, "fuzz", &tok);
    if (st) { /* the builder's own output must load */
        fprintf(stderr, "the built tokenizer does not load: %s\n", kiln_last_error());
        abort();
    }
    static int32_t ids[2 * TEXT_MAX + 2];
    static char joined[1 << 20];
    if (len > TEXT_MAX) len = TEXT_MAX;
    for (unsigned flags = 0; flags < 4; flags++) {
        int n = 0;
        fz_clear_error();
        st = kiln_tokenizer_encode_flags(tok, (const char *)text, len, flags, ids, 2 * TEXT_MAX + 2,
                                         &n);
        if (st) {
            fz_check_failure(st);
            continue;
        }
        size_t total = 0;
        kiln_detokenizer *d = NULL;
        if (kiln_detokenizer_create(tok, &d)) d = NULL;
        size_t streamed = 0;
        int same = 1;
        for (int i = 0; i < n; i++) {
            size_t l, k;
            const char *p = kiln_tokenizer_decode(tok, i ? ids[i - 1] : -1, ids[i], &l);
            if (!p) {
                fprintf(stderr, "id %d from the encoder does not decode\n", ids[i]);
                abort();
            }
            if (total + l <= sizeof joined) memcpy(joined + total, p, l);
            total += l;
            const char *q = d ? kiln_detokenizer_push(d, ids[i], &k) : NULL;
            if (d && !q) abort();
            if (q && streamed + k <= total && total <= sizeof joined)
                same &= !memcmp(joined + streamed, q, k);
            if (q) streamed += k;
        }
        if (d) {
            size_t k;
            const char *q = kiln_detokenizer_flush(d, &k);
            if (q && streamed + k <= total && total <= sizeof joined)
                same &= !memcmp(joined + streamed, q, k);
            streamed += q ? k : 0;
            if (total <= sizeof joined && (!same || streamed != total)) {
                fprintf(stderr, "the detokenizer gave %zu bytes, the pieces %zu\n", streamed,
                        total);
                abort();
            }
            kiln_detokenizer_free(d);
        }
    }
    int nv = kiln_tokenizer_vocab_size(tok);
    for (int id = 0; id < nv && id < 4096; id++) {
        size_t l;
        if (!kiln_tokenizer_decode(tok, -1, id, &l)) abort();
    }
    kiln_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    char *json = malloc(jlen + 1), *cfg = NULL;
    if (!json) return 0;
    memcpy(json, data, jlen);
    json[jlen] = 0;
    if (nul) {
        size_t clen = size - jlen - 1;
        const uint8_t *c = nul + 1, *c_end = memchr(c, 0, clen);
        if (c_end) clen = (size_t)(c_end - c);
        if ((cfg = malloc(clen + 1))) {
            memcpy(cfg, c, clen);
            cfg[clen] = 0;
        }
    }
    kiln_import imp;
    kiln_module m;
    memset(&imp, 0, sizeof imp);
    memset(&m, 0, sizeof m);
    fz_clear_error();
    kiln_status st = kiln_meta_set_str(&m, "hf.tokenizer_json", json);
    if (!st && cfg) st = kiln_meta_set_str(&m, "hf.tokenizer_config_json", cfg);
    if (!st) st = kiln_import_tokenizer(&imp, "dir/tokenizer.json", NULL, &m);
    if (st)
        fz_check_failure(st);
    else if (m.tokenizer_len)
        use(&m, data, size);
    kiln_module_free(&m);
    free(json);
    free(cfg);
    return 0;
}
