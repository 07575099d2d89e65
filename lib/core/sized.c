/* The reader of size-prefixed config structs (see sized.h). */
#include <string.h>

#include <cdl/cdl.h>

#include "sized.h"

int sized_read(const void *in, void *out, size_t out_size, size_t min_size, const char *type,
               const char *init)
{
    size_t n;
    if (!in)
        return cdl_error("%s is NULL: start from %s", type, init);
    memcpy(&n, in, sizeof n);
    if (n < min_size || n > out_size)
        return cdl_error("%s: size %zu is not that of this libcdl's struct (%zu): start from %s",
                         type, n, out_size, init);
    memcpy(out, in, n);
    memcpy(out, &out_size, sizeof out_size);
    return 0;
}
