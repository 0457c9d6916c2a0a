/* cli.h: what every subcommand of `kiln` shares: the table-driven argument
 * parser (flags, ranges, help text, path roles), the generation flags of
 * `generate` and `chat`, exit codes (2 usage, 1 failure, 128 + a signal),
 * signals, the progress bar. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"
#include "kiln/kiln_llm.h"
#include "kiln/kiln_trace.h"

enum { KILN_EXIT_OK = 0, KILN_EXIT_FAIL = 1, KILN_EXIT_USAGE = 2 };

/* The signal (SIGINT, SIGTERM, SIGHUP) that asked the command to stop, or
 * 0. Long loops check it; the command then cleans up and exits
 * KILN_EXIT_INTERRUPTED: 128 + the signal (130, 143, 129), as a shell
 * reports a process the signal killed. */
extern volatile sig_atomic_t kiln_cli_interrupted;
#define KILN_EXIT_INTERRUPTED (128 + (kiln_cli_interrupted ? (int)kiln_cli_interrupted : SIGINT))
/* SIGINT, SIGTERM, SIGHUP: kiln_cli_interrupted (a second one: temporary
 * files removed, exit at once); SIGPIPE: temporary files removed, exit 141. */
void kiln_cli_install_signals(void);
/* After a command returned rc: 128 + the signal when one came; else
 * standard output is flushed and a write error (a full disk, /dev/full) is
 * said and makes the exit 1 (141 for a closed pipe, quietly). */
int kiln_cli_finish(const char *cmd, int rc);
/* 1 when a write to stdout has failed (right after the write: its errno is
 * kept for kiln_cli_finish's message); long outputs stop there. */
int kiln_cli_stdout_failed(void);
/* fflush(stdout), then kiln_cli_stdout_failed(). */
int kiln_cli_flush(void);

/* Prints "kiln CMD: message" and the hint to use --help; returns 2. */
int kiln_cli_usage_error(const char *cmd, const char *fmt, ...);
/* Prints "kiln CMD: <library message>"; returns 1 (130 when cancelled). */
int kiln_cli_fail(const char *cmd, kiln_status st);

/* Parses a whole decimal integer in [lo, hi]; 0 on success. */
int kiln_cli_int(const char *s, long long lo, long long hi, long long *out);

/* A progress callback for kiln_compile: a bar on stderr when it is a
 * terminal, stops on Ctrl-C. */
int kiln_cli_progress(void *user, const char *stage, uint64_t done, uint64_t total);

/* ---- the flag tables ---------------------------------------------------------
 *
 * Every subcommand describes its arguments in one static table of
 * kiln_cli_flag: the names, what the value is (its kind and range), where
 * it goes (an offset into the command's options struct), what it names on
 * disk (its path role), and its help line. kiln_cli_parse reads argv
 * against it, refuses bad values with "kiln CMD: ..." and exit code 2, and
 * prints `kiln CMD --help` from it. */

typedef enum kiln_cli_kind {
    KILN_CLI_END,    /* ends a table */
    KILN_CLI_SET,    /* no value: stores .lo into an int */
    KILN_CLI_SWITCH, /* "--x, --no-x", no value: 1 (the first name) or 0 into an int */
    KILN_CLI_INT,    /* an int in [lo, hi] */
    KILN_CLI_I64,    /* a long long in [lo, hi] (hi KILN_CLI_NO_MAX: LLONG_MAX) */
    KILN_CLI_FLOAT,  /* a finite float in [lo, hi] */
    KILN_CLI_DOUBLE, /* a finite double in [lo, hi] */
    KILN_CLI_STR,    /* a const char * (argv's own) */
    KILN_CLI_CHOICE, /* one of .choices: its index, into an int */
    KILN_CLI_NAME,   /* one of .choices: the string, into a const char * */
    KILN_CLI_STRS,   /* repeatable: each value appended to a kiln_cli_strs */
    KILN_CLI_INTS,   /* a comma-separated list of integers in [lo, hi], into a kiln_cli_ints */
    KILN_CLI_TABLE,  /* no flag: the flags of .table, their destinations .at into the options */
} kiln_cli_kind;

/* What a path value names: read or written, a file or a folder (both bits:
 * either). kiln_cli_parse refuses an output that is the same file or folder
 * as another path given (same device and inode, links followed). */
