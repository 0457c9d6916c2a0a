/* format.h: the on-disk layout of a `.kiln` program (docs/FORMAT.md is the
 * byte-by-byte specification). All integers little-endian. */
#ifndef KILN_FORMAT_H
#define KILN_FORMAT_H

#include "ir/graph.h"

#define KILN_MAGIC "KILNPRGM" /* 8 bytes at offset 0 */
#define KILN_HEADER_SIZE 64
#define KILN_SECTION_ENTRY_SIZE 32
#define KILN_WEIGHT_ALIGN 64
#define KILN_MAX_SECTIONS 64
#define KILN_WRITER_LEN 16

/* Header fields (offsets). The magic and the version stay where they are in
 * every future version, so any reader can say which version wrote a file. */
enum {
    KILN_HDR_MAGIC = 0,         /* char[8] "KILNPRGM" */
    KILN_HDR_VERSION = 8,       /* u32 format version */
    KILN_HDR_HEADER_SIZE = 12,  /* u32, 64 */
    KILN_HDR_FILE_SIZE = 16,    /* u64 total file size */
    KILN_HDR_N_SECTIONS = 24,   /* u32 */
    KILN_HDR_FLAGS = 28,        /* u32, 0 */
    KILN_HDR_TABLE_OFFSET = 32, /* u64 offset of the section table */
    KILN_HDR_WRITER = 40,       /* char[16] "kiln 0.1.0", NUL-padded */
    KILN_HDR_RESERVED = 56,     /* u32 0 */
    KILN_HDR_CRC = 60,          /* u32 CRC-32C of bytes 0..59 */
};

typedef enum kiln_section_kind {
    KILN_SEC_META = 1,
    KILN_SEC_TOKENIZER = 2,
    KILN_SEC_STATE = 3,
    KILN_SEC_METHODS = 4,
    KILN_SEC_CONSTS = 5,  /* the constant table */
    KILN_SEC_WEIGHTS = 6, /* constant data, 64-byte aligned, used in place */
    KILN_SEC_BLOBS = 7,   /* what backends prepared (FORMAT.md 7.6), 64-byte aligned */
} kiln_section_kind;

typedef struct kiln_section {
    uint32_t kind;
    uint32_t align;
    uint64_t offset, size;
    uint32_t crc; /* CRC-32C of the section bytes */
    uint32_t flags;
} kiln_section;

const char *kiln_section_name(uint32_t kind);

/* Writes a verified, planned module to `path` (see writer.c): whole or not
 * at all (kiln_outfile). */
kiln_status kiln_program_write(const kiln_module *m, const char *path,
                               int (*progress)(void *, const char *, uint64_t, uint64_t),
                               void *user);
/* The same into an open file (`path` for messages); the caller checks the
 * file's errors when it closes it (kiln_outfile_finish). */
kiln_status kiln_program_write_to(const kiln_module *m, FILE *f, const char *path,
                                  int (*progress)(void *, const char *, uint64_t, uint64_t),
                                  void *user);

/* Parses a mapped program into `m` (consts point into `data`), checking
 * every field; sections[] receives the section table (for verify). */
kiln_status kiln_program_parse(const uint8_t *data, uint64_t size, const char *path, kiln_module *m,
                               kiln_section *sections, int *n_sections);

#endif /* KILN_FORMAT_H */
