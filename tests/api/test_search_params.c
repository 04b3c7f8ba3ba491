/* test_search_params.c: the search parameters handle (simil/search_params.h)
 * as a plain C11 user sees it: defaults from the table, set and get in text
 * and typed, the errors and their messages, the list of settings, and which
 * index types use which. */
#include <simil/simil.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

/* The message of the last error holds each of the NULL-ended words. */
static void message_has(const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    for (const char *w = what; w; w = va_arg(ap, const char *))
        if (!strstr(simil_last_error(), w))
            fail_msg("the message '%s' lacks '%s'", simil_last_error(), w);
    va_end(ap);
}

static void text_is(const simil_search_params *p, const char *name, const char *want)
{
    char got[64];
    SML_ASSERT_OK(simil_search_params_get(p, name, got, sizeof got));
    if (strcmp(got, want) != 0) fail_msg("%s is '%s', want '%s'", name, got, want);
}

static void test_defaults_and_list(void **state)
{
    (void)state;
    simil_search_params *p = NULL;
    SML_ASSERT_OK(simil_search_params_create(&p));
    assert_non_null(p);
    const int n = simil_search_param_count();
    assert_true(n >= 6);
    for (int i = 0; i < n; i++) {
        const simil_search_param_info *info = simil_search_param_get_info(i);
        assert_non_null(info);
        assert_non_null(info->name);
        assert_true(strlen(info->help) > 10);
        assert_true(strlen(info->range) > 0);
        assert_true(strlen(info->index_types) > 0);
        assert_true((info->type == SIMIL_PARAM_ENUM) == (info->choices != NULL));
        assert_ptr_equal(simil_search_param_find(info->name), info);
        /* a new handle holds the listed default, and the default text sets */
        text_is(p, info->name, info->default_value);
        SML_ASSERT_OK(simil_search_params_set(p, info->name, info->default_value));
        text_is(p, info->name, info->default_value);
    }
    assert_null(simil_search_param_get_info(-1));
    assert_null(simil_search_param_get_info(n));
    assert_null(simil_search_param_find("nprob"));
    assert_null(simil_search_param_find(NULL));

    int64_t v;
    double f;
    SML_ASSERT_OK(simil_search_params_get_int(p, "nprobe", &v));
    assert_int_equal(v, 1);
    SML_ASSERT_OK(simil_search_params_get_int(p, "threads", &v));
    assert_int_equal(v, 0);
    SML_ASSERT_OK(simil_search_params_get_int(p, "refine_factor", &v));
    assert_int_equal(v, 4);
    SML_ASSERT_OK(simil_search_params_get_int(p, "precomputed_tables", &v));
    assert_int_equal(v, 1);
    SML_ASSERT_OK(simil_search_params_get_float(p, "extra_distance", &f));
    assert_true(f == (double)0.05f);
    SML_ASSERT_OK(simil_search_params_get_float(p, "nprobe", &f)); /* ints read as floats */
    assert_true(f == 1.0);
    text_is(p, "lut", "auto");
    const simil_search_param_info *lut = simil_search_param_find("lut");
    assert_string_equal(lut->choices[0], "auto");
    assert_string_equal(lut->range, "auto, fp32 or fp16");
    assert_string_equal(simil_search_param_find("nprobe")->range, "1 to 1073741824");
    simil_search_params_destroy(p);
    simil_search_params_destroy(NULL);
}

