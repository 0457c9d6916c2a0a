/* fuzz_program.c: libFuzzer target for the program reader. Bytes go through
 * kiln_program_parse (header, section table, checksums, every record, the
 * verifier), as they are and again with every checksum recomputed so that
 * mutations reach the records behind them. A program that parses has its
 * tokenizer section loaded and used and, when its memory is small, is opened
 * from a file and every method run once on zero inputs. Any crash,
 * sanitizer report or leak is a bug in the library. */
#include <string.h>

#include "fuzz_common.h"
#include "kiln/kiln.h"
#include "llm/tokenizer.h"
#include "format/format.h"

#define RUN_LIMIT (64u << 20) /* bytes of state + arena + inputs worth running */

static void use_tokenizer(const kiln_module *m) {
    kiln_tokenizer *tok;
    fz_clear_error();
    kiln_status st =
        kiln_tokenizer_deserialize(m->tokenizer, (size_t)m->tokenizer_len, "fuzz", &tok);
    if (st) {
        fz_check_failure(st);
        return;
    }
    static const char text[] = "Once upon a time, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 the end.\xff";
    int32_t ids[128];
    int n = 0;
    if (kiln_tokenizer_encode(tok, text, sizeof text - 1, 1, ids, 128, &n) == KILN_OK)
        for (int i = 0; i < n; i++) {
            size_t len;
            if (!kiln_tokenizer_decode(tok, i ? ids[i - 1] : -1, ids[i], &len)) abort();
        }
    kiln_tokenizer_free(tok);
}

static uint64_t memory_needed(const kiln_module *m) {
    uint64_t total = 0;
    for (int i = 0; i < m->n_states; i++)
        total += m->states[i].nbytes;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        total += g->arena_bytes;
        for (int i = 0; i < g->n_inputs; i++) {
            const kiln_value *v = &g->values[g->inputs[i]];
            total += kiln_shape_bytes(v->dtype, v->ndim, v->ne);
        }
        if (total > RUN_LIMIT) break;
    }
    return total;
}

/* Opens the program from a file and runs every method once: inputs zeroed,
 * dynamic dims 1. Errors are fine; crashes are not. */
static void run_program(const uint8_t *data, size_t size) {
    char path[512];
    if (fz_write_temp(data, size, "kiln", path, sizeof path)) return;
    kiln_program *p;
    kiln_session *s;
    kiln_status st = kiln_program_open(path, &p);
    unlink(path);
    if (st) {
        fz_check_failure(st);
        return;
    }
    if ((st = kiln_program_verify(p)) == KILN_OK && (st = kiln_session_create(p, &s)) == KILN_OK) {
        static uint8_t zeros[1 << 20];
        for (int k = 0; k < kiln_program_method_count(p); k++) {
            int ok_inputs = 1;
            for (int i = 0; i < kiln_method_input_count(p, k) && ok_inputs; i++) {
                kiln_tensor_info info;
                if (kiln_method_input_info(p, k, i, &info)) abort();
                for (int d = 0; d < info.ndim; d++)
                    if (info.dynamic_mask >> d & 1) info.shape[d] = 1;
                ok_inputs = kiln_shape_bytes(info.dtype, info.ndim, info.shape) <= sizeof zeros &&
                            kiln_session_set_input(s, k, i, zeros, info.dtype, info.ndim,
                                                   info.shape) == KILN_OK;
            }
            if (!ok_inputs) continue;
            fz_clear_error();
            st = kiln_session_execute(s, k);
            if (st) fz_check_failure(st);
            for (int o = 0; o < kiln_method_output_count(p, k) && !st; o++) {
                const void *out;
                if (kiln_session_get_output(s, k, o, &out, NULL, NULL, NULL)) abort();
            }
        }
        kiln_session_destroy(s);
    }
    kiln_program_close(p);
}

static void parse_and_use(const uint8_t *data, size_t size) {
    kiln_module m;
    kiln_section sections[KILN_MAX_SECTIONS];
    int n_sections;
    fz_clear_error();
    kiln_status st = kiln_program_parse(data, size, "fuzz.kiln", &m, sections, &n_sections);
    if (st)
        fz_check_failure(st);
    else {
        if (m.tokenizer_len) use_tokenizer(&m);
        if (memory_needed(&m) <= RUN_LIMIT) run_program(data, size);
    }
    kiln_module_free(&m);
}

static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Recomputes every checksum the bytes claim (sections in the table that lie
 * in the buffer, then the header's), so mutations get past the CRCs to the
 * records behind them. Returns 0 when there is nothing to fix. */
static int reseal(uint8_t *b, size_t size) {
    if (size < KILN_HEADER_SIZE) return 0;
    uint64_t table = get64(b + KILN_HDR_TABLE_OFFSET);
    uint32_t n = get32(b + KILN_HDR_N_SECTIONS);
    for (uint32_t i = 0; i < n && i < KILN_MAX_SECTIONS; i++) {
        uint64_t e = table + (uint64_t)i * KILN_SECTION_ENTRY_SIZE;
        if (table > size || e > size - KILN_SECTION_ENTRY_SIZE) break;
        uint64_t off = get64(b + e + 8), len = get64(b + e + 16);
        if (off > size || len > size - off) continue;
        uint32_t crc = kiln_crc32c(0, b + off, (size_t)len);
        memcpy(b + e + 24, &crc, 4);
    }
    uint32_t crc = kiln_crc32c(0, b, KILN_HDR_CRC);
    memcpy(b + KILN_HDR_CRC, &crc, 4);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_and_use(data, size);
    /* Again with the checksums made to fit. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    if (reseal(copy, size) && memcmp(copy, data, size) != 0) parse_and_use(copy, size);
    free(copy);
    return 0;
}
