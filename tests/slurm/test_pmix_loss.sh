#!/bin/bash
# cdl-train under srun --mpi=pmix (PMIx bootstrap, hier:mpi between the
# nodes) when a rank goes missing: the survivors must keep CDL_TIMEOUT and
# exit 76 (CDL_EXIT_PEER_LOST), which the requeue templates resume after.
#   1. rank 1 stops before it reaches the bootstrap (SIGSTOP, as a hung
#      node or a rank that never starts): rank 0 gives up on the PMIx fence
#      at CDL_TIMEOUT, names rank 1 and its node, and exits 76. It used to
#      wait in PMIx_Fence for good (Slurm's pmix plugin ignores
#      PMIX_TIMEOUT), or, with --dist-backend mpi, in MPI_Init's fence; then
#      it said only "some rank did not arrive (PMIx does not say which)".
#   1c. rank 0 gets SIGTERM while rank 1 is stopped before the bootstrap:
#      it leaves the fence at once and exits 75 (it waited to CDL_TIMEOUT).
#   2. rank 1 is killed (SIGKILL) mid-run: rank 0's MPI collective times
#      out and the job ends with 76 (MPI_Abort's code). It used to be 1, the
#      status of an error a restart would repeat: the job was not requeued.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
grep -q "^#define HAVE_PMIX 1" "$top_builddir/config.h" && grep -q "^#define HAVE_MPI 1" "$top_builddir/config.h" ||
    skip "libcdl built without PMIx or MPI"
require_cluster_tools
start_cluster
srun --mpi=list 2>&1 | grep -qw pmix || skip "Slurm has no pmix MPI plugin (srun --mpi=list)"
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"
JOB_TIMEOUT=60
# Rank 1's pid for the test (it execs cdl-train: the same process); with
# "stop" rank 1 stops itself before cdl-train starts.
user_script rank.sh <<EOF
#!/bin/sh
echo \$\$ >"$WORK/pid.\$SLURM_PROCID.tmp" && mv "$WORK/pid.\$SLURM_PROCID.tmp" "$WORK/pid.\$SLURM_PROCID"
[ "\$1" = stop ] && [ "\$SLURM_PROCID" = 1 ] && kill -STOP \$\$
[ "\$1" = stop0 ] && [ "\$SLURM_PROCID" = 0 ] && kill -STOP \$\$
shift
exec "$CDL_TRAIN_BIN" "\$@"
EOF
train="--dataset synthetic --synthetic-size 20000 --epochs 50 --threads 1 --no-progress"
# Rank 1's process, once only: the test kills no process it did not start.
kill_rank1() { [ -s "$WORK/pid.1" ] && kill -KILL "$(cat "$WORK/pid.1")" 2>/dev/null; rm -f "$WORK/pid.1"; }
# Rank 0's, right after the case that stops it (later runs rewrite pid.0).
kill_rank0() { [ -s "$WORK/pid.0" ] && kill -KILL "$(cat "$WORK/pid.0")" 2>/dev/null; rm -f "$WORK/pid.0"; }
trap 'kill_rank1; stop_cluster; etc_unchanged' EXIT

# auto (hier:mpi) and mpi: the latter had no bootstrap, and MPI_Init's own
# fence waited for rank 1 for good.
for be in auto mpi; do
    echo "== 1. rank 1 stopped before the bootstrap (--dist-backend $be)"
    # -K: once rank 0 has exited, srun ends the stopped rank 1.
    as_user_env OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=self,tcp CDL_TIMEOUT=3 -- \
        srun --mpi=pmix -K -N2 --ntasks-per-node=1 ./rank.sh stop $train --dist-backend $be \
        >"$WORK/stop.log" 2>&1
    rc=$?
    kill_rank1
    cat "$WORK/stop.log"
    check "$be: srun ended (rc $rc, not 124 from timeout)" test "$rc" != 124
    check "$be: rank 0 gave up on the PMIx fence at CDL_TIMEOUT" \
        grep -q "cdl-train: rank 0: error: PMIx fence #0 did not complete within 3 s (CDL_TIMEOUT)" "$WORK/stop.log"
    check "$be: ... naming rank 1 and its node" \
        grep -q "within 3 s (CDL_TIMEOUT): rank 1 (on n2) did not reach it" "$WORK/stop.log"
    check "$be: rank 0 exited 76 (a lost peer)" grep -q "n1: task 0: Exited with exit code 76" "$WORK/stop.log"
