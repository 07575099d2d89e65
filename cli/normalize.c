/* --normalize's value (normalize.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "normalize.h"

int cli_parse_normalize(const char *a, cli_normalize *out, const char **why)
{
    memset(out, 0, sizeof *out);
    if (!strcmp(a, "auto")) {
        out->kind = CDL_NORMALIZE_COMPUTE;
        return 0;
    }
    if (!strcmp(a, "none")) {
        out->kind = CDL_NORMALIZE_NONE;
        return 0;
    }
    float v[32];
    int n = 0;
    for (const char *p = a;;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x) || n == 32 || (*end && *end != ',')) {
            *why = "expected auto, none, MEAN,STD or per channel M1,..,Mc,S1,..,Sc (at most 16 "
                   "channels)";
            return -1;
        }
        v[n++] = (float)x;
        if (!*end)
            break;
        p = end + 1;
    }
    if (n % 2) {
        *why = "give as many standard deviations as means";
        return -1;
    }
    out->count = n / 2;
    for (int k = 0; k < n / 2; k++) {
        out->mean[k] = v[k];
        out->std[k] = v[n / 2 + k];
        if (!(out->std[k] > 0)) {
            *why = "a standard deviation must be > 0";
            return -1;
        }
    }
    out->kind = CDL_NORMALIZE_GIVEN;
    return 0;
}
