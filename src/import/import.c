/* import.c: format detection and the files an import keeps mapped. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "import/import.h"
#include "import/llama2c.h"

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
    for (int i = 0; i < imp->n_maps; i++)
        kiln_file_map_close(&imp->maps[i]);
    imp->n_maps = 0;
}

kiln_status kiln_llama2c_import_file(kiln_import *imp, const char *path, kiln_module *m) {
    /* NULL: once GCC inlines kiln_import_map it warns that map may be unset,
     * missing that it is set whenever st is 0. */
    const kiln_file_map *map = NULL;
    kiln_status st = kiln_import_map(imp, path, &map);
    if (st || (st = kiln_llama2c_import(map, path, &imp->cfg, m))) return st;
    imp->format = "llama2c";
    /* llama2.c models delimit stories with BOS: run.c stops there. */
    const int64_t end[1] = {1};
    return kiln_meta_set_int_array(m, "llm.end_token_ids", end, 1);
}

kiln_status kiln_import_open(const char *path, const char *tokenizer, kiln_import *imp,
                             kiln_module *m) {
    memset(imp, 0, sizeof *imp);
    kiln_status st;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (tokenizer)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "--tokenizer is for llama2.c checkpoints; a Hugging Face "
                              "folder brings its own tokenizer.json");
        st = kiln_hf_import(imp, path, m);
    } else {
        FILE *f = fopen(path, "rb");
        char magic[4] = {0};
        if (f) {
            size_t n = fread(magic, 1, 4, f);
            (void)n;
            fclose(f);
        }
        if (memcmp(magic, "GGUF", 4) == 0) {
            if (tokenizer)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "--tokenizer is for llama2.c checkpoints; a GGUF "
                                  "file brings its own tokenizer");
            st = kiln_gguf_import(imp, path, m);
        } else {
            st = kiln_llama2c_import_file(imp, path, m);
        }
    }
    return st ? st : kiln_import_tokenizer(imp, path, tokenizer, m);
}
