/* weights_cmp A.safetensors B.safetensors [--bitwise | --rel TOL] [--base C.safetensors]
 *
 * Compares every tensor of two checkpoints (same names and shapes): prints
 * the largest |a-b| / max(|a|) over the tensors, exits 0 when the files are
 * bitwise equal (--bitwise) or within TOL relative (default 1e-6), else 1.
 *
 * --base C: A and B are one training step from the same checkpoint C;
 * compares their updates A-C and B-C instead: the largest
 * |(a-c)-(b-c)| - ulp(a) over max|a-c|, per tensor. Relative to the
 * weights, one step's difference would hide under the weights' rounding (a
 * weight is ~100x its update); relative to the update it is what the
 * summation order changes in the gradient. a and b are each rounded once
 * when the update is added (half an ulp each), hence the ulp allowed.
 *
 * I64 tensors (BatchNorm's num_batches_tracked) are counts: they must be
 * equal in A and B whatever the options. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

static int usage(void)
{
    fprintf(stderr, "usage: weights_cmp A B [--bitwise | --rel TOL] [--base C]\n");
    return 2;
}

/* The tensor NAME of F with N elements, or NULL after saying why. */
static const float *tensor(const cdl_st_file *f, const char *file, const char *name, size_t n)
{
    int j = cdl_st_find(f, name);
    size_t nj = 0;
    const float *x = j >= 0 ? cdl_st_data(f, j, &nj) : NULL;
    if (!x || nj != n) {
        fprintf(stderr, "weights_cmp: tensor %s differs in presence or size in %s\n", name, file);
        return NULL;
    }
    return x;
}

/* A's I64 tensor i against B's of the same name: 0 if equal, else 1 after
 * saying so. */
static int same_counts(const cdl_st_file *a, const cdl_st_file *b, int i, const char *file_b)
{
    const char *name = cdl_st_name(a, i);
    int j = cdl_st_find(b, name);
    size_t n = 0, m = 0;
    const int64_t *x = cdl_st_data_i64(a, i, &n), *y = j >= 0 ? cdl_st_data_i64(b, j, &m) : NULL;
    if (!x || !y || n != m || memcmp(x, y, n * sizeof *x)) {
        fprintf(stderr, "weights_cmp: count %s differs in %s\n", name, file_b);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    int bitwise = 0;
    double tol = 1e-6;
    const char *base_path = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--bitwise"))
            bitwise = 1;
        else if (!strcmp(argv[i], "--rel") && i + 1 < argc)
            tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base_path = argv[++i];
        else
            return usage();
    }
    cdl_st_file *a = cdl_st_open(argv[1]), *b = a ? cdl_st_open(argv[2]) : NULL;
    cdl_st_file *c = b && base_path ? cdl_st_open(base_path) : NULL;
    if (!a || !b || (base_path && !c)) {
        fprintf(stderr, "weights_cmp: %s\n", cdl_last_error());
        return 2;
    }
    int rc = cdl_st_count(a) == cdl_st_count(b) ? 0 : 1;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < cdl_st_count(a) && !rc; i++) {
        const char *name = cdl_st_name(a, i);
        size_t n;
        if (!strcmp(cdl_st_dtype(a, i), "I64")) {
            rc = same_counts(a, b, i, argv[2]);
            continue;
        }
        const float *x = cdl_st_data(a, i, &n);
        const float *y = x ? tensor(b, argv[2], name, n) : NULL;
        const float *z = y && c ? tensor(c, base_path, name, n) : NULL;
        if (!x || !y || (c && !z)) {
            rc = 1;
            break;
        }
        double maxdiff = 0, maxref = 0;
        for (size_t k = 0; k < n; k++) {
            double ref = z ? (double)x[k] - z[k] : x[k];
            double d = fabs((double)x[k] - y[k]);
            if (z) {   /* the two roundings of a = c + update, b = c + update' */
                float m = fmaxf(fabsf(x[k]), fabsf(y[k]));
                d = fmax(0, d - ((double)nextafterf(m, INFINITY) - m));
            }
            maxdiff = d > maxdiff ? d : maxdiff;
            maxref = fabs(ref) > maxref ? fabs(ref) : maxref;
        }
        double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
        if (rel > worst || !(rel == rel)) {
            worst = rel;
            worst_name = name;
        }
        if (bitwise && memcmp(x, y, n * sizeof *x)) {
            fprintf(stderr, "weights_cmp: %s is not bitwise equal (relative %.3g)\n", name, rel);
            rc = 1;
        }
    }
    if (!rc && !bitwise && !(worst <= tol)) {
        fprintf(stderr, "weights_cmp: %s%s differs by %.3g relative, more than %.3g\n",
                c ? "the update of " : "", worst_name, worst, tol);
        rc = 1;
    }
    printf("weights_cmp: %s vs %s%s%s: largest relative difference %.3g (%s)%s\n", argv[1],
           argv[2], c ? ", updates from " : "", c ? base_path : "", worst, worst_name,
           rc ? " FAIL" : bitwise ? " bitwise equal" : "");
    cdl_st_close(a);
    cdl_st_close(b);
    cdl_st_close(c);
    return rc;
}
