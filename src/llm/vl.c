/* vl.c: the host's side of a vision-language program (vl.h). */
#include "llm/vl.h"

#include <math.h>

static kiln_status check_grid(kiln_vl_grid g, int merge) {
    if (merge < 1 || merge > 8) return kiln_error(KILN_ERR_INVALID_ARG, "merge size %d", merge);
    if (g.t < 1 || g.h < merge || g.w < merge || g.h % merge || g.w % merge ||
        (int64_t)g.t * g.h * g.w > 1 << 24)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image grid %d x %d x %d patches is not whole %d x %d blocks", g.t, g.h,
                          g.w, merge, merge);
    return KILN_OK;
}

/* Bilinear taps along one axis: position i of n onto 0..side-1, corners
 * aligned; f32 arithmetic as transformers does it. */
static void taps(int i, int n, int side, int32_t tap[2], float wt[2]) {
    float src = (float)i * (float)(side - 1) / (float)(n > 1 ? n - 1 : 1);
    float fl = (float)(int)src; /* src >= 0 */
    for (int k = 0; k < 2; k++) {
        int32_t t = (int32_t)fl + k;
        tap[k] = t > side - 1 ? side - 1 : t;
        float d = src - fl - (float)k;
        d = d < 0 ? -d : d;
        wt[k] = 1.0f - d > 0 ? 1.0f - d : 0.0f;
    }
}

kiln_status kiln_vl_patch_tables(kiln_vl_grid g, int merge, int side, int32_t *rope_pos,
                                 int32_t *idx, float *w) {
    kiln_status st = check_grid(g, merge);
    if (st) return st;
    if (side < 1 || side > 1 << 12)
        return kiln_error(KILN_ERR_INVALID_ARG, "position grid side %d out of range", side);
    int64_t hw = (int64_t)g.h * g.w, unit = (int64_t)merge * merge, blocks_w = g.w / merge;
    for (int64_t p = 0; p < g.t * hw; p++) {
        int64_t in = p % hw;
        int row = (int)((in / (unit * blocks_w)) * merge + (in / merge) % merge);
        int col = (int)(((in / unit) % blocks_w) * merge + in % merge);
        rope_pos[p * 2] = row, rope_pos[p * 2 + 1] = col;
        int32_t th[2], tw[2];
        float wh[2], ww[2];
        taps(row, g.h, side, th, wh);
        taps(col, g.w, side, tw, ww);
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                idx[p * 4 + a * 2 + b] = th[a] * side + tw[b];
                w[p * 4 + a * 2 + b] = wh[a] * ww[b];
            }
    }
    return KILN_OK;
}

kiln_status kiln_vl_rope_index(const int32_t *ids, int n, int32_t image_token,
                               const kiln_vl_grid *grids, int n_images, int merge, int32_t *pos,
                               int32_t *delta) {
    int32_t cur = 0, last = -1;
    int im = 0;
    for (int i = 0; i < n;) {
        if (ids[i] != image_token) {
            pos[i * 3] = pos[i * 3 + 1] = pos[i * 3 + 2] = cur;
            last = cur++;
            i++;
            continue;
        }
        if (im == n_images)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "more image tokens than the %d image%s given (at token %d)", n_images,
                              n_images == 1 ? "" : "s", i);
        kiln_vl_grid g = grids[im];
        kiln_status st = check_grid(g, merge);
        if (st) return st;
        int gh = g.h / merge, gw = g.w / merge, count = g.t * gh * gw;
        if (count > n - i)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "image %d needs %d tokens but only %d are left at token %d", im,
                              count, n - i, i);
        for (int k = 0; k < count; k++) {
            if (ids[i + k] != image_token)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "image %d's run of %d image tokens ends after %d (token %d)", im,
                                  count, k, i + k);
            int32_t *p = pos + (size_t)(i + k) * 3;
            p[0] = cur + k / (gh * gw); /* frames: one time step each (an image has one) */
            p[1] = cur + (k % (gh * gw)) / gw;
            p[2] = cur + k % gw;
            for (int s = 0; s < 3; s++)
                last = p[s] > last ? p[s] : last;
        }
        i += count;
        cur += (gh > gw ? gh : gw);
        im++;
    }
    if (im != n_images)
        return kiln_error(KILN_ERR_INVALID_ARG, "%d image%s given but the text holds %d", n_images,
                          n_images == 1 ? "" : "s", im);
    *delta = last + 1 - n;
    return KILN_OK;
}

