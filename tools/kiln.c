/* kiln.c: the `kiln` command: dispatch to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *what;
} g_cmds[] = {
    {"compile", kiln_cmd_compile, "compile a checkpoint into a .kiln program"},
    {"info", kiln_cmd_info, "describe a program: methods, state, constants, backends"},
    {"generate", kiln_cmd_generate, "generate text or token ids from a prompt"},
    {"chat", kiln_cmd_chat, "chat with a model, turn by turn, keeping the KV cache"},
    {"tokenize", kiln_cmd_tokenize, "text to token ids, or ids back to text (--decode)"},
    {"perplexity", kiln_cmd_perplexity,
     "perplexity of a text, and KL divergence from a base program (llama.cpp's)"},
    {"bench", kiln_cmd_bench,
     "measure prompt and generation speed (like llama-bench), or the machine"},
    {"run", kiln_cmd_run,
     "run methods N times on given or random inputs, timed; write their outputs"},
    {"inspect", kiln_cmd_inspect,
     "read a trace: time per method, op, node and backend, roofline, memory"},
    {"debug", kiln_cmd_debug,
     "compare every node's output on a backend with a reference; find the bad one"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kiln <command> [options]\n       kiln --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof *g_cmds; i++)
        fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].what);
    fprintf(f, "\n'kiln <command> --help' describes a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return KILN_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kiln %s (program format %d)\n", kiln_version(), KILN_FORMAT_VERSION);
        return KILN_EXIT_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return KILN_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof g_cmds / sizeof *g_cmds; i++)
        if (!strcmp(argv[1], g_cmds[i].name)) {
            kiln_cli_install_signals();
            return kiln_cli_finish(g_cmds[i].name, g_cmds[i].run(argc - 1, argv + 1));
        }
    fprintf(stderr, "kiln: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return KILN_EXIT_USAGE;
}
