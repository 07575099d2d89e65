check_PROGRAMS += tests/unit/test_sample
TESTS += tests/unit/test_sample
tests_unit_test_sample_SOURCES = tests/unit/test_sample.c cli/sample.c cli/sample.h
tests_unit_test_sample_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_sample_LDADD = $(TEST_LDADD) -lm
