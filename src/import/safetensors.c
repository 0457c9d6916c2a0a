/* safetensors.c: the safetensors container and sharded checkpoints. The
 * header is parsed with the strict JSON parser; each tensor's dtype, shape
 * and data_offsets are checked against each other and the file, and the
 * tensors must cover the data exactly, as the reference reader requires: no
 * overlap, no hole, no byte after the last. Shards come from
 * model.safetensors.index.json and are mapped once each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "import/safetensors.h"

/* Every dtype of the format, with its width in bits; `dtype` is what Kiln
 * reads it as (-1: known, not read). */
static const struct {
    const char *name;
    int bits;
    int dtype;
} DTYPES[] = {
    {"F32", 32, KILN_F32},  {"F16", 16, KILN_F16}, {"BF16", 16, KILN_BF16}, {"F64", 64, -1},
    {"I64", 64, -1},        {"U64", 64, -1},       {"I32", 32, -1},         {"U32", 32, -1},
    {"I16", 16, -1},        {"U16", 16, -1},       {"I8", 8, -1},           {"U8", 8, -1},
    {"BOOL", 8, -1},        {"F8_E4M3", 8, -1},    {"F8_E5M2", 8, -1},      {"F8_E4M3FNUZ", 8, -1},
    {"F8_E5M2FNUZ", 8, -1}, {"F8_E8M0", 8, -1},    {"F6_E2M3", 6, -1},      {"F6_E3M2", 6, -1},
    {"F4", 4, -1},          {"C64", 64, -1},
};

static kiln_status grow_tensors(kiln_safetensors *st) {
    if (st->n_tensors < st->cap_tensors) return KILN_OK;
    size_t cap = st->cap_tensors ? st->cap_tensors * 2 : 64;
    kiln_st_tensor *t = kiln_realloc(st->tensors, cap * sizeof *t);
    if (!t) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    st->tensors = t;
    st->cap_tensors = cap;
    return KILN_OK;
}

const kiln_st_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

void kiln_safetensors_free(kiln_safetensors *st) {
    for (size_t i = 0; st->tensors && i < st->n_tensors; i++)
        kiln_free(st->tensors[i].name);
    kiln_free(st->tensors);
    for (int i = 0; i < st->n_files; i++)
        kiln_free(st->files[i]);
    memset(st, 0, sizeof *st);
}

