/* tools/cmd_path.c: "simil path" finds the path between two vectors through a
 * k-NN graph written by "simil knn-graph" whose largest step is smallest,
 * prints it, and can draw the images along it as one PNG strip (the GPU
 * paper's Figure 6): the vectors themselves when they are square images, or
 * the pictures that a list names, one file per vector (image.h; PNG needs
 * libpng at build time, JPEG libjpeg). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "image.h"

static const char path_usage[] =
    "usage: simil path --graph GRAPH --from A --to B [OPTIONS]\n"
    "\n"
    "Find the path from vector A to vector B through a k-NN graph whose largest\n"
    "step is as small as possible, and print its nodes and steps.  The graph is\n"
    "taken as undirected: an edge u -> v may also be walked from v to u.\n"
    "\n"
    "  --graph GRAPH    a graph written by 'simil knn-graph': NAME.ivecs (with the\n"
    "                   distances in NAME.fvecs) or NAME.npy (with NAME-distances.npy)\n"
    "  --from A         first vector (row number, from 0)\n"
    "  --to B           last vector\n"
    "  --metric M       the graph's metric: l2 (default: the largest distance is\n"
    "                   minimized), ip or cosine (the smallest similarity is\n"
    "                   maximized)\n"
    "  --data FILE      the graph's vectors\n"
    "  --png FILE       draw the path as one horizontal strip of pictures: with\n"
    "                   --images, the pictures it names; else the vectors of --data\n"
    "                   as square grayscale images, side sqrt(dim) (28 x 28 for\n"
    "                   Fashion-MNIST), values clamped to 0-255\n"
    "  --images LIST    a text file naming one PNG or JPEG file per vector: line i\n"
    "                   for vector i, relative names from the list's folder; for\n"
    "                   data whose rows are not images (embeddings)\n"
    "  --thumb H        with --images: each picture fits an H x H cell (default:\n"
    "                   the first picture's larger side, at most 128)\n";

typedef struct path_args {
    const char *graph, *data, *png, *metric, *images;
    int64_t from, to, thumb;
} path_args;

typedef struct path_graph {
    int64_t n, k;
    int64_t *ids;
    simil_matrix dist; /* n x k float32 */
} path_graph;

static void path_graph_free(path_graph *g)
{
    free(g->ids);
    simil_matrix_free(&g->dist);
}

/* The distances file beside the ids file (the naming of simil knn-graph). */
static int path_distances_path(const char *graph, char *buf, size_t size)
{
    size_t n = strlen(graph);
    int w;
    if (n >= 6 && !strcmp(graph + n - 6, ".ivecs"))
        w = snprintf(buf, size, "%.*s.fvecs", (int)(n - 6), graph);
    else
        w = snprintf(buf, size, "%.*s-distances.npy", (int)(n - 4), graph);
    return w > 0 && (size_t)w < size;
}

static int path_read_ids(const char *file, path_graph *g)
{
    simil_matrix m;
    simil_status st = simil_matrix_read(file, 0, -1, &m);
    int rc = CLI_EXIT_OK;
    if (st != SIMIL_OK) return cli_fail(st, file);
    g->n = m.rows;
    g->k = m.cols;
    if (m.dtype != SIMIL_DTYPE_INT32 && m.dtype != SIMIL_DTYPE_INT64)
        rc = cli_error("%s: a graph holds int32 or int64 ids", file);
    else if (m.rows < 1)
        rc = cli_error("%s: the graph has no nodes", file);
    else if (!(g->ids = malloc(sizeof *g->ids * (size_t)(m.rows * m.cols) + 1)))
        rc = cli_error("out of memory for the graph");
    for (int64_t i = 0; !rc && i < m.rows * m.cols; i++)
        g->ids[i] = m.dtype == SIMIL_DTYPE_INT64 ? ((const int64_t *)m.data)[i]
                                                 : ((const int32_t *)m.data)[i];
    simil_matrix_free(&m);
    return rc;
}

