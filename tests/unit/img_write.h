/* Writing small PNG and JPEG files for the reader tests, with the same
 * libraries the readers decode with (present when configure found them). */
#ifndef CDL_TEST_IMG_WRITE_H
#define CDL_TEST_IMG_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_PNG
#include <png.h>
/* px: h rows of w pixels of c bytes (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA).
 * 0 on success. */
static inline int test_write_png(const char *path, const uint8_t *px, int h, int w, int c)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    static const png_uint_32 formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                          PNG_FORMAT_RGBA};
    im.format = formats[c - 1];
    return png_image_write_to_file(&im, path, 0, px, 0, NULL) ? 0 : -1;
}
#endif

#ifdef HAVE_JPEG
#include <jpeglib.h>
/* px as for test_write_png; quality 100 keeps a flat picture exact. */
static inline int test_write_jpeg(const char *path, const uint8_t *px, int h, int w, int c)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : c == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return fclose(f);
}
#endif

#endif
