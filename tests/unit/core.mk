check_PROGRAMS += tests/unit/test_core
TESTS += tests/unit/test_core
tests_unit_test_core_SOURCES = tests/unit/test_core.c
tests_unit_test_core_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_core_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/unit/test_memlimit
TESTS += tests/unit/test_memlimit
tests_unit_test_memlimit_SOURCES = tests/unit/test_memlimit.c
tests_unit_test_memlimit_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_memlimit_LDADD = $(TEST_LDADD)
