#!/bin/bash
# The administrator's plugstack.conf settings at work in srun and
# slurmstepd (both re-read plugstack.conf at every start), and strict
# parsing: an unknown key or a bad value fails with a message naming it.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster
CONF=$CDL_CLUSTER_DIR/etc/plugstack.conf
BASE="required $(readlink -f "$CDL_SPANK_SO") mps_control=$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control runtime_dir=$RUNTIME"
set_args() { echo "$BASE $*" >"$CONF"; }

user_script show.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID addr=$MASTER_ADDR port=$MASTER_PORT pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
full=$(as_user srun -N1 -n1 ./show.sh | sed 's/.*cpus=//')

set_args port_range=45000-45000 master_addr=hostname:-ib default_bind=cores mps_thread_percentage=30
out=$(as_user srun -N2 --ntasks-per-node=2 --gres=gpu:1 --cdl-mps ./show.sh)
echo "$out"
check "port_range=45000-45000: MASTER_PORT=45000" test "$(echo "$out" | grep -c 'port=45000 ')" = 4
check "master_addr=hostname:-ib: MASTER_ADDR=n1-ib" test "$(echo "$out" | grep -c 'addr=n1-ib ')" = 4
check "mps_thread_percentage=30" test "$(echo "$out" | grep -c 'pct=30 ')" = 4
if [[ $full == *[-,]* ]]; then   # more than one CPU: binding is visible
    check "default_bind=cores: tasks bound without --cdl-bind" \
        test "$(echo "$out" | grep -c "cpus=$full\$")" = 0
fi
# Compared whole: only the task's output (--quiet: srun's own "queued and
# waiting" lines would mix in).
out=$(as_user srun --quiet -N1 -n1 ./show.sh)
check "default_bind applies to --cdl-ddp steps only" test "$(echo "$out" | sed 's/.*cpus=//')" = "$full"

# ".invalid" never resolves (RFC 2606), whatever the DNS of the test host.
set_args master_addr=ip:.invalid
err=$(as_user srun -N1 -n1 --cdl-ddp ./show.sh 2>&1)
rc=$?
check "master_addr=ip with an unresolvable node name: the step fails naming it" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "cannot resolve node name .n[12].invalid."' || echo "rc=$rc: $err"

set_args max_replicas_per_gpu=2
rm -f "$RECORDS"/rec.*
err=$(as_user srun -N1 -n3 --gres=gpu:1 --cdl-mps=3 ./show.sh 2>&1)
rc=$?
check "max_replicas_per_gpu=2: --cdl-mps=3 refused" eval '[ $rc != 0 ] && echo "$err" | grep -q "1..2"'
err=$(as_user srun -N1 -n3 --gres=gpu:1 --cdl-mps ./show.sh 2>&1)
rc=$?
check "max_replicas_per_gpu=2: 3 tasks on 1 GPU refused" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "more than the administrator.s max_replicas_per_gpu=2"'

# secret_key= (multi-node --cdl-ddp steps): owned by root, SlurmUser (root
# here) or munge, nothing else. The old rule guessed from the uid: www-data
# (33, an unrelated service) was accepted. A refused key fails the step,
# with the reason on srun's stderr and in the slurmd log; slurmd stays up.
KEYS=$CDL_CLUSTER_DIR/keys
mkdir -p "$KEYS" && chmod 0755 "$KEYS"
install -m 0600 "$CDL_CLUSTER_DIR/munge/munge.key" "$KEYS/site.key"
set_args secret_key=$KEYS/site.key
out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./show.sh 2>&1)
check "secret_key owned by root: a two-node step runs" test "$(echo "$out" | grep -c '^T')" = 2
for owner in "$CDL_TEST_USER" www-data; do
    getent passwd "$owner" >/dev/null || continue
    chown "$owner" "$KEYS/site.key"
    err=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./show.sh 2>&1)
    rc=$?
    check "secret_key owned by $owner: the step fails, naming the owner and the rule" \
        eval '[ $rc != 0 ] && ! echo "$err" | grep -q "^T" &&
              echo "$err" | grep -q "secret_key=$KEYS/site.key is owned by uid [0-9]* ($owner).*root, SlurmUser (root, in .*) or munge"' ||
        echo "rc=$rc: $err"
    check "... said in the slurmd log" grep -q "secret_key=$KEYS/site.key is owned by uid [0-9]* ($owner)" \
        "$CDL_CLUSTER_DIR/log/slurmd.n1.log"
    check "... and both slurmd still run" eval 'kill -0 $(cat "$CDL_CLUSTER_DIR"/run/harness.slurmd.n[12].pid)'
