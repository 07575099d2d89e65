/* Public config structs start with `size_t size` (sizeof the struct the
 * caller was built with), so a libcdl with more fields can read an older
 * caller's smaller struct. One reader for all of them. */
#ifndef CDL_CORE_SIZED_H
#define CDL_CORE_SIZED_H

#include <stddef.h>

/* Copies the caller's struct in over out (already holding this libcdl's
 * defaults, out_size bytes) and sets out's size to out_size. in's size
 * must be in [min_size, out_size], and in not NULL: else -1 with cdl_error naming type and
 * the function (init) that sets the size. */
int sized_read(const void *in, void *out, size_t out_size, size_t min_size, const char *type,
               const char *init);

#endif
