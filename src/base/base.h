/* base.h: what every module of the library shares: error reporting,
 * allocation, overflow-checked sizes, byte buffers with bounds-checked reads,
 * checksums, files, half floats, dtype facts, the clock. Internal: never
 * installed. */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

#if defined(__GNUC__)
#define KILN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_PRINTF(a, b)
#endif

/* ---- errors (status.c): set the thread's message, return the status ----- */
kiln_status kiln_error(kiln_status status, const char *fmt, ...) KILN_PRINTF(2, 3);
/* The status of the last kiln_error on this thread: lets a function whose
 * helpers return -1 (builders) pass the real status on. */
kiln_status kiln_last_status(void);
/* Prefixes the current message with more context ("compiling 'x': ..."). */
kiln_status kiln_error_wrap(kiln_status status, const char *fmt, ...) KILN_PRINTF(2, 3);

/* ---- allocation (alloc.c): one place to hook and to inject failures ----- */
void *kiln_malloc(size_t size);
void *kiln_calloc(size_t n, size_t size);
void *kiln_realloc(void *p, size_t size);
void kiln_free(void *p);
char *kiln_strdup(const char *s);
char *kiln_strndup(const char *s, size_t n);
/* 64-byte aligned, zeroed. */
void *kiln_aligned_alloc(size_t size);
void kiln_aligned_free(void *p);
/* Tests only: fail the n-th allocation from now (0 = never). */
void kiln_fail_alloc_after(long n);

/* ---- overflow-checked size arithmetic (here, inline) -------------------- */
/* *out = a * b, or 0 (and *out untouched) when that overflows. Inline: one
 * compare and one operation, which every reader runs per size it checks. */
static inline int kiln_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (a && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
/* *out = a + b, or 0 (and *out untouched) when that overflows. */
static inline int kiln_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}
static inline uint64_t kiln_align_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

/* ---- growable write buffer, little-endian (buf.c) ----------------------- */
typedef struct kiln_wbuf {
    uint8_t *data;
    size_t len, cap;
    int failed; /* an allocation failed; everything after is dropped */
} kiln_wbuf;

void kiln_wbuf_free(kiln_wbuf *b);
void kiln_wbuf_bytes(kiln_wbuf *b, const void *p, size_t n);
void kiln_wbuf_u8(kiln_wbuf *b, uint8_t v);
void kiln_wbuf_u32(kiln_wbuf *b, uint32_t v);
void kiln_wbuf_i32(kiln_wbuf *b, int32_t v);
void kiln_wbuf_u64(kiln_wbuf *b, uint64_t v);
void kiln_wbuf_f32(kiln_wbuf *b, float v);
void kiln_wbuf_f64(kiln_wbuf *b, double v);
void kiln_wbuf_str(kiln_wbuf *b, const char *s); /* u32 length + bytes */
void kiln_wbuf_strn(kiln_wbuf *b, const char *s, size_t n);

/* ---- bounds-checked reader (buf.c) -------------------------------------- */
/* Every read checks the bytes left; the first failure records a message
 * naming `what` (the file or section), the field and the offset, and makes
 * every later read fail too, so a parser can read a whole record and check
 * once. */
typedef struct kiln_rbuf {
    const uint8_t *data;
    size_t len, pos;
    uint64_t base;    /* offset of data[0] in the file, for messages */
    const char *what; /* "section 'methods' of model.kiln" */
    int failed;       /* 0, or the kiln_status of the first failure */
} kiln_rbuf;

void kiln_rbuf_init(kiln_rbuf *r, const void *data, size_t len, uint64_t base, const char *what);
uint8_t kiln_rbuf_u8(kiln_rbuf *r, const char *field);
uint32_t kiln_rbuf_u32(kiln_rbuf *r, const char *field);
int32_t kiln_rbuf_i32(kiln_rbuf *r, const char *field);
uint64_t kiln_rbuf_u64(kiln_rbuf *r, const char *field);
float kiln_rbuf_f32(kiln_rbuf *r, const char *field);
double kiln_rbuf_f64(kiln_rbuf *r, const char *field);
/* A u32 length then that many bytes, at most max_len; returns a borrowed
 * pointer (not NUL-terminated) or NULL. */
const char *kiln_rbuf_str(kiln_rbuf *r, const char *field, uint32_t max_len, uint32_t *len);
/* Same, returned as a new NUL-terminated string (caller frees); NULL on
 * failure. Embedded NUL bytes are refused. */
