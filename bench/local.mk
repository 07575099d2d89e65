# bench: sources are added here.

# --- allreduce benchmark (dist): cdl shm beside Open MPI; bench/run_allreduce.sh
if HAVE_MPI
noinst_PROGRAMS += bench/bench_allreduce
bench_bench_allreduce_SOURCES = bench/bench_allreduce.c
bench_bench_allreduce_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
bench_bench_allreduce_LDADD = libcdl_core.la $(MPI_LIBS)
endif
dist_noinst_SCRIPTS += bench/run_allreduce.sh
# --- end allreduce benchmark
