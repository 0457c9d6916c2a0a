/* gguf.h: the GGUF container (versions 2 and 3): metadata and tensor infos,
 * every field checked against the file before use. */
#ifndef KILN_GGUF_H
#define KILN_GGUF_H

#include "base/base.h"
#include "ir/graph.h"

enum {
    KILN_GGUF_U8 = 0,
    KILN_GGUF_I8 = 1,
    KILN_GGUF_U16 = 2,
    KILN_GGUF_I16 = 3,
    KILN_GGUF_U32 = 4,
    KILN_GGUF_I32 = 5,
    KILN_GGUF_F32 = 6,
    KILN_GGUF_BOOL = 7,
    KILN_GGUF_STRING = 8,
    KILN_GGUF_ARRAY = 9,
    KILN_GGUF_U64 = 10,
    KILN_GGUF_I64 = 11,
    KILN_GGUF_F64 = 12,
};

typedef struct kiln_gguf_kv {
    char *key;
    uint32_t type;      /* a KILN_GGUF_* value type */
    uint32_t elem_type; /* arrays: the element type */
    uint64_t n;         /* arrays: element count */
    const uint8_t *raw; /* the value's bytes in the file (for arrays: the first element) */
    uint64_t raw_len;
} kiln_gguf_kv;

typedef struct kiln_gguf_tensor {
    char *name;
    int ndim;
    int64_t ne[4]; /* GGML order: ne[0] is the contiguous dimension */
    uint32_t ggml_type;
    int dtype;       /* the kiln_dtype, or -1 when Kiln has no reader for ggml_type */
    uint64_t offset; /* from the start of the data section */
    uint64_t nbytes;
    const uint8_t *data;
} kiln_gguf_tensor;

typedef struct kiln_gguf {
    uint32_t version;
    uint64_t n_kv, n_tensors, alignment, data_offset;
    kiln_gguf_kv *kv;
    kiln_gguf_tensor *tensors;
} kiln_gguf;

/* Parses `size` bytes of a GGUF file named `path` (for messages). */
kiln_status kiln_gguf_parse(const uint8_t *data, uint64_t size, const char *path, kiln_gguf *g);
void kiln_gguf_free(kiln_gguf *g);
const kiln_gguf_kv *kiln_gguf_find(const kiln_gguf *g, const char *key);
/* Typed getters: KILN_ERR_FORMAT naming the key when it has another type;
 * `required` = 0 leaves *out untouched and returns OK when the key is absent. */
kiln_status kiln_gguf_get_int(const kiln_gguf *g, const char *path, const char *key, int required,
                              int64_t *out);
kiln_status kiln_gguf_get_float(const kiln_gguf *g, const char *path, const char *key, int required,
                                double *out);
/* Borrowed, not NUL-terminated. */
kiln_status kiln_gguf_get_str(const kiln_gguf *g, const char *path, const char *key, int required,
                              const char **s, uint64_t *len);
const char *kiln_ggml_type_name(uint32_t t);

/* Copies one metadata value into m as found, under its key. Scalars become
 * int (bool: 0/1; u64 above 2^63: KILN_ERR_FORMAT), float (not finite:
 * KILN_ERR_FORMAT) or string metadata (cut at a NUL byte); arrays keep their
 * element order as int, float or string arrays (u64 elements as their int64
 * bits; counts narrowed to 32 bits). The parser has refused nested arrays.
 * KILN_ERR_NOMEM on allocation failure. The one copy: the GGUF importer
 * (every key) and kiln_tokenizer_load (the tokenizer.* keys) use it. */
kiln_status kiln_gguf_store_meta(kiln_module *m, const kiln_gguf *g, const char *path,
                                 const kiln_gguf_kv *kv);

#endif
