/* image.c: PNG, JPEG and .npy images into 8-bit RGB (image.h). The
 * decoders are the system's libpng and libjpeg(-turbo); each is optional at
 * build time (KILN_HAVE_PNG, KILN_HAVE_JPEG), and a file of a format this
 * build cannot read is an error saying so. */
#include "image.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devtools/devtools.h"

#ifdef KILN_HAVE_PNG
#include <png.h>
#endif
#ifdef KILN_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#endif

#define MAX_FILE ((size_t)1 << 30)

const char *kiln_image_formats(void) {
#if defined(KILN_HAVE_PNG) && defined(KILN_HAVE_JPEG)
    return "png jpeg npy";
#elif defined(KILN_HAVE_PNG)
    return "png npy";
#elif defined(KILN_HAVE_JPEG)
    return "jpeg npy";
#else
    return "npy";
#endif
}

/* The size check every decoder makes from the header, before decoding. */
static kiln_status check_size(const char *what, const char *kind, uint64_t w, uint64_t h) {
    if (w < 1 || h < 1 || w > KILN_IMAGE_MAX_SIDE || h > KILN_IMAGE_MAX_SIDE ||
        w * h > KILN_IMAGE_MAX_PIXELS)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%s: a %s of %llu x %llu pixels; Kiln reads images of 1..%d pixels a "
                          "side and at most %d pixels",
                          what, kind, (unsigned long long)w, (unsigned long long)h,
                          KILN_IMAGE_MAX_SIDE, KILN_IMAGE_MAX_PIXELS);
    return KILN_OK;
}

/* ---- PNG ------------------------------------------------------------------ */

#ifdef KILN_HAVE_PNG
/* RGBA -> RGB over opaque white, as PIL's alpha_composite(white, image)
 * then convert("RGB") computes it (7-bit fixed point, rounded /255). */
static void composite_white(const uint8_t *rgba, size_t n, uint8_t *rgb) {
    for (size_t i = 0; i < n; i++) {
        uint32_t a = rgba[4 * i + 3];
        for (int c = 0; c < 3; c++) {
            uint32_t t = (rgba[4 * i + c] * a + 255u * (255u - a)) << 7;
            t += 0x80u << 7;
            rgb[3 * i + c] = (uint8_t)((((t >> 8) + t) >> 8) >> 7);
        }
    }
}

typedef struct {
    const uint8_t *data;
    size_t size, off;
    char msg[200];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->size - s->off) png_error(png, "the file ends early (truncated)");
    memcpy(out, s->data + s->off, len);
    s->off += len;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png, (void)msg; /* libpng goes on; so does PIL */
}

