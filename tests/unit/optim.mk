# tests for optim: against torch.optim and its LR schedulers (tests/fixtures/optim.fix).
check_PROGRAMS += tests/unit/test_optim
TESTS += tests/unit/test_optim
tests_unit_test_optim_SOURCES = tests/unit/test_optim.c tests/unit/model_testutil.h \
	tests/unit/fixture.c tests/unit/fixture.h
tests_unit_test_optim_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_optim_LDADD = $(TEST_LDADD)