static void test_set_get(void **state)
{
    (void)state;
    simil_search_params *p = sml_test_params("");
    int64_t v;
    double f;
    SML_ASSERT_OK(simil_search_params_set(p, "nprobe", "16"));
    SML_ASSERT_OK(simil_search_params_get_int(p, "nprobe", &v));
    assert_int_equal(v, 16);
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", (int64_t)1 << 30));
    text_is(p, "nprobe", "1073741824");
    SML_ASSERT_OK(simil_search_params_set(p, "threads", "+3"));
    text_is(p, "threads", "3");
    SML_ASSERT_OK(simil_search_params_set_float(p, "extra_distance", 0.01));
    SML_ASSERT_OK(simil_search_params_get_float(p, "extra_distance", &f));
    assert_true(f == (double)0.01f);
    /* the text of a float reads back to the same float */
    char text[64];
    SML_ASSERT_OK(simil_search_params_get(p, "extra_distance", text, sizeof text));
    SML_ASSERT_OK(simil_search_params_set(p, "extra_distance", "0.5"));
    SML_ASSERT_OK(simil_search_params_set(p, "extra_distance", text));
    SML_ASSERT_OK(simil_search_params_get_float(p, "extra_distance", &f));
    assert_true(f == (double)0.01f);
    SML_ASSERT_OK(simil_search_params_set(p, "extra_distance", "1e-1"));
    SML_ASSERT_OK(simil_search_params_set_int(p, "extra_distance", 1)); /* ints set floats */
    SML_ASSERT_OK(simil_search_params_get_float(p, "extra_distance", &f));
    assert_true(f == 1.0);
    SML_ASSERT_OK(simil_search_params_set(p, "lut", "fp16"));
    text_is(p, "lut", "fp16");
    SML_ASSERT_OK(simil_search_params_set(p, "lut", "FP32"));
    text_is(p, "lut", "fp32");
    SML_ASSERT_OK(simil_search_params_set_int(p, "precomputed_tables", 0));
    text_is(p, "precomputed_tables", "0");
    /* several at once */
    SML_ASSERT_OK(simil_search_params_parse(p, "nprobe=8,lut=auto,refine_factor=10"));
    text_is(p, "nprobe", "8");
    text_is(p, "lut", "auto");
    text_is(p, "refine_factor", "10");
    SML_ASSERT_OK(simil_search_params_parse(p, ""));
    text_is(p, "nprobe", "8");
    simil_search_params_destroy(p);
}

/* Every failing call names the setting and what it takes, and changes
 * nothing. */
static void test_errors(void **state)
{
    (void)state;
    simil_search_params *p = sml_test_params("nprobe=7,extra_distance=0.25,lut=fp16");
    const simil_status bad = SIMIL_ERR_INVALID_ARGUMENT;
    SML_ASSERT_STATUS(bad, simil_search_params_set(p, "nprob", "8"));
    message_has("nprob", "nprobe", "extra_distance", "lut", NULL);
    SML_ASSERT_STATUS(bad, simil_search_params_set_int(p, "", 8));
    SML_ASSERT_STATUS(bad, simil_search_params_set(p, NULL, "8"));
    SML_ASSERT_STATUS(bad, simil_search_params_set(p, "nprobe", NULL));
    SML_ASSERT_STATUS(bad, simil_search_params_set(NULL, "nprobe", "8"));
    SML_ASSERT_STATUS(bad, simil_search_params_create(NULL));
    const char *not_ints[] = {"1.5", "", "abc", "16x", " 16", "0x10", "1e3"};
    for (size_t i = 0; i < sizeof not_ints / sizeof not_ints[0]; i++) {
        SML_ASSERT_STATUS(bad, simil_search_params_set(p, "nprobe", not_ints[i]));
        message_has("nprobe", "integer", "1 to 1073741824", NULL);
    }
    const char *out_of_range[] = {"0", "-1", "1073741825", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
        SML_ASSERT_STATUS(bad, simil_search_params_set(p, "nprobe", out_of_range[i]));
        message_has("nprobe", out_of_range[i], "out of range", "1 to 1073741824", NULL);
    }
    SML_ASSERT_STATUS(bad, simil_search_params_set_int(p, "threads", 4097));
    message_has("threads", "4097", "0 to 4096", NULL);
    SML_ASSERT_STATUS(bad, simil_search_params_set(p, "extra_distance", "1.5"));
    message_has("extra_distance", "0 to 1", NULL);
    const char *not_numbers[] = {"nan", "inf", "x", "", "0.1 "};
    for (size_t i = 0; i < sizeof not_numbers / sizeof not_numbers[0]; i++) {
        SML_ASSERT_STATUS(bad, simil_search_params_set(p, "extra_distance", not_numbers[i]));
        message_has("extra_distance", "not a number", NULL);
    }
    SML_ASSERT_STATUS(bad, simil_search_params_set_float(p, "extra_distance", NAN));
    SML_ASSERT_STATUS(bad, simil_search_params_set_float(p, "extra_distance", -0.01));
    SML_ASSERT_STATUS(bad, simil_search_params_set(p, "lut", "fp8"));
    message_has("lut", "fp8", "auto, fp32 or fp16", NULL);
    /* typed calls of the wrong type */
    SML_ASSERT_STATUS(bad, simil_search_params_set_float(p, "nprobe", 2.0));
    message_has("nprobe", "integer", NULL);
    SML_ASSERT_STATUS(bad, simil_search_params_set_int(p, "lut", 1));
    message_has("lut", "simil_search_params_set", NULL);
    int64_t v;
    double f;
    SML_ASSERT_STATUS(bad, simil_search_params_get_int(p, "lut", &v));
    SML_ASSERT_STATUS(bad, simil_search_params_get_int(p, "extra_distance", &v));
    SML_ASSERT_STATUS(bad, simil_search_params_get_float(p, "lut", &f));
    SML_ASSERT_STATUS(bad, simil_search_params_get_int(p, "nprobe", NULL));
    char small[3];
    SML_ASSERT_STATUS(bad, simil_search_params_get(p, "lut", small, sizeof small));
    assert_string_equal(small, "");
    /* one bad setting in a list applies none */
    SML_ASSERT_STATUS(bad, simil_search_params_parse(p, "nprobe=9,lut=fp8"));
    message_has("fp8", NULL);
    SML_ASSERT_STATUS(bad, simil_search_params_parse(p, "nprobe"));
    SML_ASSERT_STATUS(bad, simil_search_params_parse(p, "=3"));
    SML_ASSERT_STATUS(bad, simil_search_params_parse(p, "nprobe=9,"));
    SML_ASSERT_STATUS(bad, simil_search_params_parse(p, NULL));
    /* nothing changed */
    text_is(p, "nprobe", "7");
    text_is(p, "extra_distance", "0.25");
    text_is(p, "lut", "fp16");
    text_is(p, "threads", "0");
    simil_search_params_destroy(p);
}

