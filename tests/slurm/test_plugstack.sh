#!/bin/bash
# A misspelled key in plugstack.conf, with `required` (what docs/admin.md
# recommends), must not take nodes down: slurmd and the job epilog log it
# and go on (a running job ends, its nodes return to idle, not drained;
# slurmd restarts), while srun and sbatch fail with a message naming the
# key, so the admin hears of it at once.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster
CONF=$CDL_CLUSTER_DIR/etc/plugstack.conf
GOOD=$(cat "$CONF")
FLAG=$WORK/flag
node_states() { sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' '; }
# Both idle once jobs have finished completing (a drained node never is).
both_idle() {
    wait_until 30 sh -c '[ "$(sinfo -h -N -o %T | grep -c "^idle$")" = 2 ]' && return 0
    echo "nodes: $(node_states)"
    sinfo -R
    return 1
}

# A job that runs until told to stop (its own wait is bounded).
user_script wait-flag.sh <<EOF
#!/bin/sh
i=0
while [ ! -e "$FLAG" ] && [ \$i -lt 1200 ]; do sleep 0.05; i=\$((i + 1)); done
echo done
EOF
job=$(submit -N2 -n2 -o "$WORK/job.out" ./wait-flag.sh)
check "a job is submitted with a good configuration" test -n "$job"
wait_until "$JOB_TIMEOUT" sh -c "squeue -h -j $job -o %T | grep -qx RUNNING" ||
    fail "job $job did not start"
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "${top_builddir:-.}/config.h")
check "slurmd logged 'cdl_spank $version (rank contract N) loaded' at start" \
    grep -qE "cdl_spank $version \(rank contract [0-9]+\) loaded" "$CDL_CLUSTER_DIR/log/slurmd.n1.log"
out=$(as_user srun --cdl-version 2>&1)
check "srun --cdl-version prints the plugin's version" \
    eval 'echo "$out" | grep -qx "cdl_spank $version (rank contract [0-9]*)"' || echo "$out"
# The documents show that line; they said "rank contract 3" after the
# contract became 4.
for f in docs/slurm-plugin.md docs/admin.md man/cdl_spank.8; do
    shown=$(grep -o "(rank contract [0-9]*)" "${top_srcdir:-.}/$f" | sort -u)
    check "$f shows the contract version srun --cdl-version prints ($shown)" \
        test "$shown" = "${out#cdl_spank * }"
done

# Now the admin misspells a key.
echo "$GOOD mps_timeuot=5" >"$CONF"
err=$(as_user srun -N1 -n1 true 2>&1)
rc=$?
check "srun fails naming the key" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "unknown key .mps_timeuot."' || echo "rc=$rc: $err"
# The user did not write that line and did not know whom to ask.
check "... and says whose line it is" \
    eval 'echo "$err" | grep -q "unknown key .*plugstack.conf line loading cdl_spank.so: ask the administrator"' || echo "$err"
# ... and which file and line: a site loads the plugin from plugstack.conf
# or a file it includes (Debian: plugstack.conf.d/cdl.conf).
check "... naming the file and line (found through PlugStackConfig)" \
    eval 'echo "$err" | grep -q "cdl: plugstack.conf: unknown key .mps_timeuot. .* (at $CONF:1); this is"' || echo "$err"
# The file saved with Windows line endings: the message named the value
# with its carriage return, which the terminal showed as "cores" refused.
printf '%s default_bind=cores\r\n' "$GOOD" >"$CONF"
err=$(as_user srun -N1 -n1 true 2>&1)
rc=$?
check "CRLF: srun fails naming Windows line endings, with no carriage return in the message" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "Windows line endings" && ! echo "$err" | grep -q "$(printf "\r")"' ||
    echo "rc=$rc: $err" | cat -A
echo "$GOOD mps_timeuot=5" >"$CONF"
err=$(as_user sbatch --wrap true 2>&1)
rc=$?
check "sbatch fails naming the key" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "unknown key .mps_timeuot."' || echo "rc=$rc: $err"

# The running job ends: its epilog runs with the bad line on both nodes.
touch "$FLAG"
state=$(wait_job "$job")
check "the running job completes" eval 'echo "$state" | grep -q "JobState=COMPLETED"' ||
    echo "$state"
