/* test_index_spec.c: the factory-string parser: what it accepts, how it
 * normalizes, and the errors for what it refuses. */
#include <string.h>

#include "index/index_spec.h"
#include "util/test_util.h"

static void expect_parse(const char *desc, int64_t dim, const char *canonical)
{
    sml_index_spec spec;
    simil_status s = sml_index_spec_parse(desc, dim, &spec);
    if (s != SIMIL_OK) fail_msg("'%s' (dim %lld): %s", desc, (long long)dim, simil_last_error());
    char out[128];
    sml_index_spec_format(&spec, out, sizeof out);
    if (strcmp(out, canonical) != 0) fail_msg("'%s' -> '%s', want '%s'", desc, out, canonical);
}

static void expect_error(const char *desc, int64_t dim, const char *fragment)
{
    sml_index_spec spec;
    simil_status s = sml_index_spec_parse(desc, dim, &spec);
    if (s != SIMIL_ERR_INVALID_ARGUMENT)
        fail_msg("'%s' (dim %lld) gave %s", desc, (long long)dim, simil_status_name(s));
    if (strstr(simil_last_error(), fragment) == NULL)
        fail_msg("'%s': message '%s' lacks '%s'", desc, simil_last_error(), fragment);
}

static void test_accepts(void **state)
{
    (void)state;
    expect_parse("Flat", 5, "Flat");
    expect_parse(" IDMap , Flat ", 5, "Flat");
    expect_parse("IVF4096,Flat", 96, "IVF4096,Flat");
    expect_parse("IVF4096,PQ32", 96, "IVF4096,PQ32x8");
    expect_parse("IVF256,PQ56x4", 784, "IVF256,PQ56x4");
    expect_parse("OPQ32,IVF4096,PQ32", 128, "OPQ32_128,IVF4096,PQ32x8");
    expect_parse("OPQ16_64,IVF1024,PQ16", 128, "OPQ16_64,IVF1024,PQ16x8");
    expect_parse("XFBQ", 100, "XFBQ4x3");
    expect_parse("XFBQ8x1", 100, "XFBQ8x1");
    expect_parse("IVF1024,XFBQ", 100, "IVF1024,XFBQ4x3");
    expect_parse("RR,XFBQ", 100, "RR,XFBQ4x3");
    expect_parse("RR100,IVF64,XFBQ3x2", 100, "RR,IVF64,XFBQ3x2");
    expect_parse("IDMap,RR,XFBQ,Refine", 100, "RR,XFBQ4x3,Refine");
    expect_parse("IVF4096,PQ32,Refine", 96, "IVF4096,PQ32x8,Refine");
    expect_parse("PQ8,RFlat", 64, "PQ8x8,Refine");
    expect_parse("SQ8", 7, "SQ8");
    expect_parse("IDMap,SQfp16", 7, "SQfp16");
    expect_parse("IVF4096,SQbf16", 96, "IVF4096,SQbf16");
    expect_parse("IVF64,SQ8,Refine", 96, "IVF64,SQ8,Refine");
}

