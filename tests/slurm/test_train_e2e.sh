#!/bin/bash
# END-TO-END: on two emulated nodes, 2 x 2 tasks train to the same weights
# as one process with the 4x larger batch, both ways a Slurm user starts them:
#  - `srun -N2 --ntasks-per-node=2 --cdl-ddp cdl-train` (the plugin's rank
#    contract; TCP store bootstrap, hierarchical shm + store collectives);
#  - `srun --mpi=pmix -N2 --ntasks-per-node=2 cdl-train` (no plugin option:
#    ranks from PMIx, hierarchical shm + Open MPI collectives).
#
# Skipped (77) until cli/cdl-train exists and supports distributed runs
# (its --help lists --dist-backend). To enable it by hand meanwhile:
#   CDL_E2E_FORCE=1 make check TESTS=tests/slurm/test_train_e2e.sh
#
# Equivalence: with DistributedSampler semantics (one shuffle per epoch from
# the seed, rank r takes every W-th index) the 4 ranks' batches of B cover
# exactly the single process's batch of 4B, and the averaged gradient is the
# same up to summation order. Compared one step at a time: from the single
# process's checkpoint at step STEPS, one step each, updates within
# STEP_TOL (tests/dist/step_equiv.sh: over a whole run a difference of
# summation order can grow until it depends on the CPU's BLAS kernels).
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
if [ "${CDL_E2E_FORCE:-0}" != 1 ] && ! "$CDL_TRAIN_BIN" --help 2>&1 | grep -q -- '--dist-backend'; then
    skip "cdl-train does not support distributed runs yet (no --dist-backend in --help)"
fi
require_cluster_tools
start_cluster
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"

STEPS=20
B=16
builddir=$top_builddir tmp=$WORK
. "$top_srcdir/tests/dist/step_equiv.sh"
chmod 0644 "$STEP_MODEL"
common="--model $STEP_MODEL --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist
        --device cpu --epochs 1 --lr 0.01 --optimizer sgd --momentum 0.9 --weight-decay 0
        --schedule constant --warmup-epochs 0 --threads 1 --workers 1 --seed 7"
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -N1 -n1 \
    "$CDL_TRAIN_BIN" $common --batch-size $((4 * B)) --max-steps $STEPS --resume never --ckpt-dir base \
    >"$WORK/base.log" 2>&1
check "one process trained $STEPS steps" test $? = 0 || tail -n 20 "$WORK/base.log"
# The global batch stays: the per-rank --batch-size changes on purpose.
from="--max-steps $((STEPS + 1)) --resume-allow batch-size --resume $WORK/base"
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -N2 --ntasks-per-node=2 --cdl-ddp \
    "$CDL_TRAIN_BIN" $common --batch-size $B $from/last.safetensors --ckpt-dir ddp >"$WORK/ddp.log" 2>&1
rc_ddp=$?
# Open MPI's shared-memory transport breaks when both "nodes" are one host.
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=self,tcp -- srun --mpi=pmix -N2 --ntasks-per-node=2 \
    "$CDL_TRAIN_BIN" $common --batch-size $B $from/last.safetensors --ckpt-dir pmix >"$WORK/pmix.log" 2>&1
rc_pmix=$?
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -N1 -n1 \
    "$CDL_TRAIN_BIN" $common --batch-size $((4 * B)) $from/last.safetensors --ckpt-dir single \
    >"$WORK/single.log" 2>&1
rc_single=$?
check "2 nodes x 2 tasks with --cdl-ddp trained" test "$rc_ddp" = 0 || tail -n 20 "$WORK/ddp.log"
check "one process trained" test "$rc_single" = 0 || tail -n 20 "$WORK/single.log"
# The whole log: a rank that died under load (SIGSEGV, once in about 230
# runs beside other tests) showed only Open MPI's lines after it, which
# did not say how far the rank had come (its own lines were cut off).
check "srun --mpi=pmix: 2 nodes x 2 tasks trained (rc $rc_pmix)" test "$rc_pmix" = 0 || cat "$WORK/pmix.log"
check "srun --mpi=pmix: ranks came from PMIx" grep -q "ranks from PMIx, 2 nodes" "$WORK/pmix.log"
check "srun --mpi=pmix: hierarchical collectives over MPI" grep -q "hier:mpi" "$WORK/pmix.log"
for run in ddp pmix; do
    check "$run: the step equals the single process's" step_same single $run "$WORK/base"
done

# A rank that cannot load the data (here n2's node-local copy is missing)
# fails every rank: the others name it and its Slurm node instead of
# waiting for it and failing with "rank 1 lost its connection to the store".
user_script n2-missing.sh <<EOF
#!/bin/sh
d=/usr/share/datasets/fashion-mnist
[ "\$SLURMD_NODENAME" = n2 ] && d=$WORK/no-such-copy
exec "$CDL_TRAIN_BIN" --model mlp --dataset fashion-mnist --data-dir "\$d" --device cpu \\
    --epochs 1 --max-steps 1 --threads 1 --workers 0 -q
EOF
out=$(as_user_env OPENBLAS_NUM_THREADS=1 -- srun -N2 --ntasks-per-node=1 --cdl-ddp ./n2-missing.sh 2>&1)
rc=$?
check "a rank without its data: every rank fails, rank 0 names rank 1 on n2" \
    eval '[ $rc != 0 ] && echo "$out" | grep -q "rank 0: error: loading the data failed on rank 1 (on n2): see that rank.s error" &&
          echo "$out" | grep -q "rank 1: error: .*no-such-copy.* (rank 1, on n2)"' || echo "$out"

finish
