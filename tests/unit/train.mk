check_PROGRAMS += tests/unit/test_train
TESTS += tests/unit/test_train
tests_unit_test_train_SOURCES = tests/unit/test_train.c
tests_unit_test_train_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_train_LDADD = $(TEST_LDADD)
