# tests for dist: discovery, collectives (forked ranks), the TCP store, GPU groups.
check_PROGRAMS += tests/unit/test_dist_discover tests/unit/test_dist_coll tests/unit/test_dist_store \
	tests/unit/test_dist_ddp tests/unit/test_dist_gpu_group
TESTS += tests/unit/test_dist_discover tests/unit/test_dist_coll tests/unit/test_dist_store \
	tests/unit/test_dist_ddp tests/unit/test_dist_gpu_group
tests_unit_test_dist_discover_SOURCES = tests/unit/test_dist_discover.c tests/unit/dist_fork.h
tests_unit_test_dist_discover_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_discover_LDADD = $(TEST_LDADD)
tests_unit_test_dist_coll_SOURCES = tests/unit/test_dist_coll.c tests/unit/dist_fork.h
tests_unit_test_dist_coll_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_coll_LDADD = $(TEST_LDADD)
tests_unit_test_dist_store_SOURCES = tests/unit/test_dist_store.c tests/unit/dist_fork.h
tests_unit_test_dist_store_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_store_LDADD = $(TEST_LDADD)
tests_unit_test_dist_ddp_SOURCES = tests/unit/test_dist_ddp.c tests/unit/dist_fork.h
tests_unit_test_dist_ddp_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_ddp_LDADD = $(TEST_LDADD)
# ZeRO-1: reduce-scatter, allgather of parts, optimizer shards.
check_PROGRAMS += tests/unit/test_dist_shard
TESTS += tests/unit/test_dist_shard
tests_unit_test_dist_shard_SOURCES = tests/unit/test_dist_shard.c tests/unit/dist_fork.h
tests_unit_test_dist_shard_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_shard_LDADD = $(TEST_LDADD)
# BatchNorm under DDP (buffers follow rank 0; SyncBatchNorm): test_dist_bn.c.
check_PROGRAMS += tests/unit/test_dist_bn
TESTS += tests/unit/test_dist_bn
tests_unit_test_dist_bn_SOURCES = tests/unit/test_dist_bn.c tests/unit/dist_fork.h
tests_unit_test_dist_bn_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_bn_LDADD = $(TEST_LDADD)
tests_unit_test_dist_gpu_group_SOURCES = tests/unit/test_dist_gpu_group.c
tests_unit_test_dist_gpu_group_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_dist_gpu_group_LDADD = $(TEST_LDADD)

# Multi-process checks: one program, launched by cdlrun and mpirun.
check_PROGRAMS += tests/dist/dist_check tests/dist/weights_cmp
tests_dist_dist_check_SOURCES = tests/dist/dist_check.c
tests_dist_dist_check_LDADD = libcdl_core.la
tests_dist_weights_cmp_SOURCES = tests/dist/weights_cmp.c
tests_dist_weights_cmp_LDADD = libcdl_core.la
TESTS += tests/dist/cdlrun.sh tests/dist/mpirun.sh tests/dist/train_equiv.sh tests/dist/train_kill.sh
TESTS += tests/dist/val_split.sh tests/dist/stage.sh tests/dist/eval_notes.sh
EXTRA_DIST += tests/dist/val_split.sh tests/dist/stage.sh tests/dist/eval_notes.sh
TESTS += tests/dist/shard_equiv.sh tests/dist/records_full.sh
# A rank stopped before the bootstrap or in MPI_Init (a preloaded shim).
check_LTLIBRARIES += tests/dist/stall-preload.la
tests_dist_stall_preload_la_SOURCES = tests/dist/stall-preload.c
tests_dist_stall_preload_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
tests_dist_stall_preload_la_LIBADD = -ldl
TESTS += tests/dist/mpi_stall.sh
EXTRA_DIST += tests/dist/mpi_stall.sh tests/dist/quiet_port.py
# SIGTERM while a rank waits in the bootstrap for one that never comes.
TESTS += tests/dist/boot_signal.sh
EXTRA_DIST += tests/dist/boot_signal.sh
EXTRA_DIST += tests/dist/shard_equiv.sh tests/dist/records_full.sh
EXTRA_DIST += tests/dist/cdlrun.sh tests/dist/mpirun.sh tests/dist/train_equiv.sh tests/dist/step_equiv.sh \
	tests/dist/train_kill.sh tests/dist/common.sh

# The rank contract's rules alone, from their source (the plugin compiles it
# the same way).
check_PROGRAMS += tests/unit/test_contract
TESTS += tests/unit/test_contract
tests_unit_test_contract_SOURCES = tests/unit/test_contract.c lib/dist/contract.c
tests_unit_test_contract_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_contract_LDADD = $(CMOCKA_LIBS)

# Round trips: the plugin's contract code and cdlrun, read back by discovery.
check_PROGRAMS += tests/unit/test_contract_roundtrip
TESTS += tests/unit/test_contract_roundtrip
tests_unit_test_contract_roundtrip_SOURCES = tests/unit/test_contract_roundtrip.c \
	tests/unit/dist_fork.h spank/util.c spank/config.c spank/contract.c spank/port.c
tests_unit_test_contract_roundtrip_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_contract_roundtrip_LDADD = $(TEST_LDADD)
EXTRA_tests_unit_test_contract_roundtrip_DEPENDENCIES = launcher/cdlrun

# The binding planner of the plugin and cdlrun on saved topologies.
if HAVE_HWLOC
check_PROGRAMS += tests/unit/test_bind
TESTS += tests/unit/test_bind
tests_unit_test_bind_SOURCES = tests/unit/test_bind.c lib/dist/bind.c lib/dist/contract.c
tests_unit_test_bind_CPPFLAGS = $(TEST_CPPFLAGS) $(HWLOC_CFLAGS)
tests_unit_test_bind_LDADD = $(CMOCKA_LIBS) $(HWLOC_LIBS)
endif
# should_stop on one data-parallel rank stops all at one step (forked ranks).
check_PROGRAMS += tests/unit/test_train_stop
TESTS += tests/unit/test_train_stop
tests_unit_test_train_stop_SOURCES = tests/unit/test_train_stop.c tests/unit/dist_fork.h
tests_unit_test_train_stop_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_train_stop_LDADD = $(TEST_LDADD)
