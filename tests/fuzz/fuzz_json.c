/* fuzz_json.c: libFuzzer target for the JSON parser and the safetensors
 * container. The bytes are parsed as JSON; a document that parses is walked
 * whole: every object member is looked up by name (it must be found, the
 * very value) and read through every typed getter. Then the same bytes are
 * parsed as a safetensors file (whose header is JSON). Any crash, sanitizer
 * report or leak is a bug in the library. */
#include <string.h>

#include "base/json.h"
#include "fuzz_common.h"
#include "import/safetensors.h"

static void walk(const kiln_json *v) {
    if (v->type == KILN_JSON_ARRAY) {
        for (size_t i = 0; i < v->len; i++)
            walk(&v->items[i]);
        return;
    }
    if (v->type != KILN_JSON_OBJECT) return;
    for (size_t i = 0; i < v->len; i++) {
        const char *key = v->keys[i].s;
        if (strlen(key) == v->keys[i].len && kiln_json_get(v, key) != &v->items[i]) {
            fprintf(stderr, "member '%s' is not found by name\n", key);
            abort();
        }
        int64_t iv;
        double f;
        int b;
        const char *s;
        size_t n;
        const kiln_json *o;
        kiln_status st;
        fz_clear_error();
        if ((st = kiln_json_get_int(v, "'fuzz.json'", key, 1, &iv))) fz_check_failure(st);
        fz_clear_error();
        if ((st = kiln_json_get_num(v, "'fuzz.json'", key, 1, &f))) fz_check_failure(st);
        fz_clear_error();
        if ((st = kiln_json_get_bool(v, "'fuzz.json'", key, 1, &b))) fz_check_failure(st);
        fz_clear_error();
        if ((st = kiln_json_get_str(v, "'fuzz.json'", key, 1, &s, &n))) fz_check_failure(st);
        fz_clear_error();
        if ((st = kiln_json_get_obj(v, "'fuzz.json'", key, 1, &o))) fz_check_failure(st);
        fz_clear_error();
        if ((st = kiln_json_get_arr(v, "'fuzz.json'", key, 1, &o))) fz_check_failure(st);
        walk(&v->items[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_json_doc doc;
    fz_clear_error();
    kiln_status st = kiln_json_parse((const char *)data, size, "'fuzz.json'", 0, &doc);
    if (st)
        fz_check_failure(st);
    else
        walk(doc.root);
    kiln_json_free(&doc);

    kiln_safetensors sf;
    memset(&sf, 0, sizeof sf);
    fz_clear_error();
    st = kiln_safetensors_parse(&sf, data, size, "fuzz.safetensors");
    if (st) fz_check_failure(st);
    for (size_t i = 0; !st && i < sf.n_tensors; i++) {
        const kiln_st_tensor *t = &sf.tensors[i];
        if (t->data < data || t->nbytes > size || t->data + t->nbytes > data + size) {
            fprintf(stderr, "tensor '%s' lies outside the input\n", t->name);
            abort();
        }
    }
    kiln_safetensors_free(&sf);
    return 0;
}
