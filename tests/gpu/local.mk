# tests/gpu: the one script of GPU checks (tests/gpu/run.sh, not part of
# make check) and its helper programs, plus the CUDA tests that need no GPU
# (tests/unit/cuda.mk).
if HAVE_CMOCKA
include tests/unit/cuda.mk
endif
if HAVE_CUDA
VALGRIND_FLAGS += --suppressions=$(top_srcdir)/tests/unit/cuda.supp
endif
EXTRA_DIST += tests/unit/cuda.supp

# The helper programs of run.sh: built by make check (so CI compiles and
# links them), run only by run.sh.
# ops_vs_cpu is the op-test harness of every backend: built in every build,
# run by make check on the CPU backend (ops_cpu.sh).
check_PROGRAMS += tests/gpu/ops_vs_cpu
tests_gpu_ops_vs_cpu_SOURCES = tests/gpu/ops_vs_cpu.c
tests_gpu_ops_vs_cpu_LDADD = libcdl_core.la
TESTS += tests/gpu/ops_cpu.sh
if HAVE_CUDA
check_PROGRAMS += tests/gpu/bench_lenet
tests_gpu_bench_lenet_SOURCES = tests/gpu/bench_lenet.c
tests_gpu_bench_lenet_LDADD = libcdl_core.la
# gpt_vs_cpu: the gpt built-in on the GPU against the CPU (run.sh may call it;
# the fake GPU runs it in make check).
check_PROGRAMS += tests/gpu/gpt_vs_cpu
tests_gpu_gpt_vs_cpu_SOURCES = tests/gpu/gpt_vs_cpu.c
tests_gpu_gpt_vs_cpu_LDADD = libcdl_core.la
# bf16 matrix products against their rounding bounds (run.sh step 8).
check_PROGRAMS += tests/gpu/ops_bf16
tests_gpu_ops_bf16_SOURCES = tests/gpu/ops_bf16.c
tests_gpu_ops_bf16_LDADD = libcdl_core.la
endif
# NVIDIA's libraries load through run paths (-Wl,-rpath), not LD_LIBRARY_PATH.
TESTS += tests/gpu/rpath.sh
# run.sh writes its table when a row fails, hangs or stops it (stand-ins).
TESTS += tests/gpu/run_stops.sh
EXTRA_DIST += tests/gpu/run_stops.sh
# run.sh step 10's summary of an Nsight Compute log, on a saved one.
TESTS += tests/gpu/ncu_top.sh
EXTRA_DIST += tests/gpu/ncu_top.sh tests/gpu/ncu_top.py tests/gpu/ncu_sample.csv
EXTRA_DIST += tests/gpu/run.sh tests/gpu/ops_cpu.sh tests/gpu/bench_torch.py tests/gpu/ops_vs_cpu.c \
	tests/gpu/bench_lenet.c tests/gpu/rpath.sh
EXTRA_DIST += tests/gpu/ops_bf16.c tests/gpu/bench_gpt_torch.py tests/gpu/bench_resnet_torch.py tests/gpu/bench_timing.py

EXTRA_DIST += tests/gpu/gpt_vs_cpu.c

# The PyTorch templates on a GPU (docs/pytorch.md); run.sh may call it.
EXTRA_DIST += tests/gpu/pytorch_templates.sh
# Accelerate's gradient-averaging check, run by pytorch_templates.sh (step 4)
# and tests/slurm/test_accelerate.sh.
EXTRA_DIST += tests/pytorch/accelerate_check.py
EXTRA_DIST += tests/gpu/nccl_checks.sh
