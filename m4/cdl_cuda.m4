# CDL_CHECK_CUDA: --with-cuda[=PREFIX] (default: /usr/local/cuda when nvcc is
# there). Sets NVCC, CUDA_PREFIX, CUDA_CFLAGS, CUDA_LIBS, CUDA_RPATH,
# have_cuda, have_nccl, NVCC_ARCH_FLAGS, conditionals HAVE_CUDA and
# HAVE_NCCL. CUDA_RPATH makes the CUDA and NCCL library directories run
# paths of libcdl and programs (libtool drops -Wl flags of a convenience
# library's LIBADD), so they load without LD_LIBRARY_PATH.
AC_DEFUN([CDL_CHECK_CUDA], [
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda[=PREFIX]], [CUDA backend with cuBLAS, cuBLASLt and cuDNN (default: if the toolkit is found in /usr/local/cuda)])],
  [], [with_cuda=check])
AC_ARG_WITH([nccl],
  [AS_HELP_STRING([--with-nccl[=PREFIX]], [NCCL collectives for the CUDA backend (default: with CUDA, if found)])],
  [], [with_nccl=check])
AC_ARG_VAR([NVCC_ARCH_FLAGS], [nvcc -gencode flags (default: sm_80 and sm_90 code plus compute_90 PTX)])
have_cuda=no
have_nccl=no
CUDA_PREFIX=
CUDA_RPATH=
NCCL_LIBDIR=
AS_CASE([$with_cuda],
  [no], [],
  [yes|check], [CUDA_PREFIX=/usr/local/cuda],
  [CUDA_PREFIX=$with_cuda])
AS_IF([test -n "$CUDA_PREFIX"], [
  AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_PREFIX/bin])
  CUDA_CFLAGS="-I$CUDA_PREFIX/include"
  CUDA_LIBDIR=$CUDA_PREFIX/lib64
  test -d "$CUDA_LIBDIR" || CUDA_LIBDIR=$CUDA_PREFIX/lib
  CUDA_LIBS="-L$CUDA_LIBDIR -Wl,-rpath,$CUDA_LIBDIR -lcudnn -lcublasLt -lcublas -lcudart"
  CUDA_RPATH="-Wl,-rpath,$CUDA_LIBDIR"
  save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
  have_cuda=yes
  AS_IF([test -z "$NVCC"], [have_cuda=no])
  AC_CHECK_HEADERS([cuda_runtime.h cublas_v2.h cublasLt.h cudnn.h], [], [have_cuda=no])
  AS_IF([test "x$have_cuda" = xyes],
    [AC_MSG_CHECKING([whether cudart, cuBLAS, cuBLASLt and cuDNN link])
     AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cudnn.h>
#include <cublasLt.h>
#include <cublas_v2.h>]], [[cudnnHandle_t h; cublasHandle_t b; cublasLtHandle_t l; cudnnCreate(&h); cublasCreate(&b); cublasLtCreate(&l);]])],
       [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_cuda=no])])
  AS_IF([test "x$have_cuda" = xyes && test "x$with_nccl" != xno], [
    AS_IF([test "x$with_nccl" != xyes && test "x$with_nccl" != xcheck],
      [NCCL_LIBDIR=$with_nccl/lib64
       test -d "$NCCL_LIBDIR" || NCCL_LIBDIR=$with_nccl/lib
       CUDA_CFLAGS="$CUDA_CFLAGS -I$with_nccl/include"
       NCCL_LIBS="-L$NCCL_LIBDIR -Wl,-rpath,$NCCL_LIBDIR -lnccl"],
      [NCCL_LIBS="-lnccl"])
    CPPFLAGS="$save_CPPFLAGS $CUDA_CFLAGS"; LIBS="$NCCL_LIBS $CUDA_LIBS $save_LIBS"
    AC_CHECK_HEADER([nccl.h],
      [AC_MSG_CHECKING([whether NCCL links])
       AC_LINK_IFELSE([AC_LANG_CALL([], [ncclGetVersion])],
         [have_nccl=yes], [have_nccl=no])
       AC_MSG_RESULT([$have_nccl])])
    AS_IF([test "x$have_nccl" = xyes],
      [CUDA_LIBS="$NCCL_LIBS $CUDA_LIBS"
       AS_IF([test -n "$NCCL_LIBDIR"], [CUDA_RPATH="$CUDA_RPATH -Wl,-rpath,$NCCL_LIBDIR"])],
      [AS_IF([test "x$with_nccl" != xcheck], [AC_MSG_ERROR([--with-nccl given but NCCL was not found under the CUDA prefix or PREFIX])])])])
  CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
  AS_IF([test "x$have_cuda" = xno && test "x$with_cuda" != xcheck],
    [AC_MSG_ERROR([--with-cuda given but nvcc, cuda_runtime.h, cuBLAS, cuBLASLt or cuDNN was not found under $CUDA_PREFIX: install the CUDA toolkit with cuDNN or pass --with-cuda=PREFIX])])
])
AS_IF([test "x$have_cuda" = xno], [CUDA_CFLAGS=; CUDA_LIBS=; CUDA_RPATH=; CUDA_PREFIX=])
AS_IF([test -z "$NVCC_ARCH_FLAGS"],
  [NVCC_ARCH_FLAGS="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
AS_IF([test "x$have_cuda" = xyes], [AC_DEFINE([HAVE_CUDA], [1], [CUDA backend])])
AS_IF([test "x$have_nccl" = xyes], [AC_DEFINE([HAVE_NCCL], [1], [NCCL collectives])])
AC_SUBST([CUDA_PREFIX])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AC_SUBST([CUDA_RPATH])
AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
AM_CONDITIONAL([HAVE_NCCL], [test "x$have_nccl" = xyes])
])
