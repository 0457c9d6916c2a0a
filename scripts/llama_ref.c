/* llama_ref.c: llama.cpp as an independent reference for Kiln. Loads a GGUF
 * through libllama's public API (CPU only), tokenizes a prompt with
 * llama.cpp's tokenizer or takes ids, greedy-decodes N tokens and prints one
 * JSON line per step (chosen id, top-2 logits); with --dump it also writes the
 * full logits of every prompt position and of every decode step (f32).
 * Built and run by scripts/llama_ref.sh; nothing here is part of libkiln.
 *
 * Numerics pinned where llama.cpp lets us: one sequence, the whole prompt in
 * one batch and one ubatch, flash attention off, f32 K/V cache (as Kiln's),
 * no weight repacking (use_extra_bufts = false), no GPU offload.
 *
 * Dump file (little-endian):
 *   char magic[8] "KLNLOGIT"; u32 version (1); u32 n_vocab; u32 n_rows;
 *   u32 n_prompt; i32 token[n_rows]; f32 logits[n_rows][n_vocab]
 * Row i holds the logits after token[i] was fed at position i: rows
 * 0..n_prompt-1 are the prompt, the rest are decode steps. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void usage(FILE *f) {
    fprintf(f, "usage: llama_ref -m MODEL.gguf (-p TEXT | --ids \"1 2 3\") [-n N] [-t THREADS]\n"
               "                 [--dump FILE] [--commit HASH] [-v]\n"
               "  -p TEXT      tokenize TEXT with llama.cpp (BOS added when the model says so)\n"
               "  --ids LIST   prompt token ids, separated by spaces or commas\n"
               "  -n N         greedy steps (default 16); each step prints a JSON line\n"
               "  -t THREADS   CPU threads (default 1)\n"
               "  --dump FILE  also feed every chosen token and write the logits of every\n"
               "               prompt position and of the N decode steps (f32) to FILE\n"
               "  --commit H   llama.cpp commit to record in the output\n"
               "  -v           keep llama.cpp's log on stderr\n");
}

static int verbose = 0;

static void on_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* Prints s as a JSON string. */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_float(FILE *f, float v) {
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

/* Top-1 and top-2 of a row; ties go to the lower id (as Kiln's greedy). */
static void top2(const float *x, int n, int *i1, int *i2) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[a]) {
            b = a;
            a = i;
        } else if (b < 0 || x[i] > x[b]) {
            b = i;
        }
    }
    *i1 = a;
    *i2 = b < 0 ? a : b;
}

