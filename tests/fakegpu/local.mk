# tests/fakegpu: the fake GPU, libcdl's CUDA host code run on the CPU.
#
# The host code of the CUDA backend (kernels/cuda/*.c, lib/train/loop.c,
# lib/dist/coll_nccl.c) is linked as it is, but against a CUDA runtime,
# cuBLAS and cuDNN written for the tests (fake_*.cc) instead of NVIDIA's,
# with the .cu kernels compiled as C++ onto tests/fakegpu/emu.h. So the
# whole GPU path, from cudaMalloc through cuDNN plans and CUDA graphs to
# the pipelined training loop, runs in CI, which has no GPU. What it can
# and cannot show: docs/cuda.md, "Testing without a GPU".
if HAVE_CUDA
# The .cu kernels as plain C++ (the host compiler through nvcc), with the
# emulation header forced in first; no -O3: the checks, not the speed.
CDL_EMU_FLAGS = -x c++ -std=c++17 -O1 -Xcompiler -Wall,-Wextra,-ffp-contract=off $(CDL_NVCC_WERROR) \
	-include $(top_srcdir)/tests/fakegpu/emu.h -I$(top_srcdir)/lib -I$(top_srcdir) -I$(top_builddir)
CUDA_EMU_OBJS = $(CUDA_KERNEL_OBJS:kernels/cuda/%.lo=tests/fakegpu/emu/%.o)
$(CUDA_EMU_OBJS): $(CDL_NVCC_DEPS) $(top_srcdir)/tests/fakegpu/emu.h $(top_srcdir)/tests/fakegpu/emu_wmma.h \
	$(top_srcdir)/tests/fakegpu/emu_mma.h
tests/fakegpu/emu/%.o: kernels/cuda/%.cu
	$(AM_V_NVCC)$(MKDIR_P) $(@D) && $(NVCC) $(CDL_EMU_FLAGS) -c $< -o $@

FAKEGPU_OBJS = tests/fakegpu/fake_runtime.o tests/fakegpu/fake_blas.o tests/fakegpu/fake_blaslt.o \
	tests/fakegpu/fake_dnn.o tests/fakegpu/fake_nccl.o
FAKEGPU_FLAGS = -x c++ -std=c++17 -O2 -Xcompiler -Wall,-Wextra $(CDL_NVCC_WERROR) \
	-I$(top_srcdir)/lib -I$(top_srcdir) -I$(top_builddir)
$(FAKEGPU_OBJS): $(top_srcdir)/tests/fakegpu/fake.h $(top_srcdir)/tests/fakegpu/emu.h \
	$(top_srcdir)/tests/fakegpu/emu_wmma.h $(top_srcdir)/tests/fakegpu/emu_mma.h
tests/fakegpu/%.o: tests/fakegpu/%.cc
	$(AM_V_NVCC)$(MKDIR_P) $(@D) && $(NVCC) $(FAKEGPU_FLAGS) -c $< -o $@
CLEANFILES += $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)

# Emulated kernels and the fake libraries come before libcdl_core.la, so
# the archive's GPU kernel objects (same symbols) are never pulled in, and
# --as-needed drops NVIDIA's libraries, which nothing references then.
FAKEGPU_LDADD = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS) libcdl_core.la -lstdc++
FAKEGPU_LINKFLAGS = -Wl,--as-needed

# ops_vs_cpu of tests/gpu/run.sh, unchanged, on the fake GPU.
check_PROGRAMS += tests/fakegpu/ops_vs_cpu tests/fakegpu/cdl-train
tests_fakegpu_ops_vs_cpu_SOURCES = tests/gpu/ops_vs_cpu.c
tests_fakegpu_ops_vs_cpu_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_ops_vs_cpu_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_ops_vs_cpu_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_ops_vs_cpu_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# cdl-train, unchanged, on the fake GPU.
tests_fakegpu_cdl_train_SOURCES = cli/cdl-train.c cli/suggest.c cli/suggest.h cli/blas_core.c \
	cli/blas_core.h cli/normalize.c cli/normalize.h cli/libcheck.c cli/libcheck.h
