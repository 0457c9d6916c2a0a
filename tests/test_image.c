/* test_image.c: the image loader (tools/image.c) against what PIL and
 * transformers' convert_to_rgb make of the same files (written by
 * scripts/make_vl_fixtures.py into the Qwen3-VL fixture), and damaged,
 * truncated, empty and oversized images as clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "image.h"

#define DIR KILN_SOURCE_DIR "/tests/data/hf/qwen3vl_tiny_f32"

static int has(const char *format) {
    return strstr(kiln_image_formats(), format) != NULL;
}

/* Loads DIR/name and compares it with DIR/expect (H x W x 3 bytes):
 * the worst difference, or -1 when the sizes differ. */
static int compare(const char *name, const char *expect, int h, int w) {
    char path[512], epath[512];
    snprintf(path, sizeof path, "%s/%s", DIR, name);
    snprintf(epath, sizeof epath, "%s/%s", DIR, expect);
    uint8_t *rgb;
    int ih, iw;
    if (kiln_image_load(path, &rgb, &ih, &iw)) {
        printf("  %s: %s\n", name, kiln_last_error());
        return -1;
    }
    size_t n;
    uint8_t *want = (uint8_t *)kt_read_file(epath, &n);
    int worst = -1;
    if (want && ih == h && iw == w && n == (size_t)h * w * 3) {
        worst = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)rgb[i] - (int)want[i]);
            worst = d > worst ? d : worst;
        }
    }
    printf("  %s: %d x %d, worst difference from PIL %d/255\n", name, iw, ih, worst);
    kiln_image_free(rgb);
    free(want);
    return worst;
}

TEST(png_as_transformers_sees_it) {
    if (!has("png")) SKIP("this build has no libpng (%s)", kiln_image_formats());
    ASSERT_EQ_I(compare("photo.png", "photo.rgb", 40, 60), 0);
    ASSERT_EQ_I(compare("alpha.png", "alpha.rgb", 24, 32), 0); /* RGBA over white */
    ASSERT_EQ_I(compare("gray.png", "gray.rgb", 17, 23), 0);
    ASSERT_EQ_I(compare("palette.png", "palette.rgb", 19, 21), 0);
}

TEST(jpeg_as_pil_decodes_it) {
    if (!has("jpeg")) SKIP("this build has no libjpeg (%s)", kiln_image_formats());
    int worst = compare("photo.jpg", "photo.jpg.rgb", 40, 60);
    ASSERT(worst >= 0 && worst <= 2); /* libjpeg-turbo builds may differ by a rounding */
}

/* A .npy header for uint8 data of `shape` (a Python tuple). */
static size_t npy(uint8_t *out, const char *shape, const uint8_t *px, size_t n) {
    char hdr[128];
    int len =
        snprintf(hdr, sizeof hdr, "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }", shape);
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)((len + 1 + pad) & 0xff), out[9] = (uint8_t)((len + 1 + pad) >> 8);
    memcpy(out + 10, hdr, (size_t)len);
    memset(out + 10 + len, ' ', (size_t)pad);
    out[10 + len + pad] = '\n';
    memcpy(out + total + pad, px, n);
    return (size_t)total + (size_t)pad + n;
}

