# End-to-end tests of the installed programs (shell scripts).
TESTS += tests/e2e/readers.sh
TESTS += tests/e2e/cli.sh tests/e2e/fashion-mnist.sh tests/e2e/torch-interop.sh tests/e2e/man.sh tests/e2e/completion.sh \
	tests/e2e/install.sh
EXTRA_DIST += tests/e2e/common.sh tests/e2e/cli.sh tests/e2e/fashion-mnist.sh \
	tests/e2e/torch-interop.sh tests/e2e/torch_lenet.py tests/e2e/doc_load_lines.py tests/e2e/torch_eval.py tests/e2e/man.sh tests/e2e/install.sh \
	tests/e2e/completion.sh
EXTRA_DIST += tests/e2e/readers.sh
TESTS += tests/e2e/plot.sh
EXTRA_DIST += tests/e2e/plot.sh
TESTS += tests/e2e/deb-postrm.sh tests/e2e/deb-postinst.sh
EXTRA_DIST += tests/e2e/deb-postrm.sh tests/e2e/deb-postinst.sh
TESTS += tests/e2e/torch-resnet.sh
EXTRA_DIST += tests/e2e/torch-resnet.sh tests/e2e/torch_resnet18.py
TESTS += tests/e2e/tensorboard.sh
EXTRA_DIST += tests/e2e/tensorboard.sh tests/e2e/tfevents_read.py
clean-local: clean-local-tensorboard-venv
clean-local-tensorboard-venv:
	-rm -rf tests/e2e/tensorboard-venv tests/e2e/tensorboard-venv.tmp
.PHONY: clean-local-tensorboard-venv
TESTS += tests/e2e/progress.sh
EXTRA_DIST += tests/e2e/progress.sh
TESTS += tests/e2e/predict-files.sh tests/e2e/predict-table.sh tests/e2e/predict-columns.sh
EXTRA_DIST += tests/e2e/predict-files.sh tests/e2e/predict-table.sh tests/e2e/predict-columns.sh \
    tests/e2e/torch_table.py
