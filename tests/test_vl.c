/* test_vl.c: Qwen3-VL. A tiny random checkpoint (tests/data/hf/
 * qwen3vl_tiny_f32, made by scripts/make_vl_fixtures.py) compiled by Kiln,
 * against what transformers computes for it: encode_image's visual tokens
 * and each DeepStack feature per image; prefill with one and with two
 * images (every position's logits), whole and in chunks that split an
 * image; ten decode steps after it. The visual tokens fed to prefill are
 * Kiln's own, so the check runs end to end. */
#include <math.h>
#include <stdint.h>

#include "base/json.h"
#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln.h"
#include "kiln/kiln_compile.h"
#include "kiln/kiln_llm.h"
#include "llm/vl.h"

#define TOL 1e-4
#define DIR KILN_SOURCE_DIR "/tests/data/hf/qwen3vl_tiny_f32"
#define WIDE KILN_SOURCE_DIR "/tests/data/hf/qwen3vl_2b_wide"
#define MAX_IMAGES 4
#define MAX_DS 4

/* ---- the oracle ------------------------------------------------------------- */

typedef struct {
    void *data;
    int64_t shape[2];
    int ndim;
} array;

typedef struct {
    array pixels, interp_idx, interp_w, rope_pos, features, deepstack[MAX_DS];
    int n_ds;
    int grid[3]; /* t, h, w */
} image;

typedef struct {
    int images[MAX_IMAGES], n_images;
    array ids, position_ids, logits, decode_logits; /* logits: every stride-th column */
    int stride;
    int decode_tokens[16], decode_pos[16], n_decode;
    int image_token, rope_delta;
} vl_case;

typedef struct {
    image im[MAX_IMAGES];
    int n_images;
    vl_case cs[4];
    int n_cases;
    int image_token;
    int stride; /* logits hold every stride-th column of the vocabulary */
} vl_oracle;

/* where the oracle's files are (the tiny folder holds its weights too) */
static const char *g_oracle = DIR;

/* {"file": F, "shape": [..]} -> the file's bytes, checked against the shape */
static int load_array(const kiln_json *o, size_t elem, array *a) {
    memset(a, 0, sizeof *a);
    const kiln_json *f = kiln_json_get(o, "file"), *sh = kiln_json_get(o, "shape");
    if (!f || f->type != KILN_JSON_STRING || !sh || sh->type != KILN_JSON_ARRAY || sh->len > 2)
        return -1;
    size_t want = elem;
    a->ndim = (int)sh->len;
    for (size_t i = 0; i < sh->len; i++)
        want *= (size_t)(a->shape[i] = sh->items[i].i);
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_oracle, f->s);
    size_t n;
    a->data = kt_read_file(p, &n);
    return a->data && n == want ? 0 : -1;
}

static int load_oracle(vl_oracle *o) {
    size_t n;
    char path[1024];
    snprintf(path, sizeof path, "%s/oracle.json", g_oracle);
    char *text = kt_read_file(path, &n);
    if (!text) return -1;
    kiln_json_doc doc;
    int rc = -1;
    memset(o, 0, sizeof *o);
    if (kiln_json_parse(text, n, "oracle.json", 0, &doc)) goto out;
    const kiln_json *ims = kiln_json_get(doc.root, "images"),
                    *cs = kiln_json_get(doc.root, "cases");
    const kiln_json *tok = kiln_json_get(doc.root, "image_token_id");
    if (!ims || !cs || !tok || ims->len > MAX_IMAGES || cs->len > 4) goto done;
    o->image_token = (int)tok->i;
    const kiln_json *stride = kiln_json_get(doc.root, "logit_stride");
    o->stride = stride ? (int)stride->i : 1;
    o->n_images = (int)ims->len;
    for (int i = 0; i < o->n_images; i++) {
        const kiln_json *e = &ims->items[i], *ds = kiln_json_get(e, "deepstack");
        image *im = &o->im[i];
        if (load_array(kiln_json_get(e, "pixel_values"), 4, &im->pixels) ||
            load_array(kiln_json_get(e, "interp_idx"), 4, &im->interp_idx) ||
            load_array(kiln_json_get(e, "interp_w"), 4, &im->interp_w) ||
            load_array(kiln_json_get(e, "rope_pos"), 4, &im->rope_pos) ||
            load_array(kiln_json_get(e, "features"), 4, &im->features) || !ds || ds->len > MAX_DS)
            goto done;
        im->n_ds = (int)ds->len;
        const kiln_json *g = kiln_json_get(e, "grid_thw");
        if (!g || g->len != 3) goto done;
        for (int d = 0; d < 3; d++)
            im->grid[d] = (int)g->items[d].i;
        for (int k = 0; k < im->n_ds; k++)
            if (load_array(&ds->items[k], 4, &im->deepstack[k])) goto done;
    }
    o->n_cases = (int)cs->len;
    for (int j = 0; j < o->n_cases; j++) {
        const kiln_json *e = &cs->items[j], *imgs = kiln_json_get(e, "images");
        const kiln_json *dec = kiln_json_get(e, "decode");
        vl_case *c = &o->cs[j];
        if (!imgs || imgs->len > MAX_IMAGES || !dec || dec->len > 16 ||
            load_array(kiln_json_get(e, "ids"), 4, &c->ids) ||
            load_array(kiln_json_get(e, "position_ids"), 4, &c->position_ids) ||
            load_array(kiln_json_get(e, "logits"), 4, &c->logits) ||
            load_array(kiln_json_get(e, "decode_logits"), 4, &c->decode_logits))
            goto done;
        c->n_images = (int)imgs->len;
        const kiln_json *rd = kiln_json_get(e, "rope_delta");
        if (!rd) goto done;
        c->rope_delta = (int)rd->i;
        for (int i = 0; i < c->n_images; i++)
            c->images[i] = (int)imgs->items[i].i;
        c->n_decode = (int)dec->len;
        for (int s = 0; s < c->n_decode; s++) {
            c->decode_tokens[s] = (int)kiln_json_get(&dec->items[s], "token")->i;
            c->decode_pos[s] = (int)kiln_json_get(&dec->items[s], "position")->i;
        }
        c->image_token = o->image_token;
        c->stride = o->stride;
    }
    rc = 0;
done:
    kiln_json_free(&doc);
out:
    free(text);
    return rc;
}