check "both nodes idle after the epilog, none drained" both_idle
check "the epilog logged the error naming the key, file and line" \
    grep -q "unknown key 'mps_timeuot' .* (at $CONF:1); ignored in the job prolog/epilog" \
    "$CDL_CLUSTER_DIR/log/slurmd.n1.log" "$CDL_CLUSTER_DIR/log/slurmd.n2.log"
check "the epilog logged the error naming the key" \
    grep -q "unknown key 'mps_timeuot'.*ignored in the job prolog/epilog" \
    "$CDL_CLUSTER_DIR/log/slurmd.n1.log" "$CDL_CLUSTER_DIR/log/slurmd.n2.log"

# slurmd starts with the bad line (it logs it).
check "slurmd restarts with the bad key" "$SLURM_TESTS_DIR/cluster.sh" restart "$CDL_CLUSTER_DIR" n1
check "slurmd logged the error at start" \
    grep -q "unknown key 'mps_timeuot'.*ignored in slurmd" "$CDL_CLUSTER_DIR/log/slurmd.n1.log"

# With `optional` (how the installed snippet loads the plugin) a failed
# init drops the plugin: the srun of a job submitted with --cdl-ddp before
# the mistake ran its step without the options (no RANK, every task alone,
# srun succeeded). It must fail naming the problem; an srun of a job that
# asked for nothing runs (the error is printed).
user_script ddp-after-flag.sh <<EOF
#!/bin/sh
i=0
while [ ! -e "$FLAG.2" ] && [ \$i -lt 1200 ]; do sleep 0.05; i=\$((i + 1)); done
srun sh -c 'echo "task \$SLURM_PROCID RANK=\${RANK-unset}"'
EOF
echo "$GOOD" >"$CONF"
job=$(submit -N1 -n2 --cdl-ddp -o "$WORK/job2.out" ./ddp-after-flag.sh)
wait_until "$JOB_TIMEOUT" sh -c "squeue -h -j $job -o %T | grep -qx RUNNING" ||
    fail "job $job did not start"
echo "$GOOD mps_timeuot=5" | sed 's/^required /optional /' >"$CONF"
touch "$FLAG.2"
state=$(wait_job "$job")
cat "$WORK/job2.out"
check "optional, job submitted with --cdl-ddp: its srun fails naming the option and the key" \
    eval 'echo "$state" | grep -q "JobState=FAILED" &&
          grep -q "cdl: --cdl-ddp, asked for by this job .*cannot be honoured.*mps_timeuot" "$WORK/job2.out"'
check "... and no task ran without the contract" eval '! grep -q "RANK=unset" "$WORK/job2.out"'
err=$(as_user srun -N1 -n1 true 2>&1)
rc=$?
check "optional, an srun without the options runs and prints the error" \
    eval '[ $rc = 0 ] && echo "$err" | grep -q "unknown key .mps_timeuot."' || echo "rc=$rc: $err"

# Fixed: jobs run again on the restarted node.
echo "$GOOD" >"$CONF"
out=$(as_user srun --quiet -w n1 -N1 -n1 hostname 2>&1)
check "after the fix, srun runs on the restarted node" test "$out" = "$(hostname)" || echo "$out"
# With `optional` Slurm ignores a failing task hook and runs the task
# anyway: an error found on the node (--cdl-mps without GPUs, -m arbitrary)
# used to be printed while every task ran without the contract, and srun
# succeeded. The tasks must fail as with `required`.
echo "$GOOD" | sed 's/^required /optional /' >"$CONF"
err=$(as_user srun -N1 -n2 --cdl-mps sh -c 'echo "ran RANK=${RANK-unset}"' 2>&1)
rc=$?
check "optional: --cdl-mps without GPUs fails every task with the message, none ran" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "no GPUs on this node" && ! echo "$err" | grep -q "^ran"' ||
    echo "rc=$rc: $err"
printf 'n2\nn1\n' >"$WORK/hosts"
chmod 0644 "$WORK/hosts"
err=$(as_user_env SLURM_HOSTFILE="$WORK/hosts" -- srun -N2 -n2 -m arbitrary --cdl-ddp \
      sh -c 'echo "ran RANK=${RANK-unset}"' 2>&1)
