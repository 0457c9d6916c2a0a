/* cmd_compile.c: `kiln compile INPUT -o model.kiln [options]`. */
#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "kiln/kiln_compile.h"

/* The library's options and the flags that are the command's own. */
typedef struct {
    kiln_compile_options c;
    const char *qnn_lib;
} options;

#define OPT(field) offsetof(options, c.field)

static const char *const QUANTS[] = {"keep", "f32", "f16", "q8_0", "q4_0", NULL};
static const char *const KV_TYPES[] = {"f16", "f32", NULL};

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "INPUT", NULL, OPT(input), .path = KILN_CLI_IN_PATH, .bits = KILN_CLI_POSITIONAL,
     .rule = "more than one input ('%s' and '%s')"},
    {KILN_CLI_STR, "-o, --output", "FILE", OPT(output), .path = KILN_CLI_OUT_FILE,
     .help = "program to write (required)"},
    {KILN_CLI_STR, "--tokenizer", "FILE", OPT(tokenizer), .path = KILN_CLI_IN_FILE,
     .help = "tokenizer to store (llama2.c tokenizer.bin)"},
    {KILN_CLI_INT, "--prefill", "N", OPT(prefill), .lo = 1, .hi = 1 << 20,
     .help = "most tokens one prefill call takes (default 128)"},
    {KILN_CLI_INT, "--max-seq", "N", OPT(max_seq), .lo = 1, .hi = 1 << 20,
     .help = "context length (default: the model's, at most 4096)"},
    {KILN_CLI_INT, "--max-image-patches", "N", OPT(max_image_patches), .lo = 1, .hi = 1 << 20,
     .help = "vision models: most patches one encode_image takes\n"
             "(default 4096, a 1024x1024 image; larger images are\n"
             "resized within it)"},
    {KILN_CLI_NAME, "--quant", "FMT", OPT(quant), .choices = QUANTS,
     .help = "matmul/embedding weights: keep (default), f32, f16,\n"
             "q8_0, q4_0; norms, biases and state are never touched"},
    {KILN_CLI_SET, "--quant-fallback", NULL, OPT(quant_fallback), .lo = 1,
     .help = "keep a weight that cannot take FMT (rows not whole\n"
             "blocks) as it is, and say so, instead of failing"},
    {KILN_CLI_NAME, "--kv-type", "T", OPT(kv_type), .choices = KV_TYPES,
     .help = "KV cache element type: f16 (default, half the memory)\n"
             "or f32"},
    {KILN_CLI_SET, "--no-pack", NULL, OPT(no_pack), .lo = 1,
     .help = "store q4_0, q4_1, q8_0, q4_K and q6_K weights as\n"
             "imported instead of packed for the cpu kernels (q4_0x8,\n"
             "q4_1x8, q8_0x8, q4_Kx8, q6_Kx8: 8 rows interleaved)"},
    {KILN_CLI_STR, "--backend", "LIST", OPT(backends),
     .help = "backends in order of preference, comma-separated\n"
             "(default: 'cpu'; nodes it cannot run fall back\n"
             "to 'ref' and are marked so in kiln info)"},
    {KILN_CLI_SET, "--check", NULL, OPT(check), .lo = 1,
     .help = "after writing, run sample calls (a prefill of a few\n"
             "random tokens, then decodes) as compiled and on ref;\n"
             "print per partition (consecutive nodes on one\n"
             "backend) its worst node's own error (the node alone\n"
             "on its backend given ref's inputs: cosine, relative\n"
             "error) and its speed against ref; a partition below\n"
             "the threshold fails the compile, naming its worst node"},
    {KILN_CLI_SET, "--check=fallback", NULL, OPT(check), .lo = 2,
     .help = "the same, but failing partitions are moved to ref\n"
             "(marked fallback in kiln info) and the program written"},
    {KILN_CLI_DOUBLE, "--check-threshold", "COS", OPT(check_threshold), .lo = 0, .hi = 1,
     .bits = KILN_CLI_OPEN_LO, .rule = "is a cosine in {range}",
     .help = "the cosine each node's own output must reach, in\n"
             "(0, 1] (default 0.99)"},
    {KILN_CLI_STR, "--calibrate", "FILE", OPT(calibrate), .path = KILN_CLI_IN_FILE,
     .help = "measure activation ranges on ref over this UTF-8 text\n"
             "before the backends prepare (stored in the program;\n"
             "a backend that quantizes activations asks for it\n"
             "itself; default text: a built-in English one)"},
    {KILN_CLI_INT, "--calibrate-tokens", "N", OPT(calibrate_tokens), .lo = 8, .hi = 1 << 20,
     .help = "tokens of the text to run (default 128, at most the\n"
             "context; the text must have as many)"},
    KILN_CLI_QNN_LIB(offsetof(options, qnn_lib)),
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    kiln_compile_options_init(&o->c);
    o->qnn_lib = NULL;
}

static const kiln_cli_command COMMAND = {
    .name = "compile",
    .about = "usage: kiln compile INPUT -o OUTPUT.kiln [options]\n"
             "\n"
             "Compiles a checkpoint into one program file holding the weights (once),\n"
             "the tokenizer, a KV cache and two methods: prefill and decode.\n"
             "INPUT: a llama2.c checkpoint (.bin, with --tokenizer), a GGUF file (llama,\n"
             "qwen2, qwen3), or a Hugging Face folder (config.json + safetensors).\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln compile stories260K.bin --tokenizer tok512.bin -o stories.kiln\n"
             "  kiln compile SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.kiln --check\n",
    .column = 23,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
};

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "kiln compile: %s\n", line);
}

int kiln_cmd_compile(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options opt;
    kiln_compile_options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &opt, &rc)) return rc;
    o = opt.c;
    if (!o.input) return kiln_cli_usage_error(cmd, "no input checkpoint given");
    if (!o.output) return kiln_cli_usage_error(cmd, "no output given (-o FILE)");
    if (o.check_threshold > 0 && !o.check)
        return kiln_cli_usage_error(cmd, "--check-threshold goes with --check");
    if ((rc = kiln_cli_qnn_lib(cmd, opt.qnn_lib))) return rc;
    o.progress = kiln_cli_progress;
    o.log = log_line;
    kiln_status st = kiln_compile(&o);
    if (st) return kiln_cli_fail(cmd, st);
    fprintf(stderr, "kiln compile: wrote %s\n", o.output);
    return KILN_EXIT_OK;
}