static kiln_status decode_png(const uint8_t *data, size_t size, const char *what, uint8_t **rgb,
                              int *h, int *w) {
    png_src src = {data, size, 0, ""};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* written after setjmp and read after a longjmp: volatile */
    uint8_t *volatile pix = NULL;
    png_bytep *volatile rows = NULL;
    volatile kiln_status st = KILN_OK;
    if (!png || !info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return kiln_error(KILN_ERR_NOMEM, "%s: out of memory for the PNG decoder", what);
    }
    if (setjmp(png_jmpbuf(png))) {
        kiln_free(pix);
        kiln_free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return st ? st : kiln_error(KILN_ERR_FORMAT, "%s: a damaged PNG (%s)", what, src.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, KILN_IMAGE_MAX_SIDE, KILN_IMAGE_MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    if ((st = check_size(what, "PNG", pw, ph))) png_longjmp(png, 1);
    int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    /* PIL keeps the high byte of a 16-bit channel, as png_set_strip_16 does */
    png_set_strip_16(png);
    png_set_packing(png);
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int ch = png_get_channels(png, info);
    size_t row = png_get_rowbytes(png, info);
    if ((ch != 3 && ch != 4) || row != (size_t)pw * (size_t)ch)
        png_error(png, "an unexpected pixel layout after conversion");
    pix = kiln_malloc(row * ph);
    rows = kiln_malloc(sizeof *rows * ph);
    if (!pix || !rows) {
        st = kiln_error(KILN_ERR_NOMEM, "%s: out of memory for a %u x %u PNG", what, (unsigned)pw,
                        (unsigned)ph);
        png_longjmp(png, 1);
    }
    for (png_uint_32 y = 0; y < ph; y++)
        rows[y] = pix + row * y;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    kiln_free(rows);
    uint8_t *out = pix;
    if (ch == 4) {
        if (!(out = kiln_malloc((size_t)pw * ph * 3))) {
            kiln_free(pix);
            return kiln_error(KILN_ERR_NOMEM, "%s: out of memory", what);
        }
        composite_white(pix, (size_t)pw * ph, out);
        kiln_free(pix);
    }
    *rgb = out, *h = (int)ph, *w = (int)pw;
    return KILN_OK;
}
#endif

/* ---- JPEG ----------------------------------------------------------------- */

#ifdef KILN_HAVE_JPEG
typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings go on, as PIL's decoder goes on, except a file that ends early:
 * libjpeg would fill the rest with gray, PIL refuses it ("image file is
 * truncated"), and so does Kiln. */
static void jpeg_on_message(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(c);
}

static kiln_status decode_jpeg(const uint8_t *data, size_t size, const char *what, uint8_t **rgb,
                               int *h, int *w) {
    struct jpeg_decompress_struct d;
    jpeg_err e;
    uint8_t *volatile pix = NULL;
    volatile kiln_status st = KILN_OK;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_on_error;
    e.mgr.emit_message = jpeg_on_message;
    e.msg[0] = 0;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&d);
        kiln_free(pix);
        return st ? st : kiln_error(KILN_ERR_FORMAT, "%s: a damaged JPEG (%s)", what, e.msg);
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, data, (unsigned long)size);
    jpeg_read_header(&d, TRUE);
    if ((st = check_size(what, "JPEG", d.image_width, d.image_height))) longjmp(e.jump, 1);
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
        st =
            kiln_error(KILN_ERR_UNSUPPORTED, "%s: a CMYK JPEG; Kiln reads RGB and gray ones", what);
        longjmp(e.jump, 1);
    }
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    if (d.output_components != 3) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: the JPEG decoder gave %d channels, not 3", what,
                        d.output_components);
        longjmp(e.jump, 1);
    }
    size_t row = (size_t)d.output_width * 3;
    if (!(pix = kiln_malloc(row * d.output_height))) {
        st = kiln_error(KILN_ERR_NOMEM, "%s: out of memory for a %u x %u JPEG", what,
                        (unsigned)d.output_width, (unsigned)d.output_height);
        longjmp(e.jump, 1);
    }
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = pix + row * d.output_scanline;
        jpeg_read_scanlines(&d, &r, 1);
    }
    *h = (int)d.output_height, *w = (int)d.output_width;
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    *rgb = pix;
    return KILN_OK;
}
#endif

/* ---- .npy ----------------------------------------------------------------- */

