#!/bin/bash
# Hostile inputs: odd and overlong option values, ../ in values, LD_PRELOAD,
# PATH and MPS variables in the job's environment, a user tampering with
# its MPS directories. The step fails with a clear message or the value is
# ignored, and nothing runs as root.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster
EVIL_SO=$top_builddir/tests/slurm/.libs/evil-preload.so
[ -f "$EVIL_SO" ] || skip "tests/slurm/evil-preload.la not built"
install -m 0755 "$EVIL_SO" "$CDL_CLUSTER_DIR/bin/evil.so"
mkdir -m 1777 "$CDL_CLUSTER_DIR/bin/evil-marks"
MARKS=$CDL_CLUSTER_DIR/bin/evil-marks

user_script mark.sh <<'EOF'
#!/bin/sh
touch "ran.$SLURM_PROCID"
echo "T$SLURM_PROCID pipe=${CUDA_MPS_PIPE_DIRECTORY-unset} rank=${RANK-unset}"
EOF

# refused OPTION...: srun with these options fails, says why, runs nothing.
refused() {
    local want=$1; shift
    rm -f "$WORK"/ran.*
    local err rc
    err=$(as_user srun -N1 -n1 "$@" ./mark.sh 2>&1)
    rc=$?
    [ $rc != 0 ] && echo "$err" | grep -q -- "$want" && ! ls "$WORK"/ran.* >/dev/null 2>&1 ||
        { echo "rc=$rc: $err" | head -5; return 1; }
}

long=$(printf 'a%.0s' $(seq 5000))
check "overlong --cdl-bind value refused" refused "--cdl-bind=aaaaaaaaaaaaaaaaaaaaaaaa...: expected" "--cdl-bind=$long"
check "overlong --cdl-mps value refused" refused "--cdl-mps=9999999999999999...: expected" "--cdl-mps=$(printf '9%.0s' $(seq 3000))"
check "--cdl-mps=../../etc refused" refused "--cdl-mps=../../etc: expected" --cdl-mps=../../etc
check "--cdl-mps='1;id' refused" refused "--cdl-mps=1;id: expected" "--cdl-mps=1;id"
check "--cdl-mps=999 refused (above max_replicas_per_gpu)" refused "1..16" --cdl-mps=999
check "--cdl-bind='cores,\$(id)' refused" refused "--cdl-bind=cores,\$(id): expected" '--cdl-bind=cores,$(id)'
check "--cdl-bind=../cores refused" refused "--cdl-bind=../cores: expected" --cdl-bind=../cores
check "--cdl-bind with a newline refused" refused "expected none, cores or closest" "--cdl-bind=cores
verbose"

# A hostile environment: LD_PRELOAD, a PATH with a fake MPS control first,
# MPS variables pointing elsewhere. The step runs with the plugin's values.
mkdir -p "$WORK/evil-bin"
cat >"$WORK/evil-bin/nvidia-cuda-mps-control" <<EOF
#!/bin/sh
echo "\$(id -u) \$0 \$*" >> "$MARKS/path-fake-ran"
EOF
chmod 0755 "$WORK/evil-bin/nvidia-cuda-mps-control"
chown -R "$CDL_TEST_USER" "$WORK/evil-bin"
# The MPS directories it names are this run's own (absent; in a folder any
# account may write, as /tmp): fixed names in /tmp were shared with every
# other run of this test on the host.
EVIL_DIRS=$(mktemp -d "$CDL_CLUSTER_DIR/evil.XXXXXX") && chmod 1777 "$EVIL_DIRS" ||
    { echo "cannot make a folder for the hostile MPS directories"; exit 1; }
out=$(as_user_env LD_PRELOAD="$CDL_CLUSTER_DIR/bin/evil.so" PATH="$WORK/evil-bin:/usr/bin:/bin" \
        CUDA_MPS_PIPE_DIRECTORY="$EVIL_DIRS/evil-pipe" CUDA_MPS_LOG_DIRECTORY="$EVIL_DIRS/evil-log" \
        -- srun -N2 --ntasks-per-node=2 --gres=gpu:1 --cdl-mps --cdl-bind=cores ./mark.sh)
echo "$out"
check "hostile environment: the step ran on all 4 tasks" test "$(echo "$out" | grep -c '^T')" = 4
check "CUDA_MPS_PIPE_DIRECTORY from the job's environment replaced by the plugin's" \
    test "$(echo "$out" | grep -c "pipe=$RUNTIME/")" = 4
check "the PATH's nvidia-cuda-mps-control never ran" test ! -e "$MARKS/path-fake-ran"
check "LD_PRELOAD was live for the user's own processes (the test can fail)" \
    eval 'grep -l "^$TEST_UID $TEST_UID " "$MARKS"/mark.* >/dev/null 2>&1'
