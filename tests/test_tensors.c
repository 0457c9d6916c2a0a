/* test_tensors.c: the tensor folder (src/devtools/tensors.c, docs/TENSORS.md):
 * .npy files round trip with their bytes, dtype and shape, are written
 * exactly as numpy.save writes them, and every damaged file or manifest is
 * an error naming the file and the rule; a tensor that does not fit a
 * method's declared input names the input and both dtype/shapes.
 *
 * Also a helper for tests/test_run.sh:
 *   test_tensors --write-program PATH   a program with one method, 'scale',
 *                                       whose one input is x f32 [1..4, 16]
 *   test_tensors --copy SRC DST         reads tensor folder SRC, writes DST */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "compiler/passes.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "format/format.h"
#include "devtools/tensors.h"

/* ---- helpers ------------------------------------------------------------------ */

/* Removes a folder of files (what these tests make under kt_tmpdir()). */
static void rm_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                rm_folder(p);
            else
                unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* The harness removes only the files of its folder: the subfolders go first. */
static void rm_subfolders(void) {
    DIR *d = opendir(kt_tmpdir());
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", kt_tmpdir(), e->d_name);
            struct stat sb;
            if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_folder(p);
        }
    closedir(d);
}

/* A fresh subfolder of the test folder. */
static const char *subdir(const char *name) {
    static int once;
    if (!once) {
        kt_tmpdir();
        atexit(rm_subfolders); /* runs before the harness's own clean-up */
        once = 1;
    }
    const char *p = kt_path(name);
    rm_folder(p);
    mkdir(p, 0755);
    return p;
}

/* An .npy file by hand: magic, version major.0, the header dict padded with
 * spaces to `pad_to` bytes in all (0: no padding) and a newline, then data. */
static size_t make_npy(uint8_t *out, size_t cap, int major, const char *dict, const void *data,
                       size_t n) {
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    if (pre + hlen + n > cap) return 0;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)major;
    out[7] = 0;
    out[8] = (uint8_t)hlen;
    out[9] = (uint8_t)(hlen >> 8);
    if (major > 1) out[10] = out[11] = 0;
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, ' ', hlen - dl - 1);
    out[pre + hlen - 1] = '\n';
    if (n) memcpy(out + pre + hlen, data, n);
    return pre + hlen + n;
}

static void fill(void *p, size_t n, unsigned long long seed) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)kt_rand(&seed);
}

/* ---- .npy ------------------------------------------------------------------------- */

TEST(npy_round_trip_every_dtype_and_shape) {
    static const int64_t shapes[][5] = {/* ndim, dims */ {0}, {1, 5},    {2, 2, 3},
                                        {4, 2, 1, 3, 2},      {2, 0, 4}, {1, 0}};
    uint8_t data[512];
    for (int t = 0; t < KILN_NPY_DTYPE_COUNT; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int ndim = (int)shapes[s][0];
            const int64_t *shape = shapes[s] + 1;
            size_t n = kiln_npy_dtype_size((kiln_npy_dtype)t);
            for (int d = 0; d < ndim; d++)
                n *= (size_t)shape[d];
            fill(data, n, (unsigned long long)(t * 16 + (int)s + 1));
            kiln_wbuf b = {0};
            ASSERT_OK(kiln_npy_encode(&b, (kiln_npy_dtype)t, ndim, shape, data));
            ASSERT_EQ_I(b.len % 64, n % 64); /* the header ends on a 64-byte boundary */
            kiln_npy a;
            ASSERT_OK(kiln_npy_parse(b.data, b.len, "mem.npy", &a));
            ASSERT_EQ_I(a.dtype, t);
            ASSERT_EQ_I(a.ndim, ndim);
            for (int d = 0; d < ndim; d++)
                ASSERT_EQ_I(a.shape[d], shape[d]);
            ASSERT_EQ_I(a.nbytes, n);
            ASSERT(n == 0 || !memcmp(a.data, data, n));
            /* through a file too */
            const char *path = kt_path("rt.npy");
            ASSERT_OK(kiln_npy_write(path, (kiln_npy_dtype)t, ndim, shape, data));
            kiln_npy c;
            ASSERT_OK(kiln_npy_read(path, &c));
            ASSERT(c.dtype == a.dtype && c.ndim == a.ndim && c.nbytes == n);
            ASSERT(n == 0 || !memcmp(c.data, data, n));
            size_t flen;
            char *file = kt_read_file(path, &flen);
            ASSERT(file && flen == b.len && !memcmp(file, b.data, flen));
            free(file);
            kiln_npy_free(&c);
            kiln_wbuf_free(&b);
        }
}

