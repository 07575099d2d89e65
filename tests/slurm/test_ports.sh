#!/bin/bash
# MASTER_PORT: what the design guarantees (docs/admin.md, Ports).
#  - Without reserved ports, the steps of one job never share a port (a hash
#    of job and step); two jobs on one node may meet, and then rank 0's
#    store fails with a message that says what to do, rather than joining
#    the other job's store. (The suite used to assert that two jobs never
#    meet, which the design does not promise.)
#  - With Slurm's reserved ports (MpiParams=ports=, SLURM_STEP_RESV_PORTS)
#    concurrent steps never meet; the first reserved port is used, and a
#    malformed or out-of-range list is refused (99999 does not wrap).
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
    i=$((i + 1)); [ $i -lt 1000 ] || { echo "no overlap with $2" >&2; exit 1; }
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
check "both in the admin range $CDL_PORT_LO-$CDL_PORT_HI" \
    eval '[ "$pa" -ge "$CDL_PORT_LO" ] && [ "$pa" -le "$CDL_PORT_HI" ] &&
          [ "$pb" -ge "$CDL_PORT_LO" ] && [ "$pb" -le "$CDL_PORT_HI" ]'

# A malformed SLURM_STEP_RESV_PORTS in the job's environment: a clear error.
err=$(as_user_env SLURM_STEP_RESV_PORTS='12a;x' -- srun -N1 -n1 --cdl-ddp true 2>&1)
rc=$?
check "a bad SLURM_STEP_RESV_PORTS fails the step with a message" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "SLURM_STEP_RESV_PORTS"'
err=$(as_user_env SLURM_STEP_RESV_PORTS=99999 -- srun -N1 -n1 --cdl-ddp true 2>&1)
rc=$?
check "SLURM_STEP_RESV_PORTS=99999 is refused, not wrapped to 34463" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "99999"'
# Without MpiParams=ports= Slurm refuses srun --resv-ports: the docs send
# users to the site for reserved ports, not to that option alone.
err=$(as_user srun -N1 -n1 --resv-ports=1 --cdl-ddp true 2>&1)
rc=$?
check "without MpiParams=ports=, srun --resv-ports fails in Slurm (docs/slurm-plugin.md)" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "more ports than can be reserved"' || echo "$err"
stop_cluster

# Two steps that meet on one port (a range of one port makes it certain, as
# two jobs can by chance): the second one's rank 0 cannot bind and says why;
# the first keeps its port.
DIST_CHECK=$(readlink -f "$top_builddir/tests/dist/dist_check" 2>/dev/null)
if [ -x "$DIST_CHECK" ] && runuser -u "$CDL_TEST_USER" -- test -x "$DIST_CHECK"; then
    # The one port is the first of this cluster's own window (cluster.sh
    # keeps the windows of clusters running beside it apart), narrowed in
    # plugstack.conf, which srun and slurmstepd read at every start. A
    # random port of 10000-19999 could lie in the window of another test's
    # cluster on this host: its jobs then met this test's holder, or this
    # holder could not bind and the check below failed.
    start_cluster
    p1=$CDL_PORT_LO
    sed -i "s/ port_range=[0-9]*-[0-9]* / port_range=$p1-$p1 /" "$CDL_CLUSTER_DIR/etc/plugstack.conf"
    grep -q " port_range=$p1-$p1 " "$CDL_CLUSTER_DIR/etc/plugstack.conf" ||
        fail "could not narrow port_range to $p1-$p1 in $CDL_CLUSTER_DIR/etc/plugstack.conf"
    user_script hold.sh <<'EOF'
#!/bin/sh
# Holds MASTER_PORT on MASTER_ADDR like a running store, until told to stop.
exec /usr/bin/python3 -c '
import os, socket, time
s = socket.socket(); s.bind(("127.0.0.1", int(os.environ["MASTER_PORT"]))); s.listen()
open("held", "w").close()
for _ in range(600):
    if os.path.exists("done"): break
    time.sleep(0.05)
'
EOF
    user_script meet.sh <<EOF
#!/bin/sh
rm -f held done
srun -N1 -n1 -w n1 --exact --cdl-ddp ./hold.sh &
i=0; while [ ! -e held ]; do i=\$((i + 1)); [ \$i -lt 400 ] || exit 3; sleep 0.05; done
CDL_TIMEOUT=20 srun -N1 -n2 -w n1 --exact --kill-on-bad-exit=1 --cdl-ddp $DIST_CHECK --backend shm 2>&1
echo "rc=\$?"
touch done
wait
EOF
    out=$(as_user salloc -N1 -n3 -w n1 ./meet.sh 2>&1)
    echo "$out" | grep -E "in use|rc=" | head -3
    check "a taken MASTER_PORT: rank 0 fails, naming the port and the way out" \
        eval 'echo "$out" | grep -q "MASTER_PORT $p1 on host .* is in use" &&
              echo "$out" | grep -q -- "MpiParams=ports=" && ! echo "$out" | grep -q "^rc=0"'
    stop_cluster
else
    echo "skip: tests/dist/dist_check is not built or not executable by $CDL_TEST_USER"
fi

# With ports reserved by Slurm the plugin uses the first reserved port.
CDL_RESV_PORTS=1 start_cluster
write_scripts
read -r pa ra pb rb < <(concurrent_ports)
echo "reserved: steps got $pa ($ra) and $pb ($rb)"
check "reserved ports: MASTER_PORT is the first of SLURM_STEP_RESV_PORTS" \
    eval '[ "$pa" = "${ra%%[-,]*}" ] && [ "$pb" = "${rb%%[-,]*}" ]'
check "reserved ports: different MASTER_PORTs" eval '[ -n "$pa" ] && [ "$pa" != "$pb" ]'

finish