/* ---- images ---------------------------------------------------------------------- */

kiln_status kiln_vl_target_size(int h, int w, int factor, int64_t min_pixels, int64_t max_pixels,
                                int *oh, int *ow) {
    if (h < 1 || w < 1)
        return kiln_error(KILN_ERR_INVALID_ARG, "image of %d x %d pixels: a side is empty", w, h);
    if (factor < 1 || min_pixels < 1 || max_pixels < min_pixels)
        return kiln_error(KILN_ERR_INVALID_ARG, "patch factor %d, pixels %lld..%lld", factor,
                          (long long)min_pixels, (long long)max_pixels);
    double hi = h > w ? h : w, lo = h > w ? w : h;
    if (hi / lo > 200)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image of %d x %d pixels: aspect ratio %.1f is over 200 (the "
                          "processor's limit)",
                          w, h, hi / lo);
    /* Python's round(): halves to even, as nearbyint in the default mode */
    double hb = nearbyint((double)h / factor) * factor, wb = nearbyint((double)w / factor) * factor;
    if (hb * wb > (double)max_pixels) {
        double beta = sqrt((double)h * (double)w / (double)max_pixels);
        hb = floor(h / beta / factor) * factor;
        wb = floor(w / beta / factor) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (hb * wb < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)h * (double)w));
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    if (hb > KILN_VL_MAX_SIDE || wb > KILN_VL_MAX_SIDE)
        return kiln_error(KILN_ERR_INVALID_ARG, "image of %d x %d pixels resizes to %.0f x %.0f", w,
                          h, wb, hb);
    *oh = (int)hb, *ow = (int)wb;
    return KILN_OK;
}

#define RS_BITS 22 /* Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

static double bicubic(double x) { /* a = -0.5, as Pillow */
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* For each of n_out output positions over n_in inputs: the first input
 * bound[2o], the count bound[2o+1], and its fixed-point weights at
 * k[o * ksize ..]. */
static kiln_status resample_coeffs(int n_in, int n_out, int **bound, int32_t **k, int *ksize) {
    double scale = (double)n_in / n_out, fscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * fscale;
    *ksize = (int)ceil(support) * 2 + 1;
    *bound = kiln_malloc(sizeof(int) * 2 * (size_t)n_out);
    *k = kiln_malloc(sizeof(int32_t) * (size_t)n_out * (size_t)*ksize);
    double *w = kiln_malloc(sizeof(double) * (size_t)*ksize);
    if (!*bound || !*k || !w) {
        kiln_free(*bound), kiln_free(*k), kiln_free(w);
        return kiln_error(KILN_ERR_NOMEM, "out of memory for resize weights");
    }
    for (int o = 0; o < n_out; o++) {
        double center = (o + 0.5) * scale, ww = 0.0, ss = 1.0 / fscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > n_in) xmax = n_in;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++)
            ww += w[x] = bicubic((x + xmin - center + 0.5) * ss);
        int32_t *kk = *k + (size_t)o * (size_t)*ksize;
        for (int x = 0; x < *ksize; x++) {
            double v = x < xmax && ww != 0.0 ? w[x] / ww : 0.0;
            kk[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << RS_BITS) : 0.5 + v * (1 << RS_BITS));
        }
        (*bound)[2 * o] = xmin, (*bound)[2 * o + 1] = xmax;
    }
    kiln_free(w);
    return KILN_OK;
}

