# tests for the CUDA backend that need no GPU (included from tests/gpu/local.mk).
#
# test_cuda: creation without a GPU, the TF32 switch, the dropout mask's
# device copy, the graph recorder. test_cuda_kernels: the .cu kernels run on
# the CPU (kernels/cuda/emu.h) against the CPU backend.
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
# The emulated kernels come first, so the archive's GPU objects (same
# symbols) are never pulled in.
CUDA_EMU_OBJS = $(CUDA_KERNEL_OBJS:kernels/cuda/%.lo=tests/unit/cuda_emu/%.o)
tests_unit_test_cuda_kernels_LDADD = $(CUDA_EMU_OBJS) $(TEST_LDADD) -lstdc++
EXTRA_tests_unit_test_cuda_kernels_DEPENDENCIES = $(CUDA_EMU_OBJS)
CLEANFILES += $(CUDA_EMU_OBJS)

# The .cu files as plain C++ (the host compiler through nvcc), with the
# emulation header forced in first; no -O3: the checks, not the speed.
CDL_EMU_FLAGS = -x c++ -std=c++17 -O1 -Xcompiler -Wall,-Wextra,-ffp-contract=off $(CDL_NVCC_WERROR) \
	-include $(top_srcdir)/kernels/cuda/emu.h -I$(top_srcdir)/lib -I$(top_srcdir) -I$(top_builddir)
$(CUDA_EMU_OBJS): $(CDL_NVCC_DEPS) $(top_srcdir)/kernels/cuda/emu.h
tests/unit/cuda_emu/%.o: kernels/cuda/%.cu
	$(AM_V_NVCC)$(MKDIR_P) $(@D) && $(NVCC) $(CDL_EMU_FLAGS) -c $< -o $@
endif
EXTRA_DIST += kernels/cuda/emu.h
