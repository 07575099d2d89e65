/* PNG (libpng's simplified API) and JPEG (libjpeg-turbo) decoding from
 * memory, and fitting a picture to the model's input (internal.h).
 *
 * Both libraries are optional at configure time (--with-png, --with-jpeg);
 * without one, its files are an error that names the file and the option. */

#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifdef HAVE_PNG
#include <png.h>
#endif
#ifdef HAVE_JPEG
#include <jpeglib.h>
#endif

#include <cdl/cdl.h>

#include "lib/data/internal.h"

/* Pictures larger than this many pixels are refused before decoding: a
 * forged header must not make us allocate gigabytes. */
#define MAX_PIXELS (1L << 28)

static int is_png(const uint8_t *d, size_t n)
{
    return n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8);
}

static int is_jpeg(const uint8_t *d, size_t n)
{
    return n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff;
}

static int check_size(const char *name, long h, long w)
{
    if (h <= 0 || w <= 0 || h > INT_MAX / 4 || w > INT_MAX / 4 || h * w > MAX_PIXELS)
        return cdl_error("%s: the image declares %ldx%ld pixels (at most %ld allowed): the file "
                         "is damaged or not a picture", name, w, h, MAX_PIXELS);
    return 0;
}

/* ---------------------------------------------------------------- PNG */
#ifdef HAVE_PNG
static int png_begin(const uint8_t *d, size_t n, const char *name, png_image *im)
{
    memset(im, 0, sizeof *im);
    im->version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(im, d, n)) {
        int rc = cdl_error("%s: not a readable PNG: %s", name, im->message);
        png_image_free(im);
        return rc;
    }
    if (check_size(name, im->height, im->width)) {
        png_image_free(im);
        return -1;
    }
    return 0;
}

static int png_decode(const uint8_t *d, size_t n, const char *name, image_buf *out)
{
    png_image im;
    if (png_begin(d, n, name, &im))
        return -1;
    int gray = !(im.format & PNG_FORMAT_FLAG_COLOR), alpha = !!(im.format & PNG_FORMAT_FLAG_ALPHA);
    /* Alpha (an alpha channel, or a tRNS chunk) is read and dropped, as
     * PIL's convert("RGB") and convert("L") do in torchvision's loader.
     * Asking libpng for a format without alpha would composite the picture
     * onto the output buffer's contents (png_image_finish_read with no
     * background): uninitialised memory. 8-bit output is not
     * premultiplied, so the colour values are the file's. */
    im.format = gray ? (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY)
                     : (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB);
    out->c = gray ? 1 : 3;
    out->h = (int)im.height;
    out->w = (int)im.width;
    out->px = cdl_malloc(PNG_IMAGE_SIZE(im));
    if (!out->px) {
        png_image_free(&im);
        return -1;
    }
    if (!png_image_finish_read(&im, NULL, out->px, 0, NULL)) {
        int rc = cdl_error("%s: damaged PNG: %s", name, im.message);
        png_image_free(&im);
        cdl_free(out->px);
        out->px = NULL;
        return rc;
    }
    if (alpha) {   /* (h, w, c + 1) -> (h, w, c) in place, front to back */
        size_t npx = (size_t)out->h * (size_t)out->w;
        for (size_t i = 0; i < npx; i++)
            for (int k = 0; k < out->c; k++)
                out->px[i * (size_t)out->c + (size_t)k] = out->px[i * (size_t)(out->c + 1) + (size_t)k];
    }
    return 0;
}
#endif