enum {
    KILN_CLI_IN = 1,
    KILN_CLI_OUT = 2,
    KILN_CLI_FILE = 4,
    KILN_CLI_DIR = 8,
    KILN_CLI_IN_FILE = KILN_CLI_IN | KILN_CLI_FILE,
    KILN_CLI_IN_DIR = KILN_CLI_IN | KILN_CLI_DIR,
    KILN_CLI_IN_PATH = KILN_CLI_IN | KILN_CLI_FILE | KILN_CLI_DIR,
    KILN_CLI_OUT_FILE = KILN_CLI_OUT | KILN_CLI_FILE,
    KILN_CLI_OUT_DIR = KILN_CLI_OUT | KILN_CLI_DIR,
};

/* Further rules of a flag (kiln_cli_flag.bits). */
enum {
    KILN_CLI_NONEMPTY = 1,   /* a string value may not be '' */
    KILN_CLI_OPEN_LO = 2,    /* numbers: lo itself is out of range */
    KILN_CLI_POSITIONAL = 4, /* the argument that is no flag (.names: its name in messages) */
};

#define KILN_CLI_NO_MAX 0x1p63 /* I64: no upper limit */
#define KILN_CLI_MAX_LIST 64

typedef struct kiln_cli_strs {
    const char *v[32];
    int n;
} kiln_cli_strs;

typedef struct kiln_cli_ints {
    int v[KILN_CLI_MAX_LIST];
    int n;
} kiln_cli_ints;

/* One flag. A table gives the first four fields in order and the rest by
 * name: {KILN_CLI_INT, "--top-k", "N", offsetof(options, top_k), .lo = 0,
 * .hi = 100, .help = "..."}. */
typedef struct kiln_cli_flag {
    kiln_cli_kind kind;
    const char *names; /* "-m, --model", as the help shows them */
    const char *arg;   /* the value in the help ("FILE"); NULL: none shown */
    size_t at;         /* the destination: offsetof(options, field) */
    double lo, hi;     /* numbers and lists: the range; SET: lo is the value */
    unsigned path;     /* KILN_CLI_IN_FILE ...: what the value names; 0: nothing on disk */
    unsigned bits;     /* KILN_CLI_NONEMPTY, KILN_CLI_OPEN_LO, KILN_CLI_POSITIONAL */
    /* Help lines joined by '\n'; "{default}" is the destination's value
     * after the command's init. NULL: not listed. */
    const char *help;
    /* A bad value's message after the flag's name: "must be -1 or a count
     * >= 0"; "{range}" is the range. NULL: made from the kind ("must be an
     * integer in {range}", "must be a, b or c"). A positional's: the
     * message for a second one, given both ('%s' and '%s'). */
    const char *rule;
    const char *shown;                 /* the name messages use; NULL: the name typed */
    const char *alias;                 /* more names, not in the help: "--iterations" */
    const char *const *choices;        /* CHOICE, NAME: NULL-terminated */
    int (*valid)(const void *value);   /* a further rule on the stored value: 0 breaks it */
    const struct kiln_cli_flag *table; /* TABLE */
} kiln_cli_flag;

typedef struct kiln_cli_command {
    const char *name;  /* "generate": messages say "kiln generate: ..." */
    const char *about; /* the help before "options:": usage, what it does */
    const char *notes; /* the help after the options: notes, examples */
    int column;        /* where the options' help starts */
    const kiln_cli_flag *flags;
    size_t size;                 /* of the options struct */
    void (*init)(void *options); /* its defaults */
    const char *unknown;         /* a flag not in the table, "%s": NULL = "unknown option '%s'" */
    const char *stray; /* an argument that is no flag where none is taken: NULL = .unknown */
} kiln_cli_command;

/* Runs cmd->init on `options`, then reads argv[1..argc) into it. Returns 1
 * when the command should go on; else 0 with *rc its exit code: 0 after
 * printing the help (-h, --help), 2 after a usage error. */
int kiln_cli_parse(const kiln_cli_command *cmd, int argc, char **argv, void *options, int *rc);

/* --backend cpu|ref: every node on one backend (kiln_open_options.backend);
 * `at` is the offset of a const char *. */
extern const char *const kiln_cli_backends[];
/* clang-format off */
#define KILN_CLI_BACKEND(at_)                                                                      \
    {KILN_CLI_NAME, "--backend", "cpu|ref", (at_), .choices = kiln_cli_backends,                   \
     .help = "run every node on this backend instead of the one\n"                                 \
             "the compiler chose"}