rc=$?
check "optional: -m arbitrary fails every task with the message, none ran" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "with -m arbitrary" && ! echo "$err" | grep -q "^ran"' ||
    echo "rc=$rc: $err"
out=$(as_user srun -N1 -n2 --cdl-ddp sh -c 'echo "ran RANK=${RANK-unset}"' 2>&1)
check "optional: a good step runs with the contract" \
    test "$(echo "$out" | grep '^ran' | sort | tr '\n' ' ')" = "ran RANK=0 ran RANK=1 "
echo "$GOOD" >"$CONF"

# A node whose plugstack.conf is wrong while the submit host's is right:
# srun (reading login.conf, whose PlugStackConfig is a good copy) forwards
# --cdl-ddp, and slurmstepd on the nodes reads the wrong file. With
# `optional` the step used to run without the contract; with either
# keyword its tasks must fail naming the key, and a step without options
# must run.
sed "s|^PlugStackConfig=.*|PlugStackConfig=$WORK/login-plugstack.conf|" "$SLURM_CONF" >"$WORK/login.conf"
echo "$GOOD" >"$WORK/login-plugstack.conf"
chmod 0644 "$WORK/login.conf" "$WORK/login-plugstack.conf"
for kw in optional required; do
    echo "$GOOD mps_timeuot=5" | sed "s/^required /$kw /" >"$CONF"
    err=$(as_user_env SLURM_CONF="$WORK/login.conf" -- srun -N2 -n2 --cdl-ddp \
          sh -c 'echo "ran RANK=${RANK-unset}"' 2>&1)
    rc=$?
    check "$kw, wrong file on the nodes only: --cdl-ddp fails every task naming the key, none ran" \
        eval '[ $rc != 0 ] && [ "$(echo "$err" | grep -c "cannot be honoured on this node: .*unknown key .mps_timeuot.")" = 2 ] &&
              ! echo "$err" | grep -q "^ran"' || echo "rc=$rc: $err"
    out=$(as_user_env SLURM_CONF="$WORK/login.conf" -- srun -N2 -n2 sh -c 'echo plain' 2>&1)
    check "$kw, wrong file on the nodes only: a step without options runs" \
        test "$(echo "$out" | grep -c '^plain$')" = 2 || echo "$out"
done
echo "$GOOD" >"$CONF"

# The plugin named twice: a line in plugstack.conf and the packaged
# plugstack.conf.d/cdl.conf, or two builds at different paths. With one
# path every hook ran once per line on one state (the binding map printed
# twice, the later line's settings silently winning); with two, Slurm
# disabled the second copy's options and its settings were silently lost.
# The first line applies; the later one says so, naming both files.
count_twice() { grep -h "loads cdl_spank.so twice" "$CDL_CLUSTER_DIR"/log/slurmd.n*.log | wc -l; }
copy=$CDL_CLUSTER_DIR/bin/other/cdl_spank.so
mkdir -p "${copy%/*}" && cp "$(readlink -f "$CDL_SPANK_SO")" "$copy"
so=$(echo "$GOOD" | awk '{print $2}')
for first in "$so" "$copy"; do
    { echo "$GOOD master_addr=hostname:-ib" | sed "s|^required [^ ]*|required $first|"; echo "$GOOD"; } >"$CONF"
    logged=$(count_twice)
    out=$(as_user srun -w n1 -N1 -n2 --cdl-ddp --cdl-bind=cores,verbose \
          sh -c 'echo "ran addr=$MASTER_ADDR"' 2>&1)
    rc=$?
    check "listed twice ($first first): the first line's settings apply, hooks run once" \
        eval '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "^ran addr=n1-ib$")" = 2 ] &&
              [ "$(echo "$out" | grep -c "^cdl: --cdl-bind=cores: task")" = 2 ]' || echo "rc=$rc: $out"
    check "listed twice ($first first): srun names both files" \
        eval 'echo "$out" | grep -qF "loads cdl_spank.so twice ($first, then $so)"' || echo "$out"
    check "listed twice ($first first): the slurmd log says so" test "$(count_twice)" -gt "$logged"
done
echo "$GOOD" >"$CONF"

check "nodes idle at the end" both_idle
finish
