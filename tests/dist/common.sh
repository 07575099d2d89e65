# Sourced by the data-parallel test scripts (tests/dist/*.sh): skips a
# unit-only pass (sanitizers, valgrind), names the built programs, makes a
# private temporary directory $tmp (removed on exit; a script that must also
# stop a process sets its own EXIT trap) and gives the shared checks.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
train=$builddir/cli/cdl-train
ev=$builddir/cli/cdl-eval
cdlrun=$builddir/launcher/cdlrun
check=$builddir/tests/dist/dist_check
cmp=$builddir/tests/dist/weights_cmp
tmp=$(mktemp -d "/tmp/cdl-$(basename "$0" .sh).XXXXXX") ||
    { echo "FAILED: cannot make a temporary directory under /tmp"; exit 1; }
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
# free_port: a TCP port for MASTER_PORT above the kernel's ephemeral ports,
# which no outgoing connection can take before rank 0 binds it (why, in
# tests/dist/quiet_port.py).
free_port() { python3 "${top_srcdir:-.}/tests/dist/quiet_port.py"; }
# have HAVE_X: configure found X (config.h defines HAVE_X to 1).
have() { grep -q "^#define $1 1" "$builddir/config.h"; }
# bitwise A B: every tensor of the checkpoints $tmp/A and $tmp/B is the same bits.
bitwise() {
    "$cmp" "$tmp/$1/last.safetensors" "$tmp/$2/last.safetensors" --bitwise ||
        fail "checkpoints of $1 and $2 are not bitwise equal"
}