/* Reads one tensor entry `name: {dtype, shape, data_offsets}` into t. */
static kiln_status read_entry(const kiln_json *key, const kiln_json *v, const char *file,
                              uint64_t data_size, kiln_st_tensor *t) {
    const char *name = key->s;
    char what[600];
    snprintf(what, sizeof what, "'%s': tensor '%.300s'", file, name);
    if (strlen(name) != key->len || key->len == 0)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': a tensor name in the header is empty or holds a NUL byte", file);
    if (v->type != KILN_JSON_OBJECT)
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: should be an object {dtype, shape, data_offsets}, found %s (header byte %zu)",
            what, kiln_json_type_name(v->type), v->offset);
    const char *dt;
    const kiln_json *shape, *offs;
    kiln_status s;
    if ((s = kiln_json_get_str(v, what, "dtype", 1, &dt, NULL)) ||
        (s = kiln_json_get_arr(v, what, "shape", 1, &shape)) ||
        (s = kiln_json_get_arr(v, what, "data_offsets", 1, &offs)))
        return s;
    t->dtype_name = NULL;
    int bits = 0;
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (!strcmp(dt, DTYPES[i].name)) {
            t->dtype_name = DTYPES[i].name;
            t->dtype = DTYPES[i].dtype;
            bits = DTYPES[i].bits;
        }
    if (!t->dtype_name)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s has unknown dtype '%.40s' (safetensors dtypes: F64 F32 F16 BF16 "
                          "I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_* F6_* F4 C64)",
                          what, dt);
    if (shape->len > KILN_ST_MAX_DIMS)
        return kiln_error(KILN_ERR_FORMAT, "%s has %zu dims (at most %d)", what, shape->len,
                          KILN_ST_MAX_DIMS);
    t->ndim = (int)shape->len;
    uint64_t elems = 1;
    for (size_t d = 0; d < shape->len; d++) {
        const kiln_json *e = &shape->items[d];
        if (e->type != KILN_JSON_NUMBER || !e->is_int || e->i < 0)
            return kiln_error(
                KILN_ERR_FORMAT,
                "%s: shape[%zu] should be a non-negative integer, found %s (header byte %zu)", what,
                d,
                e->type == KILN_JSON_NUMBER ? "a negative or fractional number"
                                            : kiln_json_type_name(e->type),
                e->offset);
        t->shape[d] = e->i;
        if (!kiln_mul_ok(elems, (uint64_t)e->i, &elems) || elems > ((uint64_t)1 << 56))
            return kiln_error(KILN_ERR_FORMAT, "%s: the shape has too many elements", what);
    }
    if (offs->len != 2)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: data_offsets should be [begin, end], found %zu numbers", what,
                          offs->len);
    uint64_t be[2];
    for (int k = 0; k < 2; k++) {
        const kiln_json *e = &offs->items[k];
        if (e->type != KILN_JSON_NUMBER || !e->is_int || e->i < 0)
            return kiln_error(
                KILN_ERR_FORMAT,
                "%s: data_offsets[%d] should be a non-negative integer (header byte %zu)", what, k,
                e->offset);
        be[k] = (uint64_t)e->i;
    }
    uint64_t bit_total = elems * (uint64_t)bits; /* elems < 2^56, bits <= 64: no overflow */
    if (bit_total % 8)
        return kiln_error(KILN_ERR_FORMAT, "%s: %llu elements of %s do not fill whole bytes", what,
                          (unsigned long long)elems, t->dtype_name);
    t->nbytes = bit_total / 8;
    if (be[1] < be[0])
        return kiln_error(KILN_ERR_FORMAT, "%s: data_offsets [%llu, %llu] end before they begin",
                          what, (unsigned long long)be[0], (unsigned long long)be[1]);
    if (be[1] - be[0] != t->nbytes) {
        char sh[96];
        int64_t ne4[4] = {0};
        for (int d = 0; d < t->ndim && d < 4; d++)
            ne4[d] = t->shape[d];
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu",
                          what, (unsigned long long)be[0], (unsigned long long)be[1],
                          (unsigned long long)(be[1] - be[0]), t->dtype_name,
                          kiln_shape_str(t->ndim < 4 ? t->ndim : 4, ne4, sh, sizeof sh),
                          (unsigned long long)t->nbytes);
    }
    if (be[1] > data_size)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: data_offsets [%llu, %llu] run past the end of the data (%llu bytes; "
                          "truncated file?)",
                          what, (unsigned long long)be[0], (unsigned long long)be[1],
                          (unsigned long long)data_size);
    t->offset = be[0];
    return KILN_OK;
}