check "no process with root ids loaded the LD_PRELOAD library" \
    eval '! grep -v "^$TEST_UID $TEST_UID " "$MARKS"/mark.* 2>/dev/null | grep -q .'
check "no slurmstepd or slurmd loaded it" eval '! grep -q "slurm" "$MARKS"/mark.* 2>/dev/null'
check "the daemons' environment had neither LD_PRELOAD nor the user's PATH" \
    test "$(count_records daemon '^env=LD_PRELOAD')$(count_records daemon 'evil-bin')$(count_records daemon 'evil-pipe')" = 000
check "nothing made the job's MPS directories" test ! -e "$EVIL_DIRS/evil-pipe" -a ! -e "$EVIL_DIRS/evil-log"
check "the daemons are the admin's binary" \
    test "$(count_records daemon "^argv0=$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control\$")" = 2
check "every run of the control program was as the job user" \
    test "$(grep -l '^uid=0$' "$RECORDS"/rec.* 2>/dev/null | wc -l)" = 0

# CUDA_VISIBLE_DEVICES from the job's environment: Slurm's gres value wins
# (and without GPUs Slurm removes it); the plugin also refuses odd values
# (unit-tested: test_spank_contract, test_gpus_parse).
# The file it would create is this run's own (in a folder any account may
# write, as /tmp): /tmp/pwned was one name for every run on the host, so a
# run failed on a file another left, or removed.
rm -f "$RECORDS"/rec.*
PWNED=$EVIL_DIRS/pwned
out=$(as_user_env "CUDA_VISIBLE_DEVICES=0;touch $PWNED" -- srun -N1 -n2 --gres=gpu:1 --cdl-mps ./mark.sh 2>&1)
check "a hostile CUDA_VISIBLE_DEVICES does not reach the daemon" \
    test "$(count_records daemon '^env=CUDA_VISIBLE_DEVICES=0$')$(count_records daemon 'pwned')" = 10
check "no file was created by it" test ! -e "$PWNED"

# Another user's process takes the step's port first (every port of
# port_range on the node's address, and the 64 above it where rank 0's
# store would move: store_proto.h) and poses as rank 0's store: rank 0
# cannot bind, and the other ranks must neither hand the squatter the
# step's secret nor take its answers (they used to send CDL_STORE_TOKEN in
# their hello and go on with whatever it answered). tests/e2e/port-squat.sh
# has the store move when it can.
SQUAT_USER=daemon
CDL_TRAIN_BIN=$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)
if [ -x /usr/bin/python3 ] && id -u "$SQUAT_USER" >/dev/null 2>&1 && [ -n "$CDL_TRAIN_BIN" ] &&
   runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN"; then
    SQUAT=$CDL_CLUSTER_DIR/squat
    mkdir -m 0700 "$SQUAT" && chown "$SQUAT_USER" "$SQUAT"
    cat >"$SQUAT/squat.py" <<'PYEOF'
import selectors, socket, struct, sys, threading
lo, hi, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()
def serve(c):
    # Answers every request OK, as a store would; keeps every byte.
    with c:
        while True:
            try:
                b = c.recv(65536)
            except OSError:
                return
            if not b:
                return
            with lock, open(out + "/got", "ab") as f:
                f.write(b)
            try:
                c.sendall(struct.pack("<IIQ", 0x53444c43, 0, 0))
            except OSError:
                return
sel = selectors.DefaultSelector()
for p in range(lo, hi + 1):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", p))
    except OSError as e:
        sys.exit("squat.py: port %d: %s" % (p, e))
    s.listen(16)
    sel.register(s, selectors.EVENT_READ)
open(out + "/ready", "w").close()
while True:
    for k, _ in sel.select():
        c, _ = k.fileobj.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
PYEOF
    setpriv --reuid="$SQUAT_USER" --regid="$(id -g "$SQUAT_USER")" --clear-groups \
        /usr/bin/python3 "$SQUAT/squat.py" "$CDL_PORT_LO" "$((CDL_PORT_HI + 64 > 65535 ? 65535 : CDL_PORT_HI + 64))" "$SQUAT" \
        >"$SQUAT/log" 2>&1 &
    squat_pid=$!
    wait_until 20 test -e "$SQUAT/ready" || cat "$SQUAT/log"   # names the port it could not take
    user_script squatted.sh <<EOF
#!/bin/sh
printf '%s' "\$CDL_STORE_TOKEN" > token.\$SLURM_PROCID
exec "$CDL_TRAIN_BIN" --dataset synthetic --synthetic-size 200 --epochs 1 --workers 0 -q \
    --batch-size 8 --max-steps 2