tests_fakegpu_cdl_train_CPPFLAGS = $(AM_CPPFLAGS)
tests_fakegpu_cdl_train_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_cdl_train_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_cdl_train_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# cdl-eval, cdl-predict and cdl-generate, unchanged, on the fake GPU
# (tools.sh: --device cuda on the checkpoints the GPU wrote).
check_PROGRAMS += tests/fakegpu/cdl-eval tests/fakegpu/cdl-predict tests/fakegpu/cdl-generate
tests_fakegpu_cdl_eval_SOURCES = cli/cdl-eval.c cli/evalcommon.c cli/evalcommon.h cli/evalnames.c cli/blas_core.c \
	cli/blas_core.h cli/normalize.c cli/normalize.h cli/libcheck.c cli/libcheck.h
tests_fakegpu_cdl_eval_CPPFLAGS = $(AM_CPPFLAGS)
tests_fakegpu_cdl_eval_LDADD = $(FAKEGPU_LDADD) -lm
tests_fakegpu_cdl_eval_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_cdl_eval_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
tests_fakegpu_cdl_predict_SOURCES = cli/cdl-predict.c cli/evalcommon.c cli/evalcommon.h cli/evalnames.c \
	cli/blas_core.c cli/blas_core.h cli/normalize.c cli/normalize.h cli/libcheck.c cli/libcheck.h
tests_fakegpu_cdl_predict_CPPFLAGS = $(AM_CPPFLAGS)
tests_fakegpu_cdl_predict_LDADD = $(FAKEGPU_LDADD) -lm
tests_fakegpu_cdl_predict_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_cdl_predict_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
tests_fakegpu_cdl_generate_SOURCES = cli/cdl-generate.c cli/sample.c cli/sample.h cli/vocab.c cli/vocab.h cli/evalcommon.c cli/evalnames.c \
	cli/evalcommon.h cli/blas_core.c cli/blas_core.h cli/normalize.c cli/normalize.h \
	cli/libcheck.c cli/libcheck.h
