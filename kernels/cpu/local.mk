# The CPU backend: OpenBLAS SGEMM plus our own thread pool and kernels.
libcdl_base_la_SOURCES += \
	kernels/cpu/backend_cpu.c \
	kernels/cpu/cpu.h \
	kernels/cpu/pool.c \
	kernels/cpu/pool.h \
	kernels/cpu/conv2d.c \
	kernels/cpu/conv2d.h \
	kernels/cpu/conv2d_gemm.c \
	kernels/cpu/conv2d_dw.c \
	kernels/cpu/conv2d_direct.c \
	kernels/cpu/conv2d_avx2.c \
	kernels/cpu/conv2d_avx512.c \
	kernels/cpu/conv2d_avx.h \
	kernels/cpu/conv2d_avx_tmpl.h \
	kernels/cpu/conv2d_wino.c \
	kernels/cpu/conv2d_wino.h \
	kernels/cpu/conv2d_wino4.c \
	kernels/cpu/conv2d_wino512.c \
	kernels/cpu/simd.c \
	kernels/cpu/simd.h \
	kernels/cpu/linear.c \
	kernels/cpu/linear_avx512.c \
	kernels/cpu/linear_avx512.h \
	kernels/cpu/pool2d.c \
	kernels/cpu/eltwise.c \
	kernels/cpu/xent.c \
	kernels/cpu/bnorm.c \
	kernels/cpu/act.c \
	kernels/cpu/join.c \
	kernels/cpu/layernorm.c \
	kernels/cpu/embedding.c \
	kernels/cpu/optim.c \
	kernels/cpu/attn.c \
	kernels/cpu/attn_avx512.c \
	kernels/cpu/attn_avx512.h \
	kernels/optim_scalars.h \
	kernels/cpu/reduce.c
