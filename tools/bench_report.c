/* tools/bench_report.c: the results files "simil bench" leaves in its output
 * folder, and the anchor points it reads (see bench.h).  Files are written
 * through a temporary file that is fsynced and renamed, so a reader never
 * sees half a file; bench_plot.c writes the plot the same way. */
#define _XOPEN_SOURCE 700

#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

const char bench_csv_header[] = "dataset,index,params,mode,k,build_seconds,index_bytes,qps,"
                                "runs,p50_ms,p95_ms,p99_ms,p999_ms,one_recall_at_1,"
                                "one_recall_at_k,recall_k_at_k,recall_by,backend,device";

int bench_path(char *out, size_t size, const char *dir, const char *name)
{
    int len = snprintf(out, size, "%s/%s", dir, name);
    return len > 0 && (size_t)len < size;
}

/* ---- atomic files ---- */

int bench_file_open(bench_file *bf, const char *dir, const char *name)
{
    if (!bench_path(bf->path, sizeof bf->path, dir, name))
        return cli_error("%s/%s: path too long", dir, name);
    snprintf(bf->tmp, sizeof bf->tmp, "%s.tmp-XXXXXX", bf->path);
    int fd = mkstemp(bf->tmp);
    if (fd < 0) return cli_error("cannot create a file in %s: %s", dir, strerror(errno));
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    if (!(bf->f = fdopen(fd, "w"))) {
        close(fd);
        unlink(bf->tmp);
        return cli_error("%s: %s", bf->tmp, strerror(errno));
    }
    return CLI_EXIT_OK;
}

int bench_file_commit(bench_file *bf)
{
    int ok = !ferror(bf->f) && fflush(bf->f) == 0 && fsync(fileno(bf->f)) == 0;
    int err = errno;
    ok = fclose(bf->f) == 0 && ok;
    if (ok && rename(bf->tmp, bf->path) == 0) return CLI_EXIT_OK;
    if (ok) err = errno;
    unlink(bf->tmp);
    return cli_error("cannot write %s: %s", bf->path, strerror(err ? err : EIO));
}

/* ---- results ---- */

/* A CSV field, quoted when it holds a comma, quote or line break. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_row(FILE *f, const char *dataset, const bench_point *p)
{
    csv_field(f, dataset);
    fputc(',', f);
    csv_field(f, p->index);
    fputc(',', f);
    csv_field(f, p->params);
    fprintf(f, ",%s,%" PRId64 ",%.6f,", p->mode, p->k, p->build_seconds);
    if (p->index_bytes >= 0) fprintf(f, "%" PRId64, p->index_bytes);
    fprintf(f, ",%.1f,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%s,", p->qps, p->runs, p->p50_ms,
            p->p95_ms, p->p99_ms, p->p999_ms, p->recall.one_at_1, p->recall.one_at_k,
            p->recall.k_at_k, p->recall.by_distance ? "distance" : "id");
    csv_field(f, p->backend);
    fputc(',', f);
    csv_field(f, p->device);
    fputc('\n', f);
}

static void json_object(FILE *f, const char *dataset, const bench_point *p)
{
    fputs("  {", f);
    cli_json_string(f, "dataset", dataset, ", ");
    cli_json_string(f, "index", p->index, ", ");
    cli_json_string(f, "params", p->params, ", ");
    cli_json_string(f, "mode", p->mode, ", ");
    fprintf(f, "\"k\": %" PRId64 ", \"build_seconds\": %.6f, ", p->k, p->build_seconds);
    if (p->index_bytes >= 0) fprintf(f, "\"index_bytes\": %" PRId64 ", ", p->index_bytes);
    else fputs("\"index_bytes\": null, ", f);
    fprintf(f,
            "\"qps\": %.1f, \"runs\": %d, \"p50_ms\": %.6f, \"p95_ms\": %.6f, "
            "\"p99_ms\": %.6f, \"p999_ms\": %.6f, \"one_recall_at_1\": %.6f, "
            "\"one_recall_at_k\": %.6f, \"recall_k_at_k\": %.6f, \"recall_by\": \"%s\", ",
            p->qps, p->runs, p->p50_ms, p->p95_ms, p->p99_ms, p->p999_ms, p->recall.one_at_1,
            p->recall.one_at_k, p->recall.k_at_k, p->recall.by_distance ? "distance" : "id");
    cli_json_string(f, "backend", p->backend, ", ");
    cli_json_string(f, "device", p->device, "}");
}

int bench_results_write(const char *dir, const char *dataset, const bench_point *points,
                        size_t n)
{
    bench_file bf;
    int rc = bench_file_open(&bf, dir, "results.csv");
    if (rc) return rc;
    fprintf(bf.f, "%s\n", bench_csv_header);
    for (size_t i = 0; i < n; i++) csv_row(bf.f, dataset, &points[i]);
    if ((rc = bench_file_commit(&bf))) return rc;

    if ((rc = bench_file_open(&bf, dir, "results.json"))) return rc;
    fputs("[\n", bf.f);
    for (size_t i = 0; i < n; i++) {
        json_object(bf.f, dataset, &points[i]);
        fputs(i + 1 < n ? ",\n" : "\n", bf.f);
    }
    fputs("]\n", bf.f);
    return bench_file_commit(&bf);
}

/* ---- anchors ---- */