static int path_read_graph(const char *file, path_graph *g)
{
    char dist_path[4096];
    int rc = path_read_ids(file, g);
    if (rc) return rc;
    if (!path_distances_path(file, dist_path, sizeof dist_path))
        return cli_error("%s: the name is too long", file);
    simil_status st = simil_matrix_read(dist_path, 0, -1, &g->dist);
    if (st != SIMIL_OK) {
        cli_fail(st, dist_path);
        return cli_error("the distances of %s are expected in %s", file, dist_path);
    }
    const simil_matrix *m = &g->dist;
    if (m->dtype != SIMIL_DTYPE_FLOAT32)
        return cli_error("%s: graph distances must be float32", dist_path);
    if (m->rows != g->n || m->cols != g->k)
        return cli_error("%s is %" PRId64 " x %" PRId64 " but %s is %" PRId64 " x %" PRId64,
                         dist_path, m->rows, m->cols, file, g->n, g->k);
    return CLI_EXIT_OK;
}

/* ---- the picture ---- */

/* One pixel from element i of a row of dtype, clamped to 0..255. */
static unsigned char path_pixel(const simil_matrix *m, int64_t i)
{
    double v;
    switch (m->dtype) {
    case SIMIL_DTYPE_UINT8: return ((const unsigned char *)m->data)[i];
    case SIMIL_DTYPE_FLOAT32: v = ((const float *)m->data)[i]; break;
    case SIMIL_DTYPE_INT32: v = ((const int32_t *)m->data)[i]; break;
    default: v = (double)((const int64_t *)m->data)[i]; break;
    }
    if (!(v > 0)) return 0;
    return v >= 255 ? 255 : (unsigned char)lround(v);
}

/* Copy image `slot` of the strip (side x side pixels) from row `row` of m. */
static void path_blit(unsigned char *strip, int64_t width, int64_t side, int64_t slot,
                      const simil_matrix *m, int64_t row)
{
    for (int64_t y = 0; y < side; y++)
        for (int64_t x = 0; x < side; x++)
            strip[y * width + slot * side + x] = path_pixel(m, row * m->cols + y * side + x);
}

/* Fill the strip with the rows on the path: one read of the range they span
 * when it is small, else one read per row. */
static int path_fill_strip(const char *data, const int64_t *path, int64_t len, int64_t side,
                           unsigned char *strip)
{
    int64_t lo = path[0], hi = path[0];
    for (int64_t i = 1; i < len; i++) {
        if (path[i] < lo) lo = path[i];
        if (path[i] > hi) hi = path[i];
    }
    int one_read = (double)(hi - lo + 1) * (double)(side * side) * 8 <= (double)(256 << 20);
    simil_matrix m = {0, 0, SIMIL_DTYPE_UINT8, NULL};
    simil_status st = one_read ? simil_matrix_read(data, lo, hi - lo + 1, &m) : SIMIL_OK;
    for (int64_t i = 0; st == SIMIL_OK && i < len; i++) {
        if (!one_read) {
            simil_matrix_free(&m);
            st = simil_matrix_read(data, path[i], 1, &m);
        }
        if (st == SIMIL_OK)
            path_blit(strip, len * side, side, i, &m, one_read ? path[i] - lo : 0);
    }
    simil_matrix_free(&m);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, data);
}

/* ---- pictures named by a list ---- */

/* The file names of the nodes on the path (names[i] for path[i], malloc'd),
 * from the list of n lines; relative names are taken from the list's folder. */
static int path_image_names(const char *list, int64_t n, const int64_t *path, int64_t len,
                            char **names)
{
    FILE *f = fopen(list, "r");
    if (!f) return cli_error("%s: cannot open the image list", list);
    const char *slash = strrchr(list, '/');
    int dir_len = slash ? (int)(slash - list + 1) : 0;
    char line[4096];
    int64_t lines = 0;
    int rc = CLI_EXIT_OK;
    while (!rc && fgets(line, sizeof line, f)) {
        size_t m = strlen(line);
        if (m == sizeof line - 1 && line[m - 1] != '\n') {
            rc = cli_error("%s:%lld: the line is too long", list, (long long)lines + 1);
            break;
        }
        while (m > 0 && (line[m - 1] == '\n' || line[m - 1] == '\r')) line[--m] = '\0';
        for (int64_t i = 0; !rc && i < len; i++) {
            if (path[i] != lines) continue;
            if (m == 0) {
                rc = cli_error("%s:%lld: no file named for vector %lld", list,
                               (long long)lines + 1, (long long)lines);
                break;
            }
            int rel = line[0] != '/';
            size_t size = (rel ? (size_t)dir_len : 0) + m + 1;
            if (!(names[i] = malloc(size))) {
                rc = cli_error("out of memory for the image names");
                break;
            }
            snprintf(names[i], size, "%.*s%s", rel ? dir_len : 0, list, line);
        }
        lines++;
    }
    if (!rc && ferror(f)) rc = cli_error("%s: cannot read the image list", list);
    fclose(f);
    if (!rc && lines != n)
        rc = cli_error("%s names %lld pictures, but the graph has %lld nodes: line i must name "
                       "the picture of vector i",
                       list, (long long)lines, (long long)n);
    return rc;
}

