/* import.c: format detection and the files an import keeps mapped. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "import/import.h"
#include "import/llama2c.h"
#include "llm/tokenizer.h"

kiln_status kiln_import_map(kiln_import *imp, const char *path, const kiln_file_map **map) {
    if (imp->n_maps == KILN_IMPORT_MAX_FILES)
        return kiln_error(KILN_ERR_INVALID_ARG, "'%s': a checkpoint of more than %d files", path,
                          KILN_IMPORT_MAX_FILES);
    kiln_status st = kiln_file_map_open(path, &imp->maps[imp->n_maps]);
    if (st) return st;
    *map = &imp->maps[imp->n_maps++];
    return KILN_OK;
}

void kiln_import_close(kiln_import *imp) {
    for (int i = 0; i < imp->n_maps; i++) kiln_file_map_close(&imp->maps[i]);
    imp->n_maps = 0;
}

kiln_status kiln_llama2c_import_file(kiln_import *imp, const char *path, const char *tokenizer,
                                     kiln_module *m) {
    /* NULL: once GCC inlines kiln_import_map it warns that map may be unset,
     * missing that it is set whenever st is 0. */
    const kiln_file_map *map = NULL;
    kiln_status st = kiln_import_map(imp, path, &map);
    if (st || (st = kiln_llama2c_import(map, path, &imp->cfg, m))) return st;
    imp->format = "llama2c";
    /* llama2.c models delimit stories with BOS: run.c stops there. */
    const int64_t end[1] = {1};
    if ((st = kiln_meta_set_int_array(m, "llm.end_token_ids", end, 1))) return st;
    if (!tokenizer) return KILN_OK;
    kiln_tokenizer *tok;
    if ((st = kiln_tokenizer_load_llama2c(tokenizer, imp->cfg.n_vocab, &tok))) return st;
    kiln_wbuf b = {0};
    kiln_tokenizer_serialize(tok, &b);
    kiln_tokenizer_free(tok);
    if (b.failed) {
        kiln_wbuf_free(&b);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    m->tokenizer = b.data;
    m->tokenizer_len = b.len;
    return kiln_meta_set_str(m, "tokenizer.model", "llama2c");
}

kiln_status kiln_import_open(const char *path, const char *tokenizer, kiln_import *imp, kiln_module *m) {
    memset(imp, 0, sizeof *imp);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (tokenizer)
            return kiln_error(KILN_ERR_INVALID_ARG, "--tokenizer is for llama2.c checkpoints; a Hugging Face "
                                                    "folder brings its own tokenizer.json");
        return kiln_hf_import(imp, path, m);
    }
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    if (f) {
        size_t n = fread(magic, 1, 4, f);
        (void)n;
        fclose(f);
    }
    if (memcmp(magic, "GGUF", 4) == 0) {
        if (tokenizer)
            return kiln_error(KILN_ERR_INVALID_ARG, "--tokenizer is for llama2.c checkpoints; a GGUF file "
                                                    "brings its own tokenizer");
        return kiln_gguf_import(imp, path, m);
    }
    return kiln_llama2c_import_file(imp, path, tokenizer, m);
}