static int parse_ids(const char *s, llama_token **out, int *n) {
    int cap = 16, k = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            llama_token *t = realloc(ids, sizeof *ids * (size_t)cap);
            if (!t) {
                free(ids);
                return -1;
            }
            ids = t;
        }
        ids[k++] = (llama_token)v;
        p = end;
    }
    *out = ids;
    *n = k;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL, *ids_arg = NULL, *dump = NULL, *commit = "unknown";
    int n_gen = 16, n_threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-v")) {
            verbose = 1;
        } else if (!strcmp(a, "-m") && has) {
            model_path = argv[++i];
        } else if (!strcmp(a, "-p") && has) {
            text = argv[++i];
        } else if (!strcmp(a, "--ids") && has) {
            ids_arg = argv[++i];
        } else if (!strcmp(a, "-n") && has) {
            n_gen = atoi(argv[++i]);
        } else if (!strcmp(a, "-t") && has) {
            n_threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--dump") && has) {
            dump = argv[++i];
        } else if (!strcmp(a, "--commit") && has) {
            commit = argv[++i];
        } else {
            fprintf(stderr, "llama_ref: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !text == !ids_arg || n_gen < 0 || n_threads < 1) {
        usage(stderr);
        return 2;
    }

    llama_log_set(on_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false; /* no repacked weight layouts */
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llama_ref: cannot load '%s'\n", model_path);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    int add_bos = llama_vocab_get_add_bos(vocab);

    llama_token *prompt = NULL;
    int n_prompt = 0;
    if (text) {
        int len = (int)strlen(text);
        int need = -llama_tokenize(vocab, text, len, NULL, 0, true, false);
        if (need <= 0 || !(prompt = malloc(sizeof *prompt * (size_t)need))) {
            fprintf(stderr, "llama_ref: cannot tokenize the prompt\n");
            return 1;
        }
        n_prompt = llama_tokenize(vocab, text, len, prompt, need, true, false);
        if (n_prompt < 0) {
            fprintf(stderr, "llama_ref: cannot tokenize the prompt\n");
            return 1;
        }
    } else if (parse_ids(ids_arg, &prompt, &n_prompt)) {
        fprintf(stderr, "llama_ref: --ids must be non-negative integers\n");
        return 2;
    }
    if (n_prompt < 1) {
        fprintf(stderr, "llama_ref: empty prompt\n");
        return 1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] >= n_vocab) {
            fprintf(stderr, "llama_ref: prompt id %d is outside the vocabulary of %d\n", prompt[i],
                    n_vocab);
            return 1;
        }

    /* The whole prompt in one batch and one ubatch; room for every step. */
    int n_ctx = n_prompt + n_gen + 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_ref: cannot create a context\n");
        return 1;
    }

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    printf("{\"type\":\"meta\",\"llama_cpp_commit\":");
    json_str(stdout, commit);
    printf(",\"model\":");
    json_str(stdout, model_path);
    printf(",\"desc\":");
    json_str(stdout, desc);
    printf(",\"n_vocab\":%d,\"add_bos\":%s,\"n_threads\":%d,\"n_ctx\":%u,\"n_batch\":%u,\"n_"
           "ubatch\":%u,"
           "\"n_seq_max\":1,\"flash_attn\":\"disabled\",\"type_k\":\"f32\",\"type_v\":\"f32\","
           "\"use_extra_bufts\":false,\"n_gpu_layers\":0,\"sampling\":\"greedy, ties to the lower "
           "id\","
           "\"system_info\":",
           n_vocab, add_bos ? "true" : "false", n_threads, llama_n_ctx(ctx), llama_n_batch(ctx),
           llama_n_ubatch(ctx));
    json_str(stdout, llama_print_system_info());
    printf("}\n{\"type\":\"prompt\",\"ids\":[");
    for (int i = 0; i < n_prompt; i++)
        printf("%s%d", i ? "," : "", prompt[i]);
    printf("]}\n");
    fflush(stdout);

    FILE *df = NULL;
    uint32_t n_rows = (uint32_t)(n_prompt + (dump ? n_gen : 0));
    if (dump) {
        if (!(df = fopen(dump, "wb"))) {
            fprintf(stderr, "llama_ref: cannot write '%s': %s\n", dump, strerror(errno));
            return 1;
        }
        uint32_t hdr[4] = {1, (uint32_t)n_vocab, n_rows, (uint32_t)n_prompt};
        /* Token list: the prompt now, the chosen ids patched in at the end. */
        if (write_all(df, "KLNLOGIT", 8) || write_all(df, hdr, sizeof hdr) ||
            write_all(df, prompt, sizeof *prompt * (size_t)n_prompt) ||
            fseek(df, (long)(sizeof *prompt * (size_t)(n_rows - (uint32_t)n_prompt)), SEEK_CUR)) {
            fprintf(stderr, "llama_ref: write error on '%s'\n", dump);
            return 1;
        }
    }
    llama_token *chosen = calloc((size_t)n_gen + 1, sizeof *chosen);
    struct llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    if (!chosen) return 1;
    for (int i = 0; i < n_prompt; i++) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = dump || i == n_prompt - 1;
    }
    batch.n_tokens = n_prompt;
    int rc = llama_decode(ctx, batch);
    if (rc) {
        fprintf(stderr, "llama_ref: llama_decode of the prompt failed (%d)\n", rc);
        return 1;
    }
    if (df)
        for (int i = 0; i < n_prompt; i++)
            if (write_all(df, llama_get_logits_ith(ctx, i), sizeof(float) * (size_t)n_vocab)) {
                fprintf(stderr, "llama_ref: write error on '%s'\n", dump);
                return 1;
            }
    const float *logits = llama_get_logits_ith(ctx, n_prompt - 1);
    for (int s = 0; s < n_gen; s++) {
        int a, b;
        top2(logits, n_vocab, &a, &b);
        chosen[s] = a;
        printf("{\"step\":%d,\"id\":%d,\"top1_id\":%d,\"top1\":", s, a, a);
        json_float(stdout, logits[a]);
        printf(",\"top2_id\":%d,\"top2\":", b);
        json_float(stdout, logits[b]);
        printf("}\n");
        fflush(stdout);
        if (!df && s == n_gen - 1) break; /* the last choice need not be fed */
        batch.n_tokens = 1;
        batch.token[0] = a;
        batch.pos[0] = n_prompt + s;
        batch.logits[0] = 1;
        if ((rc = llama_decode(ctx, batch))) {
            fprintf(stderr, "llama_ref: llama_decode at step %d failed (%d)\n", s, rc);
            return 1;
        }
        logits = llama_get_logits_ith(ctx, 0);
        if (df && write_all(df, logits, sizeof(float) * (size_t)n_vocab)) {
            fprintf(stderr, "llama_ref: write error on '%s'\n", dump);
            return 1;
        }
    }
    if (df) {
        if (fseek(df, 8 + 16 + (long)(sizeof *prompt * (size_t)n_prompt), SEEK_SET) ||
            write_all(df, chosen, sizeof *chosen * (size_t)(n_rows - (uint32_t)n_prompt)) ||
            fclose(df)) {
            fprintf(stderr, "llama_ref: write error on '%s'\n", dump);
            return 1;
        }
    }
    llama_batch_free(batch);
    free(chosen);
    free(prompt);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
