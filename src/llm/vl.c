/* vl.c: the host's side of a vision-language program (vl.h). */
#include "llm/vl.h"

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