/* The header numpy.save (numpy >= 1.24) writes, byte for byte. */
TEST(npy_header_is_numpys) {
    float x[6] = {0};
    kiln_wbuf b = {0};
    ASSERT_OK(kiln_npy_encode(&b, KILN_NPY_F32, 2, (const int64_t[]){2, 3}, x));
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ASSERT_EQ_I(b.len, 128 + sizeof x);
    ASSERT(!memcmp(b.data, "\x93NUMPY\x01\x00\x76\x00", 10)); /* header 118 bytes */
    ASSERT(!memcmp(b.data + 10, dict, strlen(dict)));
    for (size_t i = 10 + strlen(dict); i < 127; i++)
        ASSERT_EQ_I(b.data[i], ' ');
    ASSERT_EQ_I(b.data[127], '\n');
    kiln_wbuf_free(&b);
    b = (kiln_wbuf){0};
    ASSERT_OK(kiln_npy_encode(&b, KILN_NPY_I32, 1, (const int64_t[]){1}, x));
    ASSERT(!memcmp(b.data + 10, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", 57));
    kiln_wbuf_free(&b);
    b = (kiln_wbuf){0};
    ASSERT_OK(kiln_npy_encode(&b, KILN_NPY_BF16, 0, NULL, x));
    ASSERT(!memcmp(b.data + 10, "{'descr': '<u2', 'fortran_order': False, 'shape': (), } ", 56));
    ASSERT_EQ_I(b.len, 128 + 2); /* a scalar has no growth axis, yet 66 bytes round up to 128 */
    kiln_wbuf_free(&b);
}

/* Every prefix of a valid file is refused as truncated, naming the file. */
TEST(npy_truncated_anywhere) {
    int32_t v[10];
    fill(v, sizeof v, 3);
    kiln_wbuf b = {0};
    ASSERT_OK(kiln_npy_encode(&b, KILN_NPY_I32, 2, (const int64_t[]){2, 5}, v));
    for (size_t n = 0; n < b.len; n++) {
        kiln_npy a;
        kiln_status st = kiln_npy_parse(b.data, n, "cut.npy", &a);
        ASSERT_MSG(st == KILN_ERR_FORMAT, "prefix of %zu bytes: status %d", n, st);
        const char *msg = kiln_last_error();
        ASSERT_CONTAINS(msg, "'cut.npy'");
        ASSERT_MSG(strstr(msg, "truncated") || (n >= 6 && n < 10) || strstr(msg, "bad header"),
                   "prefix of %zu bytes: %s", n, msg);
    }
    /* a file on disk, cut inside its data */
    const char *path = kt_path("cut.npy");
    ASSERT(kt_write_file(path, b.data, b.len - 3) == 0);
    kiln_npy a;
    ASSERT_EQ_I(kiln_npy_read(path, &a), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), path);
    ASSERT_CONTAINS(kiln_last_error(),
                    "truncated: the data is 37 bytes, shape [2, 5] of i32 needs 40");
    kiln_wbuf_free(&b);
}

TEST(npy_damaged_headers_name_the_rule) {
    static const struct {
        int major;
        const char *dict;
        size_t data; /* bytes of data after the header */
        const char *want;
    } cases[] = {
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "big-endian"},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16,
         "'fortran_order' is True: Kiln reads C order only"},
        {1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16,
         "descr '<c8' is not a type Kiln reads"},
        {1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", 8,
         "no byte order for a 4-byte type"},
        {1, "{'descr': 'f4', 'fortran_order': False, 'shape': (2,), }", 8, "has no byte order"},
        {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, "structured"},
        {1, "{'descr': '<f4', 'fortran_order': False, }", 8, "key 'shape' is missing"},
        {1, "{'descr': '<f4', 'shape': (2,), }", 8, "key 'fortran_order' is missing"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", 8,
         "unknown key 'extra'"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
         "repeated key 'descr'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", 8, "is not a tuple"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8,
         "expected a dimension"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 2), }", 8,
         "more than 4 dimensions"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3 }", 24, "expected ',' or ')'"},
        {1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8, "True or False"},
        {1, "{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }", 8,
         "expected ':' after a key"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", 8,
         "bytes after the dict"},
        {1, "['descr', '<f4']", 8, "expected '{'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12,
         "4 bytes after the data"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 4,
         "truncated: the data is 4 bytes"},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 8,
         "too large"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8,
         "too large"},
        {1, "{'descr': '\\x', 'fortran_order': False, 'shape': (2,), }", 8, "never hold"},
    };
    uint8_t buf[512], data[64] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = make_npy(buf, sizeof buf, cases[i].major, cases[i].dict, data, cases[i].data);
        ASSERT(n > 0);
        kiln_npy a;
        kiln_status st = kiln_npy_parse(buf, n, "bad.npy", &a);
        ASSERT_MSG(st == KILN_ERR_FORMAT, "case %zu (%s): status %d", i, cases[i].dict, st);
        ASSERT_CONTAINS(kiln_last_error(), "'bad.npy'");
        ASSERT_MSG(strstr(kiln_last_error(), cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i,
                   kiln_last_error(), cases[i].want);
    }
    /* the preamble */
    size_t n = make_npy(buf, sizeof buf, 1,
                        "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data, 4);
    kiln_npy a;
    ASSERT_OK(kiln_npy_parse(buf, n, "ok.npy", &a));
    buf[5] = 'X';
    ASSERT_EQ_I(kiln_npy_parse(buf, n, "bad.npy", &a), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "bad magic");
    buf[5] = 'Y';
    buf[6] = 4;
    ASSERT_EQ_I(kiln_npy_parse(buf, n, "bad.npy", &a), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "format version 4.0");
    buf[6] = 1;
    buf[8] = 0xff;
    buf[9] = 0x7f;
    ASSERT_EQ_I(kiln_npy_parse(buf, n, "bad.npy", &a), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "truncated: the header declares 32767 bytes");
}

