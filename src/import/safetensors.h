/* safetensors.h: the safetensors container (u64 little-endian header length,
 * a JSON header naming each tensor's dtype, shape and data_offsets, then the
 * data), one file or a sharded set listed by model.safetensors.index.json.
 * Every offset and size is checked against the file before a pointer is
 * formed; the tensors must cover the data exactly (no overlap, no hole, no
 * trailing byte); unknown dtypes and offsets past the file are errors naming
 * the file and the tensor, holes name the file and the gap. */
#ifndef KILN_IMPORT_SAFETENSORS_H
#define KILN_IMPORT_SAFETENSORS_H

#include "import/import.h"

#define KILN_ST_MAX_DIMS 8
#define KILN_ST_MAX_HEADER ((uint64_t)100 << 20) /* as the reference implementation */

typedef struct kiln_st_tensor {
    char *name;             /* owned */
    const char *dtype_name; /* static: "F32", "BF16", "I64", ... */
    int dtype;              /* kiln_dtype (F32, F16, BF16), or -1: a dtype Kiln does not read */
    int ndim;               /* 0 (a scalar) .. KILN_ST_MAX_DIMS */
    int64_t shape[KILN_ST_MAX_DIMS]; /* outermost first, as in the header */
    uint64_t nbytes;
    uint64_t offset;     /* absolute offset of the data in its file */
    const uint8_t *data; /* borrowed from the file's map */
    int file;            /* index into kiln_safetensors.files */
} kiln_st_tensor;

typedef struct kiln_safetensors {
    kiln_st_tensor *tensors; /* owned */
    size_t n_tensors, cap_tensors;
    char *files[KILN_IMPORT_MAX_FILES]; /* owned base names, for messages */
    int n_files;
} kiln_safetensors;

/* Parses one safetensors file held in memory (`path` names it in messages)
 * and appends its tensors to `st`; a tensor name already in `st` is an
 * error. Tensors borrow `data`. */
kiln_status kiln_safetensors_parse(kiln_safetensors *st, const uint8_t *data, uint64_t size,
                                   const char *path);

/* Opens the weights of a Hugging Face folder: model.safetensors, or the
 * shards listed in model.safetensors.index.json (its weight_map), each
 * mapped once through kiln_import_map so the tensors live as long as imp. */
kiln_status kiln_safetensors_open_dir(kiln_import *imp, const char *dir, kiln_safetensors *st);

/* The tensor named `name`, or NULL. */
const kiln_st_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name);

/* Frees what st owns (not the maps); a zeroed st is a no-op. */
void kiln_safetensors_free(kiln_safetensors *st);

#endif
