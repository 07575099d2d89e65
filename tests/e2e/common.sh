# Shared by the end-to-end test scripts: paths and small assertions.
# Scripts skip (exit 77) when make check runs with CDL_TEST_SCOPE=unit
# (sanitizer and valgrind passes run the unit tests only).
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
: "${top_builddir:=.}" "${top_srcdir:=.}"
CDL_TRAIN="$top_builddir/cli/cdl-train"
CDL_EVAL="$top_builddir/cli/cdl-eval"
CDL_PREDICT="$top_builddir/cli/cdl-predict"
CDLRUN="$top_builddir/launcher/cdlrun"
TMP=$(mktemp -d /tmp/cdl-e2e.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }
expect_status() {   # expect_status CODE CMD...: runs CMD, checks its exit status
    local want=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    [ "$got" -eq "$want" ] || { cat "$TMP/out" "$TMP/err" >&2; die "'$*' exited $got, expected $want"; }
}
expect_err() {      # expect_err TEXT: the last command's stderr mentions TEXT
    grep -qF -- "$1" "$TMP/err" || { cat "$TMP/err" >&2; die "stderr does not mention '$1'"; }
}
