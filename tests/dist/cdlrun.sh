#!/bin/sh
# cdlrun end to end: 1-4 ranks with the contract and the TCP store
# bootstrap check every collective bitwise (tests/dist/dist_check.c).
. "${top_srcdir:-.}/tests/dist/common.sh"
run() {
    echo "+ $*"
    timeout 120 "$@" || { echo "FAILED: $*"; exit 1; }
}
run "$cdlrun" -n 1 "$check" --expect-source contract --expect-backend single
run "$cdlrun" -n 2 --label "$check" --expect-source contract --expect-backend shm --big
run "$cdlrun" -n 3 --bind cores "$check" --expect-source contract --expect-backend shm
run "$cdlrun" -n 4 --timeout 60 "$check" --expect-source contract --expect-world 4 \
    --expect-backend shm --big
# cdlrun's ranks share its GPUs: a CDL_GPU_BIND=task from an enclosing
# srun --gpus-per-task --cdl-ddp step (each rank would open GPU 0) is removed.
out=$(CDL_GPU_BIND=task "$cdlrun" -n 2 sh -c 'echo "rank $RANK: ${CDL_GPU_BIND-unset}"' 2>&1)
[ "$(echo "$out" | sort | tr '\n' ' ')" = "rank 0: unset rank 1: unset " ] ||
    { echo "$out"; echo "FAILED: cdlrun passed CDL_GPU_BIND to its ranks"; exit 1; }
# --label's pipes beyond the descriptor limit: a message that says what to
# do, and no rank left running.
out=$( (ulimit -n 64 && "$cdlrun" -n 40 --label "$check") 2>&1 ) &&
    { echo "FAILED: 40 labelled ranks under ulimit -n 64 started"; exit 1; }
echo "$out"
echo "$out" | grep -q "cannot make the output pipes of rank .*raise 'ulimit -n' or drop --label" ||
    { echo "FAILED: no advice on the descriptor limit"; exit 1; }
# --bind cores with more ranks than cores pins some ranks to the same core:
# said, not silent (one CPU here through taskset).
if command -v taskset >/dev/null; then
    out=$(taskset -c 0 "$cdlrun" -n 2 --bind cores true 2>&1) ||
        { echo "$out"; echo "FAILED: cdlrun -n 2 --bind cores on one CPU"; exit 1; }
    echo "$out" | grep -q "warning: --bind cores: 2 ranks on 1 core: ranks share pinned cores" ||
        { echo "$out"; echo "FAILED: no warning for 2 ranks pinned to 1 core"; exit 1; }
    out=$(taskset -c 0 "$cdlrun" -n 1 --bind cores true 2>&1)
    [ -z "$out" ] || { echo "$out"; echo "FAILED: a warning for 1 rank on 1 core"; exit 1; }
fi
# MASTER_PORT, released until the program's rank 0 binds it, lies above the
# kernel's ephemeral ports (where the range leaves room): a port bind(0)
# gave could be taken by any outgoing connection of the host meanwhile.
read -r _ eph_hi </proc/sys/net/ipv4/ip_local_port_range
if [ "$eph_hi" -le 64471 ]; then
    for i in 1 2 3; do
        p=$("$cdlrun" -n 1 sh -c 'echo "$MASTER_PORT"')
        [ "$p" -gt "$eph_hi" ] && [ "$p" -le 65471 ] ||
            { echo "FAILED: MASTER_PORT $p is not in $((eph_hi + 1))-65471, above the ephemeral ports"; exit 1; }
    done
fi
# A PyTorch job as it is: init_process_group("env://") binds MASTER_PORT in
# rank 0, so that port must not be the one cdlrun holds for cdl's store.
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import torch.distributed' 2>/dev/null; then
    run "$cdlrun" -n 2 --label "$py" "${top_srcdir:-.}/templates/pytorch/train_ddp.py" \
        --epochs 1 --samples 512 >"$tmp/torch.out" 2>&1 ||
        { cat "$tmp/torch.out"; exit 1; }
    cat "$tmp/torch.out"
    grep -q '^\[1\] rank 1/2 .*backend gloo' "$tmp/torch.out" &&
        grep -q '^\[0\] epoch 1/1 loss' "$tmp/torch.out" ||
        { echo "FAILED: no 2-rank PyTorch DDP epoch under cdlrun"; exit 1; }
else
    echo "note: Debian's python3-torch is missing: PyTorch under cdlrun skipped"
fi
# Rank 0's two lines about the ranks and collectives it found (Slurm tests
# and docs read them) are there without -q, and -q quiets them: "no output
# but errors".
train_args="--dataset synthetic --synthetic-size 32 --epochs 1 --threads 1 --val-split 0"
# shellcheck disable=SC2086
timeout 120 "$cdlrun" -n 2 "$train" $train_args >"$tmp/loud" 2>&1 ||
    { cat "$tmp/loud"; echo "FAILED: cdl-train on 2 ranks"; exit 1; }
grep -q "^cdl: rank 0 of 2: ranks from" "$tmp/loud" && grep -q "^cdl: rank 0: collectives over" "$tmp/loud" ||
    { cat "$tmp/loud"; echo "FAILED: rank 0 did not say what it found"; exit 1; }
# shellcheck disable=SC2086
timeout 120 "$cdlrun" -n 2 "$train" $train_args -q >"$tmp/quiet" 2>&1 ||
    { cat "$tmp/quiet"; echo "FAILED: cdl-train -q on 2 ranks"; exit 1; }
[ ! -s "$tmp/quiet" ] || { cat "$tmp/quiet"; echo "FAILED: cdl-train -q printed the lines above"; exit 1; }
echo "cdlrun checks passed"
