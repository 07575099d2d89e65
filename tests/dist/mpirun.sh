#!/bin/sh
# Multi-process checks under mpirun: PMIx discovery and bootstrap, the mpi
# backend (bitwise equal to the fixed-order reference), and the hierarchical
# backend over two emulated nodes (shm inside, MPI between the leaders).
# Skips (exit 77) only when mpirun is missing.
. "${top_srcdir:-.}/tests/dist/common.sh"
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun not found (install openmpi-bin)"
    exit 77
fi
mpi_run() {
    echo "+ mpirun -n $*"
    timeout 120 mpirun --allow-run-as-root --oversubscribe -n "$@" || {
        echo "FAILED: mpirun -n $*"
        exit 1
    }
}
# Two emulated nodes of two ranks: the contract names the nodes.
two_nodes='r=$OMPI_COMM_WORLD_RANK; RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 NODE_RANK=$((r / 2)) CDL_NNODES=2 exec "$0" "$@"'

if have HAVE_PMIX; then
    mpi_run 2 "$check" --expect-source pmix --expect-world 2 --expect-backend shm --big
    mpi_run 4 "$check" --expect-source pmix --expect-world 4 --expect-backend shm
    # hier:store under PMIx without CDL_STORE_TOKEN: rank 0 makes the store's
    # secret and hands it over through PMIx (a hand-exported contract of 4
    # ranks without a token is refused otherwise).
    port=$(free_port)
    mpi_run 4 sh -c "export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port; $two_nodes" "$check" \
        --backend hier:store --expect-backend hier:store
    # Another account holds MASTER_PORT: rank 0's store moves to an
    # alternate port and publishes it through PMIx, so the other ranks
    # connect there directly; they used to meet the squatter first and
    # find the store by trying the alternates in turn (which stays the way
    # without PMIx, tests/unit/test_dist_store.c). Needs root (the squatter
    # runs as nobody).
    if [ "$(id -u)" = 0 ]; then
        port=$(free_port)
        # Listens as nobody, then leaves a child holding the socket (its
        # pid on stdout, which it closes: no wait for readiness needed).
        squatter=$(python3 -c 'import os, socket, sys, time
os.setgid(65534); os.setuid(65534)
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
pid = os.fork()
if pid: print(pid); sys.exit(0)
os.close(1); time.sleep(300)' "$port") || { echo "FAILED: could not squat port $port"; exit 1; }
        echo "+ mpirun -n 4 dist_check --backend hier:store (MASTER_PORT $port held by nobody)"
        # The ranks' wait for the store's answer is the default 10 s: at 1 s,
        # a store that answered late under load was taken for a stranger
        # ("is not this run's store"), which the check below fails on.
        timeout 120 mpirun --allow-run-as-root --oversubscribe -n 4 sh -c \
            "export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port; $two_nodes" \
            "$check" --backend hier:store --expect-backend hier:store >"$tmp/moved.out" 2>&1
        rc=$?
        kill "$squatter"
        cat "$tmp/moved.out"
        [ $rc -eq 0 ] || { echo "FAILED: hier:store with a squatted MASTER_PORT (exit $rc)"; exit 1; }
        grep -q "MASTER_PORT $port on host .* is in use by a process of another account" "$tmp/moved.out" ||
            { echo "FAILED: rank 0's store did not move away from the squatted port"; exit 1; }
        ! grep -q "Looking for this run's store\|is not this run's store" "$tmp/moved.out" ||
            { echo "FAILED: ranks looked for the moved store although rank 0 published its port through PMIx"; exit 1; }
    else
        echo "note: not root: the store moved under PMIx not checked"
    fi
else
    echo "note: built without PMIx: PMIx discovery not checked"
fi
if have HAVE_PMIX; then
    # README's `mpirun -n 4 cdl-train`: without binding (--oversubscribe;
    # --bind-to none here, as Open MPI binds 2 ranks to a core each) every
    # rank may run on every CPU, and each started that many threads.
    # Now they share the CPUs: a rank's count is its mask's CPUs divided
    # among the node's ranks (no OMP_NUM_THREADS or --threads given).
    ncpu=$(nproc)
    want=$((ncpu / 2 > 0 ? ncpu / 2 : 1))
    echo "+ mpirun -n 2 cdl-train (no --threads, OMP_NUM_THREADS unset: $want threads each of $ncpu CPUs)"
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK \
        "$train" --dataset synthetic --synthetic-size 256 --epochs 1 --max-steps 1 --no-progress \
        >"$tmp/threads.out" 2>&1 || { cat "$tmp/threads.out"; echo "FAILED: mpirun -n 2 cdl-train"; exit 1; }
    word=threads
    [ "$want" != 1 ] || word=thread
    grep -q "cpu backend with $want $word, 2 ranks" "$tmp/threads.out" ||
        { cat "$tmp/threads.out"; echo "FAILED: 2 unbound ranks on $ncpu CPUs did not take $want threads each"; exit 1; }
    # cdl-eval shares them by the same rule (it took every CPU in each
    # rank); cdl-predict works in rank 0 alone, with all of them.
    timeout 120 "$train" --dataset synthetic --synthetic-size 64 --epochs 1 --max-steps 1 --threads 1 \
        --no-progress -q --ckpt-dir "$tmp/thr" || { echo "FAILED: cdl-train for cdl-eval"; exit 1; }
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK \
        CDL_LOG=cpu "$ev" "$tmp/thr/last.safetensors" --dataset synthetic --device cpu \
        >"$tmp/ev.out" 2>&1 || { cat "$tmp/ev.out"; echo "FAILED: mpirun -n 2 cdl-eval"; exit 1; }
    [ "$(grep -c "^cdl: cpu backend with $want $word\$" "$tmp/ev.out")" = 2 ] ||
        { cat "$tmp/ev.out"; echo "FAILED: 2 unbound cdl-eval ranks did not take $want $word each"; exit 1; }
    timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK \
        CDL_LOG=cpu "$builddir/cli/cdl-predict" "$tmp/thr/last.safetensors" --dataset synthetic \
        --device cpu >"$tmp/pr.out" 2>"$tmp/pr.err" || { cat "$tmp/pr.err"; echo "FAILED: mpirun -n 2 cdl-predict"; exit 1; }
    grep -q "started as 2 ranks: rank 0 writes the predictions" "$tmp/pr.err" &&
        [ "$(grep -c "^cdl: cpu backend with $ncpu thread" "$tmp/pr.err")" = 1 ] &&
        [ "$(grep -c "^index,label" "$tmp/pr.out")" = 1 ] ||
        { cat "$tmp/pr.err"; echo "FAILED: cdl-predict under mpirun -n 2 wrote more than once"; exit 1; }
fi
if have HAVE_MPI; then
    mpi_run 2 "$check" --backend mpi --expect-backend mpi --big
    # A stopped peer: rank 0 reports it at the first timeout and the job
    # ends (MPI_Abort), instead of hanging in MPI_Finalize, with the status
    # of a lost peer (76, which the requeue templates resume after), not the
    # 1 of an error a restart would repeat: MPI_Abort's code is mpirun's.
    pidf=$(mktemp /tmp/cdl-mpistop.XXXXXX)
    # CDL_TIMEOUT bounds every wait before rank 1 stops too (the PMIx fence,
    # MPI_Init_thread's watchdog): at 3 s, a rank 3 s late there under load
    # failed the test with another message; 10 s leaves a margin.
    echo "+ mpirun -n 2 dist_check --backend mpi --stop-rank 1 (CDL_TIMEOUT=10)"
    CDL_TIMEOUT=10 timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -n 2 \
        "$check" --backend mpi --stop-rank 1 "$pidf" >"$pidf.out" 2>&1
    rc=$?
    stopped=$(cat "$pidf" 2>/dev/null)
    [ -n "$stopped" ] && kill -9 "$stopped" 2>/dev/null   # only if the job did not end it
    cat "$pidf.out"
    grep -q "did not complete within 10 s" "$pidf.out"; said=$?
    rm -f "$pidf" "$pidf.out"
    [ $rc -ne 124 ] || { echo "FAILED: the job hung after a peer stopped"; exit 1; }
    [ $rc -ne 0 ] && [ $said -eq 0 ] ||
        { echo "FAILED: a stopped peer was not reported (exit $rc)"; exit 1; }
    [ $rc -eq 76 ] || { echo "FAILED: a stopped peer ended the job with $rc, not 76 (peer lost)"; exit 1; }
    # An error on rank 0 alone before training (its --ckpt-dir cannot be
    # made): the job ends at once (MPI_Abort) instead of rank 0 waiting in
    # MPI_Finalize while rank 1 waits for it until CDL_TIMEOUT.
    : >"$tmp/file"
    echo "+ mpirun -n 2 cdl-train --dist-backend mpi --ckpt-dir FILE/ck (CDL_TIMEOUT=60)"
    CDL_TIMEOUT=60 timeout 120 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -n 2 \
        "$train" --dataset synthetic --synthetic-size 64 --epochs 1 --threads 1 -q \
        --dist-backend mpi --ckpt-dir "$tmp/file/ck" >"$tmp/mpi.out" 2>&1
    rc=$?
    cat "$tmp/mpi.out"
    [ $rc -ne 0 ] && [ $rc -ne 76 ] ||
        { echo "FAILED: rank 0's --ckpt-dir error ended the job with $rc (not 1, its own error)"; exit 1; }
    # The error names its rank (mpirun sets no RANK: PMIx's rank it is).
    grep -q "cdl-train: rank 0: error: cannot create --ckpt-dir" "$tmp/mpi.out" &&
        grep -q "aborting the MPI job" "$tmp/mpi.out" &&
        ! grep -q "did not complete within" "$tmp/mpi.out" ||
        { echo "FAILED: rank 1 waited for rank 0 until its timeout (exit $rc)"; exit 1; }
    mpi_run 3 "$check" --backend mpi --expect-backend mpi
    mpi_run 4 sh -c "$two_nodes" "$check" --expect-source contract --expect-nodes 2 \
        --expect-backend hier:mpi
fi
echo "mpirun checks passed"