/* The value after 'key': in a .npy header dict, or NULL. */
static const char *npy_field(const char *hdr, const char *key) {
    const char *p = strstr(hdr, key);
    if (!p) return NULL;
    p += strlen(key);
    while (*p == ' ')
        p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static kiln_status decode_npy(const uint8_t *data, size_t size, const char *what, uint8_t **rgb,
                              int *h, int *w) {
    if (size < 10 || (data[6] != 1 && data[6] != 2 && data[6] != 3))
        return kiln_error(KILN_ERR_FORMAT, "%s: a damaged .npy (no version 1-3 header)", what);
    size_t hlen, off;
    if (data[6] == 1)
        hlen = (size_t)data[8] | (size_t)data[9] << 8, off = 10;
    else {
        if (size < 12) return kiln_error(KILN_ERR_FORMAT, "%s: a truncated .npy header", what);
        hlen = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 |
               (size_t)data[11] << 24;
        off = 12;
    }
    if (hlen > 65536 || hlen > size - off)
        return kiln_error(KILN_ERR_FORMAT, "%s: a truncated .npy header", what);
    char hdr[65537];
    memcpy(hdr, data + off, hlen);
    hdr[hlen] = 0;
    const char *descr = npy_field(hdr, "'descr'"), *fo = npy_field(hdr, "'fortran_order'"),
               *shape = npy_field(hdr, "'shape'");
    if (!descr || !fo || !shape || *shape != '(')
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: a .npy header without descr, fortran_order and "
                          "shape",
                          what);
    if (strncmp(descr, "'|u1'", 5) && strncmp(descr, "'<u1'", 5) && strncmp(descr, "'u1'", 4))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: a .npy of dtype %.12s; Kiln reads uint8 pixels ('|u1')", what,
                          descr);
    if (strncmp(fo, "False", 5))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: a Fortran-order .npy; Kiln reads C order",
                          what);
    uint64_t dims[3];
    int nd = 0;
    const char *p = shape + 1;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || errno || nd == 3 || *p == '-')
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: a .npy shape that is not (H, W, 3) or (H, W) of uint8", what);
        dims[nd++] = v;
        p = end;
    }
    if (nd < 2 || (nd == 3 && dims[2] != 3))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: a .npy of %d dimensions%s; Kiln reads (H, W, 3) RGB or (H, W) "
                          "gray",
                          what, nd, nd == 3 ? " whose last is not 3" : "");
    kiln_status st = check_size(what, ".npy image", dims[1], dims[0]);
    if (st) return st;
    size_t n = (size_t)dims[0] * (size_t)dims[1], ch = nd == 3 ? 3 : 1;
    size_t body = size - off - hlen;
    if (body != n * ch)
        return kiln_error(KILN_ERR_FORMAT, "%s: %zu bytes of pixels where the shape needs %zu (%s)",
                          what, body, n * ch, body < n * ch ? "truncated" : "trailing bytes");
    uint8_t *out = kiln_malloc(n * 3);
    if (!out) return kiln_error(KILN_ERR_NOMEM, "%s: out of memory", what);
    const uint8_t *src = data + off + hlen;
    if (ch == 3)
        memcpy(out, src, n * 3);
    else
        for (size_t i = 0; i < n; i++)
            out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = src[i];
    *rgb = out, *h = (int)dims[0], *w = (int)dims[1];
    return KILN_OK;
}

/* ---- by the first bytes ----------------------------------------------------- */

kiln_status kiln_image_decode(const uint8_t *data, size_t size, const char *what, uint8_t **rgb,
                              int *h, int *w) {
    *rgb = NULL, *h = *w = 0;
    static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && !memcmp(data, PNG_SIG, 8)) {
#ifdef KILN_HAVE_PNG
        return decode_png(data, size, what, rgb, h, w);
#else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: a PNG, and this kiln was built without libpng (install "
                          "libpng-dev and rebuild)",
                          what);
#endif
    }
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
#ifdef KILN_HAVE_JPEG
        return decode_jpeg(data, size, what, rgb, h, w);
#else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: a JPEG, and this kiln was built without libjpeg (install "
                          "libjpeg-dev and rebuild)",
                          what);
#endif
    }
    if (size >= 6 && !memcmp(data, "\x93NUMPY", 6)) return decode_npy(data, size, what, rgb, h, w);
    return kiln_error(KILN_ERR_FORMAT, "%s: not a PNG, JPEG or .npy image (this kiln reads %s)",
                      what, kiln_image_formats());
}

void kiln_image_free(uint8_t *rgb) {
    kiln_free(rgb);
}

kiln_status kiln_image_load(const char *path, uint8_t **rgb, int *h, int *w) {
    *rgb = NULL, *h = *w = 0;
    char what[600];
    snprintf(what, sizeof what, "image '%.500s'", path);
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_error(KILN_ERR_IO, "%s: cannot open it (%s)", what, strerror(errno));
    kiln_status st = KILN_OK;
    uint8_t *data = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = kiln_error(KILN_ERR_IO, "%s: cannot read it (not a regular file?)", what);
    else if ((size_t)size > MAX_FILE)
        st = kiln_error(KILN_ERR_INVALID_ARG, "%s: %ld bytes, past the %zu Kiln reads", what, size,
                        MAX_FILE);
    else if (!(data = kiln_malloc((size_t)size + 1)))
        st = kiln_error(KILN_ERR_NOMEM, "%s: out of memory", what);
    else if (fread(data, 1, (size_t)size, f) != (size_t)size)
        st = kiln_error(KILN_ERR_IO, "%s: a read failed", what);
    fclose(f);
    if (!st) st = kiln_image_decode(data, (size_t)size, what, rgb, h, w);
    kiln_free(data);
    return st;
}
