/* fuzz_safetensors.c: libFuzzer target for the safetensors container. The
 * bytes are parsed as one safetensors file; one that parses must keep the
 * reader's promises: every tensor inside the data, the tensors covering the
 * data exactly (sorted, each begins where the one before ends, the last
 * ends at the file's end). Then the same bytes are parsed again into the
 * same set under another file name (every tensor then repeats: an error).
 * Any crash, sanitizer report, leak or broken promise is a bug. */
#include <string.h>

#include "fuzz_common.h"
#include "import/safetensors.h"

static int by_offset(const void *a, const void *b) {
    const kiln_st_tensor *x = *(const kiln_st_tensor *const *)a,
                         *y = *(const kiln_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* The promises of a file that parsed: its tensors tile [data_start, size). */
static void check_cover(const kiln_safetensors *sf, const uint8_t *data, size_t size) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | data[i];
    uint64_t pos = 8 + n;
    const kiln_st_tensor **order = malloc((sf->n_tensors ? sf->n_tensors : 1) * sizeof *order);
    if (!order) return;
    for (size_t i = 0; i < sf->n_tensors; i++) {
        const kiln_st_tensor *t = &sf->tensors[i];
        if (t->data != data + t->offset || t->offset > size || t->nbytes > size - t->offset) {
            fprintf(stderr, "tensor '%s' lies outside the input\n", t->name);
            abort();
        }
        order[i] = t;
    }
    qsort(order, sf->n_tensors, sizeof *order, by_offset);
    for (size_t i = 0; i < sf->n_tensors; i++) {
        if (order[i]->offset != pos) {
            fprintf(stderr, "tensor '%s' begins at %llu, the tensor before ends at %llu\n",
                    order[i]->name, (unsigned long long)order[i]->offset, (unsigned long long)pos);
            abort();
        }
        pos += order[i]->nbytes;
    }
    free(order);
    if (pos != size) {
        fprintf(stderr, "the tensors end at %llu, the file at %zu\n", (unsigned long long)pos,
                size);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_safetensors sf;
    memset(&sf, 0, sizeof sf);
    fz_clear_error();
    kiln_status st = kiln_safetensors_parse(&sf, data, size, "dir/fuzz.safetensors");
    if (st) {
        fz_check_failure(st);
    } else {
        check_cover(&sf, data, size);
        size_t n = sf.n_tensors;
        fz_clear_error();
        st = kiln_safetensors_parse(&sf, data, size, "dir/again.safetensors");
        if (st)
            fz_check_failure(st);
        else if (n) { /* the same names twice */
            fprintf(stderr, "%zu tensors parsed twice into one set\n", n);
            abort();
        }
    }
    kiln_safetensors_free(&sf);
    return 0;
}
