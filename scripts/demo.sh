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
# Each demo is a fresh run: cdl-train's --resume never refuses a directory
# that holds an earlier run (a second demo, or `demo.sh --epochs 3` after
# the first, stopped with "already holds a run").
if [ -e "$top/runs/demo" ]; then
    echo "demo: replacing the previous demo's files in $top/runs/demo"
    rm -rf "$top/runs/demo"
fi
exec "$build/cli/cdl-train" --model lenet --dataset fashion-mnist --ckpt-dir "$top/runs/demo" \
    --metrics "$top/runs/demo/metrics.jsonl" --resume never "$@"