# A train.csv/test.csv pair read by name: the training table's classes.
TESTS += tests/e2e/table-classes.sh
EXTRA_DIST += tests/e2e/table-classes.sh tests/e2e/strip_ckpt.py
TESTS += tests/e2e/generate.sh
EXTRA_DIST += tests/e2e/generate.sh tests/e2e/generate_torch.py
EXTRA_DIST += tests/e2e/generate.sh
TESTS += tests/e2e/tokens.sh tests/e2e/gpt-init.sh
TESTS += tests/e2e/resume-data.sh
EXTRA_DIST += tests/e2e/resume-data.sh
TESTS += tests/e2e/resume-threads.sh
EXTRA_DIST += tests/e2e/resume-threads.sh
EXTRA_DIST += tests/e2e/gpt-init.sh
# nanoGPT's ckpt.pt to cdl and back (templates/pytorch/nanogpt_ckpt.py).
TESTS += tests/e2e/nanogpt-ckpt.sh
EXTRA_DIST += tests/e2e/nanogpt-ckpt.sh tests/e2e/nanogpt_ckpt.py
# train_ddp.py refuses a plain multi-task srun; its GPU per rank contract 5.
TESTS += tests/e2e/pytorch-launch.sh
EXTRA_DIST += tests/e2e/pytorch-launch.sh
EXTRA_DIST += tests/e2e/tokens.sh
TESTS += tests/e2e/torch-resnets.sh
EXTRA_DIST += tests/e2e/torch-resnets.sh tests/e2e/torch_resnets.py
TESTS += tests/e2e/spec-files.sh
EXTRA_DIST += tests/e2e/spec-files.sh
TESTS += tests/e2e/memlimit.sh
EXTRA_DIST += tests/e2e/memlimit.sh
TESTS += tests/e2e/stage-full.sh
TESTS += tests/e2e/shm-full.sh
TESTS += tests/e2e/stage-squat.sh
TESTS += tests/e2e/port-squat.sh
TESTS += tests/e2e/ckpt-squat.sh
TESTS += tests/e2e/ckpt-plant.sh
TESTS += tests/e2e/metrics-plant.sh
EXTRA_DIST += tests/e2e/stage-full.sh
EXTRA_DIST += tests/e2e/shm-full.sh
EXTRA_DIST += tests/e2e/stage-squat.sh
EXTRA_DIST += tests/e2e/port-squat.sh
EXTRA_DIST += tests/e2e/ckpt-squat.sh
EXTRA_DIST += tests/e2e/ckpt-plant.sh
EXTRA_DIST += tests/e2e/metrics-plant.sh
TESTS += tests/e2e/stage-flaky.sh
EXTRA_DIST += tests/e2e/stage-flaky.sh
TESTS += tests/e2e/stage-links.sh
EXTRA_DIST += tests/e2e/stage-links.sh
TESTS += tests/e2e/stage-lock.sh
EXTRA_DIST += tests/e2e/stage-lock.sh
TESTS += tests/e2e/stage-reuse.sh
EXTRA_DIST += tests/e2e/stage-reuse.sh
TESTS += tests/e2e/stage-slow.sh
EXTRA_DIST += tests/e2e/stage-slow.sh
TESTS += tests/e2e/val-folder.sh
EXTRA_DIST += tests/e2e/val-folder.sh
TESTS += tests/e2e/ckpt-limits.sh
TESTS += tests/e2e/keep.sh
TESTS += tests/e2e/early-signal.sh
EXTRA_DIST += tests/e2e/early-signal.sh
EXTRA_DIST += tests/e2e/keep.sh
TESTS += tests/e2e/diverge.sh
EXTRA_DIST += tests/e2e/diverge.sh
EXTRA_DIST += tests/e2e/ckpt-limits.sh
TESTS += tests/e2e/plot-full.sh
EXTRA_DIST += tests/e2e/plot-full.sh
TESTS += tests/e2e/plot-gnuplot.sh
EXTRA_DIST += tests/e2e/plot-gnuplot.sh
TESTS += tests/e2e/setup-signal.sh
EXTRA_DIST += tests/e2e/setup-signal.sh
check_LTLIBRARIES += tests/e2e/signal-on-open.la
tests_e2e_signal_on_open_la_SOURCES = tests/e2e/signal-on-open.c
tests_e2e_signal_on_open_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
tests_e2e_signal_on_open_la_LIBADD = -ldl
TESTS += tests/e2e/torch-pictures.sh
EXTRA_DIST += tests/e2e/torch-pictures.sh tests/e2e/torch_pictures.py
# Checkpoints of a newer cdl: refused by every reader, naming both formats.
TESTS += tests/e2e/newer-ckpt.sh
EXTRA_DIST += tests/e2e/newer-ckpt.sh
# A program run with an older libcdl.so.0 (another installation's, through
# LD_LIBRARY_PATH) refuses it by name.
TESTS += tests/e2e/mixed-libcdl.sh
EXTRA_DIST += tests/e2e/mixed-libcdl.sh
check_LTLIBRARIES += tests/e2e/old-libcdl.la
tests_e2e_old_libcdl_la_SOURCES = tests/e2e/old-libcdl.c
tests_e2e_old_libcdl_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
check_LTLIBRARIES += tests/e2e/old-libcdl-build.la
tests_e2e_old_libcdl_build_la_SOURCES = tests/e2e/old-libcdl-build.c
tests_e2e_old_libcdl_build_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere \
	-Wl,--version-script=$(top_srcdir)/tests/e2e/old-libcdl-build.map
EXTRA_DIST += tests/e2e/old-libcdl-build.map
TESTS += tests/e2e/template-settings.sh
EXTRA_DIST += tests/e2e/template-settings.sh
# PyTorch's weights of a table with text labels: --classes, LabelEncoder's order.
TESTS += tests/e2e/torch-classes.sh
EXTRA_DIST += tests/e2e/torch-classes.sh tests/e2e/torch_classes.py
# the CUDA backend as a module that the shared libcdl loads (CUDA builds)
TESTS += tests/e2e/cuda-module.sh
EXTRA_DIST += tests/e2e/cuda-module.sh