/* The strip of the pictures the list names along the path. */
static int path_png_images(const path_args *a, int64_t n, const int64_t *path, int64_t len)
{
    char **names = calloc((size_t)len, sizeof *names);
    if (!names) return cli_error("out of memory for the image names");
    int rc = path_image_names(a->images, n, path, len, names);
    cli_image img = {0, 0, NULL};
    unsigned char *strip = NULL;
    int64_t side = a->thumb;
    for (int64_t i = 0; !rc && i < len; i++) {
        rc = cli_image_read(names[i], &img);
        if (!rc && side == 0) {
            side = img.width > img.height ? img.width : img.height;
            if (side > 128) side = 128;
        }
        if (!rc && strip == NULL && (double)len * (double)side > 1e6)
            rc = cli_error("--png: a strip of %" PRId64 " pictures of %" PRId64
                           " pixels is too wide",
                           len, side);
        if (!rc && strip == NULL && !(strip = malloc((size_t)(len * side * side * 3))))
            rc = cli_error("out of memory for the picture strip");
        if (!rc) cli_image_fit(&img, side, strip + i * side * 3, len * side * 3);
        cli_image_free(&img);
    }
    if (!rc) rc = cli_png_write(a->png, strip, len * side, side, 3);
    if (!rc)
        printf("wrote %s: %" PRId64 " pictures of %" PRId64 " x %" PRId64 " from %s\n", a->png,
               len, side, side, a->images);
    free(strip);
    for (int64_t i = 0; i < len; i++) free(names[i]);
    free(names);
    return rc;
}

/* ---- the vectors as images ---- */

static int path_png(const path_args *a, const int64_t *path, int64_t len)
{
    int64_t rows, cols;
    simil_status st = simil_matrix_info(a->data, &rows, &cols, NULL);
    if (st != SIMIL_OK) return cli_fail(st, a->data);
    int64_t side = (int64_t)llround(sqrt((double)cols));
    if (side * side != cols)
        return cli_error("%s: dimension %" PRId64 " is not a square number, so its vectors "
                         "are not square images; --png needs side x side pixels",
                         a->data, cols);
    if ((double)len * (double)side > 1e6)
        return cli_error("--png: a strip of %" PRId64 " images of %" PRId64
                         " pixels is too wide",
                         len, side);
    unsigned char *strip = malloc((size_t)(len * side * side));
    if (!strip) return cli_error("out of memory for the image strip");
    int rc = path_fill_strip(a->data, path, len, side, strip);
    if (!rc) rc = cli_png_write(a->png, strip, len * side, side, 1);
    if (!rc) printf("wrote %s: %" PRId64 " images of %" PRId64 " x %" PRId64 "\n", a->png, len,
                    side, side);
    free(strip);
    return rc;
}

/* ---- the command ---- */

static void path_print(const path_args *a, const int64_t *path, const float *steps,
                       int64_t len)
{
    float worst = 0;
    for (int64_t i = 0; i + 1 < len; i++)
        if (i == 0 || (strcmp(a->metric, "l2") ? steps[i] < worst : steps[i] > worst))
            worst = steps[i];
    printf("path from %" PRId64 " to %" PRId64 ": %" PRId64 " nodes, %s step %.6g\n", a->from,
           a->to, len, strcmp(a->metric, "l2") ? "least similar" : "largest", (double)worst);
    printf("%6s %12s %14s\n", "#", "node", "step");
    for (int64_t i = 0; i < len; i++) {
        if (i == 0)
            printf("%6" PRId64 " %12" PRId64 " %14s\n", i, path[i], "-");
        else
            printf("%6" PRId64 " %12" PRId64 " %14.6g\n", i, path[i], (double)steps[i - 1]);
    }
}

