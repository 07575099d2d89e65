# tests/slurm: the fake MPS control program (also used by the unit tests);
# the cluster harness and its tests are added below.
check_PROGRAMS += tests/slurm/fake-mps-control
tests_slurm_fake_mps_control_SOURCES = tests/slurm/fake-mps-control.c
EXTRA_DIST += tests/topologies/README.md tests/topologies/2socket-4gpu-nvml.xml \
	tests/topologies/1socket-2gpu-pci.xml tests/topologies/this-vm-2pu.xml
