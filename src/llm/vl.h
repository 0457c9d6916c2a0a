/* vl.h: what the host computes for a vision-language program (Qwen3-VL):
 * an image's per-patch tables, which encode_image takes beside the pixels,
 * and the M-RoPE positions of a sequence holding images. Pure functions of
 * the image grids, written after transformers' Qwen3-VL code and checked
 * against it (tests/test_vl.c). */
#ifndef KILN_LLM_VL_H
#define KILN_LLM_VL_H

#include <stdint.h>

#include "base/base.h"

/* An image as the vision tower sees it: t x h x w patches (t = 1 for an
 * image), h and w multiples of the merge size. */
typedef struct kiln_vl_grid {
    int t, h, w;
} kiln_vl_grid;

/* For the N = t h w patches of `g` in the processor's order (each merge x
 * merge block consecutive, blocks row by row): rope_pos [N, 2] (row, col)
 * and the bilinear taps (align_corners) into the side x side learned
 * position grid, idx [N, 4] and w [N, 4]. */
kiln_status kiln_vl_patch_tables(kiln_vl_grid g, int merge, int side, int32_t *rope_pos,
                                 int32_t *idx, float *w);

/* The (t, h, w) rope positions pos [n, 3] of ids[0..n): text counts up one
 * per token; image i's run of g_i.h g_i.w / merge^2 `image_token`s takes
 * (start, start + row, start + col) over its merged grid, and the text
 * after it continues at start + max(h, w) / merge. *delta = the last
 * position + 1 - n: a decode step at cache row r uses r + delta. Fails when
 * the image tokens do not match the grids (count or run length). */
kiln_status kiln_vl_rope_index(const int32_t *ids, int n, int32_t image_token,
                               const kiln_vl_grid *grids, int n_images, int merge, int32_t *pos,
                               int32_t *delta);

/* ---- images: the Qwen2-VL / Qwen3-VL image processor -------------------- */

/* The processor's settings (preprocessor_config.json or processor_config.json). */
typedef struct kiln_vl_image_config {
    int patch, merge, temporal_patch;
    int64_t min_pixels, max_pixels; /* size.shortest_edge / longest_edge */
    float rescale;                  /* 1/255 */
    float mean[3], std[3];
} kiln_vl_image_config;

/* The processor's smart_resize: h x w -> *oh x *ow, multiples of factor,
 * within min..max pixels, the aspect kept as near as can be.
 * KILN_ERR_INVALID_ARG for a side < 1 or an aspect ratio over 200 (the
 * processor's own limit), or a result past KILN_VL_MAX_SIDE. */
#define KILN_VL_MAX_SIDE 65536
kiln_status kiln_vl_target_size(int h, int w, int factor, int64_t min_pixels, int64_t max_pixels,
                                int *oh, int *ow);

/* PIL's bicubic resize (Image.resize(..., BICUBIC)) of an RGB image, h x w
 * x 3 bytes, to oh x ow x 3: separable, antialiased when shrinking (the
 * kernel widened by the scale), two passes with 8-bit results between
 * them, the horizontal one first unless only the vertical one shrinks
 * (Pillow 13's order, found by comparing both), 22-bit fixed-point weights,
 * as Pillow computes it. */
kiln_status kiln_vl_resize_rgb(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow);

/* An RGB image already at a size of whole merged patches -> pixel_values
 * [N, 3 x temporal_patch x patch^2] (rescaled, normalised; each frame the
 * same image) in the processor's order, and its grid. */
kiln_status kiln_vl_patchify(const uint8_t *rgb, int h, int w, const kiln_vl_image_config *c,
                             float *pixels, kiln_vl_grid *grid);

#endif