TEST(npy_pixels) {
    static uint8_t buf[8192];
    uint8_t px[6 * 4 * 4], *rgb; /* room for the RGBA case */
    const size_t n_rgb = 6 * 4 * 3;
    for (int i = 0; i < (int)sizeof px; i++)
        px[i] = (uint8_t)(i * 7);
    int h, w;
    size_t n = npy(buf, "(4, 6, 3)", px, n_rgb);
    ASSERT_OK(kiln_image_decode(buf, n, "rgb.npy", &rgb, &h, &w));
    ASSERT(h == 4 && w == 6 && !memcmp(rgb, px, n_rgb));
    kiln_image_free(rgb);
    n = npy(buf, "(4, 6)", px, 24); /* gray: replicated */
    ASSERT_OK(kiln_image_decode(buf, n, "gray.npy", &rgb, &h, &w));
    ASSERT(h == 4 && w == 6 && rgb[3 * 5] == px[5] && rgb[3 * 5 + 2] == px[5]);
    kiln_image_free(rgb);
    n = npy(buf, "(4, 6, 3)", px, n_rgb - 1);
    ASSERT_EQ_I(kiln_image_decode(buf, n, "short.npy", &rgb, &h, &w), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "truncated");
    n = npy(buf, "(0, 6, 3)", px, 0);
    ASSERT_EQ_I(kiln_image_decode(buf, n, "empty.npy", &rgb, &h, &w), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "0 pixels");
    n = npy(buf, "(100000, 100000, 3)", px, 0); /* refused from the header */
    ASSERT_EQ_I(kiln_image_decode(buf, n, "huge.npy", &rgb, &h, &w), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "100000 x 100000");
    n = npy(buf, "(4, 6, 4)", px, 96);
    ASSERT_EQ_I(kiln_image_decode(buf, n, "rgba.npy", &rgb, &h, &w), KILN_ERR_UNSUPPORTED);
    n = npy(buf, "(4, 6, 3)", px, n_rgb);
    memcpy(strstr((char *)buf + 10, "'|u1'"), "'<f4'", 5);
    ASSERT_EQ_I(kiln_image_decode(buf, n, "float.npy", &rgb, &h, &w), KILN_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(kiln_last_error(), "uint8");
    ASSERT(rgb == NULL);
}

/* The file's bytes, cut or patched: every damage an error naming it. */
TEST(damaged_files_are_errors) {
    uint8_t *rgb = NULL;
    int h, w;
    ASSERT_EQ_I(kiln_image_load(DIR "/no-such.png", &rgb, &h, &w), KILN_ERR_IO);
    ASSERT_CONTAINS(kiln_last_error(), "no-such.png");
    ASSERT_EQ_I(kiln_image_decode((const uint8_t *)"GIF89a....", 10, "x.gif", &rgb, &h, &w),
                KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "not a PNG, JPEG or .npy");
    size_t n;
    uint8_t *png = (uint8_t *)kt_read_file(DIR "/photo.png", &n);
    ASSERT(png && n > 100);
    if (has("png")) {
        size_t cuts[] = {8, 30, n / 2, n - 13};
        for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
            ASSERT_EQ_I(kiln_image_decode(png, cuts[i], "cut.png", &rgb, &h, &w), KILN_ERR_FORMAT);
            ASSERT_CONTAINS(kiln_last_error(), "cut.png: a damaged PNG");
        }
        uint8_t *bad = malloc(n);
        memcpy(bad, png, n);
        bad[n / 2] ^= 0x55; /* a flipped byte in the pixel data: its CRC fails */
        ASSERT_EQ_I(kiln_image_decode(bad, n, "flipped.png", &rgb, &h, &w), KILN_ERR_FORMAT);
        free(bad);
    }
    free(png);
    uint8_t *jpg = (uint8_t *)kt_read_file(DIR "/photo.jpg", &n);
    ASSERT(jpg && n > 200);
    if (has("jpeg")) {
        ASSERT_EQ_I(kiln_image_decode(jpg, n / 2, "cut.jpg", &rgb, &h, &w), KILN_ERR_FORMAT);
        ASSERT_CONTAINS(kiln_last_error(), "cut.jpg: a damaged JPEG");
        ASSERT_EQ_I(kiln_image_decode(jpg, 40, "head.jpg", &rgb, &h, &w), KILN_ERR_FORMAT);
        /* the frame header's size: 0 wide, then 65000 x 65000 (refused
         * before anything is decoded) */
        size_t sof = 2;
        while (sof + 9 < n && !(jpg[sof] == 0xff && jpg[sof + 1] == 0xc0))
            sof++;
        ASSERT(sof + 9 < n);
        uint8_t *bad = malloc(n);
        memcpy(bad, jpg, n);
        bad[sof + 7] = 0, bad[sof + 8] = 0;
        ASSERT_EQ_I(kiln_image_decode(bad, n, "zero.jpg", &rgb, &h, &w), KILN_ERR_FORMAT);
        bad[sof + 5] = 0xfd, bad[sof + 6] = 0xe8, bad[sof + 7] = 0xfd, bad[sof + 8] = 0xe8;
        ASSERT_EQ_I(kiln_image_decode(bad, n, "huge.jpg", &rgb, &h, &w), KILN_ERR_INVALID_ARG);
        ASSERT_CONTAINS(kiln_last_error(), "65000 x 65000");
        free(bad);
    }
    free(jpg);
    ASSERT(rgb == NULL);
}

TEST_MAIN(png_as_transformers_sees_it, jpeg_as_pil_decodes_it, npy_pixels, damaged_files_are_errors)
