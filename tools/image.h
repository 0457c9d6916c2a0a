/* image.h: images from files, for the command and the tests (not the core
 * library, which stays libc-only): PNG through libpng, JPEG through
 * libjpeg(-turbo), both found with pkg-config at build time, and .npy
 * arrays of 8-bit pixels. The result is 8-bit RGB as transformers'
 * processors see it after convert_to_rgb: gray replicated, a palette
 * expanded, 16-bit channels taken to 8, and an alpha channel composited
 * onto white as PIL's alpha_composite does it. */
#ifndef KILN_TOOLS_IMAGE_H
#define KILN_TOOLS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

/* The largest image read: sides up to KILN_IMAGE_MAX_SIDE, and at most
 * KILN_IMAGE_MAX_PIXELS pixels, checked from the header before anything is
 * decoded. */
#define KILN_IMAGE_MAX_SIDE 65536
#define KILN_IMAGE_MAX_PIXELS (1 << 27)

/* Which decoders this build has ("png jpeg npy", or fewer). */
const char *kiln_image_formats(void);

/* Reads `path` (PNG, JPEG or .npy by its first bytes: a .npy is uint8
 * [H, W, 3] or [H, W], C order) into *rgb (H x W x 3 bytes, row by row;
 * kiln_image_free it) and *h, *w. A damaged or truncated file, a side of 0 or
 * past the cap, or a format this build has no decoder for is an error
 * naming the file. */
kiln_status kiln_image_load(const char *path, uint8_t **rgb, int *h, int *w);

/* The same on bytes in memory; `what` names them in messages. */
kiln_status kiln_image_decode(const uint8_t *data, size_t size, const char *what, uint8_t **rgb,
                              int *h, int *w);

/* Frees what kiln_image_load / kiln_image_decode returned; NULL is a no-op. */
void kiln_image_free(uint8_t *rgb);

#endif
