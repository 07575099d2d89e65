#!/usr/bin/env bash
# Rank 0 cannot bind MASTER_PORT because someone listens there. The port of
# an srun --cdl-ddp step is a hash of public ids, so another account can
# take it first (or another user's job meet it by chance).
#  - Another account holds it: rank 0 used to fail the step (a denial of
#    service by anyone who binds one port). Now its store moves to a port
#    derived from the run's secret, named in a warning with the account to
#    report, and the ranks find it there: the step trains.
#  - Another account holds that port and the alternates too: rank 0 fails,
#    naming the account, the ports and what to do.
#  - A process of the user's own holds it (an earlier run still going): rank
#    0 fails as before and says so.
# Needs root for the second account (nobody) and /usr/bin/python3 for the
# listener; skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account)"; exit 77; }
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
listener=
trap '[ -z "$listener" ] || kill "$listener" 2>/dev/null; rm -rf "$TMP"' EXIT
TOKEN=0123456789abcdef0123456789abcdef

# listen N [setpriv args]: a listener on a free port of 127.0.0.1 and, with
# N > 0, on the N first alternates of the store's for that port and TOKEN
# (store_alt_ports: HMAC-SHA256(token, "cdl-store-port|PORT|i")), as the
# account the arguments give; sets port and listener (its pid). A port whose
# alternates are not all free is passed over: the port is an ephemeral one
# (32768-60999), and so are the alternates, where the host's outgoing
# connections (the Slurm tests' clients beside this one) leave sockets in
# TIME_WAIT for a minute (a TIME_WAIT socket blocks bind() even with
# SO_REUSEADDR). One of them on an alternate made the store move to the
# next (not the first, which the test expects), or this listener fail to
# bind: with the 30 to 270 such sockets counted while the Slurm tests of a
# CI run went on beside, each alternate was taken 1 time in 1000 to 1 in
# 100, and a run failed up to about 1 time in 20.
listen() {
    local n=$1; shift
    exec 3< <(exec env -u SLURM_STEP_RESV_PORTS setpriv "$@" /usr/bin/python3 -c '
import hashlib, hmac, signal, socket, sys
n, token = int(sys.argv[1]), sys.argv[2].encode()
def alternates(port):
    alts, i = [], 0
    while len(alts) < 4:
        mac = hmac.new(token, b"cdl-store-port|%d|%d" % (port, i), hashlib.sha256).digest()
        off = 1 + int.from_bytes(mac[:4], "big") % 64
        p = port + off if port + off <= 65535 else port - off
        if p not in alts:
            alts.append(p)
        i += 1
    return alts
def bound(p):   # a socket bound to 127.0.0.1:p, or None where p is taken
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p))
        return t
    except OSError:
        t.close()
        return None
for attempt in range(100):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    alts = alternates(port)
    probes = [bound(p) for p in alts]
    if all(probes):
        break
    s.close()
    for t in probes:
        if t:
            t.close()
else:
    sys.exit("port-squat listener: no port of 100 had its 4 alternates free")
s.listen(1)
held = [s]
for t in probes[:n]:
    t.listen(1)
    held.append(t)
for t in probes[n:]:
    t.close()   # bound only, never listening: freed at once, no TIME_WAIT
print(port, " ".join(map(str, alts)), flush=True)
signal.pause()' "$n" "$TOKEN")
    listener=$!
    read -r -u 3 port alts || die "the listener did not start"
}
rank() {   # rank R: rank R of 2 of a short training run on MASTER_PORT $port
    RANK=$1 WORLD_SIZE=2 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port CDL_STORE_TOKEN=$TOKEN CDL_TIMEOUT=20 CDL_STORE_HELLO_TIMEOUT=2 \
        "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --workers 0 \
        --max-steps 1 --threads 1 --quiet
}
rank0() {   # rank 0 of 2 whose MASTER_PORT is taken: fails at once
    expect_status 1 rank 0
}

listen 0 --reuid=nobody --regid=nogroup --clear-groups
rank 1 >"$TMP/r1.out" 2>&1 &
r1=$!
expect_status 0 rank 0
wait "$r1" || { cat "$TMP/r1.out" >&2; die "rank 1 failed while another account held MASTER_PORT"; }
expect_err "rank 0: warning: MASTER_PORT $port on host $(hostname) is in use by a process of another account, uid $(id -u nobody) (nobody): the store listens on port ${alts%% *} instead"
expect_err "Tell the administrator which account holds it"
kill "$listener"; exec 3<&-

listen 4 --reuid=nobody --regid=nogroup --clear-groups
rank0
expect_err "rank 0: error: MASTER_PORT $port on host $(hostname) is in use by a process of another account, uid $(id -u nobody) (nobody), and so are the ports derived from the run's secret that the store would move to: "
expect_err "Tell the administrator which account holds them"
kill "$listener"; exec 3<&-

listen 0 --reuid=0
rank0
expect_err "rank 0: error: MASTER_PORT $port on host $(hostname) is in use by another process of yours (uid 0 (root)): an earlier run or step still running on this host?"
echo "PASS: port-squat"
