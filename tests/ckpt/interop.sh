#!/bin/sh
# Checks libcdl's safetensors files against the reference implementation
# (Python's safetensors with torch): see interop.py. Exit 77 (skip) only when
# Python cannot import torch and safetensors; any other problem fails.
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$here/../..}
builddir=${top_builddir:-.}
python=${PYTHON:-/usr/bin/python3}
command -v "$python" >/dev/null 2>&1 || python=python3

if ! command -v "$python" >/dev/null 2>&1; then
    echo "SKIP: no Python interpreter ($python) to run the safetensors interop test"
    exit 77
fi
if ! why=$("$python" -c 'import torch, safetensors.torch' 2>&1); then
    echo "SKIP: $python cannot import torch and safetensors:"
    echo "$why" | tail -n 1
    echo "install them with: $python -m pip install --break-system-packages safetensors (torch: apt-get install python3-torch)"
    exit 77
fi
tool=$builddir/tests/ckpt/st_tool
if [ ! -x "$tool" ]; then
    echo "FAIL: $tool is not built (run make check)"
    exit 1
fi
exec "$python" "$srcdir/tests/ckpt/interop.py" "$tool"