/* What other writers produce: format 2.0 and 3.0, '=' byte order, Python 2
 * long literals, double quotes, no trailing comma, no padding. */
TEST(npy_other_writers_are_read) {
    static const struct {
        int major;
        const char *dict;
    } ok[] = {
        {2, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"},
        {3, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"},
        {1, "{'descr': '=i8', 'fortran_order': False, 'shape': (2L,), }"},
        {1, "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<i8\"}"},
        {1, "{'descr':'<i8','fortran_order':False,'shape':(2,)}"},
        {1, "{'descr': '<i8', 'fortran_order': True, 'shape': (2,), }"}, /* refused: the rule is
                                                                            simple */
    };
    int64_t v[2] = {-5, 1LL << 40};
    uint8_t buf[512];
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        size_t n = make_npy(buf, sizeof buf, ok[i].major, ok[i].dict, v, sizeof v);
        kiln_npy a;
        kiln_status st = kiln_npy_parse(buf, n, "other.npy", &a);
        if (i == 5) {
            ASSERT_EQ_I(st, KILN_ERR_FORMAT);
            continue;
        }
        ASSERT_MSG(st == KILN_OK, "case %zu: %s", i, kiln_last_error());
        ASSERT_EQ_I(a.dtype, KILN_NPY_I64);
        ASSERT_EQ_I(a.ndim, 1);
        ASSERT_EQ_I(a.shape[0], 2);
        ASSERT(!memcmp(a.data, v, sizeof v));
    }
}

/* Random damage never crashes the reader: each result is OK or a format error. */
TEST(npy_random_damage_is_an_error_or_ok) {
    float v[12];
    fill(v, sizeof v, 9);
    kiln_wbuf b = {0};
    ASSERT_OK(kiln_npy_encode(&b, KILN_NPY_F32, 2, (const int64_t[]){3, 4}, v));
    unsigned long long seed = 77;
    uint8_t *copy = malloc(b.len);
    ASSERT(copy);
    for (int k = 0; k < 4000; k++) {
        memcpy(copy, b.data, b.len);
        int flips = 1 + (int)(kt_rand(&seed) % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = kt_rand(&seed) % 128; /* the header, where the parsing is */
            copy[at] = (uint8_t)kt_rand(&seed);
        }
        size_t len = kt_rand(&seed) % 8 ? b.len : kt_rand(&seed) % (b.len + 1);
        kiln_npy a;
        kiln_status st = kiln_npy_parse(copy, len, "fuzz.npy", &a);
        ASSERT_MSG(st == KILN_OK || st == KILN_ERR_FORMAT, "status %d: %s", st, kiln_last_error());
        if (st == KILN_OK)
            ASSERT(a.nbytes <= len && (const uint8_t *)a.data + a.nbytes == copy + len);
    }
    free(copy);
    kiln_wbuf_free(&b);
}

/* ---- folders ------------------------------------------------------------------------ */

TEST(folder_round_trip) {
    const char *dir = subdir("round");
    char nested[600];
    snprintf(nested, sizeof nested, "%s/a/b", dir); /* made with its parents */
    kiln_tensor_folder f;
    ASSERT_OK(kiln_tensor_folder_create(nested, &f));
    float x[6];
    int32_t tok[5];
    int64_t big[3] = {1, -2, 1LL << 50};
    uint16_t h[4];
    fill(x, sizeof x, 1);
    fill(tok, sizeof tok, 2);
    fill(h, sizeof h, 3);
    kiln_tensor_desc d[] = {
        {"tokens", "prefill", "input", NULL, NULL, KILN_NPY_I32, 1, (const int64_t[]){5}},
        {"logits", "prefill", "output", NULL, NULL, KILN_NPY_F32, 2, (const int64_t[]){2, 3}},
        {"tokens", "prefill", "output", NULL, NULL, KILN_NPY_I32, 1,
         (const int64_t[]){5}}, /* same file name */
        {"blk.0.attn_q", "decode", "node", "blk.0.attn_q", "matmul", KILN_NPY_F16, 2,
         (const int64_t[]){1, 4}},
        {"a/b \"c\"", NULL, NULL, NULL, NULL, KILN_NPY_I64, 1, (const int64_t[]){3}},
        {"h", NULL, NULL, NULL, NULL, KILN_NPY_BF16, 0, NULL},
    };
    const void *data[] = {tok, x, tok, h, big, h};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++)
        ASSERT_OK(kiln_tensor_folder_add(&f, &d[i], data[i]));
    ASSERT_EQ_I(kiln_tensor_folder_add(&f, &d[1], x), KILN_ERR_INVALID_ARG); /* twice */
    ASSERT_CONTAINS(kiln_last_error(), "already");
    ASSERT_OK(kiln_tensor_folder_finish(&f));
    ASSERT_STR_EQ(f.items[0].file, "prefill.tokens.npy");
    ASSERT_STR_EQ(f.items[1].file, "prefill.logits.npy");
    ASSERT_STR_EQ(f.items[2].file, "prefill.tokens.output.npy");
    ASSERT_STR_EQ(f.items[3].file, "decode.blk.0.attn_q.npy");
    ASSERT_STR_EQ(f.items[4].file, "a_b__c_.npy");
    kiln_tensor_folder_free(&f);

    kiln_tensor_folder r;
    ASSERT_OK(kiln_tensor_folder_read(nested, &r));
    ASSERT_EQ_I(r.n, 6);
    for (int i = 0; i < r.n; i++) {
        const kiln_tensor_entry *e = &r.items[i];
        ASSERT_STR_EQ(e->name, d[i].name);
        ASSERT(e->method == d[i].method || !strcmp(e->method, d[i].method));
        ASSERT(e->role == d[i].role || !strcmp(e->role, d[i].role));
        ASSERT(e->node == d[i].node || !strcmp(e->node, d[i].node));
        ASSERT(e->op == d[i].op || !strcmp(e->op, d[i].op));
        ASSERT_EQ_I(e->dtype, d[i].dtype);
        ASSERT_EQ_I(e->ndim, d[i].ndim);
        size_t n = kiln_npy_dtype_size(e->dtype);
        for (int k = 0; k < e->ndim; k++) {
            ASSERT_EQ_I(e->shape[k], d[i].shape[k]);
            n *= (size_t)e->shape[k];
        }
        ASSERT_EQ_I(e->nbytes, n);
        ASSERT(!memcmp(e->data, data[i], n));
    }
    /* lookups: an input by method, one left without method/role, a node */
    ASSERT(kiln_tensor_folder_find(&r, "prefill", "input", NULL, "tokens") == &r.items[0]);
    ASSERT(kiln_tensor_folder_find(&r, "prefill", "output", NULL, "tokens") == &r.items[2]);
    ASSERT(kiln_tensor_folder_find(&r, "decode", "input", NULL, "tokens") == NULL);
    ASSERT(kiln_tensor_folder_find(&r, "decode", "input", NULL, "h") == &r.items[5]);
    ASSERT(kiln_tensor_folder_find(&r, "decode", "node", "blk.0.attn_q", "blk.0.attn_q") ==
           &r.items[3]);
    ASSERT(kiln_tensor_folder_find(&r, "decode", "node", NULL, "blk.0.attn_q") == NULL);
    kiln_tensor_folder_free(&r);
}

