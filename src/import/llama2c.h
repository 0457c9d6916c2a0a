/* llama2c.h: llama2.c checkpoints (`.bin`) and tokenizers (`tokenizer.bin`). */
#ifndef KILN_IMPORT_LLAMA2C_H
#define KILN_IMPORT_LLAMA2C_H

#include "models/llama.h"

/* Reads the header of a mapped llama2.c checkpoint, checks it against the
 * file size, fills `c`, and adds every weight to `m` as a constant that
 * borrows the map (which must outlive the module's use). */
kiln_status kiln_llama2c_import(const kiln_file_map *map, const char *path, kiln_llama_config *c,
                                kiln_module *m);

/* A tokenizer.bin is read by kiln_tokenizer_load_llama2c (kiln_llm.h). */

#endif
