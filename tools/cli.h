/* cli.h: what every subcommand of `kiln` shares: argument parsing that
 * refuses bad numbers, exit codes (2 usage, 1 failure), Ctrl-C handling, the
 * progress bar. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <signal.h>
#include <stdint.h>

#include "kiln/kiln.h"
#include "kiln/kiln_llm.h"
#include "kiln/kiln_trace.h"

enum { KILN_EXIT_OK = 0, KILN_EXIT_FAIL = 1, KILN_EXIT_USAGE = 2, KILN_EXIT_INTERRUPTED = 130 };

extern volatile sig_atomic_t kiln_cli_interrupted;
void kiln_cli_install_sigint(void);

/* Prints "kiln CMD: message" and the hint to use --help; returns 2. */
int kiln_cli_usage_error(const char *cmd, const char *fmt, ...);
/* Prints "kiln CMD: <library message>"; returns 1 (130 when cancelled). */
int kiln_cli_fail(const char *cmd, kiln_status st);

/* Parses a whole decimal integer in [lo, hi]; 0 on success. */
int kiln_cli_int(const char *s, long long lo, long long hi, long long *out);
/* Parses a finite float in [lo, hi]. */
int kiln_cli_float(const char *s, double lo, double hi, double *out);

/* The value after a flag: argv[++*i], or NULL (usage error printed). */
const char *kiln_cli_value(const char *cmd, int argc, char **argv, int *i);

/* A progress callback for kiln_compile: a bar on stderr when it is a
 * terminal, stops on Ctrl-C. */
int kiln_cli_progress(void *user, const char *stage, uint64_t done, uint64_t total);

/* The generation flags `generate` and `chat` share, as llama.cpp names them:
 * -n, --temp, --seed, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, and -t/--threads (how the program is opened). */
typedef struct kiln_cli_sampling {
    long long n_predict, seed, top_k, repeat_last_n;
    double temp, top_p, min_p, repeat_penalty;
    long long n_threads; /* 0: the library's default ($KILN_THREADS, else all cores) */
} kiln_cli_sampling;

void kiln_cli_sampling_init(kiln_cli_sampling *s); /* llama.cpp's defaults, random seed */
/* Parses argv[*i] if it is one of those flags: 1 consumed, 0 not one of
 * them, -1 a usage error (printed). */
int kiln_cli_sampling_flag(const char *cmd, int argc, char **argv, int *i, kiln_cli_sampling *s);
/* Fills the options; a seed of -1 becomes a random one, printed on stderr
 * when sampling is not greedy. */
void kiln_cli_sampling_apply(const char *cmd, kiln_cli_sampling *s, kiln_generate_options *o);
/* Opens the program with the flags' open options (-t). */
kiln_status kiln_cli_open_program(const char *path, const kiln_cli_sampling *s, kiln_program **out);

int kiln_cmd_compile(int argc, char **argv);
int kiln_cmd_info(int argc, char **argv);
int kiln_cmd_generate(int argc, char **argv);
int kiln_cmd_tokenize(int argc, char **argv);
int kiln_cmd_chat(int argc, char **argv);
int kiln_cmd_perplexity(int argc, char **argv);
int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_debug(int argc, char **argv);
int kiln_cmd_bench(int argc, char **argv);
int kiln_cmd_inspect(int argc, char **argv);

/* Chat helpers (cmd_chat.c). The format: `override` (a name, or a Jinja
 * file whose text is detected) when given, else the program's template. */
kiln_status kiln_cli_chat_format(const kiln_program *prog, const char *override, kiln_chat_format *out);
/* Encodes a rendered chat (special tokens parsed; BOS only where the
 * tokenizer adds one and the text lacks it) into *ids (free()). */
kiln_status kiln_cli_chat_encode(const kiln_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                 int *n_ids);

#endif