/* ---------------------------------------------------------------- JPEG */
#ifdef HAVE_JPEG
typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    e->mgr.format_message(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings (a truncated file is one) are errors: a damaged picture must not
 * train as grey pixels. */
static void jpeg_warn(j_common_ptr cinfo, int level)
{
    if (level < 0)
        jpeg_fail(cinfo);
}

/* (n, 4) CMYK as libjpeg reads it -> (n, 3) RGB in place, front to back,
 * with PIL's numbers, so the pixels are torchvision's: the samples are
 * taken as Adobe's inverted CMYK (PIL's "CMYK;I", which it assumes for
 * every 4-component JPEG; Photoshop writes them so), then PIL's
 * convert("RGB"): each of R, G, B = (255 - K) - C * (255 - K) / 255,
 * rounded as its MULDIV255. ImageNet holds a few such files; they were an
 * error ("convert it to RGB"). */
static uint8_t muldiv255(int a, int b)
{
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

static void cmyk_to_rgb(uint8_t *px, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = px + 4 * i;
        int nk = p[3];   /* 255 - K, K inverted */
        uint8_t rgb[3];
        for (int k = 0; k < 3; k++) {
            int v = nk - muldiv255(255 - p[k], nk);
            rgb[k] = (uint8_t)(v < 0 ? 0 : v);
        }
        memcpy(px + 3 * i, rgb, 3);
    }
}

/* header_only: fills h, w, c and stops. want_h/want_w > 0: decode at the
 * smallest DCT scale M/8 that still covers want_h x want_w (libjpeg-turbo
 * scales while decoding, far cheaper than decoding whole and shrinking). */
static int jpeg_decode(const uint8_t *d, size_t n, const char *name, image_buf *out,
                       int header_only, int want_h, int want_w)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_err err;
    /* volatile: changed between setjmp and a longjmp back. */
    uint8_t *volatile px = NULL;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_fail;
    err.mgr.emit_message = jpeg_warn;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        cdl_free(px);
        return cdl_error("%s: damaged JPEG: %s", name, err.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, d, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    int cmyk = cinfo.num_components == 4 &&
               (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK);
    if (cinfo.num_components != 1 && cinfo.num_components != 3 && !cmyk) {
        jpeg_destroy_decompress(&cinfo);
        return cdl_error("%s: a JPEG with %d colour components: convert it to RGB", name,
                         cinfo.num_components);
    }
    if (check_size(name, cinfo.image_height, cinfo.image_width)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    out->c = cmyk ? 3 : cinfo.num_components;
    out->h = (int)cinfo.image_height;
    out->w = (int)cinfo.image_width;
    if (header_only) {
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
    cinfo.out_color_space = cmyk ? JCS_CMYK : out->c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    if (want_h > 0 && want_w > 0) {
        unsigned m = 1;
        while (m < 8 && ((unsigned long)out->h * m < 8ul * want_h ||
                         (unsigned long)out->w * m < 8ul * want_w))
            m++;
        cinfo.scale_num = m;
        cinfo.scale_denom = 8;
    }
    jpeg_start_decompress(&cinfo);
    out->h = (int)cinfo.output_height;
    out->w = (int)cinfo.output_width;
    size_t stride = (size_t)out->w * (size_t)cinfo.output_components;
    px = cdl_malloc(stride * (size_t)out->h);
    if (!px) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = px + stride * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (cmyk)
        cmyk_to_rgb(px, (size_t)out->h * (size_t)out->w);
    out->px = px;
    return 0;
}
#endif

/* What a file that is no PNG or JPEG is, by its first bytes, when it is
 * one of what a folder of pictures from the web or a camera holds (a .jpg
 * that is a GIF or WebP, an error page saved under a picture's name), or
 * NULL. */
static const char *other_format(const uint8_t *d, size_t n)
{
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6)))
        return "a GIF picture";
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4))
        return "a WebP picture";
    if (n >= 2 && !memcmp(d, "BM", 2))
        return "a BMP picture";
    if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4)))
        return "a TIFF picture";
    if (n >= 12 && !memcmp(d + 4, "ftyp", 4) &&
        (!memcmp(d + 8, "heic", 4) || !memcmp(d + 8, "heix", 4) || !memcmp(d + 8, "mif1", 4) ||
         !memcmp(d + 8, "avif", 4)))
        return "a HEIC/AVIF picture (an iPhone's?)";
    size_t i = 0;
    while (i < n && i < 64 && (d[i] == ' ' || d[i] == '\t' || d[i] == '\r' || d[i] == '\n'))
        i++;
    if (n - i >= 5 && (!strncasecmp((const char *)d + i, "<!doc", 5) ||
                       !strncasecmp((const char *)d + i, "<html", 5) ||
                       !strncasecmp((const char *)d + i, "<?xml", 5)))
        return "a web page or XML text (a download that got an error page?)";
    return NULL;
}

static int decode(const uint8_t *data, size_t len, const char *name, image_buf *out,
                  int header_only, int want_h, int want_w)
{
    (void)header_only;   /* unused without libpng and libjpeg */
    (void)want_h;
    (void)want_w;
    memset(out, 0, sizeof *out);
    if (is_png(data, len)) {
#ifdef HAVE_PNG
        if (header_only) {
            png_image im;
            if (png_begin(data, len, name, &im))
                return -1;
            out->h = (int)im.height;
            out->w = (int)im.width;
            out->c = im.format & PNG_FORMAT_FLAG_COLOR ? 3 : 1;
            png_image_free(&im);
            return 0;
        }
        return png_decode(data, len, name, out);
#else
        return cdl_error("%s is a PNG but cdl was built without libpng: install libpng-dev and "
                         "configure --with-png", name);
#endif
    }
    if (is_jpeg(data, len)) {
#ifdef HAVE_JPEG
        return jpeg_decode(data, len, name, out, header_only, want_h, want_w);
#else
        return cdl_error("%s is a JPEG but cdl was built without libjpeg: install "
                         "libjpeg62-turbo-dev and configure --with-jpeg", name);
#endif
    }
    /* Empty: a copy or download that never finished, not another format. */
    if (len == 0)
        return cdl_error("%s is empty (0 bytes: a copy or download that did not finish?): "
                         "remove it from the folder or pass --skip-bad-files", name);
    const char *what = other_format(data, len);
    if (what)
        return cdl_error("%s is %s, not a PNG or JPEG (convert it to train on it): remove it "
                         "from the folder or pass --skip-bad-files", name, what);
    return cdl_error("%s is neither a PNG nor a JPEG (wrong magic bytes): remove it from the "
                     "folder or pass --skip-bad-files", name);
}