/* By (begin, end): an empty tensor sorts before a tensor at its offset. */
static int by_offset(const void *a, const void *b) {
    const kiln_st_tensor *x = *(const kiln_st_tensor *const *)a,
                         *y = *(const kiln_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* The tensors of one file, order[k] sorted by offset, must tile its data
 * [data_start, data_start + data_size) exactly, as the reference reader
 * requires: each begins where the one before ends. A header length a byte
 * short (with padding spaces) shifts every tensor and leaves a byte over at
 * the end; a hole or an overlap is a damaged header. An empty tensor may sit
 * at any boundary, not inside another tensor. */
static kiln_status check_coverage(const char *file, const kiln_st_tensor **order, size_t k,
                                  uint64_t data_start, uint64_t data_size) {
    uint64_t pos = 0;                  /* data bytes [0, pos) are covered */
    const kiln_st_tensor *prev = NULL; /* the tensor that ends at pos */
    for (size_t i = 0; i < k; i++) {
        const kiln_st_tensor *t = order[i];
        uint64_t b = t->offset - data_start, e = b + t->nbytes;
        if (b > pos) {
            char where[480];
            if (prev)
                snprintf(where, sizeof where, "between tensors '%.200s' and '%.200s'", prev->name,
                         t->name);
            else
                snprintf(where, sizeof where, "before the first tensor, '%.200s'", t->name);
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': data bytes [%llu, %llu) (%llu bytes at file offset %llu, %s) "
                              "are not covered by any tensor",
                              file, (unsigned long long)pos, (unsigned long long)b,
                              (unsigned long long)(b - pos), (unsigned long long)(data_start + pos),
                              where);
        }
        if (b < pos) {
            unsigned long long pb = prev->offset - data_start;
            if (t->nbytes == 0)
                return kiln_error(KILN_ERR_FORMAT,
                                  "'%s': empty tensor '%.200s' (data_offsets [%llu, %llu]) lies "
                                  "inside tensor '%.200s' (data_offsets [%llu, %llu])",
                                  file, t->name, (unsigned long long)b, (unsigned long long)e,
                                  prev->name, pb, pb + prev->nbytes);
            return kiln_error(
                KILN_ERR_FORMAT,
                "'%s': tensors '%.200s' (data_offsets [%llu, %llu]) and '%.200s' (data_offsets "
                "[%llu, %llu]) overlap",
                file, prev->name, pb, pb + prev->nbytes, t->name, (unsigned long long)b,
                (unsigned long long)e);
        }
        if (t->nbytes || !prev) prev = t;
        pos = e;
    }
    if (pos < data_size) {
        if (!prev)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': the header lists no tensor, but %llu bytes of data follow it "
                              "(file offset %llu; a wrong header length?)",
                              file, (unsigned long long)data_size, (unsigned long long)data_start);
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': %llu trailing byte%s after the last tensor, '%.200s' (data "
                          "bytes [%llu, %llu) at file offset %llu are not covered by any tensor; "
                          "a wrong header length?)",
                          file, (unsigned long long)(data_size - pos),
                          data_size - pos == 1 ? "" : "s", prev->name, (unsigned long long)pos,
                          (unsigned long long)data_size, (unsigned long long)(data_start + pos));
    }
    return KILN_OK;
}

/* The header's last byte that is not JSON whitespace (the reference writer
 * pads with spaces) must close its object: else the header length is wrong
 * or the header was cut, which says more than the JSON error would. */
static kiln_status check_header_end(const char *file, const uint8_t *h, uint64_t n) {
    uint64_t e = n;
    while (e > 1 && (h[e - 1] == ' ' || h[e - 1] == '\t' || h[e - 1] == '\n' || h[e - 1] == '\r'))
        e--;
    if (h[e - 1] == '}') return KILN_OK;
    char c[16];
    if (h[e - 1] >= 0x20 && h[e - 1] < 0x7f)
        snprintf(c, sizeof c, "'%c'", h[e - 1]);
    else
        snprintf(c, sizeof c, "byte 0x%02x", h[e - 1]);
    return kiln_error(KILN_ERR_FORMAT,
                      "'%s': the header (%llu bytes from file byte 8, as the header length says) "
                      "ends with %s at file byte %llu, not '}': the header length is wrong, or "
                      "the header is cut",
                      file, (unsigned long long)n, c, (unsigned long long)(8 + e - 1));
}

