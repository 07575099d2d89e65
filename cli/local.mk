bin_PROGRAMS += cli/cdl-train
cli_cdl_train_SOURCES = cli/cdl-train.c cli/suggest.c cli/suggest.h
cli_cdl_train_LDADD = libcdl.la
