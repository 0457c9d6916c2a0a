/* machine.h: what this machine can do, measured: memory read bandwidth and
 * peak f32 FMA and int8 dot-product rates, on one thread and on N. `kiln
 * bench --machine` prints them and stores them in $KILN_CACHE/machine.json
 * for the profiler's roofline. Each kernel is compiled for its instruction
 * set with a per-function target attribute and chosen at run time, so the
 * library's generic build flags stay as they are. */
#ifndef KILN_RUNTIME_MACHINE_H
#define KILN_RUNTIME_MACHINE_H

#include <stddef.h>

#include "base/base.h"

/* Rates on one count of threads. */
typedef struct kiln_machine_rates {
    int n_threads;
    double mem_read_gbps; /* 10^9 bytes/s, read-only stream over the buffer, best of several */
    double f32_gflops;    /* 10^9 f32 flops/s (an FMA counts 2), best of several */
    double i8_gops;       /* 10^9 int8 ops/s (a multiply-add counts 2), best of several */
} kiln_machine_rates;

typedef struct kiln_machine_info {
    char cpu_model[128]; /* /proc/cpuinfo "model name" (or the ARM "CPU part"), else "unknown" */
    char date[32];       /* UTC, ISO 8601, when measured */
    const char
        *f32_kernel; /* e.g. "avx512f vfmadd231ps", "avx2 vfmadd231ps", "neon fmla", "scalar" */
    const char
        *i8_kernel;     /* e.g. "avx512vnni vpdpbusd", "avx2 vpmaddubsw", "neon sdot", "scalar" */
    uint64_t mem_bytes; /* size of the buffer streamed */
    kiln_machine_rates one; /* on 1 thread */
    kiln_machine_rates all; /* on n_threads */
} kiln_machine_info;

/* The CPU's model name into buf (never fails: "unknown" when unreadable). */
void kiln_machine_cpu_model(char *buf, size_t cap);

/* The cpu backend's kernel table here (what $KILN_CPU, else the CPU,
 * chooses) and whether AMX tiles are usable, as one line into buf, e.g.
 * "the avx512-vnni table; AMX tiles: not on this CPU". May ask the OS for
 * the AMX tile state (kernels.h: kiln_cpu_amx). */
void kiln_machine_cpu_backend(char *buf, size_t cap);

/* The name of that table ("avx512-vnni", ...), or NULL when $KILN_CPU names
 * one this CPU cannot run. */
const char *kiln_machine_cpu_table(void);

/* Measures on 1 and n_threads (1..1024) threads, streaming a buffer of
 * mem_bytes (at least 1 MiB; 1 GiB is well past any last-level cache).
 * Takes a few seconds. KILN_ERR_NOMEM when the buffer cannot be had,
 * KILN_ERR_INVALID_ARG for a count out of range. Not thread-safe with other
 * measurements (they would disturb each other). */
kiln_status kiln_machine_measure(int n_threads, uint64_t mem_bytes, kiln_machine_info *out);

/* Writes `info` as JSON to `path`, atomically (a temporary file beside it,
 * then rename). KILN_ERR_IO names the path. */
kiln_status kiln_machine_save(const kiln_machine_info *info, const char *path);

/* Reads what kiln_machine_save wrote (the profiler's peaks). Every field is
 * checked: the rates must be positive and finite, thread counts 1..1024.
 * f32_kernel and i8_kernel point to static strings: the kernel names this
 * build knows, else "unknown". KILN_ERR_IO when the file cannot be read,
 * KILN_ERR_FORMAT naming the file and the key otherwise; *out is only
 * written on success. */
kiln_status kiln_machine_load(const char *path, kiln_machine_info *out);

/* $KILN_CACHE/machine.json, else $HOME/.cache/kiln/machine.json; with
 * `create`, the folder is made too (for writing). KILN_ERR_IO when neither
 * variable is set or the folder cannot be made. */
kiln_status kiln_machine_default_path(char *buf, size_t cap, int create);

#endif /* KILN_RUNTIME_MACHINE_H */
