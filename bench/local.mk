# Benchmarks (built by `make`, not run by `make check`): bench/run_cnn.sh
# compares the seed CNN's training speed with PyTorch's.
noinst_PROGRAMS += bench/bench_cnn
bench_bench_cnn_SOURCES = bench/bench_cnn.c
bench_bench_cnn_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)
bench_bench_cnn_LDADD = libcdl_core.la
EXTRA_DIST += bench/torch_cnn.py bench/run_cnn.sh

# --- allreduce benchmark (dist): cdl shm beside Open MPI; bench/run_allreduce.sh
if HAVE_MPI
noinst_PROGRAMS += bench/bench_allreduce
bench_bench_allreduce_SOURCES = bench/bench_allreduce.c
bench_bench_allreduce_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
bench_bench_allreduce_LDADD = libcdl_core.la $(MPI_LIBS)
endif
dist_noinst_SCRIPTS += bench/run_allreduce.sh
# --- end allreduce benchmark
