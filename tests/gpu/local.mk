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
