#!/usr/bin/env bash
# Builds cdl every way CI does and runs every test:
#   1. gcc, warnings as errors: make check (unit, checkpoint interop,
#      data-parallel, the real local Slurm cluster when run as root)
#   2. clang, warnings as errors: build and unit tests
#   3. AddressSanitizer + UBSan: unit tests
#   4. valgrind: unit tests, no leaks
#   5. make distcheck
# Ends with one line "tests: N passed, N failed, N skipped".
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$top/scripts/install-deps.sh" --test || exit 1
cd "$top" && ./autogen.sh >/dev/null 2>&1 || { echo "autogen.sh failed" >&2; exit 1; }

pass=0 fail=0 skip=0
failed_stages=()
count() {   # adds the results of one automake test-suite.log
    local log=$1
    [ -f "$log" ] || return 0
    local p f s e
    p=$(grep -c '^PASS: ' "$log" || true); f=$(grep -c '^FAIL: ' "$log" || true)
    s=$(grep -c '^SKIP: ' "$log" || true); e=$(grep -c '^ERROR: ' "$log" || true)
    pass=$((pass + p)); fail=$((fail + f + e)); skip=$((skip + s))
}
stage() {   # stage NAME BUILD-DIR CONFIGURE-ARGS... -- MAKE-TARGETS...
    local name=$1 dir=$2; shift 2
    local conf=() targets=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do conf+=("$1"); shift; done
    shift
    targets=("$@")
    echo "=== $name"
    mkdir -p "$dir"
    if ! (cd "$dir" && "$top/configure" -q "${conf[@]}" >configure.out 2>&1); then
        cat "$dir/configure.out"; failed_stages+=("$name: configure"); return 1
    fi
    (cd "$dir" && make -j"$jobs" -s "${targets[@]}") 2>&1 | grep -v '^make\[' | tail -n 200
    local rc=${PIPESTATUS[0]}
    find "$dir/tests" -name test-suite.log 2>/dev/null | head -0
    count "$dir/test-suite.log"
    [ "$rc" -eq 0 ] || failed_stages+=("$name")
    return 0
}

export CDL_TIMEOUT=${CDL_TIMEOUT:-120}
stage "gcc -Werror: make check" "$top/_build/gcc" CC=gcc --enable-werror -- all check
stage "clang -Werror: unit tests" "$top/_build/clang" CC=clang --enable-werror \
    --disable-shared -- all check TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
stage "ASan+UBSan: unit tests" "$top/_build/asan" CC=gcc --enable-sanitizers \
    --disable-shared -- all check TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
stage "valgrind: unit tests" "$top/_build/valgrind" CC=gcc --disable-shared -- \
    all check-valgrind
if [ -z "${CDL_SKIP_DISTCHECK:-}" ]; then
    stage "make distcheck" "$top/_build/dist" CC=gcc -- distcheck \
        DISTCHECK_CONFIGURE_FLAGS=--enable-werror TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
fi

echo
for s in "${failed_stages[@]}"; do echo "FAILED STAGE: $s"; done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ ${#failed_stages[@]} -eq 0 ]
