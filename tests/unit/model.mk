# tests for model
check_PROGRAMS += tests/unit/test_spec
TESTS += tests/unit/test_spec
tests_unit_test_spec_SOURCES = tests/unit/test_spec.c
tests_unit_test_spec_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_spec_LDADD = $(TEST_LDADD)
