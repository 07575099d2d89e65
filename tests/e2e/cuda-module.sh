#!/bin/bash
# The CUDA backend as a module (kernels/cuda/loader.c, module.h), in a CUDA
# build: libcdl.so links no NVIDIA library; a CPU run (--device cpu, and
# --device auto on a node without an NVIDIA driver) loads neither the
# module nor any NVIDIA library; --device cuda loads the module found
# beside libcdl.so (the build tree's .libs/), which then answers as the
# backend always did; CDL_CUDA_MODULE picks another one, and a wrong value
# or file is refused with an error that names it.
. "${top_srcdir:-.}/tests/e2e/common.sh"

[ -n "$(sed -n 's/^CUDA_LIBS = //p' "$top_builddir/Makefile")" ] || { echo "SKIP: built without CUDA"; exit 77; }
module=$(cd "$top_builddir/.libs" 2>/dev/null && pwd)/cdl-cuda.so
lib=$(ls "$top_builddir"/.libs/libcdl.so.*.*.* 2>/dev/null | head -1)
[ -f "$module" ] && [ -n "$lib" ] || { echo "SKIP: no shared libcdl and cdl-cuda.so (--disable-shared)"; exit 77; }
command -v readelf >/dev/null || { echo "SKIP: no readelf (binutils)"; exit 77; }

needed=$(readelf -d "$lib" | grep -E 'NEEDED.*lib(cudart|cublas|cudnn|nccl|cuda)\b')
[ -z "$needed" ] || die "$lib needs NVIDIA libraries itself: $needed"
exported=$(nm -D --defined-only "$module" | awk '{ print $3 }')
[ "$exported" = cdl_cuda_module_1 ] || die "cdl-cuda.so exports more than its entry: $(echo "$exported" | head -5 | tr '\n' ' ')"

train=(--model lenet --dataset synthetic --synthetic-size 256 --batch-size 64 --epochs 1 --threads 1 -q)
# loaded FILE-PATTERN: the last run's dynamic loader log names it.
loaded() { grep -qE "file=[^ ]*$1" "$TMP/ld"; }

LD_DEBUG=files "$CDL_TRAIN" --device cpu "${train[@]}" >"$TMP/out" 2>"$TMP/ld" ||
    { cat "$TMP/out" "$TMP/ld" | tail -20 >&2; die "cdl-train --device cpu failed"; }
loaded 'cdl-cuda\.so|libcudart' && die "cdl-train --device cpu loaded the CUDA module or runtime"
if [ ! -e /proc/driver/nvidia/version ] && [ ! -e /dev/nvidiactl ] && [ ! -e /dev/nvidia0 ]; then
    LD_DEBUG=files "$CDL_TRAIN" --device auto "${train[@]}" >"$TMP/out" 2>"$TMP/ld" ||
        { cat "$TMP/out" "$TMP/ld" | tail -20 >&2; die "cdl-train --device auto failed without a GPU"; }
    loaded 'cdl-cuda\.so|libcudart' && die "--device auto on a node without an NVIDIA driver loaded the CUDA module or runtime"
fi

# --device cuda: the module beside libcdl.so, then the CUDA runtime; without
# a GPU the backend's own answer.
LD_DEBUG=files "$CDL_TRAIN" --device cuda "${train[@]}" >"$TMP/out" 2>"$TMP/ld"
status=$?
loaded "$module" || { tail -20 "$TMP/ld" >&2; die "--device cuda did not load $module"; }
loaded 'libcudart' || die "--device cuda loaded the module but not the CUDA runtime"
if [ $status -ne 0 ]; then
    grep -q 'no CUDA GPU is visible (cudaGetDeviceCount' "$TMP/ld" ||
        { grep 'cdl-train' "$TMP/ld" >&2; die "--device cuda without a GPU: not the CUDA runtime's answer"; }
fi

expect_status 1 env CDL_CUDA_MODULE=cdl-cuda.so "$CDL_TRAIN" --device cuda "${train[@]}"
expect_err "CDL_CUDA_MODULE 'cdl-cuda.so': give the absolute path"
expect_status 1 env CDL_CUDA_MODULE="$TMP/none/cdl-cuda.so" "$CDL_TRAIN" --device cuda "${train[@]}"
expect_err "CDL_CUDA_MODULE '$TMP/none/cdl-cuda.so': no such file"
# A shared object that is no module (libcdl itself), and a file that is
# not one at all: refused, named.
expect_status 1 env CDL_CUDA_MODULE="$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")" \
    "$CDL_TRAIN" --device cuda "${train[@]}"
expect_err "is not a cdl CUDA backend module (no cdl_cuda_module_1)"
echo 'not a library' >"$TMP/cdl-cuda.so"
expect_status 1 env CDL_CUDA_MODULE="$TMP/cdl-cuda.so" "$CDL_TRAIN" --device cuda "${train[@]}"
expect_err "cannot load the CUDA backend $TMP/cdl-cuda.so:"
# An explicit module is asked even under --device auto; without a GPU the
# run goes on on the CPU.
expect_status 0 env CDL_CUDA_MODULE="$module" "$CDL_TRAIN" --device auto "${train[@]}"
echo "PASS: libcdl.so needs no NVIDIA library; CPU runs load no CUDA; --device cuda loads cdl-cuda.so beside libcdl; bad modules are refused by name"
