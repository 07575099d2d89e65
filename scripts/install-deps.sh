#!/usr/bin/env bash
# Installs the Debian 12 packages cdl builds, tests and trains with.
# Usage: scripts/install-deps.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail

build_pkgs=(build-essential autoconf automake libtool pkg-config
            libopenblas-dev zlib1g-dev libhwloc-dev hwloc libpmix-dev libpmix-bin
            libpng-dev libjpeg62-turbo-dev libzip-dev
            openmpi-bin libopenmpi-dev libslurm-dev nettle-dev dataset-fashion-mnist
            fortunes-min)   # the text corpus of the language-model tests (scripts/fortunes-corpus.sh)
test_pkgs=(libcmocka-dev clang libclang-rt-14-dev valgrind munge slurm-wlm slurmctld slurmd slurm-client
           python3 python3-torch python3-torchvision python3-numpy python3-pip python3-venv
           passwd procps psmisc util-linux man-db
           debhelper dpkg-dev fakeroot lintian debootstrap
           gnuplot-nox gdb)

pkgs=("${build_pkgs[@]}")
[ "${1:-}" = "--test" ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: need root to install: ${missing[*]} (run with sudo)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=900 "${missing[@]}"
fi

# The checkpoint interop test reads our files with the safetensors package,
# which Debian 12 does not ship: take it from PyPI for the system python.
if [ "${1:-}" = "--test" ] && ! /usr/bin/python3 -c 'import safetensors' 2>/dev/null; then
    /usr/bin/python3 -m pip install -q --break-system-packages safetensors ||
        echo "install-deps: warning: could not install safetensors; its interop test will be skipped" >&2
fi
