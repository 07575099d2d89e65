# Benchmarks (built by `make`, not run by `make check`): bench/run_cnn.sh
# compares the seed CNN's training speed with PyTorch's.
noinst_PROGRAMS += bench/bench_cnn bench/bench_ops
bench_bench_ops_SOURCES = bench/bench_ops.c bench/bench_util.h
bench_bench_ops_LDADD = libcdl_core.la
bench_bench_cnn_SOURCES = bench/bench_cnn.c bench/bench_util.h
bench_bench_cnn_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)
bench_bench_cnn_LDADD = libcdl_core.la
EXTRA_DIST += bench/torch_cnn.py bench/run_cnn.sh bench/openblas_core.sh bench/torch_speed.py \
	bench/run_resnet_speed.sh bench/torch2_venv.sh bench/torch_ops.py bench/run_cpu_ops.sh
# One epoch of real Fashion-MNIST through the loader against synthetic images
# in memory (run_cnn.sh prints its table too).
noinst_PROGRAMS += bench/bench_data
bench_bench_data_SOURCES = bench/bench_data.c bench/bench_util.h
bench_bench_data_LDADD = libcdl_core.la

# --- allreduce benchmark (dist): cdl shm beside Open MPI; bench/run_allreduce.sh
if HAVE_MPI
noinst_PROGRAMS += bench/bench_allreduce
bench_bench_allreduce_SOURCES = bench/bench_allreduce.c
bench_bench_allreduce_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
bench_bench_allreduce_LDADD = libcdl_core.la $(MPI_LIBS)
endif
dist_noinst_SCRIPTS += bench/run_allreduce.sh bench/run_ddp.sh
# --- end allreduce benchmark

# --- SPANK plugin cost (spank/): what the plugin adds to `srun -n 2 true` on
# the test cluster; needs root and Slurm. `make bench-spank [RUNS=40]`.
dist_noinst_SCRIPTS += bench/bench_spank.sh
bench-spank: all
	top_srcdir=$(top_srcdir) top_builddir=$(top_builddir) $(top_srcdir)/bench/bench_spank.sh $(RUNS)
.PHONY: bench-spank
# --- end of SPANK plugin cost

# --- image-folder loading against PyTorch's DataLoader: bench/run_readers.sh
if HAVE_PNG
if HAVE_JPEG
noinst_PROGRAMS += bench/bench_readers bench/make_folders
bench_bench_readers_SOURCES = bench/bench_readers.c bench/bench_util.h
bench_bench_readers_LDADD = libcdl_core.la
bench_make_folders_SOURCES = bench/make_folders.c
bench_make_folders_CPPFLAGS = $(AM_CPPFLAGS) $(PNG_CFLAGS) $(JPEG_CFLAGS)
bench_make_folders_LDADD = libcdl_core.la $(PNG_LIBS) $(JPEG_LIBS)
endif
endif
EXTRA_DIST += bench/torch_loader.py
dist_noinst_SCRIPTS += bench/run_readers.sh
# --- end of image-folder loading
EXTRA_DIST += bench/run_resnet.sh bench/torch_resnet.py
EXTRA_DIST += bench/run_gpt.sh bench/torch_gpt.py
