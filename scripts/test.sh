#!/usr/bin/env bash
# Builds cdl every way CI does and runs every test:
#   1. gcc, warnings as errors: make check (unit, checkpoint interop,
#      data-parallel, the real local Slurm cluster when run as root);
#      then its data-parallel and e2e tests again under each OpenBLAS core
#      type this CPU runs (scripts/blas-matrix.sh; CDL_BLAS_MATRIX=1 or 0,
#      default 1 when CI=true)
#   2. clang, warnings as errors: build, unit tests and make fuzz (libFuzzer,
#      a few seconds per target)
#   3. AddressSanitizer + UBSan: unit tests
#   4. valgrind: unit tests, no leaks (in the gcc build of stage 1)
#   5. make distcheck
#   6. Debian packages: build, lintian, install into a clean debootstrap
#      root and train there (scripts/deb-check.sh; CDL_SKIP_DEB=1 skips it)
# Then checks that the tests left nothing in /tmp or /dev/shm (names at
# the top level, compared with before the first stage; systemd's private
# directories of services excepted; CDL_SKIP_LEFTOVERS=1 skips it).
# Ends with one line "tests: N passed, N failed, N skipped".
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$top/scripts/install-deps.sh" --test || exit 1
cd "$top" && ./autogen.sh >/dev/null 2>&1 || { echo "autogen.sh failed" >&2; exit 1; }

pass=0 fail=0 skip=0
failed_stages=()
# What failed, repeated after the totals: CI shows the head and the tail
# of this output, and a failed test's lines sit in the middle.
digest=$(mktemp) || exit 1
trap 'rm -f "$digest"' EXIT
leftover_dirs=(/tmp /dev/shm)
snapshot() {   # the top-level entries of leftover_dirs, one path a line
    local d
    for d in "${leftover_dirs[@]}"; do
        [ -d "$d" ] && find "$d" -mindepth 1 -maxdepth 1 ! -name 'systemd-private-*' -printf "$d/%f\n"
    done | sort
}
before=$(snapshot)
count() {   # adds up the automake test summaries ("# PASS:  N") in a log
    local p f s
    read -r p f s < <(awk '/^# PASS:/ {p += $3} /^# (FAIL|ERROR|XPASS):/ {f += $3}
                          /^# SKIP:/ {s += $3} END {print p+0, f+0, s+0}' "$1")
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
}
slowest() {   # slowest BUILD-DIR: the 8 longest tests of a stage, from each test's
    # log (created when it starts) and result file (written when it ends); prints
    # nothing where the file system keeps no creation time. Only results newer
    # than BUILD-DIR/.stage (a build dir an earlier stage ran tests in too).
    find "$1" -name '*.trs' -newer "$1/.stage" 2>/dev/null | while read -r trs; do
        local log=${trs%.trs}.log born
        born=$(stat -c %W "$log" 2>/dev/null) || continue
        [ "${born:-0}" -gt 0 ] && echo "$(($(stat -c %Y "$trs") - born)) ${log#"$1"/}"
    done | sort -rn | head -n 8 | awk '{printf "  %5d s  %s\n", $1, $2}'
}
stage() {   # stage NAME BUILD-DIR CONFIGURE-ARGS... -- MAKE-TARGET [VAR=VALUE...]
    local name=$1 dir=$2 t0=$SECONDS; shift 2
    local conf=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do conf+=("$1"); shift; done
    shift
    echo "=== $name"
    rm -rf "$dir"; mkdir -p "$dir"
    if ! (cd "$dir" && "$top/configure" -q "${conf[@]}" >configure.out 2>&1); then
        cat "$dir/configure.out"; failed_stages+=("$name: configure"); return 0
    fi
    # Build first, then test: two goals in one parallel make race each other.
    # Not for distcheck, which builds its own copy from the tarball (make
    # dist needs no build): that would build the tree twice.
    if [ "$1" != distcheck ] && ! (cd "$dir" && make -j"$jobs" -s all) >"$dir/build.out" 2>&1; then
        tail -n 60 "$dir/build.out"; failed_stages+=("$name: build"); return 0
    fi
    run_tests "$name" "$dir" "$t0" "$@"
}
run_tests() {   # run_tests NAME BUILD-DIR T0 MAKE-TARGET [VAR=VALUE...]: a stage's tests
    # (TEST_JOBS of them at a time, default one a CPU)
    local name=$1 dir=$2 t0=$3; shift 3
    touch "$dir/.stage"
    (cd "$dir" && make -j"${TEST_JOBS:-$jobs}" "$@") >"$dir/test.out" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL): ' "$dir/test.out"
    count "$dir/test.out"
    if [ "$rc" -ne 0 ]; then
        find "$dir" -name '*.log' -newer "$dir/.stage" ! -name test-suite.log ! -name config.log \
            -exec grep -l -E '^(FAIL|ERROR)' {} + 2>/dev/null | while read -r log; do
            # What failed, wherever it is in the log; then how the log ends.
            echo "--- $log: its failures"; grep -n -E '^(FAIL|ERROR|not ok)' "$log" | head -n 10
            echo "--- $log (tail)"; tail -n 40 "$log"
            { echo "--- $name: ${log#"$dir"/}"
              grep -E '^(FAIL|ERROR|not ok)' "$log" | head -n 8
              # What the test printed just before its first failed check
              # (the state it saw), then its last lines.
              echo "--- before the first failed check:"
              grep -m1 -B 14 -E '^(FAIL|ERROR|not ok)' "$log" | head -n 14
              echo "--- its last lines:"
              grep -v -E '^(ok|PASS|FAIL|ERROR|not ok)' "$log" | tail -n 12; } >>"$digest"
        done
        tail -n 30 "$dir/test.out"
        failed_stages+=("$name")
    fi
    echo "--- $name: $((SECONDS - t0)) s; slowest tests:"
    slowest "$dir"
    return 0
}

