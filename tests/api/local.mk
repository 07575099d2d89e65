# tests/api: libcdl as a C programmer uses it: its exported symbols against
# its headers, the C programs of the docs, the installed headers and
# library through pkg-config.
TESTS += tests/api/symbols.sh tests/api/docs.sh tests/api/installed.sh
# The public structs' layout against tests/api/abi.txt: what an older
# release's program on this libcdl.so.0 needs kept (needs gdb).
TESTS += tests/api/abi.sh
EXTRA_DIST += tests/api/abi.sh tests/api/abi.txt
EXTRA_DIST += tests/api/symbols.sh tests/api/docs.sh tests/api/installed.sh tests/api/make-install.sh
# The headers in every C++ standard, templates/train.c and a C++ program
# (skipped without a C++ compiler).
TESTS += tests/api/cxx.sh
EXTRA_DIST += tests/api/cxx.sh tests/api/cxx_use.cc
# Not beside tests/e2e/install.sh: two `make install` runs in one build tree
# under make -j may relink the same files.
tests/api/installed.log: tests/e2e/install.log

# C tests of the public API linked against the shared libcdl itself (not
# libcdl_core): they see only what a program sees. No config.h (the
# test helpers need _GNU_SOURCE for nftw and mkdtemp).
if HAVE_CMOCKA
check_PROGRAMS += tests/api/test_weights
TESTS += tests/api/test_weights
tests_api_test_weights_SOURCES = tests/api/test_weights.c
tests_api_test_weights_CPPFLAGS = -D_GNU_SOURCE -I$(top_srcdir)/lib -I$(top_srcdir)/tests/unit $(CMOCKA_CFLAGS)
tests_api_test_weights_LDADD = libcdl.la $(CMOCKA_LIBS)
# The program itself, not a libtool wrapper script, so that check-valgrind
# runs it under valgrind (its run path names the uninstalled libcdl).
tests_api_test_weights_LDFLAGS = $(AM_LDFLAGS) -no-install
# cdl_train_run in two threads at once: the numbers, the signal handlers;
# OpenBLAS's thread count given back.
check_PROGRAMS += tests/api/test_threads
TESTS += tests/api/test_threads
tests_api_test_threads_SOURCES = tests/api/test_threads.c
tests_api_test_threads_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS) $(OPENBLAS_CFLAGS)
tests_api_test_threads_LDADD = libcdl.la $(CMOCKA_LIBS) $(OPENBLAS_LIBS) -lpthread
tests_api_test_threads_LDFLAGS = $(AM_LDFLAGS) -no-install
# cdl_train_run alone in one task of a job of several (dist_backend single).
check_PROGRAMS += tests/api/test_alone
TESTS += tests/api/test_alone
tests_api_test_alone_SOURCES = tests/api/test_alone.c
tests_api_test_alone_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_alone_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_alone_LDFLAGS = $(AM_LDFLAGS) -no-install
# fork() after a CPU backend of several threads and a loader with workers:
# the child uses them (their threads were not copied).
check_PROGRAMS += tests/api/test_fork
TESTS += tests/api/test_fork
tests_api_test_fork_SOURCES = tests/api/test_fork.c
tests_api_test_fork_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_fork_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_fork_LDFLAGS = $(AM_LDFLAGS) -no-install
# cdl_train_config.on_log: a run's lines to the program, none printed.
check_PROGRAMS += tests/api/test_log
TESTS += tests/api/test_log
tests_api_test_log_SOURCES = tests/api/test_log.c
tests_api_test_log_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_log_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_log_LDFLAGS = $(AM_LDFLAGS) -no-install
endif
# What C programs get wrong: NULL handles and out-pointers, a misspelt
# dist backend on one process, a newer cdl's checkpoint, cdl_last_error.
if HAVE_CMOCKA
check_PROGRAMS += tests/api/test_robust
TESTS += tests/api/test_robust
tests_api_test_robust_SOURCES = tests/api/test_robust.c
tests_api_test_robust_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_robust_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_robust_LDFLAGS = $(AM_LDFLAGS) -no-install
endif
# One run stopped by its program (should_stop) beside one that trains on, a
# model without weights, an empty model name, fork() during a run.
if HAVE_CMOCKA
# A program and a libcdl of different releases: the sizes of the structs
# passed, both ways (and tests/api/symbols.sh: the versions required).
check_PROGRAMS += tests/api/test_abi
TESTS += tests/api/test_abi
tests_api_test_abi_SOURCES = tests/api/test_abi.c
tests_api_test_abi_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_abi_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_abi_LDFLAGS = $(AM_LDFLAGS) -no-install
check_PROGRAMS += tests/api/test_stop
TESTS += tests/api/test_stop
tests_api_test_stop_SOURCES = tests/api/test_stop.c
tests_api_test_stop_CPPFLAGS = $(tests_api_test_weights_CPPFLAGS)
tests_api_test_stop_LDADD = libcdl.la $(CMOCKA_LIBS)
tests_api_test_stop_LDFLAGS = $(AM_LDFLAGS) -no-install
endif