tests_fakegpu_cdl_generate_CPPFLAGS = $(AM_CPPFLAGS)
tests_fakegpu_cdl_generate_LDADD = $(FAKEGPU_LDADD) -lm
tests_fakegpu_cdl_generate_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_cdl_generate_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# The signal tests of tests/unit/test_train.c on the fake GPU.
if HAVE_CMOCKA
check_PROGRAMS += tests/fakegpu/test_train_signals
TESTS += tests/fakegpu/test_train_signals
tests_fakegpu_test_train_signals_SOURCES = tests/fakegpu/test_train_signals.c tests/fakegpu/unit_scope.h
tests_fakegpu_test_train_signals_CPPFLAGS = $(TEST_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_test_train_signals_LDADD = $(FAKEGPU_LDADD) $(CMOCKA_LIBS)
tests_fakegpu_test_train_signals_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_test_train_signals_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# The data-parallel should_stop tests of tests/unit/test_train_stop.c on
# two fake GPUs.
check_PROGRAMS += tests/fakegpu/test_train_stop
TESTS += tests/fakegpu/test_train_stop
tests_fakegpu_test_train_stop_SOURCES = tests/fakegpu/test_train_stop.c tests/fakegpu/unit_scope.h \
	tests/unit/dist_fork.h
tests_fakegpu_test_train_stop_CPPFLAGS = $(TEST_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_test_train_stop_LDADD = $(FAKEGPU_LDADD) $(CMOCKA_LIBS)
tests_fakegpu_test_train_stop_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_test_train_stop_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# --clip-grad's non-finite norm holds the update on the device: weights and
# Adam state unchanged (hold_updates, kernels/cuda/optim.cu).
check_PROGRAMS += tests/fakegpu/test_clip_hold
TESTS += tests/fakegpu/test_clip_hold
tests_fakegpu_test_clip_hold_SOURCES = tests/fakegpu/test_clip_hold.c
tests_fakegpu_test_clip_hold_CPPFLAGS = $(TEST_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_test_clip_hold_LDADD = $(FAKEGPU_LDADD) $(CMOCKA_LIBS)
tests_fakegpu_test_clip_hold_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_test_clip_hold_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
endif
# bench_lenet of tests/gpu/run.sh, for the script's rehearsal.
check_PROGRAMS += tests/fakegpu/bench_lenet
tests_fakegpu_bench_lenet_SOURCES = tests/gpu/bench_lenet.c
tests_fakegpu_bench_lenet_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_bench_lenet_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_bench_lenet_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_bench_lenet_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# The gpt built-in on the CUDA backend against the CPU backend (skips, exit
# 77, while the backend lacks an op of the model).
check_PROGRAMS += tests/fakegpu/gpt_vs_cpu
TESTS += tests/fakegpu/gpt_vs_cpu
tests_fakegpu_gpt_vs_cpu_SOURCES = tests/gpu/gpt_vs_cpu.c
tests_fakegpu_gpt_vs_cpu_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_gpt_vs_cpu_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_gpt_vs_cpu_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_gpt_vs_cpu_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# NCCL collectives of lib/dist/coll_nccl.c against the compute stream.
check_PROGRAMS += tests/fakegpu/coll_order
tests_fakegpu_coll_order_SOURCES = tests/fakegpu/coll_order.c
tests_fakegpu_coll_order_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_coll_order_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_coll_order_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_coll_order_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
# The bf16 matrix products (tests/gpu/ops_bf16.c) and bf16 training
# against fp32 (bf16.sh).
check_PROGRAMS += tests/fakegpu/ops_bf16
tests_fakegpu_ops_bf16_SOURCES = tests/gpu/ops_bf16.c
tests_fakegpu_ops_bf16_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_fakegpu_ops_bf16_LDADD = $(FAKEGPU_LDADD)
tests_fakegpu_ops_bf16_LDFLAGS = $(FAKEGPU_LINKFLAGS)
EXTRA_tests_fakegpu_ops_bf16_DEPENDENCIES = $(CUDA_EMU_OBJS) $(FAKEGPU_OBJS)
TESTS += tests/fakegpu/bf16.sh
# The emulated mma.sync and ldmatrix (emu_mma.h) against the PTX ISA's
# fragment layouts, written out a second time in the test; built like the
# emulated kernels.
check_PROGRAMS += tests/fakegpu/mma_layout
TESTS += tests/fakegpu/mma_layout
tests_fakegpu_mma_layout_SOURCES =
tests_fakegpu_mma_layout_LDADD = tests/fakegpu/mma_layout.o -lstdc++
EXTRA_tests_fakegpu_mma_layout_DEPENDENCIES = tests/fakegpu/mma_layout.o
tests/fakegpu/mma_layout.o: tests/fakegpu/mma_layout.cc $(CDL_NVCC_DEPS) \
	$(top_srcdir)/tests/fakegpu/emu.h $(top_srcdir)/tests/fakegpu/emu_wmma.h \
	$(top_srcdir)/tests/fakegpu/emu_mma.h
	$(AM_V_NVCC)$(MKDIR_P) $(@D) && $(NVCC) $(CDL_EMU_FLAGS) -c $(top_srcdir)/tests/fakegpu/mma_layout.cc -o $@
CLEANFILES += tests/fakegpu/mma_layout.o
# (and gpu_script.sh, which Makefile.am puts first in TESTS: it takes longest)
TESTS += tests/fakegpu/ops.sh tests/fakegpu/train.sh tests/fakegpu/ddp.sh \
	tests/fakegpu/coll.sh tests/fakegpu/fault.sh
TESTS += tests/fakegpu/nccl_stall.sh tests/fakegpu/tools.sh tests/fakegpu/gpu_bind.sh
endif
EXTRA_DIST += tests/fakegpu/emu.h tests/fakegpu/emu_wmma.h tests/fakegpu/emu_mma.h tests/fakegpu/mma_layout.cc tests/fakegpu/fake.h tests/fakegpu/fake_runtime.cc tests/fakegpu/fake_blas.cc \
	tests/fakegpu/fake_blaslt.cc \
	tests/fakegpu/fake_dnn.cc tests/fakegpu/fake_nccl.cc tests/fakegpu/ops.sh \
	tests/fakegpu/train.sh tests/fakegpu/ddp.sh tests/fakegpu/gpu_script.sh \
	tests/fakegpu/coll.sh tests/fakegpu/fault.sh tests/fakegpu/fake-compute-sanitizer tests/fakegpu/fake-ncu \
	tests/fakegpu/bf16.sh
EXTRA_DIST += tests/fakegpu/nccl_stall.sh tests/fakegpu/tools.sh tests/fakegpu/gpu_bind.sh
