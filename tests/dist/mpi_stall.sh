#!/bin/sh
# A rank that never reaches a wait of the others, under mpirun:
#  1. rank 1 stops before the PMIx bootstrap (SIGSTOP before it starts):
#     rank 0's fence gives up at CDL_TIMEOUT and names rank 1 and its node
#     (it said only "some rank did not arrive (PMIx does not say which)").
#  2. rank 1 passes the bootstrap and stops in MPI_Init_thread (a preloaded
#     shim): MPI_Init has no timeout of its own, and rank 0 waited in its
#     fence for good. Now a watchdog names the wait and the rank and ends
#     rank 0 with 76 (a lost peer), which mpirun returns.
#  3. as 2, rank 0 (cdl-train) signalled there: it exits 75 at once.
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

# CDL_TIMEOUT also bounds the PMIx fence both ranks pass first: 3 s there
# failed this case (the fence's message, not MPI_Init's) whenever rank 1
# started 3 s after rank 0, which a loaded 2-core machine can do; 10 s
# leaves the margin the test's other waits have.
echo "+ mpirun -n 2 dist_check --backend mpi, rank 1 stopped in MPI_Init_thread (CDL_TIMEOUT=10)"
rm -f "$pidf"
CDL_TIMEOUT=10 CDL_TEST_STALL_RANK=1 CDL_TEST_STALL_PID=$pidf LD_PRELOAD=$(readlink -f "$shim") \
    timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -x CDL_TEST_STALL_RANK \
    -x CDL_TEST_STALL_PID -x LD_PRELOAD -n 2 "$check" --backend mpi >"$tmp/out" 2>&1
rc=$?
[ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null
cat "$tmp/out"
[ $rc -ne 124 ] || fail "the job hung in MPI_Init after rank 1 stopped there"
[ -s "$pidf" ] || fail "rank 1 never reached MPI_Init_thread (the shim did not stop it)"
grep -q "cdl: rank 0: error: MPI_Init_thread did not return within 10 s (CDL_TIMEOUT): it waits for every rank" "$tmp/out" ||
    fail "rank 0 did not name the wait it gave up"
[ $rc -eq 76 ] || fail "a rank stopped in MPI_Init ended the job with $rc, not 76 (peer lost)"

# 3. The same stall, rank 0 of cdl-train told to stop there (SIGTERM:
#    scancel, the time limit) with CDL_TIMEOUT=120: its watchdog sees the
#    stop within a tenth of a second and ends it with 75 (--ckpt-dir), the
#    status of a signal during set-up, naming the wait; it waited until
#    CDL_TIMEOUT and exited 76 (a lost peer). The guard fails long before.
echo "+ mpirun -n 2 cdl-train --dist-backend mpi, rank 1 stopped in MPI_Init_thread, SIGTERM to rank 0"
rm -f "$pidf"
initf=$tmp/init.pid
CDL_TIMEOUT=120 CDL_TEST_STALL_RANK=1 CDL_TEST_STALL_PID=$pidf CDL_TEST_INIT_PID=$initf \
    LD_PRELOAD=$(readlink -f "$shim") \
    timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -x CDL_TEST_STALL_RANK \
    -x CDL_TEST_STALL_PID -x CDL_TEST_INIT_PID -x LD_PRELOAD -n 2 "$train" --dataset synthetic \
    --synthetic-size 64 --epochs 1 --threads 1 --no-progress --dist-backend mpi \
    --ckpt-dir "$tmp/ck" >"$tmp/out" 2>&1 &
job=$!
i=0
until [ -s "$initf" ] && [ -s "$pidf" ]; do   # rank 0 in MPI_Init_thread, rank 1 stopped
    i=$((i + 1))
    [ $i -le 600 ] || { kill $job; cat "$tmp/out"; fail "the ranks did not reach MPI_Init_thread within 60 s"; }
    kill -0 $job 2>/dev/null || { cat "$tmp/out"; fail "the job ended before the signal"; }
    sleep 0.1
done
kill -TERM "$(cat "$initf")"
wait $job
rc=$?
[ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null
cat "$tmp/out"
[ $rc -ne 124 ] || fail "rank 0 still waited in MPI_Init_thread 60 s after SIGTERM"
grep -q "cdl: rank 0: error: rank 0 was asked to stop while it waited in MPI_Init_thread (a signal: SIGTERM or SIGUSR1); it stopped waiting: exiting with status 75" "$tmp/out" ||
    fail "rank 0 did not name the wait it left for the signal"
grep -q "did not return within" "$tmp/out" && fail "rank 0 waited until CDL_TIMEOUT"
[ $rc -eq 75 ] || fail "rank 0 stopped in MPI_Init ended the job with $rc, not 75"
echo "PASS: mpi_stall"
