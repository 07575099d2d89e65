# lib/optim: optimizers and learning-rate schedules.
libcdl_base_la_SOURCES += lib/optim/optim.c lib/optim/schedule.c
