#!/bin/bash
# tests/gpu/run.sh writes its table whatever happens to a row, checked on
# stand-in programs (no GPU, no CUDA build: a rehearsal, CDL_GPU_REHEARSAL=1,
# of a "prebuilt" tree of shell scripts):
#   1. a row that fails (ops_vs_cpu exits 1) is a FAIL row and the next
#      step still runs; the table ends "result: FAIL", exit status 1;
#   2. a row that hangs, and the script stopped from outside (SIGTERM, as
#      a batch system's time limit sends) while it runs: once the row's
#      program ends, the table is written with the rows so far and a last
#      row "stopped ... SIGTERM", in table.txt too; exit status 143
#      (before, nothing but table-so-far.txt);
#   3. a step that stops the script (a program missing from the prebuilt
#      tree): the table with that message as its last row (before, only
#      the message on stderr).
set -u
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/cdl-gpu-stops.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
b=$tmp/build
mkdir -p "$b/tests/fakegpu" "$b/tests/slurm" "$b/cli" "$b/launcher" "$b/tests/dist"
: >"$b/Makefile"
stub() {   # stub PATH BODY: an executable shell script in the stand-in build
    printf '#!/bin/sh\n%s\n' "$2" >"$b/$1" && chmod +x "$b/$1"
}
stub tests/fakegpu/ops_vs_cpu 'echo "FAIL conv2d_fwd: max error 1 (stand-in)"; exit 1'
stub tests/fakegpu/bench_lenet 'exit 0'
stub tests/fakegpu/ops_bf16 'exit 0'
stub tests/fakegpu/cdl-eval 'exit 0'
stub tests/slurm/fake-mps-control 'exit 1'
for p in cli/cdl-train cli/cdl-eval launcher/cdlrun tests/dist/weights_cmp; do stub "$p" 'exit 1'; done
# The training of step 2 hangs: it says it started (its pid), then waits.
stub tests/fakegpu/cdl-train "echo \$\$ > '$tmp/train.pid.tmp' && mv '$tmp/train.pid.tmp' '$tmp/train.pid'
exec sleep 300"
gpu() {   # gpu OUT ARGS...: run.sh's rehearsal of steps 1 and 2 on the stand-ins
    local out=$1; shift
    env CDL_GPU_REHEARSAL=1 CDL_GPU_PREBUILT=1 CDL_GPU_BUILD="$b" CDL_GPU_STEPS="1 2" \
        PYTHON=/bin/false "$@" timeout 600 bash "$srcdir/tests/gpu/run.sh" --out "$tmp/$out" \
        >"$tmp/$out.out" 2>&1
}

# 2 (with 1): step 1 fails, step 2 hangs, SIGTERM arrives.
gpu logs &
pid=$!
i=0
while [ ! -s "$tmp/train.pid" ] && kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
    sleep 0.1; i=$((i + 1))   # bounded: 60 s for step 2 to start
done
[ -s "$tmp/train.pid" ] || { kill $pid 2>/dev/null; cat "$tmp/logs.out"; fail "step 2 never started"; }
# run.sh: the bash below this test's background job (through env and
# timeout); TERM the script itself, as a batch system does.
runsh=
for p in $(pgrep -P $pid) $(pgrep -P "$(pgrep -P $pid | tr '\n' ',' | sed 's/,$//')"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = bash ] && runsh=$p
done
[ -n "$runsh" ] || { cat "$tmp/logs.out"; ps -o pid,ppid,comm -g $$; fail "no run.sh below $pid"; }
kill -TERM "$runsh"
kill -TERM "$(cat "$tmp/train.pid")"   # the row's program ends (its own timeout would)
wait $pid
rc=$?
cat "$tmp/logs.out" | sed -n '/^cdl GPU checks on/,$p'
[ $rc = 143 ] || { cat "$tmp/logs.out"; fail "run.sh stopped by SIGTERM exited $rc, not 143"; }
for f in "$tmp/logs.out" "$tmp/logs/table.txt"; do
    [ -f "$f" ] || fail "no $f"
    grep -Eq '^1 ops vs CPU backend +FAIL  FAIL conv2d_fwd' "$f" || fail "$f: no FAIL row for step 1"
    grep -Eq '^stopped +FAIL  SIGTERM after [0-9]+ s$' "$f" || fail "$f: no row saying SIGTERM stopped it"
    grep -q '^result: FAIL$' "$f" || fail "$f: no 'result: FAIL'"
done
echo "PASS: a failed row, then SIGTERM during a hanging row: the table is written"

# 3. A program missing from the prebuilt tree stops the script at once.
rm "$b/tests/fakegpu/ops_bf16"
gpu logs3
rc=$?
[ $rc = 1 ] || { cat "$tmp/logs3.out"; fail "run.sh with a program missing exited $rc, not 1"; }
grep -Eq "^stopped +FAIL  CDL_GPU_PREBUILT=1 but $b/tests/fakegpu/ops_bf16 is missing" "$tmp/logs3/table.txt" ||
    { cat "$tmp/logs3.out"; fail "no table row naming the missing program"; }
grep -q '^result: FAIL$' "$tmp/logs3.out" || fail "no 'result: FAIL' on stdout"
echo "PASS: a step that stops the script leaves the table, its message the last row"
