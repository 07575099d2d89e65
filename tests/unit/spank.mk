# tests for spank: the plugin's pure modules, compiled from their sources
# (not through the plugin, which needs a Slurm process around it).
SPANK_TEST_CPPFLAGS = $(TEST_CPPFLAGS) $(HWLOC_CFLAGS) $(NETTLE_CFLAGS)
SPANK_TEST_LDADD = $(CMOCKA_LIBS)

check_PROGRAMS += tests/unit/test_spank_config tests/unit/test_spank_contract \
	tests/unit/test_spank_spawn tests/unit/test_spank_mps tests/unit/test_spank_rundir \
	tests/unit/test_spank_threads tests/unit/test_spank_badexit tests/unit/test_spank_torchrun \
	tests/unit/test_spank_shmsweep
TESTS += tests/unit/test_spank_config tests/unit/test_spank_contract \
	tests/unit/test_spank_spawn tests/unit/test_spank_mps tests/unit/test_spank_rundir \
	tests/unit/test_spank_threads tests/unit/test_spank_badexit tests/unit/test_spank_torchrun \
	tests/unit/test_spank_shmsweep

tests_unit_test_spank_shmsweep_SOURCES = tests/unit/test_spank_shmsweep.c spank/util.c \
	spank/shmsweep.c tests/unit/fuse_stall.h
tests_unit_test_spank_shmsweep_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_shmsweep_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_badexit_SOURCES = tests/unit/test_spank_badexit.c spank/badexit.c
tests_unit_test_spank_badexit_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_badexit_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_torchrun_SOURCES = tests/unit/test_spank_torchrun.c spank/util.c \
	spank/torchrun.c
tests_unit_test_spank_torchrun_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_torchrun_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_threads_SOURCES = tests/unit/test_spank_threads.c spank/threads.c
tests_unit_test_spank_threads_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_threads_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_config_SOURCES = tests/unit/test_spank_config.c spank/util.c \
	spank/config.c spank/options.c
tests_unit_test_spank_config_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_config_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_contract_SOURCES = tests/unit/test_spank_contract.c spank/util.c \
	spank/config.c spank/contract.c spank/port.c spank/packing.c lib/dist/contract.c
tests_unit_test_spank_contract_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_contract_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_spawn_SOURCES = tests/unit/test_spank_spawn.c spank/util.c spank/spawn.c
tests_unit_test_spank_spawn_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_spawn_LDADD = $(SPANK_TEST_LDADD)

tests_unit_test_spank_rundir_SOURCES = tests/unit/test_spank_rundir.c spank/util.c \
	spank/rundir.c tests/unit/fuse_stall.h
tests_unit_test_spank_rundir_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_rundir_LDADD = $(SPANK_TEST_LDADD)

# Runs the fake MPS control program (tests/slurm) through the real lifecycle.
tests_unit_test_spank_mps_SOURCES = tests/unit/test_spank_mps.c spank/util.c spank/config.c \
	spank/spawn.c spank/rundir.c spank/mps.c
tests_unit_test_spank_mps_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_mps_LDADD = $(SPANK_TEST_LDADD)
EXTRA_tests_unit_test_spank_mps_DEPENDENCIES = tests/slurm/fake-mps-control


# The step's CPUs from Slurm's core numbers, on saved topologies.
if HAVE_HWLOC
check_PROGRAMS += tests/unit/test_spank_stepcpus
TESTS += tests/unit/test_spank_stepcpus
tests_unit_test_spank_stepcpus_SOURCES = tests/unit/test_spank_stepcpus.c spank/stepcpus.c \
	spank/options.c spank/util.c lib/dist/bind.c lib/dist/contract.c
tests_unit_test_spank_stepcpus_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_stepcpus_LDADD = $(SPANK_TEST_LDADD) $(HWLOC_LIBS)

# Steps of one job sharing CPUs (srun --overlap), on a made-up /proc.
check_PROGRAMS += tests/unit/test_spank_overlap
TESTS += tests/unit/test_spank_overlap
tests_unit_test_spank_overlap_SOURCES = tests/unit/test_spank_overlap.c spank/overlap.c \
	lib/dist/bind.c lib/dist/contract.c
tests_unit_test_spank_overlap_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_overlap_LDADD = $(SPANK_TEST_LDADD) $(HWLOC_LIBS)
endif

# The step secret (HMAC-SHA256 with nettle, getrandom for one node).
if HAVE_NETTLE
check_PROGRAMS += tests/unit/test_spank_secret
TESTS += tests/unit/test_spank_secret
tests_unit_test_spank_secret_SOURCES = tests/unit/test_spank_secret.c spank/util.c \
	spank/secret.c lib/dist/contract.c
tests_unit_test_spank_secret_CPPFLAGS = $(SPANK_TEST_CPPFLAGS)
tests_unit_test_spank_secret_LDADD = $(SPANK_TEST_LDADD) $(NETTLE_LIBS)
endif
