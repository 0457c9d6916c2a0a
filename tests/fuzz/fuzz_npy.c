/* fuzz_npy.c: libFuzzer target for the tensor folder of `kiln run --inputs`
 * (src/devtools/tensors.c, docs/TENSORS.md). The bytes are parsed as one
 * .npy file; one that parses is written again by the .npy writer and must
 * read back the same (dtype, shape, data). Then the bytes up to the first
 * NUL are a manifest.json and the rest a file a.npy: the manifest is parsed
 * from memory, and the folder of the two read from disk as --inputs reads
 * it, each tensor found by its name and checked against a method input.
 * Any crash, sanitizer report, leak or broken promise is a bug. */
#include <string.h>

#include "devtools/tensors.h"
#include "fuzz_common.h"

static void round_trip(const kiln_npy *a) {
    kiln_wbuf b = {0};
    fz_clear_error();
    kiln_status st = kiln_npy_encode(&b, a->dtype, a->ndim, a->shape, a->data);
    if (st) { /* what parsed can be written, unless memory ran out */
        if (st != KILN_ERR_NOMEM) {
            fprintf(stderr, "a parsed array does not encode: %s\n", kiln_last_error());
            abort();
        }
        kiln_wbuf_free(&b);
        return;
    }
    kiln_npy c;
    st = kiln_npy_parse(b.data, b.len, "again.npy", &c);
    if (st || c.dtype != a->dtype || c.ndim != a->ndim ||
        memcmp(c.shape, a->shape, (size_t)a->ndim * sizeof *a->shape) || c.nbytes != a->nbytes ||
        (a->nbytes && memcmp(c.data, a->data, (size_t)a->nbytes))) {
        fprintf(stderr, "the written array reads back otherwise: %s\n",
                st ? kiln_last_error() : "other dtype, shape or data");
        abort();
    }
    kiln_wbuf_free(&b);
}

static void folder(const uint8_t *data, size_t size, size_t mlen) {
    kiln_tensor_folder f;
    fz_clear_error();
    kiln_status st = kiln_tensor_manifest_parse((const char *)data, mlen, "manifest.json", "d", &f);
    if (st)
        fz_check_failure(st);
    else
        kiln_tensor_folder_free(&f);
    char dir[600], path[800];
    if (fz_temp_dir(dir, sizeof dir)) return;
    if (!fz_write_in(dir, "manifest.json", data, mlen) &&
        !fz_write_in(dir, "a.npy", data + mlen + 1, size - mlen - 1)) {
        fz_clear_error();
        st = kiln_tensor_folder_read(dir, &f);
        if (st) fz_check_failure(st);
        for (int i = 0; !st && i < f.n; i++) {
            const kiln_tensor_entry *e = &f.items[i];
            if (!e->data && e->nbytes) abort();
            if (!kiln_tensor_folder_find(&f, e->method, e->role, e->node, e->name)) {
                fprintf(stderr, "tensor %d ('%s') is not found by its name\n", i, e->name);
                abort();
            }
            kiln_tensor_info want = {"tokens", KILN_I32, 1, {128}, 1};
            fz_clear_error();
            kiln_status c =
                kiln_tensor_check_input("prefill", &want, e->dtype, e->ndim, e->shape, e->file);
            if (c) fz_check_failure(c);
        }
        if (!st) kiln_tensor_folder_free(&f);
    }
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/a.npy", dir);
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_npy a;
    fz_clear_error();
    kiln_status st = kiln_npy_parse(data, size, "fuzz.npy", &a);
    if (st)
        fz_check_failure(st);
    else
        round_trip(&a);
    const uint8_t *nul = memchr(data, 0, size);
    if (nul) folder(data, size, (size_t)(nul - data));
    return 0;
}
