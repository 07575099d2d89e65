/* The fake GPU's cmocka tests reuse tests/unit's sources on the pipelined
 * GPU loop; they take tens of seconds there, so a unit-only pass (the
 * valgrind one, CDL_TEST_SCOPE=unit, where tests/unit runs the same cases
 * on the CPU) skips them. */
#ifndef CDL_FAKEGPU_UNIT_SCOPE_H
#define CDL_FAKEGPU_UNIT_SCOPE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 (after printing SKIP) in a unit-only pass: return 77 then. */
static inline int fakegpu_skip_in_unit_pass(void)
{
    const char *scope = getenv("CDL_TEST_SCOPE");
    if (!scope || strcmp(scope, "unit"))
        return 0;
    printf("SKIP: the fake GPU's training runs in a unit-only pass\n");
    return 1;
}

#endif