static void uses(const char *desc, int64_t dim, const char *used, const char *unused)
{
    simil_index *index = NULL;
    simil_status s = simil_index_create(&index, dim, desc, SIMIL_METRIC_L2, "cpu");
    if (s == SIMIL_ERR_UNSUPPORTED) {
        print_message("%s is not built here: what it uses is not checked\n", desc);
        return;
    }
    SML_ASSERT_OK(s);
    for (int i = 0; i < simil_search_param_count(); i++) {
        const char *name = simil_search_param_get_info(i)->name;
        char padded[64];
        snprintf(padded, sizeof padded, " %s ", name);
        const int want_used = strstr(used, padded) != NULL, want_unused = strstr(unused, padded) != NULL;
        if (!want_used && !want_unused) continue;
        if (simil_index_uses_search_param(index, name) != want_used)
            fail_msg("%s: uses %s is %d, want %d", desc, name,
                     simil_index_uses_search_param(index, name), want_used);
    }
    assert_int_equal(simil_index_uses_search_param(index, "nprob"), 0);
    assert_int_equal(simil_index_uses_search_param(index, NULL), 0);
    simil_index_destroy(index);
}

static void test_index_uses(void **state)
{
    (void)state;
    const char *all = " threads ";
    uses("Flat", 8, all, " nprobe refine_factor extra_distance lut precomputed_tables ");
    uses("IVF4,Flat", 8, " threads nprobe ", " refine_factor extra_distance lut ");
    uses("IVF4,PQ4", 8, " threads nprobe lut precomputed_tables ", " refine_factor extra_distance ");
    uses("IVF4,PQ4,Refine", 8, " nprobe refine_factor lut ", " extra_distance ");
    uses("XFBQ", 8, " threads extra_distance ", " nprobe lut refine_factor ");
    uses("IVF4,XFBQ", 8, " nprobe extra_distance ", " lut precomputed_tables ");
    uses("OPQ4,IVF4,PQ4", 8, " nprobe lut ", " extra_distance ");
    assert_int_equal(simil_index_uses_search_param(NULL, "threads"), 0);
}

/* NULL and a fresh handle search the same; a handle serves indexes it has
 * settings for and indexes it does not. */
static void test_search(void **state)
{
    (void)state;
    enum { N = 300, D = 8, NQ = 6, K = 5 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 3, -1, 1);
    simil_index *index = NULL;
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    float d1[NQ * K], d2[NQ * K];
    int64_t l1[NQ * K], l2[NQ * K];
    simil_search_params *p = sml_test_params("nprobe=64,lut=fp16,extra_distance=1,threads=1");
    SML_ASSERT_OK(simil_index_search(index, NQ, x, K, NULL, d1, l1));
    SML_ASSERT_OK(simil_index_search(index, NQ, x, K, p, d2, l2));
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(d1, d2, sizeof d1);
    simil_search_params_destroy(p);
    simil_index_destroy(index);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_list),
        cmocka_unit_test(test_set_get),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_index_uses),
        cmocka_unit_test(test_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
