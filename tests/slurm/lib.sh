# Shared by the Slurm tests (sourced): skip rules, one throw-away cluster per
# test, helpers to run jobs as the unprivileged test user, checks.
#
# A test exits 77 (skipped, with the reason printed) only when it cannot run
# here: not root, or Slurm/munge binaries or the built plugin missing. CI
# runs as root with them installed, so there the tests run.
#
# Every srun/sbatch is wrapped in `timeout`; every wait polls a condition
# with a deadline (no sleep as synchronisation).

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
SLURM_TESTS_DIR=$top_srcdir/tests/slurm
CDL_SPANK_SO=${CDL_SPANK_SO:-$top_builddir/spank/.libs/cdl_spank.so}
CDL_FAKE_MPS=${CDL_FAKE_MPS:-$top_builddir/tests/slurm/fake-mps-control}
CDL_TEST_USER=${CDL_TEST_USER:-nobody}
JOB_TIMEOUT=${JOB_TIMEOUT:-60}
export CDL_SPANK_SO CDL_FAKE_MPS CDL_TEST_USER

skip() { echo "SKIP: $*"; exit 77; }

require_cluster_tools() {
    [ "${CDL_TEST_SCOPE:-}" != unit ] || skip "Slurm test in a unit-only pass (sanitizers, valgrind)"
    [ "$(id -u)" = 0 ] || skip "the Slurm tests need root (slurmd must become the job user)"
    local b
    for b in munged mungekey slurmctld slurmd slurmstepd srun sbatch sinfo squeue scancel sdiag \
             scontrol runuser unshare mount mknod timeout; do
        command -v "$b" >/dev/null 2>&1 || skip "$b not found (install munge slurm-wlm slurmctld slurmd slurm-client)"
    done
    [ -f "$CDL_SPANK_SO" ] || skip "plugin not built ($CDL_SPANK_SO): configure found no slurm/spank.h"
    [ -x "$CDL_FAKE_MPS" ] || skip "fake MPS control not built ($CDL_FAKE_MPS)"
}

FAILED=0
FAILED_CHECKS=
fail() {
    echo "FAIL: $*" >&2
    FAILED=1
    FAILED_CHECKS="$FAILED_CHECKS
  $*"
}
check() {   # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else fail "$what"; return 1; fi
}
finish() {
    [ "$FAILED" = 0 ] && { echo "PASS"; exit 0; }
    echo "--- slurmd n1 log (tail)"; tail -n 30 "$CDL_CLUSTER_DIR/log/slurmd.n1.log" 2>/dev/null
    echo "--- slurmctld log (tail)"; tail -n 30 "$CDL_CLUSTER_DIR/log/slurmctld.log" 2>/dev/null
    # Last, so that CI's excerpt of a failed test's log (its tail) has them.
    echo "--- failed checks:$FAILED_CHECKS"
    exit 1
}

# start_cluster [extra plugstack args]: a fresh cluster for this test.
start_cluster() {
    ETC_BEFORE=$(etc_state)
    CDL_CLUSTER_DIR=$(mktemp -d /tmp/cdl-slurm.XXXXXX)
    trap 'stop_cluster; etc_unchanged' EXIT
    CDL_PLUGSTACK_ARGS="$*" "$SLURM_TESTS_DIR/cluster.sh" start "$CDL_CLUSTER_DIR" ||
        { echo "cluster did not start"; exit 1; }
    . "$CDL_CLUSTER_DIR/env.sh"
    WORK=$CDL_CLUSTER_DIR/work
    TEST_UID=$(id -u "$CDL_TEST_USER")
    TEST_GID=$(id -g "$CDL_TEST_USER")
    RECORDS=$CDL_CLUSTER_DIR/bin/mps-records
    RUNTIME=$CDL_CLUSTER_DIR/cdl
}

stop_cluster() {
    [ -n "${CDL_CLUSTER_DIR:-}" ] && "$SLURM_TESTS_DIR/cluster.sh" stop "$CDL_CLUSTER_DIR"
    CDL_CLUSTER_DIR=
}

# The machine is left as found: the harness edits no /etc/hosts line and
# creates no account. Checked when the test exits (a change fails it).
etc_state() { cat /etc/hosts /etc/passwd /etc/group 2>/dev/null | cksum; }
etc_unchanged() {
    [ "$(etc_state)" = "${ETC_BEFORE:-}" ] && return 0
    echo "FAIL: the test changed /etc/hosts, /etc/passwd or /etc/group" >&2
    exit 1
}

