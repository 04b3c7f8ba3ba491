/* tools/image.h: the pictures of "simil path --png": PNG and JPEG files read
 * into 8-bit RGB (libpng and libjpeg, each where the build found it), fitted
 * into square cells, and PNG files written.  Every function reports its own
 * failure (cli_error) and returns a CLI_EXIT_* code. */
#ifndef SIMIL_TOOLS_IMAGE_H
#define SIMIL_TOOLS_IMAGE_H

#include <stdint.h>

typedef struct cli_image {
    int64_t width, height;
    unsigned char *rgb; /* height rows of width RGB triples */
} cli_image;

/* Read a PNG or JPEG file (told apart by their first bytes, not the name). */
int cli_image_read(const char *path, cli_image *image);
void cli_image_free(cli_image *image);

/* Draw image scaled to fit a side x side cell (aspect kept, each pixel the
 * mean of the source pixels it covers), centred, into the RGB picture at
 * cell, whose rows are stride bytes apart; the cell is white around it. */
void cli_image_fit(const cli_image *image, int64_t side, unsigned char *cell, int64_t stride);

/* Write width x height pixels of channels bytes each (1: gray, 3: RGB) as a
 * PNG file; on failure no file is left. */
int cli_png_write(const char *path, const unsigned char *pixels, int64_t width, int64_t height,
                  int channels);

#endif
