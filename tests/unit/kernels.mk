# tests for kernels: the CPU backend against double-precision reference ops.
check_PROGRAMS += tests/unit/test_kernels
TESTS += tests/unit/test_kernels
tests_unit_test_kernels_SOURCES = tests/unit/test_kernels.c tests/unit/ref_ops.c tests/unit/ref_ops.h \
	tests/unit/kernel_testutil.h
tests_unit_test_kernels_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_LDADD = $(TEST_LDADD)
# the thread pool's waiting (kernels/cpu/pool.c)
check_PROGRAMS += tests/unit/test_pool
TESTS += tests/unit/test_pool
tests_unit_test_pool_SOURCES = tests/unit/test_pool.c
tests_unit_test_pool_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_pool_LDADD = $(TEST_LDADD)
# the ops of networks with branches (batch norm, activations, joins)
check_PROGRAMS += tests/unit/test_kernels_net
TESTS += tests/unit/test_kernels_net
tests_unit_test_kernels_net_SOURCES = tests/unit/test_kernels_net.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_net_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_net_LDADD = $(TEST_LDADD)
# causal multi-head self-attention (reference and fast CPU paths)
check_PROGRAMS += tests/unit/test_kernels_attn
TESTS += tests/unit/test_kernels_attn
tests_unit_test_kernels_attn_SOURCES = tests/unit/test_kernels_attn.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_attn_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_attn_LDADD = $(TEST_LDADD)
tests_unit_test_kernels_attn_SOURCES += tests/unit/avx512_testutil.h
# the exact GELU's AVX-512 kernels against the AVX2 ones (skipped without AVX-512)
check_PROGRAMS += tests/unit/test_kernels_act512
TESTS += tests/unit/test_kernels_act512
tests_unit_test_kernels_act512_SOURCES = tests/unit/test_kernels_act512.c tests/unit/kernel_testutil.h \
	tests/unit/avx512_testutil.h
tests_unit_test_kernels_act512_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_act512_LDADD = $(TEST_LDADD)
# no AVX kernel hands its tail to SSE code with the upper halves dirty
# (objdump over libcdl_core.a; skipped without it)
TESTS += tests/unit/avx_upper.sh
EXTRA_DIST += tests/unit/avx_upper.sh
# linear layers on the AVX2 path's shapes (GPT-sized) and the OpenBLAS one
check_PROGRAMS += tests/unit/test_kernels_linear
TESTS += tests/unit/test_kernels_linear
tests_unit_test_kernels_linear_SOURCES = tests/unit/test_kernels_linear.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_linear_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_linear_LDADD = $(TEST_LDADD)
tests_unit_test_kernels_linear_SOURCES += tests/unit/avx512_testutil.h
# the same ops against PyTorch (tests/fixtures/ops.fix)
check_PROGRAMS += tests/unit/test_ops_torch
TESTS += tests/unit/test_ops_torch
tests_unit_test_ops_torch_SOURCES = tests/unit/test_ops_torch.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h tests/unit/fixture.c tests/unit/fixture.h
tests_unit_test_ops_torch_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_ops_torch_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/fixtures/ops_fixtures.py tests/fixtures/ops.fix
# the ops of transformers (layernorm, embedding, bcast_add, ignored labels)
check_PROGRAMS += tests/unit/test_kernels_seq
TESTS += tests/unit/test_kernels_seq
tests_unit_test_kernels_seq_SOURCES = tests/unit/test_kernels_seq.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_seq_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_seq_LDADD = $(TEST_LDADD)
# the direct AVX2 convolution on ResNet shapes (skipped without AVX2)
check_PROGRAMS += tests/unit/test_kernels_conv
TESTS += tests/unit/test_kernels_conv
tests_unit_test_kernels_conv_SOURCES = tests/unit/test_kernels_conv.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_conv_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_conv_LDADD = $(TEST_LDADD)
# the Winograd F(2x2,3x3) convolution (skipped without AVX2)
check_PROGRAMS += tests/unit/test_kernels_conv_wino
TESTS += tests/unit/test_kernels_conv_wino
tests_unit_test_kernels_conv_wino_SOURCES = tests/unit/test_kernels_conv_wino.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_kernels_conv_wino_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kernels_conv_wino_LDADD = $(TEST_LDADD)
# the CPU backend's convolutions on random shapes against the reference
check_PROGRAMS += tests/unit/test_conv_sweep
TESTS += tests/unit/test_conv_sweep
tests_unit_test_conv_sweep_SOURCES = tests/unit/test_conv_sweep.c tests/unit/ref_ops.c \
	tests/unit/ref_ops.h tests/unit/kernel_testutil.h
tests_unit_test_conv_sweep_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_conv_sweep_LDADD = $(TEST_LDADD)
