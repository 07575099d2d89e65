#!/usr/bin/env bash
# Builds cdl and trains LeNet on Fashion-MNIST (Debian's dataset-fashion-mnist).
# Extra arguments go to cdl-train, e.g. scripts/demo.sh --epochs 3
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
build=$top/_build/release
if [ ! -x "$build/cli/cdl-train" ] || [ "$top/configure.ac" -nt "$build/Makefile" ]; then
    (cd "$top" && ./autogen.sh >/dev/null)
    mkdir -p "$build"
    (cd "$build" && "$top/configure" -q --disable-static)
fi
make -s -C "$build" -j"$(nproc)"
exec "$build/cli/cdl-train" --model lenet --dataset fashion-mnist --ckpt-dir "$top/runs/demo" \
    --metrics "$top/runs/demo/metrics.jsonl" --resume never "$@"
