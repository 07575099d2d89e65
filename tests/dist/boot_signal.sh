#!/bin/sh
# SIGTERM (scancel, the time limit, cdlrun stopping a run) while a rank
# waits in the bootstrap for a rank that never comes: it stops at once with
# the status of a signal during set-up (75 with --ckpt-dir, 1 without),
# naming itself and the wait it left. It used to wait on until CDL_TIMEOUT
# and exit 76 ("timed out after 300 s in barrier 'fence0'"), a lost peer.
# CDL_TIMEOUT is 120 s; the guard below fails the test long before. The
# same for cdl-eval, which exits 1.
. "${top_srcdir:-.}/tests/dist/common.sh"
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; tail -5 "$tmp/err" 2>/dev/null; exit 1; }
port=$(free_port)

# term_when WHAT COND: waits (60 s at most) until COND holds for process
# $pid, sends it SIGTERM, then waits (60 s) for its end; $rc its status.
term_when() {
    local what=$1 cond=$2 i=0
    until $cond; do
        i=$((i + 1))
        [ $i -le 600 ] || fail "$what did not start connecting within 60 s"
        kill -0 $pid 2>/dev/null || fail "$what ended before the signal"
        sleep 0.1
    done
    kill -TERM $pid
    i=0
    while kill -0 $pid 2>/dev/null; do
        i=$((i + 1))
        [ $i -le 600 ] || fail "$what still waits for rank 1 60 s after SIGTERM"
        sleep 0.1
    done
    wait $pid
    rc=$?
    pid=
}

# stop_rank0 ARGS...: rank 0 of 2 started alone, SIGTERM once it is in the
# bootstrap (its "rank 0 of 2" line is printed just before); $rc its status.
stop_rank0() {
    rm -f "$tmp/err"   # not the last run's line
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port CDL_STORE_TOKEN=boot-signal-$$ CDL_JOB_ID=boot-signal-$$ \
        CDL_TIMEOUT=120 "$train" --dataset synthetic --synthetic-size 64 --epochs 1 \
        --threads 1 --no-progress "$@" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    term_when "rank 0" in_bootstrap
}
in_bootstrap() { grep -q "rank 0 of 2" "$tmp/err" 2>/dev/null; }

stop_rank0 --ckpt-dir "$tmp/ck"
[ $rc -eq 75 ] || fail "rank 0 exited $rc after SIGTERM in the bootstrap, expected 75"
grep -q "rank 0: stopped by a signal while connecting to the other ranks, before the first step (rank 0 was asked to stop while " "$tmp/err" ||
    fail "no message naming the rank and the wait it left"
grep -q "nothing of this start to save; start it again to go on (exit status 75)" "$tmp/err" ||
    fail "no word of what to do"
grep -q "timed out" "$tmp/err" && fail "rank 0 waited until CDL_TIMEOUT"
[ ! -e "$tmp/ck/last.safetensors" ] || fail "a checkpoint was written"
grep "stopped by a signal" "$tmp/err"

# Without --ckpt-dir nothing could be resumed: an error (1), as a signal
# during the rest of set-up gives.
stop_rank0
[ $rc -eq 1 ] || fail "rank 0 exited $rc after SIGTERM without --ckpt-dir, expected 1"
grep -q "stopped by a signal (SIGUSR1 or SIGTERM) while connecting to the other ranks, before the first step, with no --ckpt-dir" "$tmp/err" ||
    fail "no message for the stop without --ckpt-dir"
grep -q "a rank of this run was lost" "$tmp/err" && fail "the stop was taken for a lost peer"

# cdl-eval joins its ranks the same way (cdl_dist_create_stoppable): rank 0
# of 2 alone, SIGTERM once it waits in the bootstrap (its handler is in:
# SigCgt), as a plain process and as one whose launcher keeps SIGTERM
# blocked. It exits 1 (an error, its documented status) naming the wait.
# It used to die of the signal without a word (143), or, the signal
# blocked, wait on until CDL_TIMEOUT.
"$train" --dataset synthetic --synthetic-size 64 --epochs 1 --threads 1 --no-progress \
    --ckpt-dir "$tmp/evck" >"$tmp/out" 2>"$tmp/err" || fail "training the checkpoint failed"
# stop_eval MODE: MODE plain or blocked; $rc its status.
stop_eval() {
    rm -f "$tmp/err"
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port CDL_STORE_TOKEN=boot-signal-$$ CDL_JOB_ID=boot-signal-$$ \
        CDL_TIMEOUT=120 python3 -c '
import os, signal, sys
if sys.argv[1] == "blocked":
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
os.execv(sys.argv[2], sys.argv[2:])' "$1" "$ev" "$tmp/evck/last.safetensors" --threads 1 \
        >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    term_when "cdl-eval ($1)" catches_term
}
# SIGTERM caught (bit 15 of SigCgt): cdl-eval is connecting its ranks.
catches_term() {
    local caught
    caught=$(awk '/^SigCgt:/ { print $2 }' /proc/$pid/status 2>/dev/null) &&
        [ -n "$caught" ] && [ $((0x$caught & 0x4000)) -ne 0 ]
}
for mode in plain blocked; do
    stop_eval $mode
    [ $rc -eq 1 ] || fail "cdl-eval ($mode) exited $rc after SIGTERM in the bootstrap, expected 1"
    grep -q "cdl-eval: rank 0: error: stopped by a signal (SIGTERM) while connecting to the other ranks, before evaluating anything (rank 0 was asked to stop while it waited in barrier 'fence0'" "$tmp/err" ||
        fail "cdl-eval ($mode): no message naming the rank and the wait it left"
    grep -q "timed out" "$tmp/err" && fail "cdl-eval ($mode) waited until CDL_TIMEOUT"
    grep "stopped by a signal" "$tmp/err"
done
echo "PASS: boot_signal"
