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

#endif
