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

#endif
