/* tools/image.c: PNG and JPEG in and PNG out for "simil path --png" (see
 * image.h).  PNG goes through libpng's simplified API, which converts any
 * bit depth, palette or gray to RGB and composites alpha onto white; JPEG
 * through libjpeg, whose error handler must not exit the program, so it
 * jumps back here instead. */
#include "image.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SIMIL_HAVE_PNG
#include <png.h>
#endif
#ifdef SIMIL_HAVE_JPEG
#include <jpeglib.h>
#endif

#include "cli.h"

/* Pictures larger than this many pixels are refused (a corrupt header, or a
 * photo far larger than a strip cell needs). */
static const int64_t image_max_pixels = (int64_t)1 << 28;

void cli_image_free(cli_image *image)
{
    free(image->rgb);
    image->rgb = NULL;
}

static int image_alloc(const char *path, int64_t width, int64_t height, cli_image *image)
{
    if (width < 1 || height < 1 || width > image_max_pixels / height)
        return cli_error("%s: a picture of %lld x %lld pixels is empty or too large", path,
                         (long long)width, (long long)height);
    image->width = width;
    image->height = height;
    image->rgb = malloc((size_t)(width * height * 3));
    if (!image->rgb) return cli_error("%s: out of memory for the picture", path);
    return CLI_EXIT_OK;
}

static int image_read_png(const char *path, cli_image *image)
{
#ifdef SIMIL_HAVE_PNG
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&png, path))
        return cli_error("%s: cannot read the PNG: %s", path, png.message);
    png.format = PNG_FORMAT_RGB;
    int rc = image_alloc(path, png.width, png.height, image);
    if (rc) {
        png_image_free(&png);
        return rc;
    }
    const png_color white = {255, 255, 255};
    if (!png_image_finish_read(&png, &white, image->rgb, 0, NULL)) {
        cli_image_free(image);
        return cli_error("%s: cannot read the PNG: %s", path, png.message);
    }
    return CLI_EXIT_OK;
#else
    (void)image;
    return cli_error("%s: this simil was built without libpng, so it cannot read PNG files; "
                     "install libpng-dev and rebuild",
                     path);
#endif
}

#ifdef SIMIL_HAVE_JPEG
typedef struct image_jpeg_error {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    char message[JMSG_LENGTH_MAX];
} image_jpeg_error;

static void image_jpeg_exit(j_common_ptr info)
{
    image_jpeg_error *e = (image_jpeg_error *)info->err;
    e->mgr.format_message(info, e->message);
    longjmp(e->back, 1);
}

/* Decode into image (allocated here); 0 on success, else libjpeg's message
 * is in e->message.  Apart from the caller so that no local it changes lives
 * across the longjmp. */
static int image_jpeg_decode(FILE *f, const char *path, cli_image *image, image_jpeg_error *e,
                             int *rc)
{
    struct jpeg_decompress_struct info;
    info.err = jpeg_std_error(&e->mgr);
    e->mgr.error_exit = image_jpeg_exit;
    if (setjmp(e->back)) {
        jpeg_destroy_decompress(&info);
        cli_image_free(image);
        return 1;
    }
    jpeg_create_decompress(&info);
    jpeg_stdio_src(&info, f);
    jpeg_read_header(&info, TRUE);
    info.out_color_space = JCS_RGB;
    jpeg_start_decompress(&info);
    *rc = image_alloc(path, info.output_width, info.output_height, image);
    if (*rc) {
        jpeg_destroy_decompress(&info);
        return 0;
    }
    while (info.output_scanline < info.output_height) {
        JSAMPROW row = image->rgb + (size_t)info.output_scanline * (size_t)image->width * 3;
        jpeg_read_scanlines(&info, &row, 1);
    }
    jpeg_finish_decompress(&info);
    jpeg_destroy_decompress(&info);
    return 0;
}
#endif

static int image_read_jpeg(const char *path, cli_image *image)
{
#ifdef SIMIL_HAVE_JPEG
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error("%s: cannot open the JPEG", path);
    image_jpeg_error e;
    int rc = CLI_EXIT_OK;
    int failed = image_jpeg_decode(f, path, image, &e, &rc);
    fclose(f);
    if (failed) return cli_error("%s: cannot read the JPEG: %s", path, e.message);
    return rc;
#else
    (void)image;
    return cli_error("%s: this simil was built without libjpeg, so it cannot read JPEG files; "
                     "install libjpeg-dev and rebuild",
                     path);
#endif
}

int cli_image_read(const char *path, cli_image *image)
{
    unsigned char magic[8] = {0};
    image->rgb = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error("%s: cannot open the picture", path);
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == 8 && !memcmp(magic, "\x89PNG\r\n\x1a\n", 8)) return image_read_png(path, image);
    if (got >= 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff)
        return image_read_jpeg(path, image);
    return cli_error("%s: not a PNG or JPEG file", path);
}

void cli_image_fit(const cli_image *image, int64_t side, unsigned char *cell, int64_t stride)
{
    for (int64_t y = 0; y < side; y++) memset(cell + y * stride, 255, (size_t)(side * 3));
    /* the scaled size: the longer side becomes `side` */
    int64_t w = side, h = side;
    if (image->width >= image->height)
        h = (image->height * side + image->width / 2) / image->width;
    else
        w = (image->width * side + image->height / 2) / image->height;
    if (w < 1) w = 1;
    if (h < 1) h = 1;
    int64_t x0 = (side - w) / 2, y0 = (side - h) / 2;
    for (int64_t y = 0; y < h; y++) {
        /* source rows [sy0, sy1) cover this row; at least one */
        int64_t sy0 = y * image->height / h, sy1 = (y + 1) * image->height / h;
        if (sy1 <= sy0) sy1 = sy0 + 1;
        for (int64_t x = 0; x < w; x++) {
            int64_t sx0 = x * image->width / w, sx1 = (x + 1) * image->width / w;
            if (sx1 <= sx0) sx1 = sx0 + 1;
            int64_t sum[3] = {0, 0, 0}, count = (sy1 - sy0) * (sx1 - sx0);
            for (int64_t sy = sy0; sy < sy1; sy++)
                for (int64_t sx = sx0; sx < sx1; sx++)
                    for (int c = 0; c < 3; c++)
                        sum[c] += image->rgb[(sy * image->width + sx) * 3 + c];
            unsigned char *out = cell + (y0 + y) * stride + (x0 + x) * 3;
            for (int c = 0; c < 3; c++) out[c] = (unsigned char)((sum[c] + count / 2) / count);
        }
    }
}

int cli_png_write(const char *path, const unsigned char *pixels, int64_t width, int64_t height,
                  int channels)
{
#ifdef SIMIL_HAVE_PNG
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = (png_uint_32)width;
    image.height = (png_uint_32)height;
    image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    if (!png_image_write_to_file(&image, path, 0, pixels, 0, NULL)) {
        remove(path);
        return cli_error("%s: cannot write the PNG: %s", path, image.message);
    }
    return CLI_EXIT_OK;
#else
    (void)pixels;
    (void)width;
    (void)height;
    (void)channels;
    return cli_error("%s: this simil was built without libpng, so --png is not available; "
                     "install libpng-dev and rebuild",
                     path);
#endif
}
