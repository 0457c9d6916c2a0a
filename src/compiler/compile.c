/* compile.c: the compiler driver. import (weights, metadata, tokenizer) ->
 * build graphs -> the passes (passes.h: prune, verify, partition, quantize
 * and, when it ran, verify and partition again, calibrate when asked, each
 * backend's prepare, plan, verify) -> write (to a temporary file) -> reopen
 * and verify every section -> --check -> rename into place. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "import/import.h"
#include "kiln/kiln_compile.h"
#include "compiler/check.h"
#include "compiler/passes.h"
#include "format/format.h"

#define DEFAULT_PREFILL 128
#define MAX_SEQ_CAP 4096

void kiln_compile_options_init(kiln_compile_options *o) {
    memset(o, 0, sizeof *o);
    o->prefill = DEFAULT_PREFILL;
}

/* The progress callback between steps (done = total = 0): non-zero stops. */
static kiln_status stop_asked(const kiln_compile_options *o, const char *stage) {
    if (o->progress && o->progress(o->progress_user, stage, 0, 0))
        return kiln_error(KILN_ERR_CANCELLED, "compile: stopped before %s", stage);
    return KILN_OK;
}

/* Reads a program just written back: parse, verify graphs, every checksum.
 * A blob its backend marks device_only (QNN's weight-shared binaries) cannot
 * load on this machine: such a program is read back described only (the
 * blobs' checksums still checked). */
static kiln_status verify_written(const char *path, const kiln_module *m) {
    int device_only = 0;
    for (int i = 0; i < m->n_blobs; i++)
        device_only |= kiln_blob_prop(&m->blobs[i], "device_only") != NULL;
    kiln_open_options describe = {.describe_only = 1};
    kiln_program *p;
    kiln_status st = kiln_program_open_with(path, device_only ? &describe : NULL, &p);
    if (st) return kiln_error_wrap(st, "the program just written does not read back");
    st = kiln_program_verify(p);
    kiln_program_close(p);
    return st;
}

