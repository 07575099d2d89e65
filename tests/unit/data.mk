# tests for data
check_PROGRAMS += tests/unit/test_data
TESTS += tests/unit/test_data
tests_unit_test_data_SOURCES = tests/unit/test_data.c
tests_unit_test_data_CPPFLAGS = $(TEST_CPPFLAGS) $(ZLIB_CFLAGS)
tests_unit_test_data_LDADD = $(TEST_LDADD) $(ZLIB_LIBS)

# Timings of the batch conversion and the loader: built, run by hand.
check_PROGRAMS += tests/unit/test_data_bench
tests_unit_test_data_bench_SOURCES = tests/unit/test_data_bench.c
tests_unit_test_data_bench_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_data_bench_LDADD = $(TEST_LDADD)

# Readers of users' data: image folders, .npy/.npz, CSV.
check_PROGRAMS += tests/unit/test_readers
TESTS += tests/unit/test_readers
tests_unit_test_readers_SOURCES = tests/unit/test_readers.c tests/unit/img_write.h
tests_unit_test_readers_CPPFLAGS = $(TEST_CPPFLAGS) $(PNG_CFLAGS) $(JPEG_CFLAGS)
tests_unit_test_readers_LDADD = $(TEST_LDADD) $(PNG_LIBS) $(JPEG_LIBS)

# Token datasets (text:FILE, tokens:DIR) and their windows.
check_PROGRAMS += tests/unit/test_tokens
TESTS += tests/unit/test_tokens
tests_unit_test_tokens_SOURCES = tests/unit/test_tokens.c
tests_unit_test_tokens_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tokens_LDADD = $(TEST_LDADD)
