#!/bin/sh
# Programs built with CUDA load NVIDIA's libraries without LD_LIBRARY_PATH:
# every library directory configure found (the CUDA prefix, and the NCCL
# prefix of --with-nccl=PREFIX) is also a run path (-Wl,-rpath) in
# CUDA_LIBS and CUDA_RPATH, and the CUDA module's (cdl-cuda.so) and a
# statically linked program's dynamic sections carry it (readelf -d), so
# cudart, cuBLAS, cuDNN and NCCL resolve (ldd) with LD_LIBRARY_PATH unset.
# The shared libcdl itself needs none of them (it loads the module when a
# program asks for a GPU: kernels/cuda/loader.c).
set -u
builddir=${top_builddir:-.}
fail() { echo "FAILED: $*"; exit 1; }
libs=$(sed -n 's/^CUDA_LIBS = //p' "$builddir/Makefile")
rpath=$(sed -n 's/^CUDA_RPATH = //p' "$builddir/Makefile")
[ -n "$libs" ] || { echo "SKIP: built without CUDA"; exit 77; }
echo "CUDA_LIBS: $libs"
echo "CUDA_RPATH: $rpath"
dirs=
for word in $libs; do
    case $word in -L*) dirs="$dirs ${word#-L}" ;; esac
done
for dir in $dirs; do
    case " $libs " in *" -Wl,-rpath,$dir "*) ;; *) fail "-L$dir has no -Wl,-rpath,$dir in CUDA_LIBS (configure)" ;; esac
    case " $rpath " in *" -Wl,-rpath,$dir "*) ;; *) fail "$dir is not in CUDA_RPATH (configure)" ;; esac
done
command -v readelf >/dev/null 2>&1 || { echo "SKIP: no readelf (binutils) for the built files"; exit 77; }
# has_paths FILE: FILE's run paths include every existing -L directory.
has_paths() {
    paths=$(readelf -d "$1" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p' | tr ':' ' ')
    echo "run paths of $1: $paths"
    for dir in $dirs; do
        [ -d "$dir" ] || continue
        case " $paths " in *" $dir "*) ;; *) fail "$dir is not a run path of $1" ;; esac
    done
    missing=$(env -u LD_LIBRARY_PATH ldd "$1" 2>&1 | grep -E 'lib(cudart|cublas|cudnn|nccl)[^ ]* => not found')
    [ -z "$missing" ] || fail "$1 without LD_LIBRARY_PATH: $missing"
}
checked=0
lib=$(ls "$builddir"/.libs/libcdl.so.*.*.* 2>/dev/null | head -1)
if [ -n "$lib" ]; then
    needed=$(readelf -d "$lib" | grep -E 'NEEDED.*lib(cudart|cublas|cudnn|nccl|cuda)')
    [ -z "$needed" ] || fail "$lib needs NVIDIA libraries itself (the CUDA code belongs to cdl-cuda.so): $needed"
    echo "$lib: no NVIDIA library needed"
    has_paths "$builddir/.libs/cdl-cuda.so"
    checked=$((checked + 1))
fi
prog=$builddir/tests/gpu/ops_vs_cpu
readelf -h "$prog" >/dev/null 2>&1 && { has_paths "$prog"; checked=$((checked + 1)); }
[ $checked -gt 0 ] || { echo "SKIP: neither a shared libcdl nor tests/gpu/ops_vs_cpu is built"; exit 77; }
echo "PASS: NVIDIA's libraries load through run paths"
