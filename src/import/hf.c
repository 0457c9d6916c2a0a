/* hf.c: Hugging Face folders (config.json + safetensors). Not yet. */
#include "import/import.h"

kiln_status kiln_hf_import(kiln_import *imp, const char *dir, kiln_module *m) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "'%s': Hugging Face folders are not supported yet", dir);
}