# as_user CMD...: run a Slurm client as the test user, in WORK, bounded.
as_user() {
    (cd "$WORK" && timeout "$JOB_TIMEOUT" runuser -u "$CDL_TEST_USER" -- \
        env SLURM_CONF="$SLURM_CONF" PATH=/usr/local/bin:/usr/bin:/bin "$@")
}

# as_user_env VAR=VALUE... -- CMD...: the same with extra variables.
as_user_env() {
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done
    shift
    (cd "$WORK" && timeout "$JOB_TIMEOUT" runuser -u "$CDL_TEST_USER" -- \
        env SLURM_CONF="$SLURM_CONF" PATH=/usr/local/bin:/usr/bin:/bin "${vars[@]}" "$@")
}

# wait_until SECONDS COMMAND...: poll COMMAND until it succeeds.
wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05   # poll interval only: the condition decides
    done
}

# A script file in WORK readable by the test user.
user_script() {   # user_script NAME <<EOF ... EOF
    cat >"$WORK/$1"
    chmod 0755 "$WORK/$1"
}

runtime_empty() { [ -z "$(ls -A "$RUNTIME" 2>/dev/null)" ]; }
no_user_daemon() { ! pgrep -u "$CDL_TEST_USER" -f "$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control" >/dev/null; }
# No job left in the queue. A squeue that failed (slurmctld slow to answer
# under load) says nothing: an empty output of a failed squeue was taken for
# "gone", and a test went on while its job still ran.
jobs_gone() { local q; q=$(squeue -h 2>/dev/null) && [ -z "$q" ]; }
# job_gone ID: job ID has left the queue (ended, or already purged by
# slurmctld: squeue then fails with "Invalid job id"); false while it is
# pending, running or completing, and when squeue itself failed.
job_gone() {
    local q
    if q=$(squeue -h -j "$1" 2>&1); then [ -z "$q" ]; else case $q in *"Invalid job id"*) ;; *) false ;; esac; fi
}
# running_job: the id of the job now running (tests that run one job at a
# time); a job of an earlier step still completing (its epilog) is not it.
running_job() { squeue -h -t RUNNING -o %i 2>/dev/null | head -n 1; }

# count_records MODE [GREP-PATTERN]: fake MPS records of that mode.
count_records() {
    local n=0 f
    for f in "$RECORDS"/rec.*; do
        [ -f "$f" ] || continue
        head -n 1 "$f" | grep -qx "mode=$1" || continue
        if [ -n "${2:-}" ]; then grep -q -- "$2" "$f" || continue; fi
        n=$((n + 1))
    done
    echo "$n"
}

# submit ARGS...: sbatch --parsable as the test user; prints the job id.
submit() {
    as_user sbatch --parsable "$@" | cut -d';' -f1
}

# wait_job ID: until the job has left the queue (faster than sbatch --wait,
# which polls at growing intervals); then prints its JobState and ExitCode.
wait_job() {
    wait_until "$JOB_TIMEOUT" job_gone "$1" ||
        { echo "TIMEOUT"; scancel "$1"; return 1; }
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | grep -E '^(JobState|ExitCode)=' | tr '\n' ' '
    echo
}