int image_decode(const uint8_t *data, size_t len, const char *name, image_buf *out)
{
    return decode(data, len, name, out, 0, 0, 0);
}

int image_decode_for(const uint8_t *data, size_t len, const char *name, int want_h, int want_w,
                     image_buf *out)
{
    return decode(data, len, name, out, 0, want_h, want_w);
}

int image_probe(const uint8_t *data, size_t len, const char *name, int *h, int *w, int *c)
{
    image_buf b;
    if (decode(data, len, name, &b, 1, 0, 0))
        return -1;
    *h = b.h;
    *w = b.w;
    *c = b.c;
    return 0;
}

/* ---------------------------------------------------------------- fitting */

/* Filter taps of one axis: output i of `out` reads `n[i]` inputs from
 * first[i] with weights w[i*taps ...]. A triangle filter widened by the
 * shrink factor (antialiasing, as PIL's bilinear resize does). */
typedef struct axis {
    int taps;
    int *first, *n;
    float *w;
} axis;

static void axis_free(axis *a)
{
    cdl_free(a->first);
    cdl_free(a->n);
    cdl_free(a->w);
}

/* The triangle filter's weight of input pixel j for an output centred at
 * centre (input pixels), widened to support. */
static double tap(int j, double centre, double support)
{
    double v = 1 - fabs((j + 0.5 - centre) / support);
    return v > 0 ? v : 0;
}

/* Input size in, scaled size scaled (>= out), output positions [off, off+out). */
static int axis_make(axis *a, int in, int scaled, int off, int out)
{
    double scale = (double)in / scaled;
    double support = scale > 1 ? scale : 1;
    a->taps = (int)ceil(support) * 2 + 1;
    a->first = cdl_malloc((size_t)out * sizeof(int));
    a->n = cdl_malloc((size_t)out * sizeof(int));
    a->w = cdl_malloc((size_t)out * (size_t)a->taps * sizeof(float));
    if (!a->first || !a->n || !a->w) {
        axis_free(a);
        return -1;
    }
    for (int i = 0; i < out; i++) {
        double centre = (i + off + 0.5) * scale;
        int lo = (int)floor(centre - support), hi = (int)ceil(centre + support);
        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        if (hi - lo > a->taps)
            hi = lo + a->taps;
        /* Two passes over the taps (the sum, then each weight over it)
         * rather than a stack array of them: a shrink of any factor has
         * room (a 4000-pixel microscope or phone picture to 32 is 2 x 125
         * taps; a fixed array of 64x refused it). */
        double sum = 0;
        int k = hi - lo;
        float *w = a->w + (size_t)i * a->taps;
        for (int j = lo; j < hi; j++)
            sum += tap(j, centre, support);
        for (int j = 0; j < k; j++)
            w[j] = (float)(sum > 0 ? tap(lo + j, centre, support) / sum : (j == 0));
        a->first[i] = lo;
        a->n[i] = k;
    }
    return 0;
}

static uint8_t clamp_u8(float v)
{
    return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)(v + 0.5f);
}

/* Pixel (y, x) channel k of `in` as channel count c wants it. */
static inline float sample(const image_buf *in, int y, int x, int k, int c)
{
    const uint8_t *p = in->px + ((size_t)y * in->w + x) * in->c;
    if (in->c == c)
        return p[k];
    if (c == 3)
        return p[0];                                   /* gray -> RGB */
    return (p[0] * 299 + p[1] * 587 + p[2] * 114) / 1000.0f; /* RGB -> gray, PIL's "L" */
}

/* Interleaved (h, w, c) to planar (c, h, w), same channels: the common case
 * (a JPEG decoded by DCT scaling straight to the model's size, a PNG of the
 * right size), with no float round trip. */
