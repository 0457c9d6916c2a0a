/* introspect.h: read-only views of an open program for the developer tools
 * (devtools/devtools.h) and the library's own reports. Internal. */
#ifndef KILN_RUNTIME_INTROSPECT_H
#define KILN_RUNTIME_INTROSPECT_H

#include "ir/graph.h"
#include "ir/ops.h"
#include "kiln/kiln.h"

/* The module a program was read into (borrowed, lives as long as the
 * program; read-only: constants point into the mapped file). */
const kiln_module *kiln_program_module(const kiln_program *p);

/* 1 when this build has a backend called `name` (what a report checks
 * before it opens anything with that name), else 0. */
int kiln_backend_available(const char *name);

/* The path the program was opened from (borrowed, lives as long as it). */
const char *kiln_program_path(const kiln_program *p);

/* Bytes of the program file and the number of sections it holds. */
uint64_t kiln_program_file_bytes(const kiln_program *p);
int kiln_program_section_count(const kiln_program *p);
/* Section i (0 <= i < the count): its name ("weights"), offset, size and
 * stored CRC-32C; 0, or -1 when i is out of range. */
int kiln_program_section(const kiln_program *p, int i, const char **name, uint64_t *offset,
                         uint64_t *size, uint32_t *crc);

/* Whether node n runs on ref standing in for the backend the compiler was
 * asked for (kiln info's and the debugger's fallback column). */
int kiln_program_node_is_fallback(const kiln_program *p, const kiln_node *n);

/* The compute unit node n runs on given its inputs ("avx2 q4_1x8 x q8 dot"),
 * or NULL when its backend names none. Borrowed: static or valid until the
 * program is closed. */
const char *kiln_program_node_unit(const kiln_program *p, const kiln_node *n,
                                   const kiln_tensor *const *in);

/* Writes the names of the backends the nodes of `method` (-1: of every
 * method) run on, joined by '+' in the program's order ("cpu+ref"), into
 * buf (cap bytes, cut to fit). */
void kiln_program_backends_used(const kiln_program *p, int method, char *buf, size_t cap);

#endif