/* Writes `manifest` and the files of a folder for the error cases. */
static const char *bad_folder(const char *name, const char *manifest) {
    const char *dir = subdir(name);
    char p[700];
    float x[6] = {1, 2, 3, 4, 5, 6};
    snprintf(p, sizeof p, "%s/x.npy", dir);
    kiln_npy_write(p, KILN_NPY_F32, 2, (const int64_t[]){2, 3}, x);
    snprintf(p, sizeof p, "%s/cut.npy", dir);
    kiln_wbuf b = {0};
    kiln_npy_encode(&b, KILN_NPY_F32, 2, (const int64_t[]){2, 3}, x);
    kt_write_file(p, b.data, b.len - 1);
    kiln_wbuf_free(&b);
    if (manifest) {
        snprintf(p, sizeof p, "%s/manifest.json", dir);
        kt_write_file(p, manifest, strlen(manifest));
    }
    return dir;
}

TEST(folder_damaged_manifest_names_file_and_rule) {
#define T1(f, d, s)                                                                                \
    "{\"tensors\": [{\"name\": \"x\", \"file\": \"" f "\", \"dtype\": \"" d "\", \"shape\": " s    \
    "}]}"
    static const struct {
        const char *manifest, *want;
    } cases[] = {
        {NULL, "needs a manifest.json"},
        {"{\"tensors\": [", "byte 13"},
        {"[]", "should be a JSON object"},
        {"{}", "key 'tensors' is missing"},
        {"{\"version\": 2, \"tensors\": []}", "version 2: Kiln reads version 1"},
        {"{\"format\": \"safetensors\", \"tensors\": []}",
         "format 'safetensors' is not 'kiln-tensors'"},
        {"{\"tensors\": [1]}", "tensor 0 should be an object"},
        {"{\"tensors\": [{\"file\": \"x.npy\", \"dtype\": \"f32\", \"shape\": [2, 3]}]}",
         "key 'name' is missing"},
        {T1("../x.npy", "f32", "[2, 3]"), "file '../x.npy' is not a plain file name"},
        {T1("/etc/passwd", "f32", "[2, 3]"), "is not a plain file name"},
        {T1("..", "f32", "[2, 3]"), "is not a plain file name"},
        {T1("x.npy", "f8", "[2, 3]"), "dtype 'f8' is not one of"},
        {T1("x.npy", "f32", "[2, -3]"), "shape[1] should be a non-negative integer"},
        {T1("x.npy", "f32", "[1, 1, 1, 2, 3]"), "5 dimensions, at most 4"},
        {T1("x.npy", "f32", "[3, 2]"),
         "the manifest says tensor 'x' is f32 [3, 2], the file holds f32 [2, 3]"},
        {T1("x.npy", "i32", "[2, 3]"),
         "the manifest says tensor 'x' is i32 [2, 3], the file holds f32 [2, 3]"},
        {T1("missing.npy", "f32", "[2, 3]"), "cannot open"},
        {T1("cut.npy", "f32", "[2, 3]"),
         "truncated: the data is 23 bytes, shape [2, 3] of f32 needs 24"},
        {"{\"tensors\": [{\"name\": \"x\", \"file\": \"x.npy\", \"dtype\": \"f32\", \"shape\": [2, "
         "3], \"method\": \"m\"},"
         " {\"name\": \"x\", \"file\": \"x.npy\", \"dtype\": \"f32\", \"shape\": [2, 3], "
         "\"method\": \"m\"}]}",
         "tensors 0 and 1 are both 'x', method 'm'"},
        {"{\"tensors\": [{\"name\": \"x\", \"file\": \"x.npy\", \"dtype\": \"f32\", \"shape\": [2, "
         "3], \"method\": 3}]}",
         "key 'method' should be a string"},
    };
#undef T1
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        const char *dir = bad_folder(name, cases[i].manifest);
        kiln_tensor_folder f;
        kiln_status st = kiln_tensor_folder_read(dir, &f);
        ASSERT_MSG(st == KILN_ERR_FORMAT || st == KILN_ERR_IO, "case %zu: status %d", i, st);
        ASSERT_MSG(strstr(kiln_last_error(), cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i,
                   kiln_last_error(), cases[i].want);
        ASSERT_MSG(strstr(kiln_last_error(), dir), "case %zu: \"%s\" does not name the folder", i,
                   kiln_last_error());
        ASSERT(f.n == 0 && f.items == NULL);
    }
    /* a file where the folder should be */
    kiln_tensor_folder f;
    ASSERT_EQ_I(kiln_tensor_folder_read(kt_path("rt.npy"), &f), KILN_ERR_IO);
    ASSERT_CONTAINS(kiln_last_error(), "is not a folder");
    ASSERT(kt_write_file(kt_path("plain"), "x", 1) == 0);
    char below[600];
    snprintf(below, sizeof below, "%s/sub", kt_path("plain"));
    ASSERT_EQ_I(kiln_tensor_folder_create(below, &f), KILN_ERR_IO);
    ASSERT_CONTAINS(kiln_last_error(), "cannot create the folder");
}