char *kiln_rbuf_strdup(kiln_rbuf *r, const char *field, uint32_t max_len);
const void *kiln_rbuf_bytes(kiln_rbuf *r, const char *field, size_t n);
/* A count that will be followed by at least `min_item_bytes` per item:
 * refused when the bytes left cannot hold that many, so an absurd count
 * never drives an allocation. */
uint32_t kiln_rbuf_count(kiln_rbuf *r, const char *field, uint32_t min_item_bytes);
/* Records a rule violation at the current offset (sets failed). */
void kiln_rbuf_fail(kiln_rbuf *r, const char *fmt, ...) KILN_PRINTF(2, 3);
/* KILN_OK, or the status of the first failure (message already set). */
kiln_status kiln_rbuf_status(const kiln_rbuf *r);

/* ---- checksums (crc32c.c) ----------------------------------------------- */
uint32_t kiln_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- files (file.c) ----------------------------------------------------- */
typedef struct kiln_file_map {
    const uint8_t *data;
    size_t size;
    int mapped; /* 1: munmap on close; 0: an empty file (data NULL) or memory the caller owns */
} kiln_file_map;

/* Maps a whole file read-only (KILN_ERR_IO names the path and the reason). */
kiln_status kiln_file_map_open(const char *path, kiln_file_map *map);
void kiln_file_map_close(kiln_file_map *map);
/* The last path component, for messages. */
const char *kiln_basename(const char *path);

/* ---- files written whole or not at all (outfile.c) ---------------------- */
/* An output file is written to "<path>.tmp.<pid>" next to it, synced, and
 * renamed into place only when every byte reached the disk; the folder is
 * synced after. A reader never sees half a file, a write error (a full
 * disk) leaves the old file as it was, and kiln_remove_temp_files (in a
 * signal handler) leaves no temporary behind. A link is followed (its
 * target is replaced, the link stays); a path that is no regular file
 * (/dev/stdout, a FIFO) is written directly. */
typedef struct kiln_outfile {
    FILE *f;          /* write through this */
    const char *path; /* as given, for messages */
    char *final;      /* where it lands: the path, or a link's target; NULL: direct */
    char *tmp;        /* what is written until commit; NULL: direct */
    int slot;         /* in the table of temporary files; -1: none */
    int finished;     /* 1: closed and synced, not yet renamed */
} kiln_outfile;

kiln_status kiln_outfile_open(kiln_outfile *o, const char *path);
/* Flushes, checks every write, fsyncs and closes: the bytes are complete
 * under o->tmp (verify them there before commit). On failure the
 * temporary is removed and the message names the path and the reason. */
kiln_status kiln_outfile_finish(kiln_outfile *o);
/* finish, then rename into place and sync the folder. Always releases o. */
kiln_status kiln_outfile_commit(kiln_outfile *o);
/* Closes and removes the temporary: the old file (if any) stays. */
void kiln_outfile_discard(kiln_outfile *o);
/* Temporary files written by other means, for kiln_remove_temp_files: a
 * slot (-1 when the table is full: still written, not removed by a
 * signal), given back by kiln_temp_untrack. */
int kiln_temp_track(const char *path);
void kiln_temp_untrack(int slot);
/* rename(2), then fsync of the folder. */
kiln_status kiln_file_rename_synced(const char *tmp, const char *path);

/* ---- half-precision conversions (fp16.c) -------------------------------- */
float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f);
float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);

/* ---- dtypes (dtype.c; kiln_dtype_name is in kiln.h) --------------------- */
size_t kiln_dtype_row_bytes(kiln_dtype dtype, int64_t n); /* 0 when n is not a whole block */
int kiln_dtype_block(kiln_dtype dtype);                   /* elements per block (1 for plain) */
int kiln_dtype_valid(uint32_t v);
/* Rows stored interleaved in groups of this many (8 for the packed x8
 * dtypes, 1 for the rest): a tensor's leading dim must be a multiple. */
int kiln_dtype_row_group(kiln_dtype dtype);
/* One past the largest kiln_dtype value (table sizes). */
#define KILN_DTYPE_END (KILN_Q6_K_X8 + 1)

/* ---- clock (clock.c) ---------------------------------------------------- */
/* Milliseconds on the monotonic clock (differences only). */
double kiln_now_ms(void);

#endif /* KILN_BASE_H */
