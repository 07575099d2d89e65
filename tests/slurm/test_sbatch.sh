#!/bin/bash
# #SBATCH --cdl-ddp: the option reaches every step of the job, the batch
# step itself is left alone; allow_batch=no refuses it with a message;
# cdl-train run in the batch script of a job of several tasks warns.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster

user_script job.sh <<'EOF'
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2
#SBATCH --cdl-ddp
echo "batch RANK=${RANK-unset} WORLD_SIZE=${WORLD_SIZE-unset} MASTER_ADDR=${MASTER_ADDR-unset} CDL_LAUNCHER=${CDL_LAUNCHER-unset} OMP_NUM_THREADS=${OMP_NUM_THREADS-unset}"
srun sh -c 'echo "step0 RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR CDL_JOB_ID=$CDL_JOB_ID"'
srun -N1 -n1 sh -c 'echo "step1 RANK=$RANK WORLD_SIZE=$WORLD_SIZE CDL_JOB_ID=$CDL_JOB_ID"'
EOF

id=$(submit -o job.out ./job.sh)
state=$(wait_job "$id")
out=$(cat "$WORK/job.out")
echo "$out"
check "job completed ($state)" test "${state%% *}" = JobState=COMPLETED
check "batch step untouched" \
    test "$(echo "$out" | grep '^batch ')" = "batch RANK=unset WORLD_SIZE=unset MASTER_ADDR=unset CDL_LAUNCHER=unset OMP_NUM_THREADS=unset"
check "first step: 4 ranks with the contract" \
    test "$(echo "$out" | grep '^step0 ' | grep 'WORLD_SIZE=4' | grep 'MASTER_ADDR=n1' | grep -c "CDL_JOB_ID=$id.0")" = 4
check "first step: ranks 0..3 exactly once" \
    test "$(echo "$out" | sed -n 's/^step0 RANK=\([0-9]*\) .*/\1/p' | sort | tr '\n' ' ')" = "0 1 2 3 "
check "second step: its own contract (job id $id.1)" \
    test "$(echo "$out" | grep '^step1 ')" = "step1 RANK=0 WORLD_SIZE=1 CDL_JOB_ID=$id.1"

# The option on the sbatch command line works the same.
user_script plain.sh <<'EOF'
#!/bin/sh
echo "batch RANK=${RANK-unset}"
srun -n1 sh -c 'echo "step RANK=$RANK CDL_LAUNCHER=$CDL_LAUNCHER"'
EOF
id=$(submit -N1 -n1 --cdl-ddp -o plain.out ./plain.sh)
wait_job "$id" >/dev/null
check "sbatch --cdl-ddp: batch untouched, step gets the contract" \
    test "$(cat "$WORK/plain.out" | tr '\n' ' ')" = "batch RANK=unset step RANK=0 CDL_LAUNCHER=slurm "

# cdl-train started in the batch script itself (sbatch --wrap without srun)
# of a job of several tasks trained alone, silently; it now warns, and the
# same command under srun does not.
CDL_TRAIN_BIN=$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)
if [ -n "$CDL_TRAIN_BIN" ] && runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN"; then
    train="$CDL_TRAIN_BIN --dataset synthetic --synthetic-size 500 --epochs 1 --workers 0 -q --max-steps 1"
    id=$(submit -N1 -n2 --cdl-ddp -o wrap.out --wrap "$train; echo srun; srun $train")
    state=$(wait_job "$id")
    cat "$WORK/wrap.out"
    check "sbatch -n2 --wrap 'cdl-train': warns that it trains alone outside a step ($state)" \
        eval 'sed -n "1,/^srun$/p" "$WORK/wrap.out" | grep -q "cdl: warning: Slurm job $id has 2 tasks, but this process runs outside a job step"'
    check "... and under srun it does not" \
        eval '[ "${state%% *}" = JobState=COMPLETED ] && ! sed -n "/^srun$/,\$p" "$WORK/wrap.out" | grep -q warning'
    # sbatch -N2 without a task count sets no SLURM_NTASKS.
    id=$(submit -N2 -o wrap2.out --wrap "$train")
    wait_job "$id" >/dev/null
    check "sbatch -N2 --wrap 'cdl-train': warns too" \
        grep -q "cdl: warning: Slurm job $id has 2 nodes, but" "$WORK/wrap2.out"
fi

# Option values are validated by sbatch already.
user_script badjob.sh <<'EOF'
#!/bin/sh
#SBATCH --cdl-bind=../../cores
true
EOF
err=$(as_user sbatch ./badjob.sh 2>&1)
rc=$?
check "#SBATCH --cdl-bind=../../cores refused by sbatch" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q -- "--cdl-bind=../../cores: expected none, cores or closest"'

# allow_batch=no: sbatch and salloc refuse, srun inside a job accepts.
sed -i 's/$/ allow_batch=no/' "$CDL_CLUSTER_DIR/etc/plugstack.conf"
err=$(as_user sbatch --cdl-ddp ./plain.sh 2>&1)
rc=$?
check "allow_batch=no: sbatch --cdl-ddp refused with a message" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "disabled for sbatch and salloc by the administrator (allow_batch=no)"'
err=$(as_user sbatch ./job.sh 2>&1)
rc=$?
check "allow_batch=no: #SBATCH --cdl-ddp refused" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "allow_batch=no"'
out=$(as_user salloc -N1 -n1 srun --cdl-ddp sh -c 'echo RANK=$RANK' 2>/dev/null)
check "allow_batch=no: srun --cdl-ddp inside salloc works" test "$out" = "RANK=0"

finish
