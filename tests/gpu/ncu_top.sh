#!/bin/sh
# tests/gpu/ncu_top.py, which run.sh step 10 uses on a GPU machine to say
# where a step's time goes, on a saved Nsight Compute log
# (tests/gpu/ncu_sample.csv: ns and us units, thousands separators, a
# template kernel seen twice, another metric to leave out, ncu's own
# ==PROF== lines); and its refusal of a log without kernel times.
set -u
srcdir=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/cdl-ncu-top.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
python3 "$srcdir/ncu_top.py" "$srcdir/ncu_sample.csv" > "$tmp/out" 2>&1 ||
    { cat "$tmp/out"; fail "ncu_top.py exited $?"; }
cat > "$tmp/want" <<'WANT'
total 4.00 ms in 5 kernels
by owner: cdl 2.00 ms (50%), cudnn 1.00 ms (25%), cublas 1.00 ms (25%)
2.00|50.0|2|cdl: fb_fwd
1.00|25.0|1|cudnn: cudnn::nchwToNhwcKernel
1.00|24.9|1|cublas: nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_TNT
0.00|0.1|1|cdl: fill_kernel
WANT
diff -u "$tmp/want" "$tmp/out" || fail "ncu_top.py's summary differs (above)"
python3 "$srcdir/ncu_top.py" "$srcdir/ncu_sample.csv" 1 | tail -n 1 | grep -q '^2.00|50.0|2|cdl: fb_fwd$' ||
    fail "N=1 does not give the largest group alone"
grep -v gpu__time_duration "$srcdir/ncu_sample.csv" > "$tmp/none.csv"
if python3 "$srcdir/ncu_top.py" "$tmp/none.csv" > "$tmp/err" 2>&1; then
    fail "a log without kernel times was accepted"
fi
grep -q 'no gpu__time_duration.sum values' "$tmp/err" || { cat "$tmp/err"; fail "no reason given"; }
echo "PASS: ncu_top.py sums a saved ncu log by kernel and owner"
