#!/usr/bin/env bash
# Rank 0 cannot bind MASTER_PORT because someone listens there. The port of
# an srun --cdl-ddp step is a hash of public ids, so another account can
# take it first; rank 0 said only "another process holds it (a step of
# another job ... two jobs on one node can meet)", as if it were a chance
# collision. Now it names the account that holds the port and what to do,
# and tells a process of the user's own (an earlier run still going) from
# another account's. Needs root for the second account (nobody) and
# /usr/bin/python3 for the listener; skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account)"; exit 77; }
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
listener=
trap '[ -z "$listener" ] || kill "$listener" 2>/dev/null; rm -rf "$TMP"' EXIT

# listen [setpriv args]: a listener on a free port of 127.0.0.1, as the
# account the arguments give; sets port and listener (its pid).
listen() {
    exec 3< <(exec setpriv "$@" /usr/bin/python3 -c '
import signal, socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
signal.pause()')
    listener=$!
    read -r -u 3 port || die "the listener did not start"
}
rank0() {   # rank 0 of 2 whose MASTER_PORT is taken: fails at once
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port CDL_STORE_TOKEN=0123456789abcdef0123456789abcdef CDL_TIMEOUT=20 \
        expect_status 1 "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 \
        --workers 0 --max-steps 1 --threads 1 --quiet
}

listen --reuid=nobody --regid=nogroup --clear-groups
rank0
expect_err "rank 0: error: MASTER_PORT $port on host $(hostname) is in use by a process of another account, uid $(id -u nobody) (nobody): this step cannot run on it"
expect_err "tell the administrator which account holds it"
kill "$listener"; exec 3<&-

listen --reuid=0
rank0
expect_err "rank 0: error: MASTER_PORT $port on host $(hostname) is in use by another process of yours (uid 0 (root)): an earlier run or step still running on this host?"
echo "PASS: port-squat"
