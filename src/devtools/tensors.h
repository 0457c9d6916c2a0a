/* tensors.h: the tensor folder (docs/TENSORS.md): one NumPy .npy file per
 * tensor plus a manifest.json naming each with its dtype, shape and origin
 * (method, role, node, op). `kiln run` reads its inputs from one and writes
 * outputs to one; the debugger writes node dumps in the same form. Internal:
 * never installed.
 *
 * Every reader trusts nothing: a truncated file, a bad magic, a header that
 * is not the dict NumPy writes, Fortran order, big-endian data, data shorter
 * or longer than the shape, a manifest that disagrees with its files, or a
 * file name that leaves the folder is KILN_ERR_FORMAT naming the file and
 * the rule. Not thread-safe per object; objects are independent. */
#ifndef KILN_TENSORS_H
#define KILN_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Element types a tensor file holds: Kiln's plain dtypes, plus f64 and i64
 * (NumPy's default float and integer), which no method takes but which a
 * reader must recognise to say so. bf16 has no NumPy type: it is stored as
 * '<u2' (the raw bfloat16 bit patterns), and '<u2' is read as bf16. */
typedef enum kiln_npy_dtype {
    KILN_NPY_F32 = 0, /* '<f4' */
    KILN_NPY_F16,     /* '<f2' */
    KILN_NPY_BF16,    /* '<u2' */
    KILN_NPY_F64,     /* '<f8' */
    KILN_NPY_I32,     /* '<i4' */
    KILN_NPY_I64,     /* '<i8' */
    KILN_NPY_DTYPE_COUNT
} kiln_npy_dtype;

/* "f32", "f16", "bf16", "f64", "i32", "i64"; NULL for a value that is not one. */
const char *kiln_npy_dtype_name(kiln_npy_dtype t);
/* The dtype named `name`; -1 when there is none. */
int kiln_npy_dtype_from_name(const char *name);
/* Bytes per element (0 for an invalid value). */
size_t kiln_npy_dtype_size(kiln_npy_dtype t);
/* Kiln dtype <-> file dtype: 0 on success, -1 when the other side has no
 * equivalent (f64 and i64 are no Kiln dtype; quantized blocks are no file
 * dtype). */
int kiln_npy_dtype_to_kiln(kiln_npy_dtype t, kiln_dtype *out);
int kiln_npy_dtype_from_kiln(kiln_dtype t, kiln_npy_dtype *out);

/* One array. */
typedef struct kiln_npy {
    kiln_npy_dtype dtype;
    int ndim; /* 0..KILN_MAX_DIMS; 0 is a scalar (one element) */
    int64_t shape[KILN_MAX_DIMS];
    uint64_t nbytes;  /* elements * element size */
    const void *data; /* kiln_npy_parse: borrowed from the bytes; kiln_npy_read: owned */
    void *owned;      /* what kiln_npy_free releases (NULL after parse) */
} kiln_npy;

/* Parses the bytes of a whole .npy file (format 1.0, 2.0 or 3.0): checks the
 * magic, the version, the header (a Python dict with exactly 'descr',
 * 'fortran_order' and 'shape'), the dtype (little-endian f4, f2, u2, f8, i4,
 * i8), C order, and that the data is exactly elements * size bytes. `what`
 * names the file in messages. out->data points into `bytes`. */
kiln_status kiln_npy_parse(const void *bytes, size_t len, const char *what, kiln_npy *out);
/* Reads a .npy file (the data copied into out->owned); KILN_ERR_IO names the
 * path when it cannot be read. Free with kiln_npy_free. */
kiln_status kiln_npy_read(const char *path, kiln_npy *out);
void kiln_npy_free(kiln_npy *a);

/* Appends an .npy file (format 1.0, or 2.0 when the header needs it) to `b`:
 * the header NumPy's own writer makes (keys sorted, padding for the growth
 * axis, total header a multiple of 64 bytes), then `data`, elements * size
 * bytes, little-endian. KILN_ERR_INVALID_ARG for a bad dtype or shape. */
kiln_status kiln_npy_encode(kiln_wbuf *b, kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                            const void *data);
/* Writes one .npy file; KILN_ERR_IO names the path. */
kiln_status kiln_npy_write(const char *path, kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                           const void *data);

/* ---- folders -------------------------------------------------------------- */

/* A tensor of a folder. Strings are owned by the folder; method, role,
 * node and op are NULL when the manifest leaves them out. */
typedef struct kiln_tensor_entry {
    char *name;   /* an input's or output's name, or a node's value */
    char *file;   /* a file name inside the folder (no '/') */
    char *method; /* the method it belongs to */
    char *role;   /* "input", "output", or what a writer says (e.g. "node") */
    char *node;   /* the node that produced it (debug dumps) */
    char *op;     /* that node's op */
    kiln_npy_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    void *data; /* read: the file's data, owned, nbytes; written: NULL */
    uint64_t nbytes;
} kiln_tensor_entry;

/* A folder read into memory, or being written. */
typedef struct kiln_tensor_folder {
    char *dir;
    kiln_tensor_entry *items;
    int n, cap;
} kiln_tensor_folder;

/* The most tensors one manifest may list. */
#define KILN_TENSORS_MAX 1000000

/* Reads DIR/manifest.json and every file it names (see docs/TENSORS.md):
 * each file's dtype and shape must be those the manifest gives; two
 * entries with the same (method, role, node, name) are refused. On failure
 * *out is empty. Free with kiln_tensor_folder_free. */
kiln_status kiln_tensor_folder_read(const char *dir, kiln_tensor_folder *out);
/* Parses a manifest's text into entries without data (what `what` names in
 * messages; `dir` is kept as out->dir). Used by kiln_tensor_folder_read and
 * by tests. */
kiln_status kiln_tensor_manifest_parse(const char *text, size_t len, const char *what,
                                       const char *dir, kiln_tensor_folder *out);
void kiln_tensor_folder_free(kiln_tensor_folder *f);

/* The entry for (method, role, name), matching entries that leave method or
 * role out; an entry naming the method is preferred to one that does not.
 * node must match exactly (NULL matches entries without a node). NULL when
 * none matches. */
const kiln_tensor_entry *kiln_tensor_folder_find(const kiln_tensor_folder *f, const char *method,
                                                 const char *role, const char *node,
                                                 const char *name);

/* What a writer says about a tensor (strings borrowed; NULL = left out). */
typedef struct kiln_tensor_desc {
    const char *name, *method, *role, *node, *op;
    kiln_npy_dtype dtype;
    int ndim;
    const int64_t *shape;
} kiln_tensor_desc;

/* Starts writing a folder: creates DIR (and its parents) when missing. Files
 * already there are overwritten when their names come up; others are left
 * alone (only the manifest says what the folder holds). */
kiln_status kiln_tensor_folder_create(const char *dir, kiln_tensor_folder *out);
/* Writes one tensor's .npy file now (named after method, node and name,
 * made safe and unique) and records it; the data is not kept. A repeated
 * (method, role, node, name) is KILN_ERR_INVALID_ARG. */
kiln_status kiln_tensor_folder_add(kiln_tensor_folder *f, const kiln_tensor_desc *d,
                                   const void *data);
/* Writes DIR/manifest.json (through a temporary file and a rename, so a
 * reader never sees a manifest naming files not yet written). The folder
 * stays usable (more adds, another finish). */
kiln_status kiln_tensor_folder_finish(kiln_tensor_folder *f);

/* ---- checking an input -------------------------------------------------------- */

/* Checks a tensor against a method's declared input: the same dtype, the
 * same rank, every fixed dimension equal and every dynamic one in
 * 1..its maximum. KILN_ERR_INVALID_ARG names the method, the input, the
 * expected and the given dtype/shape, and `source` (a file) when not NULL:
 * "method 'prefill' input 'tokens': expected i32 [1..128], given i64 [5]
 * (from 'in/tokens.npy')". */
kiln_status kiln_tensor_check_input(const char *method, const kiln_tensor_info *want,
                                    kiln_npy_dtype dtype, int ndim, const int64_t *shape,
                                    const char *source);
/* "[1..128, 64]" (dynamic dims as 1..max) into buf. */
const char *kiln_tensor_info_shape_str(const kiln_tensor_info *t, char *buf, size_t cap);

#endif /* KILN_TENSORS_H */
