#!/bin/bash
# --cdl-bind on the test machine (the plans themselves are unit-tested on
# saved topologies): tasks get disjoint whole-core shares of the step's
# CPUs, verbose prints the map, Slurm's own binding wins.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster

user_script aff.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF

expand() {   # "0-2,5" -> "0 1 2 5"
    local part out=()
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then out+=($(seq "${part%-*}" "${part#*-}")); else out+=("$part"); fi
    done
    echo "${out[@]}"
}

full=$(as_user srun -N1 -n1 ./aff.sh | cut -d' ' -f2)
ncpu=$(expand "$full" | wc -w)
echo "step CPUs without binding: $full ($ncpu)"

out=$(as_user srun -N1 -n2 --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
echo "$out"; cat "$WORK/err"
a=$(expand "$(echo "$out" | sed -n 's/^T0 //p')")
b=$(expand "$(echo "$out" | sed -n 's/^T1 //p')")
subset() { local x; for x in $1; do [[ " $2 " == *" $x "* ]] || return 1; done; }
check "cores: each task bound inside the step's CPUs" eval 'subset "$a" "$(expand "$full")" && subset "$b" "$(expand "$full")"'
check "cores: each task got at least one CPU" eval '[ -n "$a" ] && [ -n "$b" ]'
if [ "$ncpu" -ge 2 ]; then
    check "cores: the two tasks' CPUs are disjoint" eval '! subset "$a" "$b" && ! subset "$b" "$a"'
fi
check "verbose: the map names each task" \
    test "$(grep -c 'cdl: --cdl-bind=cores: task [01] (local [01], GPU -1) -> cores ' "$WORK/err")" = 2

out=$(as_user srun -N1 -n2 --cdl-bind=none ./aff.sh)
check "--cdl-bind=none: no change" test "$(echo "$out" | cut -d' ' -f2 | sort -u)" = "$full"

# The user asked Slurm to bind: the plugin stands back and says why.
out=$(as_user srun -N1 -n2 --cpu-bind=cores --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
check "--cpu-bind given: affinity left to Slurm" test "$(echo "$out" | cut -d' ' -f2 | sort -u)" = "$full"
check "--cpu-bind given: verbose says why" \
    test "$(grep -c 'not binding task [01]: srun --cpu-bind=.* asked Slurm to bind' "$WORK/err")" = 2

# Without verbose it is said once, for the step: the user's --cdl-bind
# does nothing (it used to be silent).
out=$(as_user srun -N1 -n2 --cpu-bind=cores --cdl-bind=cores ./aff.sh 2>"$WORK/err")
check "--cpu-bind and --cdl-bind, no verbose: said once which wins" \
    test "$(grep -c 'cdl: --cdl-bind: not binding: srun --cpu-bind=.*cores.* asked Slurm to bind the tasks (drop --cpu-bind' "$WORK/err")" = 1

# A binding given as a long list (map_cpu for many tasks, mask_cpu on a big
# node) is longer than the plugin's buffer: it read as no binding, and
# --cdl-bind bound over the user's own.
long=$(for i in $(seq 200); do printf '0,'; done)0
out=$(as_user srun -N1 -n2 --cpu-bind=map_cpu:"$long" --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
check "--cpu-bind=map_cpu:<${#long} characters>: the plugin stands back and says why" \
    eval '[ "$(grep -c "not binding task [01]: srun --cpu-bind=.* asked Slurm to bind" "$WORK/err")" = 2 ] &&
          ! grep -q "cdl: --cdl-bind=cores: task" "$WORK/err"' || cat "$WORK/err"

# closest on a machine without GPUs in its topology: like cores, with a note.
out=$(as_user srun -N1 -n2 --gres=gpu:2 --cdl-ddp --cdl-bind=closest,verbose ./aff.sh 2>"$WORK/err")
cat "$WORK/err"
check "closest without GPUs in the topology: bound, with a note" \
    test "$(grep -c 'cdl: --cdl-bind=closest: task [01] (local [01], GPU [01]) -> cores .*not found in the topology' "$WORK/err")" = 2

# More tasks than CPUs: neighbours share, nobody is left unbound.
n=$((ncpu * 2))
out=$(as_user srun -N1 -n"$n" --overcommit --cdl-bind=cores ./aff.sh)
check "$n tasks on $ncpu CPUs: every task bound to one CPU" \
    test "$(echo "$out" | awk '{print $2}' | grep -c '^[0-9]*$')" = "$n"

err=$(as_user srun -N1 -n1 --cdl-bind=sockets ./aff.sh 2>&1)
rc=$?
check "--cdl-bind=sockets refused with the accepted values" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "expected none, cores or closest"'

# default_bind is none here: "verbose" alone bound nothing and printed no
# map, without a word. Refused, saying what to write.
err=$(as_user srun -N1 -n1 --cdl-bind=verbose ./aff.sh 2>&1)
rc=$?
check "--cdl-bind=verbose with default_bind=none refused, saying cores,verbose" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "cdl: --cdl-bind=verbose: .*default_bind) is none.*--cdl-bind=cores,verbose"' || echo "$err"

# TaskPlugin=task/none on nodes shared by jobs: every task may run on the
# whole node, so the plans of two jobs sharing n1 both started at core 0
# (both jobs' tasks on CPU 0, CPU 1 idle). Slurm's step cores now say
# which CPUs are the job's; the nodes have the host's CPUs (CDL_CPUS), so
# Slurm's core numbers are the host's cores.
if [ "$(nproc)" -ge 2 ]; then
    stop_cluster
    CDL_CPUS=$(nproc) start_cluster
    user_script aff.sh <<'EOF'
#!/bin/sh
line="T$SLURM_PROCID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
[ "${1:-}" = hold ] && { echo "$line" >held.tmp && mv held.tmp held; exec sleep 300; }
echo "$line"
EOF
    rm -f "$WORK/held"
    hold=$(submit -w n1 -n1 -c1 -o /dev/null --wrap 'srun --cdl-bind=cores ./aff.sh hold')
    check "task/none: a job holding one CPU of n1 runs" wait_until 30 test -f "$WORK/held"
    other=$(cut -d' ' -f2 "$WORK/held")
    out=$(as_user srun -N1 -w n1 -n1 -c1 --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
    echo "held: $other; $out"; cat "$WORK/err"
    mine=$(echo "$out" | sed -n 's/^T0 //p')
    check "task/none, two jobs on n1: bound to different CPUs ($other, $mine)" \
        eval '[ -n "$other" ] && [ -n "$mine" ] && ! subset "$(expand "$mine")" "$(expand "$other")"'
    scancel "$hold"
    wait_until 30 jobs_gone

    # Two steps of one job side by side (srun in a batch script, as after
    # salloc), each given one CPU by Slurm: bound to their own CPUs. Their
    # environment carries another step's binding (SLURM_CPU_BIND_TYPE/
    # _LIST, as a task of a step task/affinity bound passes them on to an
    # srun it runs): the plan took those masks for the step's CPUs, and
    # both steps went to CPU 0. Each step waits (bounded) for the other, so
    # that they run at the same time.
    user_script pair.sh <<'EOF'
#!/bin/sh
echo "S$SLURM_STEP_ID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" >"step.$SLURM_STEP_ID"
i=0
while [ "$(ls step.* 2>/dev/null | wc -l)" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
EOF
    rm -f "$WORK"/step.*
    job=$(submit -w n1 -N1 -n2 -c1 -o "$WORK/pair.out" --wrap '
        export SLURM_CPU_BIND_TYPE=mask_cpu: SLURM_CPU_BIND_LIST=0x1
        srun -n1 -c1 --exact --cdl-bind=cores,verbose ./pair.sh &
        srun -n1 -c1 --exact --cdl-bind=cores,verbose ./pair.sh &
        wait')
    wait_job "$job" >/dev/null
    cat "$WORK"/step.* "$WORK/pair.out" 2>/dev/null
    s0=$(cut -d' ' -f2 "$WORK/step.0" 2>/dev/null)
    s1=$(cut -d' ' -f2 "$WORK/step.1" 2>/dev/null)
    check "two steps of one job at once, another step's masks in their environment: apart ($s0; $s1)" \
        eval '[ -n "$s0" ] && [ -n "$s1" ] && [ "$s0" != "$s1" ] &&
              ! subset "$(expand "$s0")" "$(expand "$s1")" &&
              grep -q "SLURM_CPU_BIND_LIST is not this step.s binding" "$WORK/pair.out"'
    rm -f "$WORK"/step.* "$WORK/pair.out"

    # srun --overlap: a step beside another of the job. Slurm gives the
    # overlapping step the same first CPU as step 0 (it does not look at
    # what other steps use), so both are bound there, each planned as if
    # alone; the map of the second now says so.
    user_script ovl.sh <<'EOF'
#!/bin/sh
line="S$SLURM_STEP_ID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
[ "${1:-}" = hold ] || { echo "$line"; exit 0; }
echo "$line" >ovl.held.tmp && mv ovl.held.tmp ovl.held
i=0
while [ ! -f ovl.done ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
EOF
    rm -f "$WORK"/ovl.held "$WORK"/ovl.done
    job=$(submit -w n1 -N1 -n2 -c1 -o "$WORK/ovl.out" --wrap '
        srun -n1 -c1 --exact --cdl-bind=cores ./ovl.sh hold &
        i=0
        while [ ! -f ovl.held ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
        srun -n1 -c1 --overlap --cdl-bind=cores,verbose ./ovl.sh
        touch ovl.done
        wait')
    wait_job "$job" >/dev/null
    cat "$WORK/ovl.held" "$WORK/ovl.out" 2>/dev/null
    s0=$(cut -d' ' -f2 "$WORK/ovl.held" 2>/dev/null)
    s1=$(sed -n 's/^S1 //p' "$WORK/ovl.out" 2>/dev/null)
    check "srun --overlap on step 0's CPU: the map says it shares it ($s0; $s1)" \
        eval '[ -n "$s0" ] && [ "$s0" = "$s1" ] &&
              grep -q "cdl: --cdl-bind=cores: task 0 .*; shares PUs $s0 with step 0 of this job (srun --overlap" "$WORK/ovl.out"'
    rm -f "$WORK"/ovl.held "$WORK"/ovl.done "$WORK/ovl.out"

    # srun --hint=nomultithread sets a binding of its own (SLURM_CPU_BIND=
    # quiet,threads): the plugin stood back, saying "srun --cpu-bind=quiet,
    # threads asked Slurm to bind" (never typed), and under task/none
    # nothing bound the tasks at all. It binds them now, one thread a core.
    out=$(as_user srun -N1 -w n1 -n2 --hint=nomultithread --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
    echo "$out"; cat "$WORK/err"
    a=$(expand "$(echo "$out" | sed -n 's/^T0 //p')")
    b=$(expand "$(echo "$out" | sed -n 's/^T1 //p')")
    check "task/none, --hint=nomultithread: --cdl-bind binds, disjoint CPUs ($a; $b)" \
        eval '[ -n "$a" ] && [ -n "$b" ] && ! subset "$a" "$b" && ! subset "$b" "$a" &&
              [ "$(grep -c "task [01] (local [01], GPU -1) -> cores .*one thread per core" "$WORK/err")" = 2 ] &&
              ! grep -q "not binding" "$WORK/err"'
fi

# TaskPlugin=task/affinity, as most sites run it: Slurm binds every task by
# itself and puts the masks it applied into the task's SLURM_CPU_BIND, also
# when the user asked for no binding. That is not the user's --cpu-bind:
# --cdl-bind used to stand back ("srun --cpu-bind=quiet,mask_cpu:... asked
# Slurm to bind") and never bound on such a cluster.
stop_cluster
CDL_TASK_PLUGIN=task/affinity CDL_TASK_PLUGIN_PARAM=autobind=threads start_cluster
user_script aff.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF
out=$(as_user srun -N1 -n2 --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
echo "$out"; cat "$WORK/err"
check "task/affinity, no --cpu-bind: --cdl-bind=cores binds, the map names each task" \
    eval '[ "$(grep -c "cdl: --cdl-bind=cores: task [01] (local [01], GPU -1) -> cores " "$WORK/err")" = 2 ] &&
          ! grep -q "not binding" "$WORK/err"'
a=$(expand "$(echo "$out" | sed -n 's/^T0 //p')")
b=$(expand "$(echo "$out" | sed -n 's/^T1 //p')")
if [ "$ncpu" -ge 2 ]; then
    check "task/affinity: the two tasks' CPUs are disjoint" \
        eval '[ -n "$a" ] && [ -n "$b" ] && ! subset "$a" "$b" && ! subset "$b" "$a"'
fi
out=$(as_user srun -N1 -n2 --hint=nomultithread --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
a=$(expand "$(echo "$out" | sed -n 's/^T0 //p')")
b=$(expand "$(echo "$out" | sed -n 's/^T1 //p')")
check "task/affinity, --hint=nomultithread: --cdl-bind binds (not 'srun --cpu-bind=quiet,threads asked Slurm')" \
    eval '[ "$(grep -c "cdl: --cdl-bind=cores: task [01] .*one thread per core" "$WORK/err")" = 2 ] &&
          [ -n "$a" ] && [ -n "$b" ] && ! subset "$a" "$b"' || cat "$WORK/err"
out=$(as_user srun -N1 -n2 --cpu-bind=cores --cdl-bind=cores,verbose ./aff.sh 2>"$WORK/err")
check "task/affinity, --cpu-bind=cores given: the plugin stands back and says why" \
    test "$(grep -c 'not binding task [01]: srun --cpu-bind=.*cores.* asked Slurm to bind' "$WORK/err")" = 2

# plugstack topology= saved on another kind of node (a 2-socket 16-PU file
# here): the plan used cores this node does not have, and both tasks were
# bound to the same "cores 0 (PUs 0-1)" without a word. Refused now,
# naming the file and both CPU counts.
stop_cluster
big=$(readlink -f "$top_srcdir/tests/topologies/2socket-4gpu-nvml.xml")
if [ "$(getconf _NPROCESSORS_ONLN)" != 16 ]; then
    start_cluster topology="$big"
    user_script aff.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF
    err=$(as_user srun -N1 -n2 --cdl-bind=cores,verbose ./aff.sh 2>&1)
    rc=$?
    echo "$err"
    check "topology= of another machine: the step fails, naming the file and the CPU counts" \
        eval '[ $rc != 0 ] && echo "$err" | grep -q "cdl: --cdl-bind: topology=$big describes a machine with 16 CPUs, this node has [0-9]* online"'
    out=$(as_user srun -N1 -n2 ./aff.sh 2>&1)
    check "... steps without --cdl-bind run as before" test "$(echo "$out" | grep -c '^T[01] ')" = 2
fi

finish