# start_requeued ID: job ID, being requeued, starts within seconds, not
# after the two minutes Slurm holds a requeued job. Once it is pending, its
# start is moved to now+2 (not now: slurmd refuses a credential made in the
# second its job's old one was revoked, and the job ends FAILED), and moved
# again should the hold come back (a requeue that completes after the move
# sets it anew: test_idle_requeue.sh's fourth requeue waited past its
# timeout so). Returns once the job has left PENDING or been requeued
# again (a run that ended at once); 1 if it is not pending within 60 s or
# still pending 60 s after.
start_requeued() {
    local info start restarts t0
    wait_until 60 sh -c "scontrol show job $1 2>/dev/null | grep -q JobState=PENDING" || return 1
    # Slurm's hold is also what lets slurmctld deliver messages it could not
    # send before: a step kill for a node that was lost, retried until that
    # node answers. Started at once, the new run's step 0 (the same step id
    # as the lost run's) got the old kill: test_node_loss.sh's requeued
    # PyTorch run was killed 5 s in under load. So first wait until this
    # cluster's slurmctld has no message queued or in flight.
    t0=$SECONDS
    if ! wait_until 90 agents_idle; then
        echo "start_requeued: slurmctld still has messages queued after 90 s: $(sdiag 2>/dev/null |
            grep -E '^Agent (queue size|count)' | tr -s ' ' | tr '\n' ' ')" >&2
    elif [ $((SECONDS - t0)) -gt 1 ]; then
        echo "start_requeued: waited $((SECONDS - t0)) s for slurmctld's queued messages" >&2
    fi
    restarts=$(scontrol show job "$1" 2>/dev/null | grep -o 'Restarts=[0-9]*')
    local deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
        info=$(scontrol show job "$1" 2>/dev/null) || return 1
        case $info in *JobState=PENDING*) ;; *) return 0 ;; esac
        case $info in *"$restarts "*) ;; *) return 0 ;; esac
        # EligibleTime: the begin time (StartTime may still be the last run's)
        start=$(echo "$info" | sed -n 's/.*[[:space:]]EligibleTime=\([^ ]*\).*/\1/p' | head -n 1)
        local at=$start
        start=$(date -d "$start" +%s 2>/dev/null || echo 0)
        if [ "$start" -eq 0 ] || [ "$start" -gt $(($(date +%s) + 3)) ]; then
            echo "start_requeued: job $1 ($restarts) eligible at $at: start moved to now+2" >&2
            scontrol update JobId="$1" StartTime=now+2 >/dev/null 2>&1
        fi
        sleep 0.2   # poll interval only: the job's state decides
    done
    echo "start_requeued: job $1 still pending after 60 s: $(scontrol show job "$1" 2>/dev/null |
        grep -oE '(JobState|Reason|EligibleTime|StartTime)=[^ ]*' | tr '\n' ' ')" >&2
    return 1
}

# agents_idle: slurmctld (this test's own) has no RPC queued for retry and
# none in flight (sdiag's agent counters).
agents_idle() {
    local d
    d=$(sdiag 2>/dev/null) || return 1
    echo "$d" | grep -Eq '^Agent queue size: +0$' && echo "$d" | grep -Eq '^Agent count: +0$'
}

# requeue_on_usr1 ID OUT: SIGUSR1 to job ID's batch script (what
# --signal=B:USR1 does before the limit) of a pytorch-requeue.sbatch job
# writing WORK/OUT; waits until the script has requeued the job, starts
# run 2 at once and waits for it to end; prints wait_job's line.
requeue_on_usr1() {
    scancel --signal=USR1 --batch "$1"
    wait_until 90 grep -q 'checkpointed: requeueing' "$WORK/$2"
    start_requeued "$1"
    wait_until 60 grep -q '^run 2 ' "$WORK/$2"
    JOB_TIMEOUT=240 wait_job "$1"
}

# free_port: a TCP port for MASTER_PORT above the kernel's ephemeral ports,
# which no outgoing connection can take before rank 0 binds it (why, in
# tests/dist/quiet_port.py).
free_port() { python3 "${top_srcdir:-.}/tests/dist/quiet_port.py"; }

# pypi_venv NAME MODULE PINS...: sets venv to a venv in the build tree
# (tests/slurm/NAME-venv, removed by make clean) over $PY's system
# site-packages (so that the system's torch is used), with PINS installed
# from PyPI with --no-deps (pip never pulls another torch); made once and
# reused while MODULE imports. Skips the test when PyPI cannot be reached.
pypi_venv() {
    local name=$1 module=$2; shift 2
    venv=$(mkdir -p "$top_builddir/tests/slurm" && cd "$top_builddir/tests/slurm" && pwd)/$name-venv
    "$venv/bin/python" -c "import $module" >/dev/null 2>&1 && return 0
    rm -rf "$venv" "$venv.tmp"
    "$PY" -m venv --system-site-packages "$venv.tmp" ||
        skip "$PY -m venv failed (install python3-venv)"
    if ! timeout 600 "$venv.tmp/bin/python" -m pip install -q --no-deps --no-cache-dir \
            --disable-pip-version-check "$@"; then
        rm -rf "$venv.tmp"
        skip "cannot install $name from PyPI ($*): no network or no PyPI here"
    fi
    mv "$venv.tmp" "$venv"   # only a complete venv is cached
}