kiln_status kiln_compile(const kiln_compile_options *o) {
    if (!o || !o->input || !o->output)
        return kiln_error(KILN_ERR_INVALID_ARG, "compile needs an input and an output path");
    if (o->check < 0 || o->check > 2 || !(o->check_threshold >= 0 && o->check_threshold <= 1))
        return kiln_error(
            KILN_ERR_INVALID_ARG,
            "check must be 0, 1 or 2 (got %d) and check_threshold in (0, 1] or 0 (got %g)",
            o->check, o->check_threshold);
    if (o->prefill < 0 || o->max_seq < 0)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "prefill (%d) and max-seq (%d) must not be negative", o->prefill,
                          o->max_seq);
    kiln_dtype kv_dtype = KILN_F16;
    if (o->kv_type && !strcmp(o->kv_type, "f32"))
        kv_dtype = KILN_F32;
    else if (o->kv_type && strcmp(o->kv_type, "f16"))
        return kiln_error(KILN_ERR_INVALID_ARG, "unknown KV cache type '%s' (f16, f32)",
                          o->kv_type);
    kiln_module m;
    memset(&m, 0, sizeof m);
    kiln_import imp;
    kiln_outfile out = {.slot = -1};
    kiln_status st = kiln_import_open(o->input, o->tokenizer, &imp, &m);
    if (st) goto done;
    if (imp.tokenizer_note[0] && o->log) o->log(o->log_user, imp.tokenizer_note);
    kiln_llama_config cfg = imp.cfg;
    cfg.kv_dtype = kv_dtype;
    if (o->max_image_patches) {
        int unit = cfg.vision.merge * cfg.vision.merge;
        if (!cfg.vision.depth)
            st = kiln_error(KILN_ERR_INVALID_ARG,
                            "max-image-patches %d: '%s' has no vision tower to take images",
                            o->max_image_patches, kiln_basename(o->input));
        else if (o->max_image_patches < unit || o->max_image_patches % unit ||
                 o->max_image_patches > 1 << 20)
            st = kiln_error(KILN_ERR_INVALID_ARG,
                            "max-image-patches %d must be a multiple of %d (the %d x %d merge) "
                            "in %d..1048576",
                            o->max_image_patches, unit, cfg.vision.merge, cfg.vision.merge, unit);
        if (st) goto done;
        cfg.vision.max_patches = o->max_image_patches;
    }
    int max_seq =
        o->max_seq ? o->max_seq : (cfg.n_ctx_train < MAX_SEQ_CAP ? cfg.n_ctx_train : MAX_SEQ_CAP);
    int prefill = o->prefill ? o->prefill : DEFAULT_PREFILL;
    if (max_seq > (1 << 20)) {
        st = kiln_error(KILN_ERR_INVALID_ARG, "max-seq %d is too large (at most 1048576)", max_seq);
        goto done;
    }
    if (prefill > max_seq)
        prefill = max_seq; /* a prefill longer than the context is never usable */
    if ((st = kiln_meta_set_str(&m, "general.source", kiln_basename(o->input)))) goto done;
    if ((st = kiln_llama_build(&m, &cfg, prefill, max_seq))) goto done;
    if ((st = kiln_module_prune_consts(&m))) goto done; /* weights no method reads */
    /* Partitioned first, so --quant leaves the delegates' weights alone;
     * partitioned again after it, as the backends' choices may depend on a
     * weight's dtype. */
    const char *backends = o->backends ? o->backends : kiln_backend_default();
    if ((st = kiln_module_verify(&m, 0)) || (st = kiln_module_partition(&m, backends))) goto done;
    int converted = 0;
    if ((st = stop_asked(o, "quantize")) || (st = kiln_module_quantize(&m, o, &converted)))
        goto done;
    if (converted &&
        ((st = kiln_module_verify(&m, 0)) || (st = kiln_module_partition(&m, backends))))
        goto done;
    /* ranges for the backends that quantize activations, measured on ref
     * before they prepare */
    if ((st = kiln_module_calibrate(&m, o))) goto done;
    if ((st = stop_asked(o, "prepare")) || (st = kiln_module_prepare(&m, o))) goto done;
    for (int i = 0; i < m.n_methods; i++)
        if ((st = kiln_graph_plan(&m.methods[i], &m))) goto done;
    if ((st = kiln_module_verify(&m, 1))) goto done;
    for (int pass = 0;; pass++) {
        if ((st = stop_asked(o, "write")) || (st = kiln_outfile_open(&out, o->output))) goto done;
        if (!out.tmp) {
            st = kiln_error(KILN_ERR_INVALID_ARG, "'%s' is not a regular file: a program is one",
                            o->output);
            goto done;
        }
        if ((st = kiln_program_write_to(&m, out.f, out.tmp, o->progress, o->progress_user)) ||
            (st = kiln_outfile_finish(&out)))
            goto done;
        /* Verify what was written: parse, verify graphs, check every checksum. */
        if ((st = stop_asked(o, "verify")) || (st = verify_written(out.tmp, &m))) goto done;
        /* --check: once; --check=fallback may move partitions to ref, and
         * the program is written again (the memory plan holds for every
         * backend: verified again here) */
        if (!o->check || pass) break;
        int moved = 0;
        if ((st = kiln_check_partitions(out.tmp, &m, o, &moved))) goto done;
        if (!moved) break;
        kiln_outfile_discard(&out);
        /* the partitions changed: what the backends prepared is made again */
        kiln_module_drop_blobs(&m);
        double t0 = kiln_now_ms();
        if ((st = kiln_module_prepare(&m, o)) || (st = kiln_module_verify(&m, 1))) goto done;
        if (o->log) {
            char line[160];
            int parts = 0;
            for (int k = 0; k < m.n_methods; k++)
                parts += m.methods[k].n_parts;
            snprintf(line, sizeof line,
                     "check: %d partitions after the move, prepared again in %.2f s (not checked "
                     "again)",
                     parts, (kiln_now_ms() - t0) / 1e3);
            o->log(o->log_user, line);
        }
    }
    /* The last moment a stop leaves no file: after it the program is in place. */
    if ((st = stop_asked(o, "rename"))) goto done;
    st = kiln_outfile_commit(&out);
done:
    kiln_outfile_discard(&out);
    kiln_module_free(&m);
    kiln_import_close(&imp);
    return st;
}