static void free_array(array *a) {
    free(a->data);
}

static void free_oracle(vl_oracle *o) {
    for (int i = 0; i < o->n_images; i++) {
        image *im = &o->im[i];
        free_array(&im->pixels), free_array(&im->interp_idx), free_array(&im->interp_w);
        free_array(&im->rope_pos), free_array(&im->features);
        for (int k = 0; k < im->n_ds; k++)
            free_array(&im->deepstack[k]);
    }
    for (int j = 0; j < o->n_cases; j++) {
        vl_case *c = &o->cs[j];
        free_array(&c->ids), free_array(&c->position_ids), free_array(&c->logits);
        free_array(&c->decode_logits);
    }
}

/* ---- running the program ----------------------------------------------------- */

static int input_index(const kiln_program *p, int method, const char *name) {
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info info;
        if (!kiln_method_input_info(p, method, i, &info) && !strcmp(info.name, name)) return i;
    }
    return -1;
}

static kiln_status set(kiln_session *s, int method, const char *name, const void *data,
                       kiln_dtype t, int ndim, int64_t a, int64_t b) {
    int i = input_index(kiln_session_program(s), method, name);
    if (i < 0) return kiln_error(KILN_ERR_INVALID_ARG, "no input '%s'", name);
    int64_t shape[2] = {a, b};
    return kiln_session_set_input(s, method, i, data, t, ndim, shape);
}

/* What encode_image gave for one image: visual tokens, then each DeepStack
 * feature, rows x width (copied out of the arena). */
typedef struct {
    float *out[1 + MAX_DS];
    int n_out;
    int64_t rows, width;
} encoded;

static kiln_status encode(kiln_session *s, const image *im, encoded *e, double *worst) {
    const kiln_program *p = kiln_session_program(s);
    int m;
    kiln_status st = kiln_program_find_method(p, "encode_image", &m);
    int64_t N = im->pixels.shape[0];
    if (st || (st = set(s, m, "pixels", im->pixels.data, KILN_F32, 2, N, im->pixels.shape[1])) ||
        (st = set(s, m, "rope_pos", im->rope_pos.data, KILN_I32, 2, N, 2)) ||
        (st = set(s, m, "interp_idx", im->interp_idx.data, KILN_I32, 2, N, 4)) ||
        (st = set(s, m, "interp_w", im->interp_w.data, KILN_F32, 2, N, 4)) ||
        (st = kiln_session_execute(s, m)))
        return st;
    e->n_out = kiln_method_output_count(p, m);
    if (e->n_out != 1 + im->n_ds)
        return kiln_error(KILN_ERR_FORMAT, "%d outputs, expected %d", e->n_out, 1 + im->n_ds);
    for (int k = 0; k < e->n_out; k++) {
        const void *d;
        int64_t shape[KILN_MAX_DIMS];
        int nd;
        if ((st = kiln_session_get_output(s, m, k, &d, NULL, &nd, shape))) return st;
        const array *ref = k ? &im->deepstack[k - 1] : &im->features;
        if (nd != 2 || shape[0] != ref->shape[0] || shape[1] != ref->shape[1])
            return kiln_error(KILN_ERR_FORMAT, "output %d has shape [%lld, %lld]", k,
                              (long long)shape[0], (long long)shape[1]);
        e->rows = shape[0], e->width = shape[1];
        size_t bytes = (size_t)(shape[0] * shape[1]) * sizeof(float);
        e->out[k] = malloc(bytes);
        memcpy(e->out[k], d, bytes);
        double err = kt_rel_err(e->out[k], ref->data, (int)(shape[0] * shape[1]));
        if (err > *worst) *worst = err;
    }
    return KILN_OK;
}

