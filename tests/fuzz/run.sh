#!/bin/sh
# Runs each libFuzzer target for a bounded time over its seed corpus:
#   run.sh CORPUS-DIR SECONDS TARGET...
# A target passes when libFuzzer finds nothing: no sanitizer report, crash,
# leak, timeout (10 s per input) or allocation over 2 GiB. New inputs go to a
# temporary directory (the checked-in corpus is only read); a failing input
# is kept as TARGET-crash-* etc. next to the target, for
#   TARGET FILE    (reproduces it)
# Prints automake-style "PASS:/FAIL:" lines and a "# PASS:/# FAIL:" summary,
# which scripts/test.sh counts.
corpus=$1 seconds=$2
shift 2
pass=0 fail=0
for t in "$@"; do
    name=$(basename "$t")
    new=$(mktemp -d "${TMPDIR:-/tmp}/cdl-corpus.XXXXXX") || exit 1
    seeds=
    [ -d "$corpus/$name" ] && seeds=$corpus/$name
    if "$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$t-" -print_final_stats=1 "$new" $seeds >"$t.log" 2>&1; then
        pass=$((pass + 1))
        echo "PASS: $t ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$t.log" |
                          grep -o '[0-9]*$') runs)"
    else
        fail=$((fail + 1))
        echo "FAIL: $t"
        tail -n 40 "$t.log"
    fi
    rm -rf "$new"
done
echo "# PASS: $pass"
echo "# FAIL: $fail"
[ "$fail" -eq 0 ]
