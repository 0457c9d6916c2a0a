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
    const char *format;        /* "llama2c", "gguf", "hf" */
    char tokenizer_note[1024]; /* why no tokenizer was stored, or "" */
} kiln_import;

/* Maps one more file into imp (KILN_ERR_INVALID_ARG past the limit). */
kiln_status kiln_import_map(kiln_import *imp, const char *path, const kiln_file_map **map);

/* Detects the format of `path` (a directory: Hugging Face; "GGUF" magic:
 * GGUF; otherwise llama2.c), imports it, and stores the tokenizer it brings
 * (kiln_import_tokenizer). `tokenizer`: a separate tokenizer file
 * (llama2.c), or NULL. */
kiln_status kiln_import_open(const char *path, const char *tokenizer, kiln_import *imp,
                             kiln_module *m);
void kiln_import_close(kiln_import *imp);

/* The importers. */
kiln_status kiln_llama2c_import_file(kiln_import *imp, const char *path, kiln_module *m);
kiln_status kiln_gguf_import(kiln_import *imp, const char *path, kiln_module *m);
kiln_status kiln_hf_import(kiln_import *imp, const char *dir, kiln_module *m);

/* Builds the tokenizer the checkpoint at `path` brings and stores its
 * program-section form in m->tokenizer (tokenizer.c, the one builder, which
 * kiln_tokenizer_load shares): from `tokenizer_bin`, llama2.c's
 * tokenizer.bin, which must hold imp->cfg.n_vocab pieces (metadata
 * tokenizer.model becomes "llama2c"), when given; otherwise from the
 * metadata the importer stored (GGUF tokenizer.ggml.*, or hf.tokenizer_json
 * + hf.tokenizer_config_json). A module with neither is left without a
 * tokenizer. So is one whose metadata describes a tokenizer Kiln cannot run,
 * and imp->tokenizer_note says why (otherwise it is ""). Fails on a damaged
 * tokenizer file or metadata, and on memory. */
kiln_status kiln_import_tokenizer(kiln_import *imp, const char *path, const char *tokenizer_bin,
                                  kiln_module *m);

#endif