static void free_encoded(encoded *e) {
    for (int k = 0; k < e->n_out; k++)
        free(e->out[k]);
}

/* kt_rel_err of a full row of logits against the oracle's every stride-th
 * column of it (n of them) */
static double cols_err(const float *full, const float *ref, int n, int stride) {
    if (stride == 1) return kt_rel_err(full, ref, n);
    float *g = malloc((size_t)n * sizeof(float));
    for (int j = 0; j < n; j++)
        g[j] = full[(size_t)j * stride];
    double e = kt_rel_err(g, ref, n);
    free(g);
    return e;
}

/* Prefill of a case in calls of at most `chunk` tokens (all positions'
 * logits), then its decode steps: worst errors against the oracle; the
 * prefill logits are kept in *rows (T x V) for comparisons across runs. */
static kiln_status run_case(kiln_session *s, const vl_case *c, const encoded *enc, int chunk,
                            double *worst_pre, double *worst_dec, float **rows, int *width) {
    const kiln_program *p = kiln_session_program(s);
    int pre, dec;
    kiln_status st;
    if ((st = kiln_program_find_method(p, "prefill", &pre)) ||
        (st = kiln_program_find_method(p, "decode", &dec)) || (st = kiln_session_reset(s)))
        return st;
    int T = (int)c->ids.shape[0], Vs = (int)c->logits.shape[1], D = (int)enc[0].width;
    int V = (Vs - 1) * c->stride + 1; /* at least; the program's row width below */
    int n_ds = enc[0].n_out - 1;
    const int32_t *ids = c->ids.data, *pid = c->position_ids.data; /* pid: [3, T] */
    float *vis = calloc((size_t)T * D, sizeof(float)), *ds[MAX_DS];
    int32_t *mask = calloc((size_t)T, sizeof(int32_t)), *rp = malloc((size_t)T * 3 * 4);
    for (int k = 0; k < n_ds; k++)
        ds[k] = calloc((size_t)T * D, sizeof(float));
    /* the visual rows: image i's tokens fill its run of pads, in order */
    for (int t = 0, im = 0, row = 0; t < T; t++) {
        rp[t * 3] = pid[t], rp[t * 3 + 1] = pid[T + t], rp[t * 3 + 2] = pid[2 * T + t];
        if (ids[t] != c->image_token) continue;
        const encoded *e = &enc[c->images[im]];
        mask[t] = 1;
        memcpy(vis + (size_t)t * D, e->out[0] + (size_t)row * D, (size_t)D * sizeof(float));
        for (int k = 0; k < n_ds; k++)
            memcpy(ds[k] + (size_t)t * D, e->out[1 + k] + (size_t)row * D,
                   (size_t)D * sizeof(float));
        if (++row == e->rows) row = 0, im++;
    }
    int32_t one = 1;
    *rows = NULL;
    st = set(s, pre, "all_logits", &one, KILN_I32, 1, 1, 0);
    for (int done = 0; !st && done < T;) {
        int n = T - done < chunk ? T - done : chunk;
        int32_t pos = done;
        if ((st = set(s, pre, "tokens", ids + done, KILN_I32, 1, n, 0)) ||
            (st = set(s, pre, "pos", &pos, KILN_I32, 1, 1, 0)) ||
            (st = set(s, pre, "rope_pos", rp + done * 3, KILN_I32, 2, n, 3)) ||
            (st = set(s, pre, "visual", vis + (size_t)done * D, KILN_F32, 2, n, D)) ||
            (st = set(s, pre, "visual_mask", mask + done, KILN_I32, 1, n, 0)))
            break;
        for (int k = 0; k < n_ds && !st; k++) {
            char nm[32];
            snprintf(nm, sizeof nm, "deepstack.%d", k);
            st = set(s, pre, nm, ds[k] + (size_t)done * D, KILN_F32, 2, n, D);
        }
        const void *out;
        int64_t shape[KILN_MAX_DIMS];
        int nd;
        if (st || (st = kiln_session_execute(s, pre)) ||
            (st = kiln_session_get_output(s, pre, 0, &out, NULL, &nd, shape)))
            break;
        if (!*rows) {
            if (shape[nd - 1] < V) {
                st = kiln_error(KILN_ERR_FORMAT, "logits of width %lld", (long long)shape[nd - 1]);
                break;
            }
            *width = V = (int)shape[nd - 1];
            *rows = malloc((size_t)T * V * sizeof(float));
        }
        memcpy(*rows + (size_t)done * V, out, (size_t)n * V * sizeof(float));
        done += n;
    }
    for (int t = 0; !st && t < T; t++) {
        double e = cols_err(*rows + (size_t)t * V, (const float *)c->logits.data + (size_t)t * Vs,
                            Vs, c->stride);
        if (e > *worst_pre) *worst_pre = e;
    }
    for (int k = 0; k < c->n_decode && !st; k++) {
        int32_t tok = c->decode_tokens[k], pos = T + k;
        int32_t r3[3] = {c->decode_pos[k], c->decode_pos[k], c->decode_pos[k]};
        const void *out;
        if ((st = set(s, dec, "tokens", &tok, KILN_I32, 1, 1, 0)) ||
            (st = set(s, dec, "pos", &pos, KILN_I32, 1, 1, 0)) ||
            (st = set(s, dec, "rope_pos", r3, KILN_I32, 2, 1, 3)) ||
            (st = kiln_session_execute(s, dec)) ||
            (st = kiln_session_get_output(s, dec, 0, &out, NULL, NULL, NULL)))
            break;
        double e =
            cols_err(out, (const float *)c->decode_logits.data + (size_t)k * Vs, Vs, c->stride);
        if (e > *worst_dec) *worst_dec = e;
    }
    free(vis), free(mask), free(rp);
    for (int k = 0; k < n_ds; k++)
        free(ds[k]);
    return st;
}