static void test_refuses(void **state)
{
    (void)state;
    expect_error("", 8, "empty");
    expect_error("HNSW32", 8, "HNSW32");
    expect_error("IVF,Flat", 8, "IVF<number");
    expect_error("IVF0,Flat", 8, "IVF<number");
    expect_error("IVF-5,Flat", 8, "IVF<number");
    expect_error("IVF12x,Flat", 8, "IVF<number");
    expect_error("IVF99999999999999999999,Flat", 8, "IVF<number");
    expect_error("IVF16", 8, "no encoding");
    expect_error("PQ7", 96, "divide");
    expect_error("PQ8x9", 96, "4 to 8 bits");
    expect_error("PQ8x3", 96, "4 to 8 bits");
    expect_error("PQ256", 256, "exceed 128 bytes");
    expect_error("XFBQ9x3", 64, "1 to 8");
    expect_error("XFBQ4", 64, "XFBQ<query bits>");
    expect_error("SQ4", 64, "SQ8, SQfp16 or SQbf16");
    expect_error("RR,Flat", 64, "XFBQ codes only");
    expect_error("RR,IVF8,PQ8", 64, "XFBQ codes only");
    expect_error("RR32,XFBQ", 64, "keeps the dimension 64");
    expect_error("RR,XFBQ", 8193, "at most 8192");
    expect_error("SQfp32", 64, "not an encoding");
    expect_error("OPQ16,SQ8", 64, "OPQ needs a PQ");
    expect_error("OPQ16,IVF10,Flat", 64, "OPQ needs a PQ");
    expect_error("OPQ16_128,PQ16", 64, "larger than the input");
    expect_error("OPQ5,PQ5", 64, "OPQ5 must divide");
    expect_error("Flat,Refine", 64, "already exact");
    expect_error("Flat,IVF10", 64, "unexpected 'IVF10'");
    expect_error("IVF10,IVF10,Flat", 64, "not an encoding");
    expect_error("Flat,Flat,Flat,Flat,Flat,Flat,Flat,Flat,Flat", 64, "too many");
    /* the limits on trained parameters divide by the dimension */
    expect_error("IVF16,PQ4", 0, "dimension 0 must be at least 1");
    expect_error("Flat", -3, "dimension -3 must be at least 1");
    sml_index_spec spec;
    assert_int_equal(sml_index_spec_parse(NULL, 8, &spec), SIMIL_ERR_INVALID_ARGUMENT);
}

/* desc puts flat XFBQ's re-ranking floats in place `floats`
 * (SML_XFBQ_FLOATS_*) and normalizes to canonical, which parses back the
 * same. */
static void expect_floats(const char *desc, const char *canonical, int floats)
{
    expect_parse(desc, 64, canonical);
    expect_parse(canonical, 64, canonical);
    sml_index_spec spec;
    SML_ASSERT_OK(sml_index_spec_parse(desc, 64, &spec));
    if (spec.xfbq_floats != floats)
        fail_msg("'%s': floats in place %d, want %d", desc, spec.xfbq_floats, floats);
}

/* Flat XFBQ keeps an fp16 copy of its floats unless its suffix says
 * otherwise; _fp16 names that default and is not written back. */
static void test_xfbq_floats(void **state)
{
    (void)state;
    expect_floats("XFBQ", "XFBQ4x3", SML_XFBQ_FLOATS_FP16);
    expect_floats("XFBQ_fp16", "XFBQ4x3", SML_XFBQ_FLOATS_FP16);
    expect_floats("RR,XFBQ2x5_fp16,Refine", "RR,XFBQ2x5,Refine", SML_XFBQ_FLOATS_FP16);
    expect_floats("XFBQ_fp32", "XFBQ4x3_fp32", SML_XFBQ_FLOATS_BACKEND);
    expect_floats("Shards2,RR,XFBQ8x1_fp32", "Shards2,RR,XFBQ8x1_fp32", SML_XFBQ_FLOATS_BACKEND);
    expect_floats("XFBQ_host", "XFBQ4x3_host", SML_XFBQ_FLOATS_HOST);
    /* an inverted file's floats are in its list rows, in backend memory */
    expect_floats("IVF8,XFBQ", "IVF8,XFBQ4x3", SML_XFBQ_FLOATS_BACKEND);
    expect_error("IVF8,XFBQ_fp32", 64, "_fp32, _host and _fp16");
    expect_error("IVF8,XFBQ_fp16", 64, "are for flat XFBQ");
    expect_error("XFBQ_fp32_fp16", 64, "not an encoding");
    expect_error("XFBQ_fp64", 64, "XFBQ[<q>x<b>][_fp32|_host|_fp16]");
    expect_error("Flat_fp32", 64, "not an encoding");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_xfbq_floats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