/* Out of memory at every allocation of a read and a write: NOMEM, no leak. */
static kiln_status write_some(void *user) {
    kiln_tensor_folder f;
    kiln_status st = kiln_tensor_folder_create((const char *)user, &f);
    float x[4] = {1, 2, 3, 4};
    kiln_tensor_desc d = {"x", "m", "output", NULL, NULL, KILN_NPY_F32, 1, (const int64_t[]){4}};
    kiln_tensor_desc e = {"y", "m", "output", "n", "add", KILN_NPY_F32, 2, (const int64_t[]){2, 2}};
    if (!st) st = kiln_tensor_folder_add(&f, &d, x);
    if (!st) st = kiln_tensor_folder_add(&f, &e, x);
    if (!st) st = kiln_tensor_folder_finish(&f);
    kiln_tensor_folder_free(&f);
    return st;
}

static kiln_status read_some(void *user) {
    kiln_tensor_folder f;
    kiln_status st = kiln_tensor_folder_read((const char *)user, &f);
    kiln_tensor_folder_free(&f);
    return st;
}

TEST(folder_out_of_memory_everywhere) {
    const char *dir = subdir("oom");
    kiln_status (*steps[2])(void *) = {write_some, read_some};
    for (int s = 0; s < 2; s++) {
        int done = 0;
        for (int n = 1; n < 200 && !done; n++) {
            kiln_fail_alloc_after(n);
            kiln_status st = steps[s]((void *)dir);
            void *probe = kiln_malloc(1); /* NULL: the injected failure never came */
            kiln_free(probe);
            kiln_fail_alloc_after(0);
            if (st == KILN_OK) {
                done = 1;
                continue;
            }
            ASSERT_MSG(st == KILN_ERR_NOMEM, "%s, allocation %d: status %d: %s",
                       s ? "read" : "write", n, st, kiln_last_error());
            ASSERT_CONTAINS(kiln_last_error(), "out of memory");
        }
        ASSERT_MSG(done, "%s never succeeded", s ? "read" : "write");
    }
}