/* ---- tests ---------------------------------------------------------------------- */

/* The oracle in g_oracle against the folder `model` compiled for
 * `backends` (NULL: cpu), weights as `quant` says (NULL: as stored). */
static void check_program(const char *model, const char *backends, const char *quant) {
    vl_oracle o;
    ASSERT(load_oracle(&o) == 0);
    char prog[600];
    snprintf(prog, sizeof prog, "%s", kt_path(backends ? "vl_ref.kiln" : "vl.kiln"));
    kiln_compile_options co;
    kiln_compile_options_init(&co);
    co.input = model, co.output = prog, co.prefill = 64, co.max_seq = 128;
    co.backends = backends, co.kv_type = "f32", co.quant = quant;
    ASSERT_OK(kiln_compile(&co));
    kiln_program *p;
    kiln_session *s;
    ASSERT_OK(kiln_program_open(prog, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    encoded enc[MAX_IMAGES];
    memset(enc, 0, sizeof enc);
    double w_vis = 0;
    for (int i = 0; i < o.n_images; i++) {
        double w = 0;
        ASSERT_OK(encode(s, &o.im[i], &enc[i], &w));
        printf("  image %d (%lld patches): worst rel err over visual tokens and %d DeepStack "
               "features %.3g\n",
               i, (long long)o.im[i].pixels.shape[0], o.im[i].n_ds, w);
        if (w > w_vis) w_vis = w;
    }
    for (int j = 0; j < o.n_cases; j++) {
        double wp = 0, wd = 0, wp2 = 0, wd2 = 0;
        float *whole, *chunked;
        int V;
        ASSERT_OK(run_case(s, &o.cs[j], enc, 64, &wp, &wd, &whole, &V));
        ASSERT_OK(run_case(s, &o.cs[j], enc, 7, &wp2, &wd2, &chunked, &V));
        size_t n = (size_t)o.cs[j].logits.shape[0] * (size_t)V;
        int same = !memcmp(whole, chunked, n * sizeof(float));
        printf("  case %d (%d image%s, %lld tokens): prefill %.3g, in chunks of 7 %.3g (%s), "
               "%d decode steps %.3g\n",
               j, o.cs[j].n_images, o.cs[j].n_images > 1 ? "s" : "",
               (long long)o.cs[j].ids.shape[0], wp, wp2, same ? "bit for bit" : "differs",
               o.cs[j].n_decode, wd > wd2 ? wd : wd2);
        ASSERT(wp <= TOL && wp2 <= TOL && wd <= TOL && wd2 <= TOL);
        ASSERT(same);
        free(whole), free(chunked);
    }
    ASSERT(w_vis <= TOL);
    for (int i = 0; i < o.n_images; i++)
        free_encoded(&enc[i]);
    kiln_session_destroy(s);
    kiln_program_close(p);
    free_oracle(&o);
}

TEST(matches_transformers_on_cpu) {
    check_program(DIR, NULL, NULL);
}

TEST(matches_transformers_on_ref) {
    check_program(DIR, "ref", NULL);
}

/* Qwen3-VL-2B-Instruct's widths, two layers each side or all of them
 * (tests/data/hf/qwen3vl_2b_wide or _full, KILN_VL_WIDE_ORACLE: the oracle;
 * the weights are tests/make_random_vl's, whose folder KILN_VL_WIDE names:
 * tests/test_vl_wide.sh), on cpu in f32. */
TEST(matches_transformers_at_2b_widths) {
    const char *model = getenv("KILN_VL_WIDE"), *oracle = getenv("KILN_VL_WIDE_ORACLE");
    if (!model || !*model)
        SKIP("KILN_VL_WIDE (a make_random_vl folder) is unset: the slow tests vl_wide and "
             "vl_full set it");
    g_oracle = oracle && *oracle ? oracle : WIDE;
    check_program(model, NULL, "f32");
    g_oracle = DIR;
}

/* The kiln_llm image API on a case: each image encoded once, prefill in
 * chunks of `chunk` (split into two calls after the first image when
 * `split`), the last logits and the rope delta against transformers, then
 * its decode steps through kiln_llm_decode_rope. */
static void llm_case(kiln_session *s, const kiln_llm *lm, kiln_llm_image *const *enc,
                     const vl_case *c, int chunk, int split, double *worst) {
    int T = (int)c->ids.shape[0], V = (int)c->logits.shape[1];
    const int32_t *ids = c->ids.data;
    kiln_llm_image *imgs[MAX_IMAGES];
    for (int i = 0; i < c->n_images; i++)
        imgs[i] = enc[c->images[i]];
    ASSERT_OK(kiln_session_reset(s));
    int delta = 0, at = 0, first_images = 0;
    const float *last;
    if (split) { /* up to the first image's end: the text after it starts the second call */
        while (ids[at] != c->image_token)
            at++;
        at += kiln_llm_image_tokens(imgs[0]);
        first_images = 1;
        ASSERT_OK(kiln_llm_prefill_images(s, lm, ids, at, 0, imgs, 1, chunk, &delta, NULL));
    }
    ASSERT_OK(kiln_llm_prefill_images(s, lm, ids + at, T - at, at, imgs + first_images,
                                      c->n_images - first_images, chunk, &delta, &last));
    ASSERT_EQ_I(delta, c->rope_delta);
    double e = cols_err(last, (const float *)c->logits.data + (size_t)(T - 1) * V, V, c->stride);
    if (e > *worst) *worst = e;
    for (int k = 0; k < c->n_decode; k++) {
        ASSERT_OK(kiln_llm_decode_rope(s, lm, c->decode_tokens[k], T + k, delta, &last));
        e = cols_err(last, (const float *)c->decode_logits.data + (size_t)k * V, V, c->stride);
        if (e > *worst) *worst = e;
    }
}

TEST(llm_image_api_matches_transformers) {
    vl_oracle o;
    ASSERT(load_oracle(&o) == 0);
    ASSERT(kt_compile_kv(DIR, NULL, kt_path("vl_llm.kiln"), 64, 128, NULL, "f32") == 0);
    kiln_program *p;
    kiln_session *s;
    kiln_llm *lm;
    ASSERT_OK(kiln_program_open(kt_path("vl_llm.kiln"), &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_llm_bind(p, &lm));
    const kiln_llm_vision *v = kiln_llm_get_vision(lm);
    ASSERT(v != NULL);
    ASSERT_EQ_I(v->image_token, o.image_token);
    ASSERT_EQ_I(v->n_deepstack, o.im[0].n_ds);
    ASSERT(kiln_llm_encode_method(lm) >= 0);
    kiln_llm_image *enc[MAX_IMAGES] = {0};
    for (int i = 0; i < o.n_images; i++) {
        const int *g = o.im[i].grid;
        ASSERT_OK(kiln_llm_encode_image(s, lm, o.im[i].pixels.data, g[0], g[1], g[2], &enc[i]));
        ASSERT_EQ_I(kiln_llm_image_tokens(enc[i]), (int)o.im[i].features.shape[0]);
    }
    double worst = 0;
    for (int j = 0; j < o.n_cases; j++) {
        llm_case(s, lm, enc, &o.cs[j], 0, 0, &worst);
        llm_case(s, lm, enc, &o.cs[j], 5, 0, &worst);
        llm_case(s, lm, enc, &o.cs[j], 3, 1, &worst);
    }
    printf("  prefill (whole, chunks of 5, two calls) and decode through kiln_llm: worst rel err "
           "%.3g\n",
           worst);
    ASSERT(worst <= TOL);

    /* photo.rgb through the folder's image processor (preprocessor_config
     * json: 1024..4096 pixels, mean/std 0.5) and the tower: case 2, whose
     * oracle prompted with photo.png through transformers' processor */
    ASSERT(v->min_pixels == 1024 && v->max_pixels == 4096 && v->mean[1] == 0.5f &&
           v->std[2] == 0.5f && fabs(v->rescale - 1 / 255.0) < 1e-9);
    size_t n_rgb;
    uint8_t *rgb = (uint8_t *)kt_read_file(DIR "/photo.rgb", &n_rgb);
    ASSERT(rgb && n_rgb == 60 * 40 * 3);
    kiln_llm_image *from_rgb[MAX_IMAGES] = {enc[0], enc[1], NULL};
    ASSERT(o.n_cases == 3 && o.cs[2].images[0] == 2);
    ASSERT_OK(kiln_llm_encode_rgb(s, lm, rgb, 40, 60, &from_rgb[2]));
    int gt, gh, gw;
    kiln_llm_image_grid(from_rgb[2], &gt, &gh, &gw);
    ASSERT(gt == o.im[2].grid[0] && gh == o.im[2].grid[1] && gw == o.im[2].grid[2]);
    double worst_rgb = 0;
    llm_case(s, lm, from_rgb, &o.cs[2], 0, 0, &worst_rgb);
    printf("  photo.rgb encoded from its pixels (grid %d x %d): case 2 within %.3g\n", gh, gw,
           worst_rgb);
    ASSERT(worst_rgb <= TOL);
    kiln_llm_image *wide = NULL;
    ASSERT_EQ_I(kiln_llm_encode_rgb(s, lm, rgb, 1, 201, &wide), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "200");
    ASSERT_EQ_I(kiln_llm_encode_rgb(s, lm, rgb, 0, 5, &wide), KILN_ERR_INVALID_ARG);
    ASSERT(wide == NULL);
    kiln_llm_image_free(from_rgb[2]);
    free(rgb);

    /* wrong image counts and bad grids: clear errors */
    const vl_case *c = &o.cs[1]; /* two images */
    const int32_t *ids = c->ids.data;
    int T = (int)c->ids.shape[0], delta = 0;
    ASSERT_OK(kiln_session_reset(s));
    ASSERT_EQ_I(kiln_llm_prefill_images(s, lm, ids, T, 0, enc, 1, 0, &delta, NULL),
                KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "more image tokens than the 1 image given");
    kiln_llm_image *three[3] = {enc[0], enc[1], enc[0]};
    ASSERT_EQ_I(kiln_llm_prefill_images(s, lm, ids, T, 0, three, 3, 0, &delta, NULL),
                KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "3 images given but the text holds 2");
    kiln_llm_image *swapped[2] = {enc[1], enc[0]}; /* runs of the wrong lengths */
    ASSERT_EQ_I(kiln_llm_prefill_images(s, lm, ids, T, 0, swapped, 2, 0, &delta, NULL),
                KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(kiln_llm_prefill(s, lm, ids, T, 0, 0, NULL), KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(delta, 0);
    kiln_llm_image *bad = NULL;
    const int *g = o.im[0].grid;
    ASSERT_EQ_I(kiln_llm_encode_image(s, lm, o.im[0].pixels.data, 1, g[1] + 1, g[2], &bad),
                KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(kiln_llm_encode_image(s, lm, o.im[0].pixels.data, 1, 2, 4096, &bad),
                KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(kiln_llm_encode_image(s, lm, NULL, g[0], g[1], g[2], &bad), KILN_ERR_INVALID_ARG);
    ASSERT(bad == NULL);

    /* text alone runs on the same program: rope positions are the rows */
    int32_t text[6] = {1, 2, 3, 4, 5, 6};
    const float *a, *b;
    float *row = malloc(sizeof(float) * (size_t)c->logits.shape[1]);
    ASSERT_OK(kiln_session_reset(s));
    ASSERT_OK(kiln_llm_prefill(s, lm, text, 6, 0, 0, &a));
    memcpy(row, a, sizeof(float) * (size_t)c->logits.shape[1]);
    ASSERT_OK(kiln_session_reset(s));
    ASSERT_OK(kiln_llm_prefill(s, lm, text, 4, 0, 0, NULL));
    ASSERT_OK(kiln_llm_decode_rope(s, lm, text[4], 4, 0, NULL));
    ASSERT_OK(kiln_llm_decode(s, lm, text[5], 5, &b));
    ASSERT(kt_rel_err(b, row, (int)c->logits.shape[1]) <= TOL);
    free(row);

    for (int i = 0; i < o.n_images; i++)
        kiln_llm_image_free(enc[i]);
    kiln_llm_free(lm);
    kiln_session_destroy(s);
    kiln_program_close(p);
    free_oracle(&o);
}

TEST(methods_and_inputs) {
    kiln_program *p;
    ASSERT(kt_compile_kv(DIR, NULL, kt_path("vl_info.kiln"), 16, 64, NULL, "f16") == 0);
    ASSERT_OK(kiln_program_open(kt_path("vl_info.kiln"), &p));
    int m;
    ASSERT_OK(kiln_program_find_method(p, "encode_image", &m));
    ASSERT_EQ_I(kiln_method_input_count(p, m), 4);
    ASSERT_EQ_I(kiln_method_output_count(p, m), 3); /* visual tokens + 2 DeepStack features */
    ASSERT_OK(kiln_program_find_method(p, "prefill", &m));
    ASSERT(input_index(p, m, "rope_pos") >= 0 && input_index(p, m, "visual") >= 0 &&
           input_index(p, m, "visual_mask") >= 0 && input_index(p, m, "deepstack.1") >= 0);
    ASSERT_OK(kiln_program_find_method(p, "decode", &m));
    ASSERT(input_index(p, m, "rope_pos") >= 0 && input_index(p, m, "visual") < 0);
    ASSERT_STR_EQ(kiln_program_meta_str(p, "general.architecture"), "qwen3vl");
    kiln_program_close(p);
}

TEST(host_tables_match_transformers) {
    vl_oracle o;
    ASSERT(load_oracle(&o) == 0);
    kiln_vl_grid grids[MAX_IMAGES];
    for (int i = 0; i < o.n_images; i++) {
        grids[i] = (kiln_vl_grid){o.im[i].grid[0], o.im[i].grid[1], o.im[i].grid[2]};
        int64_t N = o.im[i].pixels.shape[0];
        ASSERT_EQ_I(N, (int64_t)grids[i].t * grids[i].h * grids[i].w);
        int32_t *rp = malloc((size_t)N * 8), *idx = malloc((size_t)N * 16);
        float *w = malloc((size_t)N * 16);
        ASSERT_OK(kiln_vl_patch_tables(grids[i], 2, 6, rp, idx, w));
        ASSERT(!memcmp(rp, o.im[i].rope_pos.data, (size_t)N * 8));
        ASSERT(!memcmp(idx, o.im[i].interp_idx.data, (size_t)N * 16));
        double e = 0;
        for (int64_t k = 0; k < N * 4; k++) {
            double d = fabs((double)w[k] - ((const float *)o.im[i].interp_w.data)[k]);
            e = d > e ? d : e;
        }
        printf("  image %d: rope positions and taps equal, weights within %.3g\n", i, e);
        ASSERT(e <= 1e-6);
        free(rp), free(idx), free(w);
    }
    for (int j = 0; j < o.n_cases; j++) {
        const vl_case *c = &o.cs[j];
        int T = (int)c->ids.shape[0];
        kiln_vl_grid g[MAX_IMAGES];
        for (int i = 0; i < c->n_images; i++)
            g[i] = grids[c->images[i]];
        int32_t *pos = malloc((size_t)T * 12), delta, *want = c->position_ids.data;
        ASSERT_OK(
            kiln_vl_rope_index(c->ids.data, T, c->image_token, g, c->n_images, 2, pos, &delta));
        for (int t = 0; t < T; t++)
            for (int s = 0; s < 3; s++)
                ASSERT_EQ_I(pos[t * 3 + s], want[s * T + t]);
        ASSERT_EQ_I(delta, c->decode_pos[0] - T);
        /* fewer or more images than the text holds */
        ASSERT_EQ_I(
            kiln_vl_rope_index(c->ids.data, T, c->image_token, g, c->n_images - 1, 2, pos, &delta),
            KILN_ERR_INVALID_ARG);
        ASSERT_CONTAINS(kiln_last_error(), "more image tokens than");
        g[c->n_images] = grids[0];
        ASSERT_EQ_I(
            kiln_vl_rope_index(c->ids.data, T, c->image_token, g, c->n_images + 1, 2, pos, &delta),
            KILN_ERR_INVALID_ARG);
        ASSERT_CONTAINS(kiln_last_error(), "but the text holds");
        free(pos);
    }
    kiln_vl_grid bad = {1, 7, 6};
    int32_t rp[84], idx[168];
    float w[168];
    ASSERT_EQ_I(kiln_vl_patch_tables(bad, 2, 6, rp, idx, w), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "not whole 2 x 2 blocks");
    free_oracle(&o);
}

/* The image processor: for images of several sizes and aspect ratios
 * (upscaled to the pixel floor, shrunk past the cap, one 400 x 37), the
 * target size and grid equal transformers' slow (PIL) processor's, the
 * bicubic resize within 2/255 of Pillow's (it is meant to equal it), and
 * pixel_values within 1e-5 of the processor's. */
#define PRE KILN_SOURCE_DIR "/tests/data/hf/qwen3vl_preproc"
TEST(preprocessing_matches_transformers) {
    size_t n;
    char *text = kt_read_file(PRE "/oracle.json", &n);
    ASSERT(text);
    kiln_json_doc doc;
    ASSERT_OK(kiln_json_parse(text, n, "oracle.json", 0, &doc));
    const kiln_json *ims = kiln_json_get(doc.root, "images"),
                    *set = kiln_json_get(doc.root, "settings");
    ASSERT(ims && set);
    kiln_vl_image_config c = {(int)kiln_json_get(set, "patch_size")->i,
                              (int)kiln_json_get(set, "merge_size")->i,
                              (int)kiln_json_get(set, "temporal_patch_size")->i,
                              kiln_json_get(kiln_json_get(set, "size"), "shortest_edge")->i,
                              kiln_json_get(kiln_json_get(set, "size"), "longest_edge")->i,
                              1.0f / 255.0f,
                              {0.5f, 0.5f, 0.5f},
                              {0.5f, 0.5f, 0.5f}};
    for (size_t k = 0; k < ims->len; k++) {
        const kiln_json *e = &ims->items[k], *rs = kiln_json_get(e, "resized"),
                        *g = kiln_json_get(e, "grid_thw");
        int w = (int)kiln_json_get(e, "width")->i, h = (int)kiln_json_get(e, "height")->i;
        int oh, ow;
        ASSERT_OK(
            kiln_vl_target_size(h, w, c.patch * c.merge, c.min_pixels, c.max_pixels, &oh, &ow));
        ASSERT_EQ_I(oh, (int)rs->items[0].i);
        ASSERT_EQ_I(ow, (int)rs->items[1].i);
        char p[600];
        size_t len;
        snprintf(p, sizeof p, PRE "/image%zu.rgb", k);
        uint8_t *rgb = (uint8_t *)kt_read_file(p, &len);
        ASSERT(rgb && len == (size_t)w * h * 3);
        snprintf(p, sizeof p, PRE "/image%zu.resized", k);
        uint8_t *want = (uint8_t *)kt_read_file(p, &len);
        ASSERT(want && len == (size_t)oh * ow * 3);
        uint8_t *got = malloc(len);
        ASSERT_OK(kiln_vl_resize_rgb(rgb, h, w, got, oh, ow));
        int worst = 0;
        size_t differ = 0;
        for (size_t i = 0; i < len; i++) {
            int d = abs((int)got[i] - (int)want[i]);
            worst = d > worst ? d : worst;
            differ += d != 0;
        }
        snprintf(p, sizeof p, PRE "/image%zu.pixels.f32", k);
        float *pix = (float *)kt_read_file(p, &len);
        size_t per = (size_t)3 * c.temporal_patch * c.patch * c.patch;
        size_t npatch = (size_t)(oh / c.patch) * (size_t)(ow / c.patch);
        ASSERT(pix && len == npatch * per * sizeof(float));
        float *mine = malloc(len);
        kiln_vl_grid grid;
        ASSERT_OK(kiln_vl_patchify(want, oh, ow, &c, mine, &grid)); /* Pillow's pixels: layout */
        ASSERT_EQ_I(grid.t, (int)g->items[0].i);
        ASSERT_EQ_I(grid.h, (int)g->items[1].i);
        ASSERT_EQ_I(grid.w, (int)g->items[2].i);
        double err = 0;
        for (size_t i = 0; i < npatch * per; i++)
            err = fabs((double)mine[i] - pix[i]) > err ? fabs((double)mine[i] - pix[i]) : err;
        printf("  %d x %d -> %d x %d (grid %d x %d): resize worst %d/255, %zu of %zu bytes "
               "differ; pixel_values within %.2g\n",
               w, h, ow, oh, grid.w, grid.h, worst, differ, (size_t)oh * ow * 3, err);
        ASSERT(worst <= 2);
        ASSERT(err <= 1e-5);
        free(rgb), free(want), free(got), free(pix), free(mine);
    }
    /* the processor's refusals */
    int oh, ow;
    ASSERT_EQ_I(kiln_vl_target_size(10, 2001, 16, 1024, 4096, &oh, &ow), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "aspect ratio 200.1 is over 200");
    ASSERT_OK(kiln_vl_target_size(10, 2000, 16, 1024, 4096, &oh, &ow));
    ASSERT_EQ_I(kiln_vl_target_size(0, 20, 16, 1024, 4096, &oh, &ow), KILN_ERR_INVALID_ARG);
    kiln_vl_grid grid;
    float one[384];
    uint8_t px[17 * 16 * 3] = {0};
    ASSERT_EQ_I(kiln_vl_patchify(px, 17, 16, &c, one, &grid), KILN_ERR_INVALID_ARG);
    kiln_json_free(&doc);
    free(text);
}

TEST_MAIN(preprocessing_matches_transformers, host_tables_match_transformers,
          matches_transformers_on_cpu, matches_transformers_on_ref,
          matches_transformers_at_2b_widths, llm_image_api_matches_transformers, methods_and_inputs)