kiln_status kiln_safetensors_parse(kiln_safetensors *st, const uint8_t *data, uint64_t size,
                                   const char *path) {
    const char *file = kiln_basename(path);
    if (st->n_files == KILN_IMPORT_MAX_FILES)
        return kiln_error(KILN_ERR_INVALID_ARG, "'%s': more than %d safetensors files", file,
                          KILN_IMPORT_MAX_FILES);
    if (size < 8)
        return kiln_error(
            KILN_ERR_FORMAT,
            "'%s': %llu bytes, too short for the 8-byte header length (truncated file?)", file,
            (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | data[i];
    if (n > KILN_ST_MAX_HEADER)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': header length %llu exceeds the limit of %llu bytes", file,
                          (unsigned long long)n, (unsigned long long)KILN_ST_MAX_HEADER);
    if (n > size - 8)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': header length %llu runs past the end of the file (%llu bytes; "
                          "truncated file, or not safetensors?)",
                          file, (unsigned long long)n, (unsigned long long)size);
    if (n == 0 || data[8] != '{')
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': the header at byte 8 does not start with '{' (not safetensors?)",
                          file);
    kiln_status s = check_header_end(file, data + 8, n);
    if (s) return s;
    char what[600];
    snprintf(what, sizeof what, "'%s': header (JSON of %llu bytes from file byte 8)", file,
             (unsigned long long)n);
    kiln_json_doc doc;
    if ((s = kiln_json_parse((const char *)data + 8, (size_t)n, what, 0, &doc))) return s;
    const kiln_json *root = doc.root;
    uint64_t data_start = 8 + n, data_size = size - data_start;
    size_t first = st->n_tensors;
    const kiln_st_tensor **order = NULL;
    if (root->type != KILN_JSON_OBJECT) {
        s = kiln_error(KILN_ERR_FORMAT, "%s: should be an object, found %s", what,
                       kiln_json_type_name(root->type));
        goto done;
    }
    if (!(st->files[st->n_files] = kiln_strdup(file))) {
        s = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int fi = st->n_files++;
    for (size_t i = 0; i < root->len; i++) {
        const kiln_json *key = &root->keys[i], *v = &root->items[i];
        if (!strcmp(key->s, "__metadata__")) { /* free-form strings */
            if (v->type != KILN_JSON_OBJECT) {
                s = kiln_error(KILN_ERR_FORMAT, "'%s': __metadata__ should be an object, found %s",
                               file, kiln_json_type_name(v->type));
                goto done;
            }
            for (size_t j = 0; j < v->len; j++)
                if (v->items[j].type != KILN_JSON_STRING) {
                    s = kiln_error(KILN_ERR_FORMAT,
                                   "'%s': __metadata__ key '%.200s' should be a string, found %s",
                                   file, v->keys[j].s, kiln_json_type_name(v->items[j].type));
                    goto done;
                }
            continue;
        }
        if ((s = grow_tensors(st))) goto done;
        kiln_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        if ((s = read_entry(key, v, file, data_size, t))) goto done;
        const kiln_st_tensor *dup = kiln_safetensors_find(st, key->s);
        if (dup) {
            s = kiln_error(KILN_ERR_FORMAT, "'%s': tensor '%.300s' is also in '%s'", file, key->s,
                           st->files[dup->file]);
            goto done;
        }
        if (!(t->name = kiln_strdup(key->s))) {
            s = kiln_error(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        t->file = fi;
        t->data = data + data_start + t->offset;
        t->offset += data_start;
        st->n_tensors++;
    }
    /* The tensors of this file tile its data. */
    size_t nt = st->n_tensors - first;
    if (!(order = kiln_malloc((nt ? nt : 1) * sizeof *order))) {
        s = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nt; i++)
        order[i] = &st->tensors[first + i];
    qsort(order, nt, sizeof *order, by_offset);
    s = check_coverage(file, order, nt, data_start, data_size);
done:
    kiln_free(order);
    kiln_json_free(&doc);
    return s;
}

static kiln_status join(char *out, size_t cap, const char *dir, const char *name) {
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap)
        return kiln_error(KILN_ERR_INVALID_ARG, "path '%s/%s' is too long", dir, name);
    return KILN_OK;
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static kiln_status map_and_parse(kiln_import *imp, const char *path, kiln_safetensors *st) {
    const kiln_file_map *map;
    kiln_status s = kiln_import_map(imp, path, &map);
    return s ? s : kiln_safetensors_parse(st, map->data, map->size, path);
}

/* The shards of an index, each parsed once; then every weight_map entry
 * must be in the shard it names. */
static kiln_status open_sharded(kiln_import *imp, const char *dir, const char *index_path,
                                kiln_safetensors *st) {
    const char *ifile = kiln_basename(index_path);
    kiln_file_map im;
    kiln_status s = kiln_file_map_open(index_path, &im);
    if (s) return s;
    char what[600], path[4200];
    snprintf(what, sizeof what, "'%s'", ifile);
    kiln_json_doc doc;
    s = kiln_json_parse((const char *)im.data, im.size, what, 0, &doc);
    kiln_file_map_close(&im);
    if (s) return s;
    const kiln_json *wm = NULL;
    if (doc.root->type != KILN_JSON_OBJECT) {
        s = kiln_error(KILN_ERR_FORMAT, "%s: should be an object with a weight_map, found %s", what,
                       kiln_json_type_name(doc.root->type));
        goto done;
    }
    if ((s = kiln_json_get_obj(doc.root, what, "weight_map", 1, &wm))) goto done;
    if (wm->len == 0) {
        s = kiln_error(KILN_ERR_FORMAT, "%s: weight_map is empty", what);
        goto done;
    }
    for (size_t i = 0; i < wm->len; i++) {
        const kiln_json *v = &wm->items[i];
        if (v->type != KILN_JSON_STRING) {
            s = kiln_error(KILN_ERR_FORMAT,
                           "%s: weight_map['%.200s'] should be a file name, found %s", what,
                           wm->keys[i].s, kiln_json_type_name(v->type));
            goto done;
        }
        /* Shards are plain names in this folder: nothing that climbs out. */
        if (v->len == 0 || strlen(v->s) != v->len || strchr(v->s, '/') || strchr(v->s, '\\') ||
            !strcmp(v->s, ".") || !strcmp(v->s, "..")) {
            s = kiln_error(KILN_ERR_FORMAT,
                           "%s: weight_map['%.200s'] is '%.200s', not a file name in the folder",
                           what, wm->keys[i].s, v->s);
            goto done;
        }
        int seen = 0;
        for (int f = 0; f < st->n_files && !seen; f++)
            seen = !strcmp(st->files[f], v->s);
        if (seen) continue;
        if ((s = join(path, sizeof path, dir, v->s))) goto done;
        if (!is_file(path)) {
            s = kiln_error(KILN_ERR_IO, "%s: shard '%s' (of tensor '%.200s') is not in '%s'", what,
                           v->s, wm->keys[i].s, dir);
            goto done;
        }
        if ((s = map_and_parse(imp, path, st))) goto done;
    }
    for (size_t i = 0; i < wm->len; i++) {
        const kiln_st_tensor *t = kiln_safetensors_find(st, wm->keys[i].s);
        if (!t || strcmp(st->files[t->file], wm->items[i].s)) {
            s = kiln_error(KILN_ERR_FORMAT, "%s: tensor '%.200s' should be in '%s', %s%s%s", what,
                           wm->keys[i].s, wm->items[i].s,
                           t ? "but is in '" : "but no listed shard has it",
                           t ? st->files[t->file] : "", t ? "'" : "");
            goto done;
        }
    }
done:
    kiln_json_free(&doc);
    return s;
}

kiln_status kiln_safetensors_open_dir(kiln_import *imp, const char *dir, kiln_safetensors *st) {
    memset(st, 0, sizeof *st);
    char path[4200];
    kiln_status s;
    if ((s = join(path, sizeof path, dir, "model.safetensors.index.json"))) return s;
    if (is_file(path)) return open_sharded(imp, dir, path, st);
    if ((s = join(path, sizeof path, dir, "model.safetensors"))) return s;
    if (is_file(path)) return map_and_parse(imp, path, st);
    if ((s = join(path, sizeof path, dir, "pytorch_model.bin"))) return s;
    if (is_file(path))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "'%s': the weights are in pytorch_model.bin (a pickle), which Kiln "
                          "does not read; save them with safe_serialization=True",
                          dir);
    return kiln_error(KILN_ERR_IO, "'%s': no model.safetensors or model.safetensors.index.json",
                      dir);
}
