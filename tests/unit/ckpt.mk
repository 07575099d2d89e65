# tests for ckpt: unit tests, and interoperability with the reference
# safetensors implementation (tests/ckpt/interop.sh; skips when Python's torch
# or safetensors cannot be imported).
check_PROGRAMS += tests/unit/test_ckpt
TESTS += tests/unit/test_ckpt
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c
tests_unit_test_ckpt_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_ckpt_LDADD = $(TEST_LDADD)
