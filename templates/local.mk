# templates: sbatch scripts and a minimal train.c, installed for users in
# $(pkgdatadir)/templates. tests/slurm/test_templates.sh checks each script
# with `bash -n` and `sbatch --test-only` and runs the CPU ones.
templatesdir = $(pkgdatadir)/templates
CDL_TEMPLATES = templates/single-gpu.sbatch templates/ddp-multinode.sbatch \
	templates/mps-pack.sbatch templates/cpu-ddp.sbatch templates/long-requeue.sbatch \
	templates/lr-sweep.sbatch templates/pytorch-ddp.sbatch templates/pytorch-mps-pack.sbatch \
	templates/lightning.sbatch templates/pytorch-requeue.sbatch
CDL_TEMPLATES += templates/lm-gpt.sbatch templates/finetune-resnet.sbatch templates/chain.sbatch
dist_templates_DATA = $(CDL_TEMPLATES) templates/train.c templates/README.md
# The Python scripts the PyTorch templates run (tests/slurm/test_pytorch.sh,
# test_lightning.sh, test_hf_trainer.sh run them on the test cluster).
templatespytorchdir = $(templatesdir)/pytorch
dist_templatespytorch_DATA = templates/pytorch/train_ddp.py templates/pytorch/train_lightning.py \
	templates/pytorch/nanogpt_ckpt.py templates/pytorch/train_hf.py

# train.c must keep compiling against the public headers: built (not linked)
# into a check-only convenience library during `make check`. This fragment
# sets check_LTLIBRARIES; tests/slurm/local.mk (included later) adds to it.
check_LTLIBRARIES = templates/libtraincheck.la
templates_libtraincheck_la_SOURCES = templates/train.c
templates_libtraincheck_la_CPPFLAGS = -I$(top_srcdir)/lib