/* Parse a whole number field of s (leading and trailing blanks allowed). */
static int anchor_number(const char *s, double *out)
{
    char *end;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return 0;
    errno = 0;
    *out = strtod(s, &end);
    while (*end == ' ' || *end == '\t') end++;
    return end != s && !*end && errno != ERANGE && isfinite(*out);
}

/* Split one line into label, recall and qps text; the label is unquoted
 * into label.  Returns NULL, or what is wrong. */
static const char *anchor_split(char *line, char *label, size_t size, char **fields)
{
    char *p = line;
    size_t len = 0;
    if (*p == '"') {
        for (p++;; p++) {
            if (!*p) return "unterminated quoted label";
            if (*p == '"' && p[1] != '"') break;
            if (*p == '"') p++;
            if (len + 1 >= size) return "label too long";
            label[len++] = *p;
        }
        p++;
    } else {
        for (; *p && *p != ','; p++) {
            if (len + 1 >= size) return "label too long";
            label[len++] = *p;
        }
    }
    label[len] = '\0';
    for (int i = 0; i < 2; i++) {
        if (*p != ',') return "want 3 fields: label,recall,qps";
        *p++ = '\0';
        fields[i] = p;
        p += strcspn(p, ",");
    }
    return *p ? "want 3 fields: label,recall,qps" : NULL;
}

/* Check one non-blank line and append its anchor; *header says whether a
 * header line may still come. */
static int anchor_line(const char *path, long lineno, char *line, int *header,
                       bench_anchor *a)
{
    char *fields[2];
    const char *why = anchor_split(line, a->label, sizeof a->label, fields);
    if (!why && !anchor_number(fields[0], &a->recall)) {
        if (*header) {
            *header = 0;
            return -1;
        }
        why = "recall is not a number";
    }
    *header = 0;
    if (!why && (a->recall < 0 || a->recall > 1)) why = "recall is outside [0, 1]";
    if (!why && (!anchor_number(fields[1], &a->qps) || a->qps <= 0))
        why = "qps is not a number > 0";
    if (why) return cli_error("%s:%ld: %s", path, lineno, why);
    return CLI_EXIT_OK;
}

int bench_anchors_read(const char *path, bench_anchor **out, size_t *n)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, size = 0;
    long lineno = 0;
    int header = 1, rc = CLI_EXIT_OK;
    *out = NULL;
    *n = 0;
    if (!f) return cli_error("%s: %s", path, strerror(errno));
    while (!rc && getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[strspn(line, " \t")] || line[0] == '#') continue;
        if (*n == size) {
            size_t grow = size ? 2 * size : 16;
            bench_anchor *more = realloc(*out, grow * sizeof *more);
            if (!more) {
                rc = cli_error("out of memory reading %s", path);
                break;
            }
            *out = more;
            size = grow;
        }
        int r = anchor_line(path, lineno, line, &header, &(*out)[*n]);
        if (r == CLI_EXIT_OK) ++*n;
        else if (r > 0) rc = r;
    }
    if (!rc && ferror(f)) rc = cli_error("%s: read error", path);
    free(line);
    fclose(f);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
