/* gguf_writer.h: a minimal GGUF (v3) writer for test fixtures. */
#ifndef KILN_TEST_GGUF_WRITER_H
#define KILN_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* Open structures, so tests can damage a fixture before writing it. */
typedef struct {
    char *key;
    uint32_t type;    /* GGUF value type */
    uint8_t *payload; /* the value's bytes as written after the type */
    size_t len;
} kt_gguf_kv;

typedef struct {
    char *name;
    uint32_t type; /* ggml type */
    int ndim;
    int64_t ne[4];
    uint8_t *data;
    size_t nbytes;
    int64_t offset_override; /* >= 0: write this offset instead of the real one */
} kt_gguf_tensor_t;

typedef struct kt_gguf {
    kt_gguf_kv *kv;
    int n_kv;
    kt_gguf_tensor_t *t;
    int n_t;
    uint32_t version;
} kt_gguf;

kt_gguf_kv *kt_gguf_find_kv(kt_gguf *g, const char *key);
kt_gguf_tensor_t *kt_gguf_find_tensor(kt_gguf *g, const char *name);
void kt_gguf_drop_kv(kt_gguf *g, const char *key);
void kt_gguf_drop_tensor(kt_gguf *g, const char *name);

kt_gguf *kt_gguf_new(void);
void kt_gguf_free(kt_gguf *g);
void kt_gguf_u32(kt_gguf *g, const char *key, uint32_t v);
void kt_gguf_f32(kt_gguf *g, const char *key, float v);
void kt_gguf_str(kt_gguf *g, const char *key, const char *v);
void kt_gguf_strs(kt_gguf *g, const char *key, const char *const *v, int n);
void kt_gguf_i32s(kt_gguf *g, const char *key, const int32_t *v, int n);
void kt_gguf_f32s(kt_gguf *g, const char *key, const float *v, int n);
/* A value of any scalar type (`size` bytes at v), or an array of n elements
 * of elem_type, elem_size bytes each (GGUF value type numbers). */
void kt_gguf_scalar(kt_gguf *g, const char *key, uint32_t type, const void *v, size_t size);
void kt_gguf_array(kt_gguf *g, const char *key, uint32_t elem_type, const void *v, size_t elem_size,
                   int n);
/* Adds a tensor; ne in GGML order (ne[0] contiguous); data is copied. */
void kt_gguf_tensor(kt_gguf *g, const char *name, uint32_t ggml_type, int ndim, const int64_t *ne,
                    const void *data, size_t nbytes);
/* Serializes (alignment 32); returns malloc'd bytes. */
uint8_t *kt_gguf_bytes(kt_gguf *g, size_t *len);
int kt_gguf_write(kt_gguf *g, const char *path);

/* A llama2.c fixture re-expressed as a GGUF 'llama' model: same weights,
 * tensor names and shapes as convert tools write them (adjacent-pair rope,
 * so Q/K stay as they are), weights stored as `ggml_type` (0 F32, 1 F16, 8
 * Q8_0, 2 Q4_0) converted with Kiln's own quantizer. */
kt_gguf *kt_gguf_from_llama2c(const void *l2c_bytes, uint32_t ggml_type);

#endif
