# tests/slurm: a throw-away Slurm cluster (cluster.sh: munged, slurmctld and
# two slurmd emulating n1/n2) with the built plugin, and the tests against
# it. They need root and Debian's munge/slurm packages; without them each
# prints why and exits 77 (skipped). The fake MPS control program is also
# used by tests/unit/test_spank_mps.
check_PROGRAMS += tests/slurm/fake-mps-control
tests_slurm_fake_mps_control_SOURCES = tests/slurm/fake-mps-control.c

# Loaded through LD_PRELOAD by the hostile-input test: records who loads it.
check_LTLIBRARIES += tests/slurm/evil-preload.la
tests_slurm_evil_preload_la_SOURCES = tests/slurm/evil-preload.c
tests_slurm_evil_preload_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

# Longest first (CI's times: test_node_loss 200 s, test_idle_requeue 135,
# test_templates 90, test_hf_trainer, test_arrays 70, test_pytorch 55), and
# before the other tests (Makefile.am includes this file first): make -j
# starts TESTS in list order, and a long test that starts last stretches
# make check by its whole length.
SLURM_TESTS = tests/slurm/test_node_loss.sh tests/slurm/test_idle_requeue.sh \
	tests/slurm/test_templates.sh tests/slurm/test_hf_trainer.sh tests/slurm/test_arrays.sh \
	tests/slurm/test_pytorch.sh tests/slurm/test_ddp_contract.sh tests/slurm/test_sbatch.sh \
	tests/slurm/test_ports.sh tests/slurm/test_mps.sh tests/slurm/test_bind.sh \
	tests/slurm/test_hostile.sh tests/slurm/test_admin.sh tests/slurm/test_train_e2e.sh \
	tests/slurm/test_plugstack.sh tests/slurm/test_lightning.sh tests/slurm/test_stage.sh \
	tests/slurm/test_rank_exit.sh tests/slurm/test_torchrun.sh \
	tests/slurm/test_accelerate.sh tests/slurm/test_shm.sh tests/slurm/test_cgroup.sh \
	tests/slurm/test_hetero.sh tests/slurm/test_lm_requeue.sh tests/slurm/test_gpu_bind.sh \
	tests/slurm/test_pmix_loss.sh
TESTS += $(SLURM_TESTS)
dist_check_SCRIPTS += $(SLURM_TESTS) tests/slurm/cluster.sh
EXTRA_DIST += tests/slurm/lib.sh tests/slurm/fake-train.sh

EXTRA_DIST += tests/topologies/README.md tests/topologies/2socket-4gpu-nvml.xml \
	tests/topologies/1socket-2gpu-pci.xml tests/topologies/this-vm-2pu.xml \
	tests/topologies/dgx-2socket-8gpu.xml tests/topologies/1socket-4gpu.xml \
	tests/topologies/gh200.xml tests/topologies/make_gpu_nodes.py \
	tests/topologies/2socket-smt-interleaved.xml tests/topologies/2socket-smt-cpuset.xml

# test_lightning.sh, test_accelerate.sh and test_hf_trainer.sh cache their
# venvs (Lightning, Accelerate, transformers from PyPI) in the build tree.
clean-local: clean-local-lightning-venv
clean-local-lightning-venv:
	-rm -rf tests/slurm/lightning-venv tests/slurm/lightning-venv.tmp \
	  tests/slurm/accelerate-venv tests/slurm/accelerate-venv.tmp \
	  tests/slurm/hf-venv tests/slurm/hf-venv.tmp
.PHONY: clean-local-lightning-venv