EOF
    rm -f "$WORK"/token.*
    out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./squatted.sh 2>&1)
    rc=$?
    kill "$squat_pid"
    wait "$squat_pid" 2>/dev/null
    token=$(cat "$WORK/token.1" 2>/dev/null)
    check "squatted port: the step fails (rc=$rc)" test "$rc" != 0
    check "squatted port: rank 1 connected to the squatter" test -s "$SQUAT/got"
    check "squatted port: rank 1 says the listener is not the store" \
        eval 'echo "$out" | grep -q "rank 1: the process listening on .* is not this run.s store"' ||
        echo "$out" | tail -5
    check "squatted port: rank 0 names the account that holds the port" \
        eval 'echo "$out" | grep -q "rank 0: error: MASTER_PORT [0-9]* on host .* is in use by a process of another account, uid $(id -u "$SQUAT_USER") ($SQUAT_USER)"' ||
        echo "$out" | grep "rank 0" | head -3
    check "squatted port: the squatter never got the step's secret" \
        eval '[ ${#token} -ge 32 ] && ! grep -a -q -F "$token" "$SQUAT/got"'
else
    echo "skipped: the squatting case (needs /usr/bin/python3, user $SQUAT_USER, cli/cdl-train)"
fi

# The user tampers with its MPS directory: the pid file names a root
# process, the log directory becomes a link to a root-owned folder. Then
# slurmstepd dies, and the epilog cleans up as root.
mkdir -m 0755 "$CDL_CLUSTER_DIR/victim"
echo keep >"$CDL_CLUSTER_DIR/victim/file"
sleep 300 </dev/null >/dev/null 2>&1 &
root_pid=$!
echo "$root_pid" >"$WORK/root.pid"
chmod 0644 "$WORK/root.pid"
user_script tamper.sh <<EOF
#!/bin/sh
echo \$SLURM_JOB_ID > job.id
echo \$\$ > task.\$SLURM_LOCALID.pid
[ "\$SLURM_LOCALID" = 0 ] || exec sleep 60
d=\${CUDA_MPS_PIPE_DIRECTORY%/pipe}
cat root.pid > "\$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
mv "\$d/log" "\$d/log.old" && ln -s "$CDL_CLUSTER_DIR/victim" "\$d/log" && touch tampered
exec sleep 60
EOF
rm -f "$WORK/tampered" "$WORK"/task.*.pid "$WORK/job.id"
as_user srun -N1 -n2 -w n1 --gres=gpu:1 --cdl-mps ./tamper.sh >/dev/null 2>&1 &
# Each task writes its pid before it execs sleep (the same pid): task 0's
# parent is the step's slurmstepd. (A pid from scontrol listpids may be a
# short-lived child of the script, gone by the time its parent is asked.)
# The job's id from the job itself: squeue's first line may be the
# squatting job, still completing, and scancel would end that one.
tamper_ready() { [ -e "$WORK/tampered" ] && [ -s "$WORK/task.0.pid" ] && [ -s "$WORK/task.1.pid" ]; }
wait_until 60 tamper_ready
job=$(cat "$WORK/job.id" 2>/dev/null)
tasks=$(cat "$WORK"/task.*.pid 2>/dev/null)
task=$(cat "$WORK/task.0.pid" 2>/dev/null)
stepd=$(ps -o ppid= -p "${task:-0}" 2>/dev/null | tr -d ' ')
check "tampering step is running" eval '[ -e "$WORK/tampered" ] && [ "$(ps -o comm= -p "${stepd:-0}")" = slurmstepd ]' ||
    { echo "job=$job task=$task stepd=$stepd; $(ls "$WORK"); step's log:"
      grep -F "[$job.0]" "$CDL_CLUSTER_DIR/log/slurmd.n1.log" | tail -n 20; ps -ef --forest | grep -B2 -A4 "[t]amper"; }
[ "$(ps -o comm= -p "${stepd:-0}")" = slurmstepd ] && kill -KILL "$stepd"
[ -n "$job" ] && scancel "$job"
check "epilog cleaned the tampered directory" wait_until 30 runtime_empty
check "epilog stopped the daemon (quit over its control socket)" wait_until 30 no_user_daemon
check "the root process named in the user's pid file is alive" kill -0 "$root_pid"
check "the link target kept its content" test "$(cat "$CDL_CLUSTER_DIR/victim/file")" = keep
kill "$root_pid"
# shellcheck disable=SC2086
[ -n "$tasks" ] && kill -KILL $tasks 2>/dev/null
wait

finish
