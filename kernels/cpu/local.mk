libcdl_core_la_SOURCES += kernels/cpu/backend_cpu.c
