#!/bin/bash
# MASTER_PORT never collides between concurrent steps on one node: the
# deterministic choice from (job, step) without reserved ports, and Slurm's
# reserved ports (MpiParams=ports=, SLURM_STEP_RESV_PORTS) when configured.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools

# Two steps that wait for each other (each writes its port, then waits for
# the other's file) so they certainly overlap in time; bounded by timeout.
write_scripts() {
user_script step.sh <<'EOF'
#!/bin/sh
# step.sh NAME OTHER
echo "$MASTER_PORT ${SLURM_STEP_RESV_PORTS-none}" > "ports.$1.tmp" && mv "ports.$1.tmp" "ports.$1"
i=0
while [ ! -e "ports.$2" ]; do
    i=$((i + 1)); [ $i -lt 400 ] || { echo "no overlap with $2" >&2; exit 1; }
    sleep 0.05
done
EOF
user_script two_steps.sh <<'EOF'
#!/bin/sh
rm -f ports.a ports.b
srun -N1 -n1 -w n1 --exact --cdl-ddp ./step.sh a b &
srun -N1 -n1 -w n1 --exact --cdl-ddp ./step.sh b a &
wait
echo "a=$(cat ports.a) b=$(cat ports.b)"
EOF
}

concurrent_ports() {   # prints "PORT_A RESV_A PORT_B RESV_B"
    as_user salloc -N1 -n2 -w n1 ./two_steps.sh 2>/dev/null | sed -n 's/^a=\(.*\) b=\(.*\)$/\1 \2/p'
}

start_cluster
write_scripts
read -r pa ra pb rb < <(concurrent_ports)
echo "no reservation: steps got $pa and $pb (reserved: $ra $rb)"
check "two concurrent steps on one node: different MASTER_PORTs" \
    eval '[ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ]'
check "both in the admin range 41000-41999" \
    eval '[ "$pa" -ge 41000 ] && [ "$pa" -le 41999 ] && [ "$pb" -ge 41000 ] && [ "$pb" -le 41999 ]'

# Two jobs sharing node n1, one step each, at the same time.
user_script one_job.sh <<'EOF'
#!/bin/sh
srun -n1 --cdl-ddp ./step.sh "$1" "$2"
EOF
rm -f "$WORK"/ports.*
id1=$(submit -w n1 -n1 -o j1.out ./one_job.sh j1 j2)
id2=$(submit -w n1 -n1 -o j2.out ./one_job.sh j2 j1)
wait_job "$id1" >/dev/null
wait_job "$id2" >/dev/null
p1=$(cut -d' ' -f1 "$WORK/ports.j1" 2>/dev/null)
p2=$(cut -d' ' -f1 "$WORK/ports.j2" 2>/dev/null)
echo "two jobs on n1: $p1 and $p2"
check "two concurrent jobs on one node: different MASTER_PORTs" \
    eval '[ -n "$p1" ] && [ -n "$p2" ] && [ "$p1" != "$p2" ]'

# A malformed SLURM_STEP_RESV_PORTS in the job's environment: a clear error.
err=$(as_user_env SLURM_STEP_RESV_PORTS='12a;x' -- srun -N1 -n1 --cdl-ddp true 2>&1)
rc=$?
check "a bad SLURM_STEP_RESV_PORTS fails the step with a message" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "SLURM_STEP_RESV_PORTS"'
stop_cluster

# With ports reserved by Slurm the plugin uses the first reserved port.
CDL_RESV_PORTS=1 start_cluster
write_scripts
read -r pa ra pb rb < <(concurrent_ports)
echo "reserved: steps got $pa ($ra) and $pb ($rb)"
check "reserved ports: MASTER_PORT is the first of SLURM_STEP_RESV_PORTS" \
    eval '[ "$pa" = "${ra%%[-,]*}" ] && [ "$pb" = "${rb%%[-,]*}" ]'
check "reserved ports: different MASTER_PORTs" eval '[ -n "$pa" ] && [ "$pa" != "$pb" ]'

finish