static void planar_copy(const image_buf *in, uint8_t *dst)
{
    const size_t plane = (size_t)in->h * in->w;
    const int c = in->c;
    if (c == 1) {
        memcpy(dst, in->px, plane);
        return;
    }
    if (c == 3) {   /* RGB, unrolled: a runtime channel loop would not vectorise */
        const uint8_t *p = in->px;
        uint8_t *r = dst, *g = dst + plane, *b = dst + 2 * plane;
        for (size_t i = 0; i < plane; i++) {
            r[i] = p[3 * i];
            g[i] = p[3 * i + 1];
            b[i] = p[3 * i + 2];
        }
        return;
    }
    for (size_t i = 0; i < plane; i++)
        for (int k = 0; k < c; k++)
            dst[k * plane + i] = in->px[i * c + k];
}

/* The column pass of the resize, channels unchanged: row y of in through the
 * x filter into tmp (w, c) floats; inputs read straight from the bytes. */
static void columns_same_c(const image_buf *in, const axis *ax, int y, int w, float *tmp)
{
    const int c = in->c;
    const uint8_t *row = in->px + (size_t)y * in->w * c;
    for (int x = 0; x < w; x++) {
        const float *wt = ax->w + (size_t)x * ax->taps;
        const uint8_t *p = row + (size_t)ax->first[x] * c;
        for (int k = 0; k < c; k++) {
            float v = 0;
            for (int j = 0; j < ax->n[x]; j++)
                v += wt[j] * p[(size_t)j * c + k];
            tmp[(size_t)x * c + k] = v;
        }
    }
}

/* round(d / 2) as Python rounds, half to even: torchvision's CenterCrop
 * offset of a crop d pixels smaller than the picture (d = 3: 2, d = 5: 2). */
static int crop_start(int d)
{
    int k = d / 2;
    return d % 2 && k % 2 ? k + 1 : k;
}

int image_fit(const image_buf *in, int h, int w, int c, uint8_t *dst)
{
    const size_t plane = (size_t)h * w;
    if (in->h == h && in->w == w && in->c == c) {
        planar_copy(in, dst);
        return 0;
    }
    if (in->h == h && in->w == w) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int k = 0; k < c; k++)
                    dst[k * plane + (size_t)y * w + x] = clamp_u8(sample(in, y, x, k, c));
        return 0;
    }
    if (check_size("image", in->h, in->w))
        return -1;
    /* Scale so the picture covers h x w, then take the centre, with
     * torchvision's numbers (Resize(N) + CenterCrop(N)): the side that
     * needs the larger scale becomes exactly h or w, the other is
     * int(target * other / side), truncated; the crop starts at
     * round((scaled - target) / 2), Python's round (half to even). A
     * pixel off there shifts every pixel of the sample. */
    int sh, sw;
    if ((int64_t)h * in->w >= (int64_t)w * in->h) {   /* h / in->h >= w / in->w */
        sh = h;
        sw = (int)fmax(w, (double)((int64_t)h * in->w / in->h));
    } else {
        sw = w;
        sh = (int)fmax(h, (double)((int64_t)w * in->h / in->w));
    }
    axis ay = {0}, ax = {0};
    float *tmp = cdl_malloc(((size_t)in->h + 1) * w * c * sizeof(float));   /* + acc */
    if (!tmp || axis_make(&ay, in->h, sh, crop_start(sh - h), h) ||
        axis_make(&ax, in->w, sw, crop_start(sw - w), w)) {
        cdl_free(tmp);
        axis_free(&ay);
        axis_free(&ax);
        return -1;
    }
    /* Columns first into tmp (in->h, w, c), then rows into dst (c, h, w). */
    for (int y = 0; y < in->h; y++) {
        if (in->c == c) {
            columns_same_c(in, &ax, y, w, tmp + (size_t)y * w * c);
            continue;
        }
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                float v = 0;
                const float *wt = ax.w + (size_t)x * ax.taps;
                for (int j = 0; j < ax.n[x]; j++)
                    v += wt[j] * sample(in, y, ax.first[x] + j, k, c);
                tmp[((size_t)y * w + x) * c + k] = v;
            }
    }
    /* Rows: whole tmp rows scaled and summed into acc (w*c), taps in the
     * same order as a per-pixel loop, so the same floats, but contiguous. */
    const size_t wc = (size_t)w * c;
    float *acc = tmp + (size_t)in->h * wc;
    for (int y = 0; y < h; y++) {
        const float *wt = ay.w + (size_t)y * ay.taps;
        memset(acc, 0, wc * sizeof *acc);
        for (int j = 0; j < ay.n[y]; j++) {
            const float *t = tmp + (size_t)(ay.first[y] + j) * wc;
            for (size_t i = 0; i < wc; i++)
                acc[i] += wt[j] * t[i];
        }
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                dst[k * plane + (size_t)y * w + x] = clamp_u8(acc[(size_t)x * c + k]);
    }
    cdl_free(tmp);
    axis_free(&ay);
    axis_free(&ax);
    return 0;
}
