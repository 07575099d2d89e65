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
# free_port: a TCP port for MASTER_PORT that no socket of this host holds,
# above the kernel's ephemeral ports (ip_local_port_range, 32768-60999 by
# default) with room for the 64 where rank 0's store may move. A port asked
# of the kernel (bind to port 0) was one of the ephemeral ports, and
# released until rank 0 bound it seconds later (after Python imported torch,
# for the PyTorch cases): any outgoing connection of the host could take it
# meanwhile, and the Slurm tests beside this one make several a second (up
# to 270 sockets in TIME_WAIT counted): about 1 time in 3000 for a cdl rank
# that binds within 2 s, 1 in 400 for a PyTorch rank that binds after
# importing torch and transformers. The kernel never gives a port above
# that range to a connection; only a process naming it can take it.
free_port() {
    python3 -c '
import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
top = 65535 - 64
ports = list(range(hi + 1, top + 1)) if top - hi >= 1000 else []   # else as before
random.shuffle(ports)
def free(p):
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(fam)
        except OSError:
            continue   # no IPv6 here
        try:
            s.bind((addr, p))   # bound only, never listening: freed at once
        except OSError:
            return False
        finally:
            s.close()
    return True
for p in ports[:200]:
    if free(p):
        print(p)
        break
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
'
}
# have HAVE_X: configure found X (config.h defines HAVE_X to 1).
have() { grep -q "^#define $1 1" "$builddir/config.h"; }
# bitwise A B: every tensor of the checkpoints $tmp/A and $tmp/B is the same bits.
bitwise() {
    "$cmp" "$tmp/$1/last.safetensors" "$tmp/$2/last.safetensors" --bitwise ||
        fail "checkpoints of $1 and $2 are not bitwise equal"
}
