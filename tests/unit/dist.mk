# tests for dist: discovery, collectives (forked ranks), the TCP store.
check_PROGRAMS += tests/unit/test_dist_discover tests/unit/test_dist_coll tests/unit/test_dist_store
TESTS += tests/unit/test_dist_discover tests/unit/test_dist_coll tests/unit/test_dist_store
tests_unit_test_dist_discover_SOURCES = tests/unit/test_dist_discover.c tests/unit/dist_fork.h
tests_unit_test_dist_discover_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_discover_LDADD = $(TEST_LDADD)
tests_unit_test_dist_coll_SOURCES = tests/unit/test_dist_coll.c tests/unit/dist_fork.h
tests_unit_test_dist_coll_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_coll_LDADD = $(TEST_LDADD)
tests_unit_test_dist_store_SOURCES = tests/unit/test_dist_store.c tests/unit/dist_fork.h
tests_unit_test_dist_store_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_store_LDADD = $(TEST_LDADD)

# Multi-process checks: one program, launched by cdlrun and mpirun.
check_PROGRAMS += tests/dist/dist_check
tests_dist_dist_check_SOURCES = tests/dist/dist_check.c
tests_dist_dist_check_LDADD = libcdl_core.la
TESTS += tests/dist/cdlrun.sh tests/dist/mpirun.sh
EXTRA_DIST += tests/dist/cdlrun.sh tests/dist/mpirun.sh
