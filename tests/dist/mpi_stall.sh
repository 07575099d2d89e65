#!/bin/sh
# A rank that never reaches a wait of the others, under mpirun: rank 1
# stops before the PMIx bootstrap (SIGSTOP before it starts), and rank 0's
# fence gives up at CDL_TIMEOUT naming rank 1 and its node (it said only
# "some rank did not arrive (PMIx does not say which)").
# Skips without mpirun, or a libcdl without MPI or PMIx.
. "${top_srcdir:-.}/tests/dist/common.sh"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
have HAVE_MPI && have HAVE_PMIX || { echo "SKIP: libcdl built without MPI or PMIx"; exit 77; }
pidf=$tmp/stalled.pid
trap '[ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null; rm -rf "$tmp"' EXIT
host=$(hostname)

for be in shm mpi; do
    echo "+ mpirun -n 2 dist_check --backend $be, rank 1 stopped before it starts (CDL_TIMEOUT=3)"
    rm -f "$pidf"
    CDL_TIMEOUT=3 timeout 60 mpirun --allow-run-as-root --oversubscribe -x CDL_TIMEOUT -n 2 \
        sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && { echo $$ >"$0"; kill -STOP $$; }; shift; exec "$@"' \
        "$pidf" x "$check" --backend $be >"$tmp/out" 2>&1
    rc=$?
    [ -s "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null
    cat "$tmp/out"
    [ $rc -ne 124 ] || fail "$be: the job hung after rank 1 stopped"
    grep -q "rank 0: PMIx fence #0 did not complete within 3 s (CDL_TIMEOUT): rank 1 (on $host) did not reach it" "$tmp/out" ||
        fail "$be: rank 0's fence error does not name rank 1 on $host"
done

echo "PASS: mpi_stall"
