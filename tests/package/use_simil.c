/* use_simil.c: a program outside the tree, built against an installed simil
 * by tests/package/test_package.sh: exact search of 3 vectors finds each. */
#include <stdio.h>

#include <simil/simil.h>

int main(void)
{
    const float x[3][2] = {{0, 0}, {10, 0}, {0, 10}};
    float d[3];
    int64_t ids[3];
    simil_index *index;
    if (simil_index_create(&index, 2, "Flat", SIMIL_METRIC_L2, "cpu") != SIMIL_OK ||
        simil_index_add(index, 3, &x[0][0], NULL) != SIMIL_OK ||
        simil_index_search(index, 3, &x[0][0], 1, NULL, d, ids) != SIMIL_OK) {
        fprintf(stderr, "use_simil: %s\n", simil_last_error());
        return 1;
    }
    simil_index_destroy(index);
    for (int i = 0; i < 3; i++)
        if (ids[i] != i || d[i] != 0) {
            fprintf(stderr, "use_simil: query %d found %lld at %g\n", i, (long long)ids[i],
                    (double)d[i]);
            return 1;
        }
    printf("use_simil: ok (simil %s)\n", simil_version_string());
    return 0;
}
