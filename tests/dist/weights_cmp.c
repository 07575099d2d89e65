/* weights_cmp A.safetensors B.safetensors [--bitwise | --rel TOL]
 *
 * Compares every tensor of two checkpoints (same names and shapes): prints
 * the largest |a-b| / max(|a|) over the tensors, exits 0 when the files are
 * bitwise equal (--bitwise) or within TOL relative (default 1e-6), else 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: weights_cmp A B [--bitwise | --rel TOL]\n");
        return 2;
    }
    int bitwise = argc > 3 && !strcmp(argv[3], "--bitwise");
    double tol = argc > 4 && !strcmp(argv[3], "--rel") ? atof(argv[4]) : 1e-6;
    cdl_st_file *a = cdl_st_open(argv[1]), *b = a ? cdl_st_open(argv[2]) : NULL;
    if (!a || !b) {
        fprintf(stderr, "weights_cmp: %s\n", cdl_last_error());
        return 2;
    }
    int rc = cdl_st_count(a) == cdl_st_count(b) ? 0 : 1;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < cdl_st_count(a) && !rc; i++) {
        const char *name = cdl_st_name(a, i);
        int j = cdl_st_find(b, name);
        size_t na, nb;
        const float *x = cdl_st_data(a, i, &na), *y = j >= 0 ? cdl_st_data(b, j, &nb) : NULL;
        if (!x || !y || na != nb) {
            fprintf(stderr, "weights_cmp: tensor %s differs in presence or size\n", name);
            rc = 1;
            break;
        }
        double maxdiff = 0, maxref = 0;
        for (size_t k = 0; k < na; k++) {
            double d = fabs((double)x[k] - y[k]);
            maxdiff = d > maxdiff ? d : maxdiff;
            maxref = fabs(x[k]) > maxref ? fabs(x[k]) : maxref;
        }
        double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
        if (rel > worst || !(rel == rel)) {
            worst = rel;
            worst_name = name;
        }
        if (bitwise && memcmp(x, y, na * sizeof *x)) {
            fprintf(stderr, "weights_cmp: %s is not bitwise equal (relative %.3g)\n", name, rel);
            rc = 1;
        }
    }
    if (!rc && !bitwise && !(worst <= tol)) {
        fprintf(stderr, "weights_cmp: %s differs by %.3g relative, more than %.3g\n", worst_name,
                worst, tol);
        rc = 1;
    }
    printf("weights_cmp: %s vs %s: largest relative difference %.3g (%s)%s\n", argv[1], argv[2],
           worst, worst_name, rc ? " FAIL" : bitwise ? " bitwise equal" : "");
    cdl_st_close(a);
    cdl_st_close(b);
    return rc;
}
