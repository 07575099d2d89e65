# tests for launcher: cdlrun end to end on small sh scripts.
check_PROGRAMS += tests/unit/test_launcher
TESTS += tests/unit/test_launcher
tests_unit_test_launcher_SOURCES = tests/unit/test_launcher.c
tests_unit_test_launcher_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_launcher_LDADD = $(TEST_LDADD)
EXTRA_tests_unit_test_launcher_DEPENDENCIES = launcher/cdlrun
