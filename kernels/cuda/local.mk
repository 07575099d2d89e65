# kernels/cuda: the CUDA backend (built when configure finds the toolkit).
if HAVE_CUDA
libcdl_core_la_SOURCES += kernels/cuda/backend_cuda.c
endif
