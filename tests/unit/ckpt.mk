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

# A 25M-parameter model with Adam through a training checkpoint, and into
# PyTorch (docs/checkpoints.md).
check_PROGRAMS += tests/ckpt/big_adam
tests_ckpt_big_adam_SOURCES = tests/ckpt/big_adam.c
tests_ckpt_big_adam_CPPFLAGS = $(TEST_CPPFLAGS) $(ZLIB_CFLAGS)
tests_ckpt_big_adam_LDADD = $(TEST_LDADD) $(ZLIB_LIBS)
dist_check_SCRIPTS += tests/ckpt/big_adam.sh
TESTS += tests/ckpt/big_adam.sh
EXTRA_DIST += tests/ckpt/big_adam.py
