#!/bin/bash
# Shared memory of a step whose rank was killed during set-up: libcdl's node
# segment (/dev/shm/cdl-<job>.<step>-n0-<hex>) is unlinked only once every
# rank of the node opened it, so rank 0 killed right after creating it left
# the file, and its memory, in /dev/shm until the node rebooted. The plugin
# removes the step's own segments when the step ends on the node (slurmstepd,
# as root), and slurmd's log says so; a segment named for another step stays
# until the job's epilog, which removes what is left of the job's.
#
# The kill is placed by a test double (tests/e2e/signal-on-open.c): rank 0
# raises SIGKILL as its shm_open of the step's segment returns.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
PRELOAD=$(readlink -f "$top_builddir/tests/e2e/.libs/signal-on-open.so" 2>/dev/null)
[ -n "$PRELOAD" ] && [ -f "$PRELOAD" ] || skip "tests/e2e/.libs/signal-on-open.so is not built"
require_cluster_tools
start_cluster
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"
runuser -u "$CDL_TEST_USER" -- test -r "$PRELOAD" || skip "$PRELOAD not readable by $CDL_TEST_USER"

# Rank 1 names the step (for the checks); rank 0 dies as it creates the
# segment. Rank 1 then loses rank 0's store and fails.
user_script kill0.sh <<EOF
#!/bin/sh
step=\$SLURM_JOB_ID.\$SLURM_STEP_ID
[ "\$SLURM_PROCID" = 1 ] && echo "\$step" >step.id
[ "\$SLURM_PROCID" = 0 ] && export LD_PRELOAD=$PRELOAD CDL_TEST_SIGNAL_ON=/cdl-\$step- CDL_TEST_SIGNAL=9
exec "$CDL_TRAIN_BIN" --model mlp --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist \\
    --device cpu --epochs 1 --max-steps 1 --threads 1 --workers 0 --resume never -q
EOF
# The job user's file named like the job's next step: not this step's, so
# it is still there after the step; the job's epilog removes it (as it does
# what a step whose slurmstepd died before its exit hook left).
user_script job.sh <<'EOF'
#!/bin/sh
f=/dev/shm/cdl-$SLURM_JOB_ID.1-n0-00000000000000aa
: >"$f"
srun -n2 --cdl-ddp ./kill0.sh
rc=$?
[ -f "$f" ] && echo kept >next.kept
exit $rc
EOF

no_segment() { ! ls /dev/shm | grep -q "^cdl-$1-"; }

echo "== rank 0 killed as it creates its node's segment"
out=$(as_user_env OPENBLAS_NUM_THREADS=1 -- salloc -N1 -n2 -w n1 ./job.sh 2>&1); rc=$?
echo "$out" | tail -n 5
step=$(cat "$WORK/step.id" 2>/dev/null)
check "the step failed (rc $rc) and rank 1 named its step ($step)" \
    eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ -n "$step" ]'
job=${step%.*}
# slurmstepd runs the plugin's exit hook after srun has its tasks' status.
check "no segment of step $step is left in /dev/shm" wait_until 30 no_segment "$step" ||
    ls -l /dev/shm | grep "cdl-$step-"
check "n1's slurmd log names what was removed" \
    grep -q "cdl: removed /dev/shm/cdl-$step-n0-[0-9a-f]\{16\}, left by a rank of step $step killed" \
    "$CDL_CLUSTER_DIR/log/slurmd.n1.log"
check "the job user's file of another step's name stayed after the step" test -f "$WORK/next.kept"
check "the job's epilog removed it" wait_until 30 no_segment "$job.1"
check "... and slurmd's log says so" \
    grep -q "cdl: epilog: removed /dev/shm/cdl-$job.1-n0-00000000000000aa, left by a rank of job $job" \
    "$CDL_CLUSTER_DIR/log/slurmd.n1.log"
[ -n "$job" ] && rm -f "/dev/shm/cdl-$job.1-n0-00000000000000aa" "/dev/shm/cdl-$step-"*

finish