export CDL_TIMEOUT=${CDL_TIMEOUT:-120}
# The CUDA kernels' device code (with a CUDA toolkit) cannot run here: the
# gcc stage builds it for configure's default architectures, the later
# stages, which only link it, as compute_90 PTX alone (nvcc: 27 s of CPU a
# build instead of 48).
ptx='-gencode arch=compute_90,code=compute_90'
# Its tests one more at a time than there are CPUs: the Slurm tests spend
# most of their time waiting on the daemons (slurmctld's retries, requeues,
# node loss). On 2 cores the stage's tests took 736 s instead of 1005.
TEST_JOBS=$((jobs + 1)) stage "gcc -Werror: make check" "$top/_build/gcc" CC=gcc --enable-werror -- check
if [ "${CDL_BLAS_MATRIX:-$([ "${CI:-}" = true ] && echo 1)}" = 1 ] && [ -x "$top/_build/gcc/cli/cdl-train" ]; then
    echo "=== gcc: OpenBLAS core types"
    t0=$SECONDS
    "$top/scripts/blas-matrix.sh" "$top/_build/gcc" >"$top/_build/gcc/blas-matrix.out" 2>&1 ||
        failed_stages+=("gcc: OpenBLAS core types")
    grep -v '^# ' "$top/_build/gcc/blas-matrix.out"
    count "$top/_build/gcc/blas-matrix.out"
    echo "--- gcc: OpenBLAS core types: $((SECONDS - t0)) s"
fi
stage "clang -Werror: unit tests, make fuzz" "$top/_build/clang" CC=clang --enable-werror "NVCC_ARCH_FLAGS=$ptx" -- \
    check fuzz TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
stage "ASan+UBSan: unit tests" "$top/_build/asan" CC=gcc --enable-sanitizers "NVCC_ARCH_FLAGS=$ptx" -- \
    check TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
# valgrind runs the gcc stage's build (the same gcc -O2 -g code; -Werror
# changes no code): a fifth configure and build took about 2 minutes.
# Its own build only where that stage did not build.
if [ -x "$top/_build/gcc/cli/cdl-train" ]; then
    echo "=== valgrind: unit tests (in the gcc stage's build)"
    run_tests "valgrind: unit tests" "$top/_build/gcc" "$SECONDS" check-valgrind
else
    stage "valgrind: unit tests" "$top/_build/valgrind" CC=gcc "NVCC_ARCH_FLAGS=$ptx" -- \
        check-valgrind
fi
if [ -z "${CDL_SKIP_DISTCHECK:-}" ]; then
    stage "make distcheck" "$top/_build/dist" CC=gcc -- distcheck \
        DISTCHECK_CONFIGURE_FLAGS="--enable-werror NVCC_ARCH_FLAGS=\"$ptx\"" \
        TESTS_ENVIRONMENT=CDL_TEST_SCOPE=unit
fi
if [ -z "${CDL_SKIP_DEB:-}" ]; then
    echo "=== Debian packages: build, lintian, clean-root install, training"
    t0=$SECONDS
    mkdir -p "$top/_build"
    "$top/scripts/deb-check.sh" >"$top/_build/deb-check.out" 2>&1
    deb_rc=$?
    cat "$top/_build/deb-check.out"
    count "$top/_build/deb-check.out"
    [ "$deb_rc" -eq 0 ] || [ "$deb_rc" -eq 77 ] || failed_stages+=("Debian packages")
    echo "--- Debian packages: $((SECONDS - t0)) s"
fi

if [ -z "${CDL_SKIP_LEFTOVERS:-}" ]; then
    left=$(comm -13 <(echo "$before") <(snapshot))
    if [ -n "$left" ]; then
        echo "=== left behind by the tests (delete them; the test that made them must clean up):"
        echo "$left" | head -n 40
        failed_stages+=("files left in /tmp or /dev/shm")
    fi
fi

if [ -s "$digest" ]; then
    echo
    echo "=== the failed tests again (their failures, then their last other lines)"
    head -n 160 "$digest"
fi
echo
echo "total: $SECONDS s"
for s in "${failed_stages[@]}"; do echo "FAILED STAGE: $s"; done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ ${#failed_stages[@]} -eq 0 ]