static int path_check_data(const path_args *a, int64_t n)
{
    int64_t rows;
    simil_status st = simil_matrix_info(a->data, &rows, NULL, NULL);
    if (st != SIMIL_OK) return cli_fail(st, a->data);
    if (rows != n)
        return cli_error("%s has %" PRId64 " vectors but the graph %s has %" PRId64 " nodes",
                         a->data, rows, a->graph, n);
    return CLI_EXIT_OK;
}

static int path_run(const path_args *a, simil_metric metric)
{
    path_graph g = {0, 0, NULL, {0, 0, SIMIL_DTYPE_FLOAT32, NULL}};
    int rc = path_read_graph(a->graph, &g);
    if (!rc && a->data) rc = path_check_data(a, g.n);
    if (!rc && (a->from >= g.n || a->to >= g.n))
        rc = cli_usage_error("--from %" PRId64 " / --to %" PRId64 ": the graph has %" PRId64
                             " nodes (0 to %" PRId64 ")",
                             a->from, a->to, g.n, g.n - 1);
    if (rc) {
        path_graph_free(&g);
        return rc;
    }
    int64_t *path = malloc(sizeof *path * (size_t)g.n), len = 0;
    float *steps = malloc(sizeof *steps * (size_t)g.n);
    if (!path || !steps) {
        rc = cli_error("out of memory for a path of %" PRId64 " nodes", g.n);
    } else {
        simil_status st =
            simil_graph_path(g.ids, g.dist.data, g.n, g.k, metric, a->from, a->to, path, steps, &len);
        if (st != SIMIL_OK) rc = cli_fail(st, NULL);
    }
    if (!rc) path_print(a, path, steps, len);
    if (!rc && a->png) rc = a->images ? path_png_images(a, g.n, path, len) : path_png(a, path, len);
    free(steps);
    free(path);
    path_graph_free(&g);
    return rc;
}

int cmd_path(int argc, char **argv)
{
    path_args a = {NULL, NULL, NULL, "l2", NULL, 0, 0, 0};
    const cli_opt opts[] = {
        {"graph", 'g', CLI_STRING, &a.graph, 1, 0, 0},
        {"from", 0, CLI_INT, &a.from, 1, 0, INT64_MAX},
        {"to", 0, CLI_INT, &a.to, 1, 0, INT64_MAX},
        {"metric", 0, CLI_STRING, &a.metric, 0, 0, 0},
        {"data", 0, CLI_STRING, &a.data, 0, 0, 0},
        {"png", 0, CLI_STRING, &a.png, 0, 0, 0},
        {"images", 0, CLI_STRING, &a.images, 0, 0, 0},
        {"thumb", 0, CLI_INT, &a.thumb, 0, 1, 4096},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    static const char *const graph_suffixes[] = {".ivecs", ".npy", NULL};
    static const char *const png_suffixes[] = {".png", NULL};
    simil_metric metric;
    int rc;
    if (!cli_parse(argc, argv, opts, path_usage, NULL, 0, &rc)) return rc;
    if (simil_metric_parse(a.metric, &metric) != SIMIL_OK)
        return cli_usage_error("--metric: '%s' is not l2, ip or cosine", a.metric);
    a.metric = simil_metric_name(metric);
    if (!cli_check_suffix("--graph", a.graph, graph_suffixes)) return CLI_EXIT_USAGE;
    if (a.png && !cli_check_suffix("--png", a.png, png_suffixes)) return CLI_EXIT_USAGE;
    if (a.png && !a.data && !a.images)
        return cli_usage_error("--png needs --data, the graph's vectors, or --images, a list "
                               "of pictures");
    if ((a.images || a.thumb) && !a.png)
        return cli_usage_error("--images and --thumb go with --png");
    if (a.thumb && !a.images) return cli_usage_error("--thumb goes with --images");
    return path_run(&a, metric);
}
