# tests for the CUDA backend that need no GPU (included from tests/gpu/local.mk).
#
# test_cuda: creation without a GPU, the TF32 switch, the dropout mask's
# device copy, the graph recorder. test_cuda_kernels: the .cu kernels run on
# the CPU (tests/fakegpu/emu.h) against the CPU backend.
check_PROGRAMS += tests/unit/test_cuda
TESTS += tests/unit/test_cuda
tests_unit_test_cuda_SOURCES = tests/unit/test_cuda.c
tests_unit_test_cuda_CPPFLAGS = $(TEST_CPPFLAGS) $(CUDA_CFLAGS)
tests_unit_test_cuda_LDADD = $(TEST_LDADD)

if HAVE_CUDA
check_PROGRAMS += tests/unit/test_cuda_kernels
TESTS += tests/unit/test_cuda_kernels
tests_unit_test_cuda_kernels_SOURCES = tests/unit/test_cuda_kernels.c
tests_unit_test_cuda_kernels_CPPFLAGS = $(TEST_CPPFLAGS) $(CUDA_CFLAGS)
# The emulated kernels (tests/fakegpu/local.mk) come first, so the
# archive's GPU objects (same symbols) are never pulled in.
tests_unit_test_cuda_kernels_LDADD = $(CUDA_EMU_OBJS) $(TEST_LDADD) -lstdc++
EXTRA_tests_unit_test_cuda_kernels_DEPENDENCIES = $(CUDA_EMU_OBJS)
endif
