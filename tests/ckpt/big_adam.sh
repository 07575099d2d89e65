#!/bin/sh
# A 25M-parameter model with Adam: a training checkpoint round-trips bit for
# bit in cdl and loads in PyTorch (big_adam.c, big_adam.py). ~1 GB of memory
# at its peak, a 300 MB file in a temporary directory (removed). Exit 77
# (skip) only when Python cannot import torch and safetensors.
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: 1 GB and a 300 MB file: run once, in the plain make check, not under sanitizers"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$here/../..}
builddir=${top_builddir:-.}
python=${PYTHON:-/usr/bin/python3}
command -v "$python" >/dev/null 2>&1 || python=python3

tool=$builddir/tests/ckpt/big_adam
if [ ! -x "$tool" ]; then
    echo "FAIL: $tool is not built (run make check)"
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cdl-big-adam.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
"$tool" "$tmp/big.safetensors" >"$tmp/crcs" || { cat "$tmp/crcs"; exit 1; }
cat "$tmp/crcs"
if ! command -v "$python" >/dev/null 2>&1 ||
   ! why=$("$python" -c 'import torch, safetensors.torch' 2>&1); then
    echo "SKIP (the PyTorch half): $python cannot import torch and safetensors: $why" | head -n 2
    echo "install them with: $python -m pip install --break-system-packages safetensors (torch: apt-get install python3-torch)"
    exit 77
fi
"$python" "$srcdir/tests/ckpt/big_adam.py" "$tmp/big.safetensors" "$tmp/crcs"