done

echo "== 1b. rank 0 stopped before the bootstrap"
rm -f "$WORK/pid.0"
# Rank 1's discovery reads rank 0's host name from PMIx, and its fence
# waits for rank 0: it must give up at CDL_TIMEOUT naming rank 0 on n1.
as_user_env OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=self,tcp CDL_TIMEOUT=3 -- \
    srun --mpi=pmix -K -N2 --ntasks-per-node=1 ./rank.sh stop0 $train >"$WORK/stop0.log" 2>&1
rc=$?
kill_rank0
cat "$WORK/stop0.log"
check "rank 0 stopped: srun ended (rc $rc, not 124 from timeout)" test "$rc" != 124
check "rank 1 names rank 0 on n1" \
    grep -q "cdl-train: rank 1: error: PMIx fence #0 did not complete within 3 s (CDL_TIMEOUT): rank 0 (on n1) did not reach it" "$WORK/stop0.log"
check "rank 1 exited 76 (a lost peer)" grep -q "n2: task 1: Exited with exit code 76" "$WORK/stop0.log"

echo "== 1c. SIGTERM to rank 0 while it waits in the PMIx fence for rank 1"
# scancel or the time limit while a rank never comes: rank 0 leaves the
# fence at once (75 with --ckpt-dir, naming the wait) instead of waiting
# out CDL_TIMEOUT (120 s here; the 60 s guard fails the test first).
rm -f "$WORK/pid.0" "$WORK/pid.1"
as_user_env OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=self,tcp CDL_TIMEOUT=120 -- \
    srun --mpi=pmix -K -N2 --ntasks-per-node=1 ./rank.sh stop $train --ckpt-dir ck1c \
    >"$WORK/term.log" 2>&1 &
srun_pid=$!
# Its discovery line comes just before the bootstrap's first fence.
wait_until 50 grep -q "rank 0 of 2" "$WORK/term.log" && wait_until 5 test -s "$WORK/pid.0"
kill -TERM "$(cat "$WORK/pid.0")"
wait_until 60 sh -c "! kill -0 $srun_pid 2>/dev/null"
check "1c: srun ended within 60 s of the SIGTERM" sh -c "! kill -0 $srun_pid 2>/dev/null"
kill_rank1
kill -KILL "$srun_pid" 2>/dev/null
wait "$srun_pid"
rm -f "$WORK/pid.0"
cat "$WORK/term.log"
check "1c: rank 0 left the fence, naming it" \
    grep -q "stopped by a signal while connecting to the other ranks, before the first step (rank 0 was asked to stop while it waited in PMIx fence #0" "$WORK/term.log"
check "1c: rank 0 exited 75" grep -q "n1: task 0: Exited with exit code 75" "$WORK/term.log"

echo "== 2. rank 1 killed mid-run"
# CDL_TIMEOUT bounds every wait of the run before the kill too: the PMIx
# fence of two ranks srun starts on two nodes, MPI_Init_thread's watchdog,
# each step's collective. At 3 s a rank that late under load failed the
# run before rank 1 was killed; 10 s leaves a margin (and detects the kill
# 7 s later).
as_user_env OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=self,tcp CDL_TIMEOUT=10 -- \
    srun --mpi=pmix -N2 --ntasks-per-node=1 ./rank.sh run $train --ckpt-dir ck >"$WORK/kill.log" 2>&1 &
srun_pid=$!
wait_until 50 grep -q "^epoch 1/" "$WORK/kill.log" && wait_until 5 test -s "$WORK/pid.1"
kill_rank1
wait "$srun_pid"
rc=$?
cat "$WORK/kill.log"
check "srun exited 76, the status of a lost peer (rc $rc)" test "$rc" = 76
check "rank 0 said to resume" grep -q "cdl-train: rank 0: a rank of this run was lost" "$WORK/kill.log"
check "... once" test "$(grep -c "a rank of this run was lost" "$WORK/kill.log")" = 1
check "the MPI job was aborted with 76" grep -q "aborting the MPI job with exit status 76" "$WORK/kill.log"
finish
