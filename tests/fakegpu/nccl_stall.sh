#!/bin/sh
# A rank that hangs before one of a step's NCCL collectives (the fake
# NCCL's CDL_FAKE_NCCL_STALL: rank 1's process stops for good when its Nth
# collective runs) must not hang the others: rank 0's wait for the step is
# bounded by CDL_TIMEOUT (cdlrun --timeout 10), it fails with an error that
# names the rank, the step, the collectives and what to do, and exits
# non-zero; cdlrun then stops rank 1, and nothing is left behind (no rank
# process, no /dev/shm segment). The fake NCCL leaves a collective whose
# peer is missing queued while the host polls, as NCCL's kernels do on a
# GPU, so without the deadline (ddp_wait_mark) rank 0 would poll forever
# and this test fail on its own 120 s guard.
# Runs: the sharded optimizer with --clip-grad (the collective stalled in
# a later step), and plain data parallelism (stalled in the first steps).
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu/cdl-train
cdlrun=$builddir/launcher/cdlrun
tmp=$(mktemp -d /tmp/cdl-fakestall.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
export CDL_FAKE_GPUS=2
# Rank 1 alone stalls at its collective number $STALL_AT.
wrap=$tmp/stall-rank1.sh
printf '#!/bin/sh\n[ "$RANK" = 1 ] && export CDL_FAKE_NCCL_STALL=$STALL_AT\nexec "%s" "$@"\n' \
    "$fake" >"$wrap" && chmod +x "$wrap"

stalled() {  # stalled NAME N OPS ARGS...: rank 1 stalls at its Nth collective;
    # rank 0's error lists the gradient allreduce and OPS
    name=$1; export STALL_AT=$2 ops=$3; shift 3
    echo "+ cdlrun -n 2 --timeout 10 cdl-train $* (rank 1 stalls at collective $STALL_AT)"
    timeout -k 10 120 "$cdlrun" -n 2 -v --label --timeout 10 "$wrap" --dataset synthetic \
        --synthetic-size 256 --batch-size 8 --epochs 1 --lr 0.01 --threads 1 --no-progress \
        --device cuda "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    out=$tmp/$name.out
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$out"; fail "$name: hung (killed after 120 s)"; }
    [ $rc -ne 0 ] || { cat "$out"; fail "$name: exited 0 though rank 1 stalled"; }
    grep -q "^\[0\] .*rank 0: error: step [0-9]* did not finish within 10 s (CDL_TIMEOUT): one of its NCCL collectives (the gradient allreduce$ops) waits for a rank that died or hangs.*larger CDL_TIMEOUT.*resume from the last checkpoint" "$out" ||
        { cat "$out"; fail "$name: rank 0 does not say which step timed out and what to do"; }
    grep -q "^cdlrun: failed: rank 0 " "$out" ||
        { cat "$out"; fail "$name: cdlrun does not name rank 0 as the one that failed"; }
    for pid in $(sed -n 's/^cdlrun: rank [0-9]*: pid \([0-9]*\),.*/\1/p' "$out"); do
        ! kill -0 "$pid" 2>/dev/null || { cat "$out"; kill -9 "$pid"; fail "$name: rank pid $pid still runs"; }
    done
    # The fake NCCL's segment carries the pid of the rank that made its id
    # (rank 0), shm collectives the job id: none of this run's may remain.
    pid0=$(sed -n 's/^cdlrun: rank 0: pid \([0-9]*\),.*/\1/p' "$out")
    job=$(sed -n "s/^\[0\] cdl: rank 0 of 2: .* job '\([^']*\)'.*/\1/p" "$out")
    [ -n "$pid0" ] && [ -n "$job" ] || { cat "$out"; fail "$name: no pid or job id for rank 0"; }
    left=$(ls /dev/shm | grep -e "^cdl-fakenccl-$pid0-" -e "^cdl-$job")
    [ -z "$left" ] || { cat "$out"; fail "$name: left in /dev/shm: $left"; }
    echo "  $name: exit $rc; $(grep -o 'rank 0: error: step [0-9]* did not finish within 10 s' "$out")"
}
stalled shard-clip 14 ", the parameter broadcasts of --shard-optimizer" \
    --shard-optimizer --clip-grad 0.05
# Collective 10 is in step 1: set-up has its own (weights, the ranks'
# agreement on the settings, the stop check after loading), which a
# stall reports as the broadcast or sum it stopped.
stalled plain 10 ""
echo "PASS: a stalled rank makes the others fail within CDL_TIMEOUT, naming the step"