static uint8_t clip8(int64_t v) {
    v >>= RS_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass over an h x w RGB image: along the rows (horizontal, to ow
 * columns) or the columns (vertical, to oh rows), 8-bit out. */
static void resample_pass(const uint8_t *src, int w, uint8_t *dst, int oh, int ow, int vertical,
                          const int *bound, const int32_t *k, int ksize) {
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int o = vertical ? y : x;
            const int32_t *kk = k + (size_t)o * (size_t)ksize;
            size_t first = vertical ? ((size_t)bound[2 * o] * (size_t)w + (size_t)x) * 3
                                    : ((size_t)y * (size_t)w + (size_t)bound[2 * o]) * 3;
            size_t step = vertical ? (size_t)w * 3 : 3;
            for (int c = 0; c < 3; c++) {
                int64_t ss = 1 << (RS_BITS - 1);
                const uint8_t *in = src + first + (size_t)c;
                for (int t = 0; t < bound[2 * o + 1]; t++)
                    ss += (int64_t)in[(size_t)t * step] * kk[t];
                dst[((size_t)y * (size_t)ow + (size_t)x) * 3 + (size_t)c] = clip8(ss);
            }
        }
}

kiln_status kiln_vl_resize_rgb(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow) {
    if (h < 1 || w < 1 || oh < 1 || ow < 1)
        return kiln_error(KILN_ERR_INVALID_ARG, "resize %d x %d -> %d x %d", w, h, ow, oh);
    /* Pillow shrinks first: the vertical pass leads when it alone shrinks
     * (wider and shorter); otherwise the horizontal one */
    int v_first = ow > w && oh < h;
    int *bx = NULL, *by = NULL, kx, ky;
    int32_t *wx = NULL, *wy = NULL;
    size_t mid = v_first ? (size_t)oh * (size_t)w : (size_t)h * (size_t)ow;
    uint8_t *tmp = kiln_malloc(mid * 3);
    kiln_status st = tmp ? resample_coeffs(w, ow, &bx, &wx, &kx)
                         : kiln_error(KILN_ERR_NOMEM, "out of memory for a %d x %d image", ow, h);
    if (!st) st = resample_coeffs(h, oh, &by, &wy, &ky);
    if (st) goto done;
    if (v_first) {
        resample_pass(src, w, tmp, oh, w, 1, by, wy, ky);
        resample_pass(tmp, w, dst, oh, ow, 0, bx, wx, kx);
    } else {
        resample_pass(src, w, tmp, h, ow, 0, bx, wx, kx);
        resample_pass(tmp, ow, dst, oh, ow, 1, by, wy, ky);
    }
done:
    kiln_free(tmp), kiln_free(bx), kiln_free(by), kiln_free(wx), kiln_free(wy);
    return st;
}

kiln_status kiln_vl_patchify(const uint8_t *rgb, int h, int w, const kiln_vl_image_config *c,
                             float *pixels, kiln_vl_grid *grid) {
    int p = c->patch, m = c->merge, tp = c->temporal_patch;
    if (p < 1 || m < 1 || tp < 1 || h % (p * m) || w % (p * m) || h < 1 || w < 1)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image of %d x %d pixels is not whole %d-pixel merged patches", w, h,
                          p * m);
    int gh = h / p, gw = w / p;
    size_t per = (size_t)3 * (size_t)tp * (size_t)p * (size_t)p;
    float lut[3][256]; /* ((v * rescale) - mean) / std, as the processor's float steps */
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ((float)v * c->rescale - c->mean[ch]) / c->std[ch];
    size_t n = 0;
    for (int bh = 0; bh < gh / m; bh++)
        for (int bw = 0; bw < gw / m; bw++)
            for (int mh = 0; mh < m; mh++)
                for (int mw = 0; mw < m; mw++, n++) {
                    float *out = pixels + n * per;
                    int y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
                    for (int ch = 0; ch < 3; ch++)
                        for (int t = 0; t < tp; t++)
                            for (int py = 0; py < p; py++)
                                for (int px = 0; px < p; px++)
                                    *out++ = lut[ch][rgb[((size_t)(y0 + py) * (size_t)w +
                                                          (size_t)(x0 + px)) *
                                                             3 +
                                                         (size_t)ch]];
                }
    *grid = (kiln_vl_grid){1, gh, gw};
    return KILN_OK;
}
