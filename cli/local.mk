bin_PROGRAMS += cli/cdl-train
cli_cdl_train_SOURCES = cli/cdl-train.c cli/suggest.c cli/suggest.h cli/blas_core.c \
	cli/blas_core.h cli/normalize.c cli/normalize.h cli/libcheck.c cli/libcheck.h
cli_cdl_train_LDADD = libcdl.la
bin_PROGRAMS += cli/cdl-plot
cli_cdl_plot_SOURCES = cli/cdl-plot.c cli/plot_read.c cli/plot_read.h cli/plot_gnuplot.c \
	cli/plot_gnuplot.h cli/plot_run.c lib/ckpt/atomic.c lib/ckpt/atomic.h
cli_cdl_plot_LDADD = libcdl.la
bin_PROGRAMS += cli/cdl-eval cli/cdl-predict
cli_cdl_eval_SOURCES = cli/cdl-eval.c cli/evalcommon.c cli/evalcommon.h cli/evalnames.c cli/normalize.c \
	cli/normalize.h cli/blas_core.c cli/blas_core.h cli/libcheck.c cli/libcheck.h
cli_cdl_eval_LDADD = libcdl.la -lm
cli_cdl_predict_SOURCES = cli/cdl-predict.c cli/evalcommon.c cli/evalcommon.h cli/evalnames.c cli/normalize.c \
	cli/normalize.h cli/blas_core.c cli/blas_core.h cli/libcheck.c cli/libcheck.h
cli_cdl_predict_LDADD = libcdl.la -lm
bin_PROGRAMS += cli/cdl-generate
cli_cdl_generate_SOURCES = cli/cdl-generate.c cli/sample.c cli/sample.h cli/vocab.c cli/vocab.h \
	cli/evalcommon.c cli/evalcommon.h cli/evalnames.c cli/normalize.c cli/normalize.h cli/blas_core.c \
	cli/blas_core.h cli/libcheck.c cli/libcheck.h
cli_cdl_generate_LDADD = libcdl.la -lm
# The programs link the shared libcdl, which needs no NVIDIA library (its
# CUDA module carries their run path): not AM_LDFLAGS' CUDA run path.
cli_cdl_train_LDFLAGS =
cli_cdl_plot_LDFLAGS =
cli_cdl_eval_LDFLAGS =
cli_cdl_predict_LDFLAGS =
cli_cdl_generate_LDFLAGS =
