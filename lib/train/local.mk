libcdl_base_la_SOURCES += lib/train/config.c lib/train/checkpoint.c lib/train/report.c \
	lib/train/signals.c lib/train/harness.c lib/train/ddp.c lib/train/pipeline.c \
	lib/train/loop.c lib/train/step.c lib/train/diverged.c
EXTRA_DIST += lib/train/checkpoint.h lib/train/report.h lib/train/signals.h lib/train/loop.h lib/train/step.h lib/train/ddp.h lib/train/pipeline.h lib/train/run.h
libcdl_base_la_SOURCES += lib/train/resume_check.c lib/train/ckpt_dir.c lib/train/realign.c \
	lib/train/agree.c lib/train/keep.c
EXTRA_DIST += lib/train/keep.h
libcdl_base_la_SOURCES += lib/train/metrics.c
libcdl_base_la_SOURCES += lib/train/metrics_read.c
libcdl_base_la_SOURCES += lib/train/owned.c lib/train/owned.h
EXTRA_DIST += lib/train/metrics.h
libcdl_base_la_SOURCES += lib/train/init.c lib/train/init.h
libcdl_base_la_SOURCES += lib/train/stage.c lib/train/stage.h lib/train/lockwait.c \
	lib/train/lockwait.h
libcdl_base_la_SOURCES += lib/train/tfevents.c lib/train/tboard.c
EXTRA_DIST += lib/train/tfevents.h
libcdl_base_la_SOURCES += lib/train/grads.c lib/train/grads.h
libcdl_base_la_SOURCES += lib/train/mfu.c lib/train/mfu.h