/* -t, --threads N: kiln_open_options.n_threads; `at` is the offset of an int. */
#define KILN_CLI_THREADS(at_)                                                                      \
    {KILN_CLI_INT, "-t, --threads", "N", (at_), .lo = 1, .hi = KILN_MAX_THREADS,                   \
     .rule = "must be a thread count in {range}", .shown = "-t",                                   \
     .help = "threads to compute with (default: $KILN_THREADS, else\n"                             \
             "every core this process may run on)"}
/* --qnn-lib DIR: the folder the qnn backend loads Qualcomm's QNN runtime
 * from (kiln_qnn_set_library_dir); `at` is the offset of a const char *.
 * kiln_cli_qnn_lib applies it. */
#define KILN_CLI_QNN_LIB(at_)                                                                      \
    {KILN_CLI_STR, "--qnn-lib", "DIR", (at_), .path = KILN_CLI_IN_DIR, .bits = KILN_CLI_NONEMPTY,  \
     .help = "folder of Qualcomm's QNN libraries (libQnnHtp.so ...)\n"                             \
             "for qnn partitions (default: $KILN_QNN_LIB, else\n"                                  \
             "~/.cache/kiln/qnn, filled by scripts/fetch-qnn.sh)"}
/* clang-format on */

/* --qnn-lib after parsing, before anything is opened or compiled: DIR
 * (NULL: not given, nothing done) must be an existing folder, then
 * kiln_qnn_set_library_dir(DIR). 0, or the exit code after the message: 2
 * when DIR is no folder, 1 when the library refuses it. */
int kiln_cli_qnn_lib(const char *cmd, const char *dir);

/* The generation flags `generate` and `chat` share, as llama.cpp names them
 * (kiln_cli_sampling_flags): -n, --temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --seed, and how the program is opened:
 * -t/--threads, --backend and --qnn-lib. */
typedef struct kiln_cli_sampling {
    kiln_generate_options gen; /* defaults: kiln_generate_options_init's */
    long long seed;            /* -1 (default): a random one (kiln_cli_sampling_seed) */
    kiln_open_options open;    /* all zero: the library's defaults */
    const char *qnn_lib;       /* --qnn-lib: NULL = not given (kiln_cli_qnn_lib) */
} kiln_cli_sampling;

extern const kiln_cli_flag kiln_cli_sampling_flags[];
void kiln_cli_sampling_init(kiln_cli_sampling *s);
/* Sets gen.seed from --seed; -1 becomes a random one, printed on stderr
 * when sampling is not greedy. */
void kiln_cli_sampling_seed(const char *cmd, kiln_cli_sampling *s);

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
kiln_status kiln_cli_chat_format(const kiln_program *prog, const char *override,
                                 kiln_chat_format *out);
/* Encodes a rendered chat (special tokens parsed; BOS only where the
 * tokenizer adds one and the text lacks it) into *ids (free()). */
kiln_status kiln_cli_chat_encode(const kiln_tokenizer *tok, const char *text, size_t len,
                                 int32_t **ids, int *n_ids);

/* Images (cmd_chat.c). The model's image placeholder, as its tokenizer
 * writes vision start, image pad and vision end, into *out (free()). */
kiln_status kiln_cli_image_placeholder(const kiln_llm *lm, const kiln_tokenizer *tok, char **out);
/* n placeholders, then text, into *out (free()): a user turn of n images
 * and then text, as Qwen3-VL's template renders it. */
kiln_status kiln_cli_images_then_text(const char *placeholder, int n, const char *text, char **out);
/* An error unless ids hold one image pad per image (n_imgs), in the
 * program's pad id; said before any image is decoded. */
kiln_status kiln_cli_image_check(const kiln_llm *lm, const int32_t *ids, int n_ids, int n_imgs);
/* Loads an image file (PNG, JPEG, uint8 .npy) and encodes it into *out;
 * info (when not NULL) receives a line of what was done: its size, the
 * size it was resized to, its tokens and the time taken. */
kiln_status kiln_cli_image_encode(kiln_session *sess, const kiln_llm *lm, const char *path,
                                  kiln_llm_image **out, char *info, size_t info_size);
/* Replaces ids' image pads, one per image, by each image's run of pads;
 * *row_serial (when not NULL; free()) receives per row serial[k] of the
 * image it belongs to (k + 1 without serial), 0 for text. An error when the
 * pads are not one per image. */
kiln_status kiln_cli_image_expand(const kiln_llm *lm, int32_t **ids, int *n_ids,
                                  kiln_llm_image *const *imgs, int n_imgs, const int *serial,
                                  int **row_serial);

#endif
