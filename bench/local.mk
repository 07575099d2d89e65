# bench: sources are added here.

# --- SPANK plugin cost (spank/): what the plugin adds to `srun -n 2 true` on
# the test cluster; needs root and Slurm. `make bench-spank [RUNS=40]`.
dist_noinst_SCRIPTS += bench/bench_spank.sh
bench-spank: all
	top_srcdir=$(top_srcdir) top_builddir=$(top_builddir) $(top_srcdir)/bench/bench_spank.sh $(RUNS)
.PHONY: bench-spank
# --- end of SPANK plugin cost
