#!/bin/sh
# A rank that never reaches a wait of the others, under mpirun:
#  1. rank 1 stops before the PMIx bootstrap (SIGSTOP before it starts):
#     rank 0's fence gives up at CDL_TIMEOUT and names rank 1 and its node
#     (it said only "some rank did not arrive (PMIx does not say which)").
#  2. rank 1 passes the bootstrap and stops in MPI_Init_thread (a preloaded
#     shim): MPI_Init has no timeout of its own, and rank 0 waited in its
#     fence for good. Now a watchdog names the wait and the rank and ends
#     rank 0 with 76 (a lost peer), which mpirun returns.
# Skips without mpirun, or a libcdl without MPI or PMIx.
. "${top_srcdir:-.}/tests/dist/common.sh"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
have HAVE_MPI && have HAVE_PMIX || { echo "SKIP: libcdl built without MPI or PMIx"; exit 77; }
shim=$builddir/tests/dist/.libs/stall-preload.so
[ -f "$shim" ] || fail "$shim is not built"
pidf=$tmp/stalled.pid
trap '[ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null; rm -rf "$tmp"' EXIT
host=$(hostname)

for be in shm mpi; do
    echo "+ mpirun -n 2 dist_check --backend $be, rank 1 stopped before it starts (CDL_TIMEOUT=3)"
    rm -f "$pidf"
    CDL_TIMEOUT=3 timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -n 2 \
        sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && { echo $$ >"$0"; kill -STOP $$; }; shift; exec "$@"' \
        "$pidf" x "$check" --backend $be >"$tmp/out" 2>&1
    rc=$?
    [ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null
    cat "$tmp/out"
    [ $rc -ne 124 ] || fail "$be: the job hung after rank 1 stopped"
    grep -q "rank 0: PMIx fence #0 did not complete within 3 s (CDL_TIMEOUT): rank 1 (on $host) did not reach it" "$tmp/out" ||
        fail "$be: rank 0's fence error does not name rank 1 on $host"
done

echo "+ mpirun -n 2 dist_check --backend mpi, rank 1 stopped in MPI_Init_thread (CDL_TIMEOUT=3)"
rm -f "$pidf"
CDL_TIMEOUT=3 CDL_TEST_STALL_RANK=1 CDL_TEST_STALL_PID=$pidf LD_PRELOAD=$(readlink -f "$shim") \
    timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -x CDL_TEST_STALL_RANK \
    -x CDL_TEST_STALL_PID -x LD_PRELOAD -n 2 "$check" --backend mpi >"$tmp/out" 2>&1
rc=$?
[ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null
cat "$tmp/out"
[ $rc -ne 124 ] || fail "the job hung in MPI_Init after rank 1 stopped there"
[ -s "$pidf" ] || fail "rank 1 never reached MPI_Init_thread (the shim did not stop it)"
grep -q "cdl: rank 0: error: MPI_Init_thread did not return within 3 s (CDL_TIMEOUT): it waits for every rank" "$tmp/out" ||
    fail "rank 0 did not name the wait it gave up"
[ $rc -eq 76 ] || fail "a rank stopped in MPI_Init ended the job with $rc, not 76 (peer lost)"
echo "PASS: mpi_stall"