done
chown root "$KEYS/site.key"
out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./show.sh 2>&1)
check "given back to root: the step runs again" test "$(echo "$out" | grep -c '^T')" = 2

# Strict arguments: every srun fails, naming the culprit.
set_args frobnicate=1
err=$(as_user srun -N1 -n1 true 2>&1)
rc=$?
check "unknown key: srun fails naming it" eval '[ $rc != 0 ] && echo "$err" | grep -q "unknown key .frobnicate."'
set_args port_range=20-10
err=$(as_user srun -N1 -n1 true 2>&1)
rc=$?
check "bad value: srun fails naming it" eval '[ $rc != 0 ] && echo "$err" | grep -q "port_range=20-10"'
echo "required $(readlink -f "$CDL_SPANK_SO") runtime_dir=relative/dir" >"$CONF"
err=$(as_user sbatch --wrap true 2>&1)
rc=$?
check "relative runtime_dir: sbatch fails too" eval '[ $rc != 0 ] && echo "$err" | grep -q "runtime_dir=relative/dir is not an absolute path"'

# The control binary must be the admin's: missing, or writable by others.
echo "required $(readlink -f "$CDL_SPANK_SO") mps_control=/nonexistent/nvidia-cuda-mps-control runtime_dir=$RUNTIME" >"$CONF"
err=$(as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps true 2>&1)
rc=$?
check "missing mps_control: the step fails naming the path" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "mps_control=/nonexistent/nvidia-cuda-mps-control"'
out=$(as_user srun -N1 -n1 --cdl-ddp ./show.sh 2>&1)
check "missing mps_control does not affect --cdl-ddp" eval 'echo "$out" | grep -q "^T0 "'
set_args
chmod 0777 "$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control"
err=$(as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps true 2>&1)
rc=$?
check "world-writable mps_control refused" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "must be owned by root and not writable by group or others"'
chmod 0755 "$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control"
mkdir -p "$RUNTIME" && chmod 1777 "$RUNTIME"
err=$(as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps true 2>&1)
rc=$?
check "world-writable runtime_dir refused" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "runtime_dir=.* is writable by everyone" && ! echo "$err" | grep -q chmod'
chmod 0755 "$RUNTIME"
out=$(as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps ./show.sh 2>&1)
check "fixed again: --cdl-mps runs" eval 'echo "$out" | grep -q "^T0 "'

# docs/admin.md's "Checking an installation": cluster.sh from the build tree
# with no variables (it said "CDL_SPANK_SO is not a file: unset").
doc=$(mktemp -d /tmp/cdl-doc-cluster.XXXXXX)
out=$(cd "$top_builddir" && env -u CDL_SPANK_SO -u CDL_FAKE_MPS -u SLURM_CONF \
      "$(cd "$top_srcdir" && pwd)/tests/slurm/cluster.sh" start "$doc/c" 2>&1)
check "the documented cluster.sh start runs from the build tree without variables" \
    eval '[ -f "$doc/c/env.sh" ] && grep -q "^required .*/spank/.libs/cdl_spank.so " "$doc/c/etc/plugstack.conf"' ||
    echo "$out"
"$SLURM_TESTS_DIR/cluster.sh" stop "$doc/c" >/dev/null 2>&1
check "... and cluster.sh stop removes it" test ! -e "$doc/c"
rmdir "$doc"
finish
