/* cmd_compile.c: `kiln compile INPUT -o model.kiln [options]`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kiln/kiln_compile.h"

static const char *HELP =
    "usage: kiln compile INPUT -o OUTPUT.kiln [options]\n"
    "\n"
    "Compiles a checkpoint into one program file holding the weights (once),\n"
    "the tokenizer, a KV cache and two methods: prefill and decode.\n"
    "INPUT: a llama2.c checkpoint (.bin, with --tokenizer), a GGUF file (llama,\n"
    "qwen2, qwen3), or a Hugging Face folder (config.json + safetensors).\n"
    "\n"
    "options:\n"
    "  -o, --output FILE    program to write (required)\n"
    "  --tokenizer FILE     tokenizer to store (llama2.c tokenizer.bin)\n"
    "  --prefill N          most tokens one prefill call takes (default 128)\n"
    "  --max-seq N          context length (default: the model's, at most 4096)\n"
    "  --quant FMT          matmul/embedding weights: keep (default), f32, f16,\n"
    "                       q8_0, q4_0; norms, biases and state are never touched\n"
    "  --quant-fallback     keep a weight that cannot take FMT (rows not whole\n"
    "                       blocks) as it is, and say so, instead of failing\n"
    "  --kv-type T          KV cache element type: f16 (default, half the memory)\n"
    "                       or f32\n"
    "  --no-pack            store q4_0 weights as imported instead of packed for\n"
    "                       the cpu kernels (q4_0x8: 8 rows interleaved)\n"
    "  --backend LIST       backends in order of preference, comma-separated\n"
    "                       (default: 'cpu'; nodes it cannot run fall back\n"
    "                       to 'ref' and are marked so in kiln info)\n"
    "  --check              after writing, run sample calls (a prefill of a few\n"
    "                       random tokens, then decodes) as compiled and on ref;\n"
    "                       print per partition (consecutive nodes on one\n"
    "                       backend) its worst node's own error (the node alone\n"
    "                       on its backend given ref's inputs: cosine, relative\n"
    "                       error) and its speed against ref; a partition below\n"
    "                       the threshold fails the compile, naming its worst node\n"
    "  --check=fallback     the same, but failing partitions are moved to ref\n"
    "                       (marked fallback in kiln info) and the program written\n"
    "  --check-threshold COS  the cosine each node's own output must reach, in\n"
    "                       (0, 1] (default 0.99)\n"
    "  -h, --help           this text\n"
    "\n"
    "examples:\n"
    "  kiln compile stories260K.bin --tokenizer tok512.bin -o stories.kiln\n"
    "  kiln compile SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.kiln --check\n";

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "kiln compile: %s\n", line);
}

int kiln_cmd_compile(int argc, char **argv) {
    kiln_compile_options o;
    kiln_compile_options_init(&o);
    const char *cmd = "compile";
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(HELP, stdout);
            return KILN_EXIT_OK;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(o.output = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(o.tokenizer = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--prefill")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_int(val, 1, 1 << 20, &v))
                return kiln_cli_usage_error(cmd, "--prefill must be an integer in 1..1048576, got '%s'", val);
            o.prefill = (int)v;
        } else if (!strcmp(a, "--max-seq")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_int(val, 1, 1 << 20, &v))
                return kiln_cli_usage_error(cmd, "--max-seq must be an integer in 1..1048576, got '%s'", val);
            o.max_seq = (int)v;
        } else if (!strcmp(a, "--quant")) {
            if (!(o.quant = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (strcmp(o.quant, "keep") && strcmp(o.quant, "f32") && strcmp(o.quant, "f16") &&
                strcmp(o.quant, "q8_0") && strcmp(o.quant, "q4_0"))
                return kiln_cli_usage_error(cmd, "--quant must be keep, f32, f16, q8_0 or q4_0, got '%s'", o.quant);
        } else if (!strcmp(a, "--kv-type")) {
            if (!(o.kv_type = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (strcmp(o.kv_type, "f16") && strcmp(o.kv_type, "f32"))
                return kiln_cli_usage_error(cmd, "--kv-type must be f16 or f32, got '%s'", o.kv_type);
        } else if (!strcmp(a, "--no-pack")) {
            o.no_pack = 1;
        } else if (!strcmp(a, "--quant-fallback")) {
            o.quant_fallback = 1;
        } else if (!strcmp(a, "--check")) {
            o.check = 1;
        } else if (!strncmp(a, "--check=", 8)) {
            if (strcmp(a + 8, "fallback"))
                return kiln_cli_usage_error(cmd, "--check takes no value or '=fallback', got '%s'", a);
            o.check = 2;
        } else if (!strcmp(a, "--check-threshold")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_float(val, 0, 1, &o.check_threshold) || !(o.check_threshold > 0))
                return kiln_cli_usage_error(cmd, "--check-threshold is a cosine in (0, 1], got '%s'", val);
        } else if (!strcmp(a, "--backend")) {
            if (!(o.backends = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (a[0] == '-' && a[1]) {
            return kiln_cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (!o.input) {
            o.input = a;
        } else {
            return kiln_cli_usage_error(cmd, "more than one input ('%s' and '%s')", o.input, a);
        }
    }
    if (!o.input) return kiln_cli_usage_error(cmd, "no input checkpoint given");
    if (!o.output) return kiln_cli_usage_error(cmd, "no output given (-o FILE)");
    if (o.check_threshold > 0 && !o.check)
        return kiln_cli_usage_error(cmd, "--check-threshold goes with --check");
    o.progress = kiln_cli_progress;
    o.log = log_line;
    kiln_status st = kiln_compile(&o);
    if (st) return kiln_cli_fail(cmd, st);
    fprintf(stderr, "kiln compile: wrote %s\n", o.output);
    return KILN_EXIT_OK;
}
