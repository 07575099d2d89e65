# tests for ckpt: unit tests, and interoperability with the reference
# safetensors implementation (tests/ckpt/interop.sh; skips when Python's torch
# or safetensors cannot be imported).
check_PROGRAMS += tests/unit/test_ckpt
TESTS += tests/unit/test_ckpt
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c
tests_unit_test_ckpt_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_ckpt_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/ckpt/st_tool
tests_ckpt_st_tool_SOURCES = tests/ckpt/st_tool.c
tests_ckpt_st_tool_LDADD = libcdl_core.la
dist_check_SCRIPTS += tests/ckpt/interop.sh
TESTS += tests/ckpt/interop.sh
EXTRA_DIST += tests/ckpt/interop.py