/* ---- inputs --------------------------------------------------------------------------- */

TEST(check_input_names_input_and_both_shapes) {
    kiln_tensor_info tokens = {"tokens", KILN_I32, 1, {8}, 1};
    kiln_tensor_info x = {"x", KILN_F32, 2, {4, 16}, 1};
    ASSERT_OK(
        kiln_tensor_check_input("prefill", &tokens, KILN_NPY_I32, 1, (const int64_t[]){5}, NULL));
    ASSERT_OK(
        kiln_tensor_check_input("prefill", &tokens, KILN_NPY_I32, 1, (const int64_t[]){8}, NULL));
    ASSERT_EQ_I(kiln_tensor_check_input("prefill", &tokens, KILN_NPY_I64, 1, (const int64_t[]){5},
                                        "in/tokens.npy"),
                KILN_ERR_INVALID_ARG);
    ASSERT_STR_EQ(kiln_last_error(), "method 'prefill' input 'tokens': expected i32 [1..8], given "
                                     "i64 [5] (from 'in/tokens.npy')");
    ASSERT_EQ_I(
        kiln_tensor_check_input("prefill", &tokens, KILN_NPY_I32, 1, (const int64_t[]){9}, NULL),
        KILN_ERR_INVALID_ARG);
    ASSERT_STR_EQ(kiln_last_error(),
                  "method 'prefill' input 'tokens': expected i32 [1..8], given i32 [9]");
    ASSERT_EQ_I(
        kiln_tensor_check_input("prefill", &tokens, KILN_NPY_I32, 1, (const int64_t[]){0}, NULL),
        KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(
        kiln_tensor_check_input("scale", &x, KILN_NPY_F32, 2, (const int64_t[]){2, 15}, "x.npy"),
        KILN_ERR_INVALID_ARG);
    ASSERT_STR_EQ(
        kiln_last_error(),
        "method 'scale' input 'x': expected f32 [1..4, 16], given f32 [2, 15] (from 'x.npy')");
    ASSERT_EQ_I(kiln_tensor_check_input("scale", &x, KILN_NPY_F32, 1, (const int64_t[]){16}, NULL),
                KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "given f32 [16]");
    ASSERT_EQ_I(
        kiln_tensor_check_input("scale", &x, KILN_NPY_F64, 2, (const int64_t[]){2, 16}, NULL),
        KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "given f64 [2, 16]");
    ASSERT_OK(
        kiln_tensor_check_input("scale", &x, KILN_NPY_F32, 2, (const int64_t[]){3, 16}, NULL));
}

TEST(dtype_tables) {
    for (int t = 0; t < KILN_NPY_DTYPE_COUNT; t++) {
        ASSERT_EQ_I(kiln_npy_dtype_from_name(kiln_npy_dtype_name((kiln_npy_dtype)t)), t);
        kiln_dtype k;
        if (!kiln_npy_dtype_to_kiln((kiln_npy_dtype)t, &k)) {
            kiln_npy_dtype back;
            ASSERT_OK(kiln_npy_dtype_from_kiln(k, &back));
            ASSERT_EQ_I(back, t);
            ASSERT_STR_EQ(kiln_dtype_name(k), kiln_npy_dtype_name((kiln_npy_dtype)t));
        }
    }
    kiln_npy_dtype t;
    ASSERT_EQ_I(kiln_npy_dtype_from_kiln(KILN_Q4_0, &t), -1);
    ASSERT_EQ_I(kiln_npy_dtype_from_name("float32"), -1);
    ASSERT(kiln_npy_dtype_name(KILN_NPY_DTYPE_COUNT) == NULL);
}

/* ---- helpers for test_run.sh ------------------------------------------------------------- */

/* A program with one method, 'scale', with one input x f32 [1..4, 16] and
 * one output y = rms_norm(x) * w, on the cpu backend. */
static int write_program(const char *path) {
    kiln_module m;
    memset(&m, 0, sizeof m);
    static float w[16];
    for (int i = 0; i < 16; i++)
        w[i] = 0.5f + (float)i / 16;
    int64_t wn[1] = {16}, xs[2] = {4, 16};
    int b;
    float eps[KILN_MAX_FATTR] = {1e-5f};
    kiln_graph *g;
    int x, y;
    if (kiln_module_add_const(&m, "w", KILN_F32, 1, wn, w) < 0 ||
        kiln_module_add_backend(&m, "cpu", &b) || !(g = kiln_module_add_method(&m, "scale", 4)) ||
        (x = kiln_graph_input(g, "x", KILN_F32, 2, xs, 1)) < 0 ||
        (y = kiln_graph_node(g, &m, KILN_OP_RMS_NORM, "y", 2,
                             (int32_t[]){x, kiln_graph_const(g, &m, "w")}, NULL, eps)) < 0 ||
        kiln_graph_output(g, y) || kiln_graph_partition(g) || kiln_graph_plan(g, &m) ||
        kiln_module_verify(&m, 1) || kiln_program_write(&m, path, NULL, NULL)) {
        fprintf(stderr, "test_tensors --write-program: %s\n", kiln_last_error());
        kiln_module_free(&m);
        return 1;
    }
    kiln_module_free(&m);
    return 0;
}

/* Reads folder src and writes every tensor again into dst. */
static int copy_folder(const char *src, const char *dst) {
    kiln_tensor_folder r = {0}, w = {0};
    kiln_status st = kiln_tensor_folder_read(src, &r);
    if (!st) st = kiln_tensor_folder_create(dst, &w);
    for (int i = 0; !st && i < r.n; i++) {
        const kiln_tensor_entry *e = &r.items[i];
        kiln_tensor_desc d = {e->name, e->method, e->role, e->node,
                              e->op,   e->dtype,  e->ndim, e->shape};
        st = kiln_tensor_folder_add(&w, &d, e->data);
    }
    if (!st) st = kiln_tensor_folder_finish(&w);
    if (st) fprintf(stderr, "test_tensors --copy: %s\n", kiln_last_error());
    kiln_tensor_folder_free(&r);
    kiln_tensor_folder_free(&w);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-program")) return write_program(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--copy")) return copy_folder(argv[2], argv[3]);
    static const kt_test tests[] = {KT_FOREACH(
        KT_ENTRY, npy_round_trip_every_dtype_and_shape, npy_header_is_numpys,
        npy_truncated_anywhere, npy_damaged_headers_name_the_rule, npy_other_writers_are_read,
        npy_random_damage_is_an_error_or_ok, folder_round_trip,
        folder_damaged_manifest_names_file_and_rule, folder_out_of_memory_everywhere,
        check_input_names_input_and_both_shapes, dtype_tables)};
    return kt_run(tests, (int)(sizeof tests / sizeof *tests), argc, argv);
}
