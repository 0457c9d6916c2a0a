/* import.h: the front of the compiler. An importer reads one checkpoint
 * format, fills the model config, adds every weight to the module as a
 * constant (borrowing the file's map, or owning converted data), and stores
 * the tokenizer and its metadata. Every length, offset, count, dtype and
 * shape is checked against the file before use. */
#ifndef KILN_IMPORT_H
#define KILN_IMPORT_H

#include "models/llama.h"

#define KILN_IMPORT_MAX_FILES 64

typedef struct kiln_import {
    kiln_file_map maps[KILN_IMPORT_MAX_FILES]; /* owned; weights borrow them */
    int n_maps;
    kiln_llama_config cfg;
    const char *format; /* "llama2c", "gguf", "hf" */
} kiln_import;

/* Maps one more file into imp (KILN_ERR_INVALID_ARG past the limit). */
kiln_status kiln_import_map(kiln_import *imp, const char *path, const kiln_file_map **map);

/* Detects the format of `path` (a directory: Hugging Face; "GGUF" magic:
 * GGUF; otherwise llama2.c) and imports it. `tokenizer`: a separate
 * tokenizer file (llama2.c), or NULL. */
kiln_status kiln_import_open(const char *path, const char *tokenizer, kiln_import *imp, kiln_module *m);
void kiln_import_close(kiln_import *imp);

/* The importers. */
kiln_status kiln_llama2c_import_file(kiln_import *imp, const char *path, const char *tokenizer,
                                     kiln_module *m);
kiln_status kiln_gguf_import(kiln_import *imp, const char *path, kiln_module *m);
kiln_status kiln_hf_import(kiln_import *imp, const char *dir, kiln_module *m);

/* Builds the tokenizer of a module from its metadata (GGUF tokenizer.ggml.*,
 * or hf.tokenizer_json + hf.tokenizer_config_json) when m->tokenizer is
 * empty, and stores its program-section form there (tokenizer.c). A module
 * without such metadata is left as it is. When the metadata describes a
 * tokenizer Kiln cannot run, the module is left without one and `note` (cap
 * bytes) says why; otherwise note is "". Fails only on damaged metadata or
 * memory. */
kiln_status kiln_tokenizer_build_for_module(kiln_module *m, char *note, size_t cap);

#endif
