/* json.h: a small strict JSON parser (RFC 8259) for the files that come with
 * checkpoints (config.json, safetensors headers, shard indexes). The parse
 * builds a tree in one arena owned by the document; strings are decoded to
 * UTF-8 (escapes and surrogate pairs included, invalid UTF-8 refused);
 * numbers keep their double value and, when integral, an exact int64. Every
 * error names the source, the byte offset (with line and column) and what
 * was expected there. Not thread-safe per document; documents are
 * independent. */
#ifndef KILN_JSON_H
#define KILN_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

typedef enum kiln_json_type {
    KILN_JSON_NULL = 0,
    KILN_JSON_BOOL = 1,
    KILN_JSON_NUMBER = 2,
    KILN_JSON_STRING = 3,
    KILN_JSON_ARRAY = 4,
    KILN_JSON_OBJECT = 5,
} kiln_json_type;

typedef struct kiln_json kiln_json;
struct kiln_json {
    kiln_json_type type;
    int b;            /* BOOL: 0 or 1 */
    int is_int;       /* NUMBER: integral and exactly representable as int64 (2.0, 1e3 too) */
    int64_t i;        /* NUMBER: the value when is_int */
    int int_syntax;   /* NUMBER: written as an integer: '-'? digits, no fraction, no exponent */
    int is_u64;       /* NUMBER: written as an integer in 0..2^64-1 (no '-') */
    uint64_t u;       /* NUMBER: the value when is_u64 */
    double num;       /* NUMBER: the value (finite) */
    const char *s;    /* STRING: UTF-8, NUL-terminated; may hold NUL bytes (\u0000), see len */
    size_t len;       /* STRING: bytes (without the terminator); ARRAY/OBJECT: element count */
    kiln_json *items; /* ARRAY: len values; OBJECT: len member values, in file order */
    kiln_json *keys;  /* OBJECT: len member names (STRING values), parallel to items */
    uint32_t *sorted; /* OBJECT: member indices sorted by name (lookups) */
    size_t offset;    /* byte offset of the value's first character in the source */
};

/* A parsed document: the root and the arena everything lives in. */
typedef struct kiln_json_doc {
    kiln_json *root;
    void *arena; /* owned */
} kiln_json_doc;

#define KILN_JSON_MAX_DEPTH 128

/* Parses `len` bytes (not necessarily NUL-terminated) as one JSON value
 * surrounded by optional whitespace. `what` names the source in messages
 * ("'config.json'"). Objects with a repeated member name are refused.
 * `max_depth`: nesting limit (0 = KILN_JSON_MAX_DEPTH). On failure returns
 * KILN_ERR_FORMAT (or KILN_ERR_NOMEM) with a message like
 * "'config.json': byte 57 (line 3, column 12): expected ',' or '}' after an
 * object member, found 'x'", and leaves `doc` empty. */
kiln_status kiln_json_parse(const char *text, size_t len, const char *what, int max_depth,
                            kiln_json_doc *doc);
/* Frees the arena; NULL or an empty document is a no-op. */
void kiln_json_free(kiln_json_doc *doc);

/* Writes s as a JSON string literal (quotes, \" \\ and \u00XX escapes for
 * control bytes; other bytes as they are). */
void kiln_json_fput_str(FILE *f, const char *s);

/* "null", "a boolean", "a number", "a string", "an array", "an object". */
const char *kiln_json_type_name(kiln_json_type t);

/* The member `key` of an object, or NULL when obj is not an object or has no
 * such member. Borrowed from the document. */
const kiln_json *kiln_json_get(const kiln_json *obj, const char *key);

/* Typed getters. A member that is absent or null is "not there": an error
 * (KILN_ERR_FORMAT, "<what>: key 'x' is missing") when `required`, else
 * KILN_OK with *out untouched. A member of the wrong type is an error
 * naming what, the key, the type wanted and the type found with its byte
 * offset ("'config.json': key 'hidden_size' should be an integer, found a
 * string (byte 120)"). */
kiln_status kiln_json_get_int(const kiln_json *obj, const char *what, const char *key, int required,
                              int64_t *out);
kiln_status kiln_json_get_num(const kiln_json *obj, const char *what, const char *key, int required,
                              double *out);
kiln_status kiln_json_get_bool(const kiln_json *obj, const char *what, const char *key,
                               int required, int *out);
/* *out borrows the document's string (NUL-terminated); *len may be NULL. */
kiln_status kiln_json_get_str(const kiln_json *obj, const char *what, const char *key, int required,
                              const char **out, size_t *len);
/* Strict integers, for formats whose integers are written as such: the
 * member must be written as a JSON integer ('-'? digits: 1.5, 2.0 and 1e3
 * are refused) whose value lies in min..max (kiln_json_get_i64) or 0..max
 * (kiln_json_get_u64, up to 2^64-1). Absent and null as above. A wrong value
 * is an error naming what, the key, the range and what was found ("'t.trace'
 * line 3: key 'bytes' should be an integer in 0..18446744073709551615, found
 * an integer beyond 64 bits (byte 212)"). */
kiln_status kiln_json_get_i64(const kiln_json *obj, const char *what, const char *key, int required,
                              int64_t min, int64_t max, int64_t *out);
kiln_status kiln_json_get_u64(const kiln_json *obj, const char *what, const char *key, int required,
                              uint64_t max, uint64_t *out);
/* Members that must be an object / an array. */
kiln_status kiln_json_get_obj(const kiln_json *obj, const char *what, const char *key, int required,
                              const kiln_json **out);
kiln_status kiln_json_get_arr(const kiln_json *obj, const char *what, const char *key, int required,
                              const kiln_json **out);

#endif /* KILN_JSON_H */
