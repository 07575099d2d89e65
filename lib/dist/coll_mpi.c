/* Collectives over Open MPI (between nodes on CPU, or flat).
 *
 * Allreduce keeps the fixed summation order of shm (reduce.h) instead of
 * MPI_Allreduce, whose order depends on the algorithm Open MPI picks: per
 * round of T elements, a reduce-scatter by MPI_Ialltoallv (member j sends
 * part i of its buffer to member i), a left-to-right sum of the W parts,
 * then MPI_Iallgatherv in place. The traffic is that of a ring allreduce;
 * the results equal the shm backend's bit for bit.
 *
 * MPI has no timeouts, so every call is non-blocking and waited by polling
 * MPI_Test against one deadline per collective (what MPI_Wait does inside;
 * we yield the CPU when ranks outnumber CPUs). A timeout cannot name the
 * missing rank: MPI does not say. After a timeout or an error the process
 * aborts the MPI job at exit rather than finalising (see mpi_broken). The
 * calls that have no non-blocking form (MPI_Init_thread, MPI_Comm_split,
 * MPI_Finalize) wait for every rank too: they run under a watchdog
 * (watchdog.h) that ends the process with CDL_EXIT_PEER_LOST at the
 * timeout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "boot.h"
#include "coll.h"
#include "contract.h"

int coll_mpi_available(void)
{
#ifdef HAVE_MPI
    const char *o = getenv("OMPI_COMM_WORLD_SIZE");
    return (o && *o) || pmix_present();
#else
    return 0;
#endif
}

#ifdef HAVE_MPI
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "reduce.h"
#include "util.h"
#include "watchdog.h"

#define SCRATCH_BYTES (8u << 20)   /* receive buffer of one reduce-scatter round */
#define PAD 16                      /* elements: a part may exceed T/W by the alignment */

typedef struct mpi_coll {
    coll base;
    MPI_Comm comm;
    double timeout;
    int yield;                      /* ranks outnumber CPUs: give the CPU away while polling */
    void *scratch;
    int *counts, *displs, *rcounts, *rdispls;
    long ops;
    double deadline;                /* of the collective in progress: one timeout per call */
} mpi_coll;

/* Set once a collective timed out or failed, or this rank gave up: MPI
 * cannot recover (a request is still pending on a peer that never came), so
 * later calls fail at once and the exit aborts the job instead of waiting in
 * MPI_Finalize for the missing peer forever. */
static int mpi_broken;
static int abort_rank;   /* this process's MPI_COMM_WORLD rank, for the abort's line */
static double exit_timeout = CDL_DEFAULT_TIMEOUT;   /* MPI_Finalize's, at exit */

/* What a rank waiting in a blocking MPI call should check. */
#define MPI_PEER_HINT "it waits for every rank of the MPI job: a rank that never started, " \
    "stopped, died or lost its node holds it (MPI does not say which: see the other ranks' " \
    "errors and the launcher's, mpirun or srun --mpi=pmix)"

static int mpi_fail(mpi_coll *m, const char *what, int err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    (void)m;
    mpi_broken = 1;
    return cdl_error("MPI %s failed: %s", what, msg);
}

static int mpi_wait(mpi_coll *m, MPI_Request *req, int err, const char *what)
{
    if (mpi_broken)
        return cdl_error("MPI %s #%ld: an earlier MPI collective failed; the job stops", what,
                         m->ops);
    if (err != MPI_SUCCESS)
        return mpi_fail(m, what, err);
    double deadline = m->deadline;
    for (long k = 0;; k++) {
        int done = 0;
        err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS)
            return mpi_fail(m, what, err);
        if (done)
            return 0;
        if (m->yield)
            sched_yield();
        if ((k & 255) == 255 && dist_now() > deadline) {
            mpi_broken = 1;
            dist_note_peer_lost();
            return cdl_error("MPI %s #%ld did not complete within %.0f s: a peer is missing or "
                             "dead (MPI does not say which; see the other ranks' errors)", what,
                             m->ops, m->timeout);
        }
    }
}

static MPI_Datatype mpi_type(coll_dtype t)
{
    return t == COLL_F32 ? MPI_FLOAT : MPI_DOUBLE;
}

static int mpi_allreduce(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    mpi_coll *m = (mpi_coll *)c;
    m->deadline = dist_now() + m->timeout;
    int w = c->size, me = c->rank;
    size_t es = coll_dtype_size(t);
    size_t chunk = SCRATCH_BYTES / es / (size_t)w - PAD, round = chunk * (size_t)w;
    size_t stride = chunk + PAD;
    char *p = buf;
    m->ops++;
    for (size_t off = 0; off < n; off += round) {
        size_t len = n - off < round ? n - off : round, lo, hi;
        for (int j = 0; j < w; j++) {
            reduce_part(len, w, j, es, &lo, &hi);
            m->counts[j] = (int)(hi - lo);
            m->displs[j] = (int)lo;
        }
        for (int j = 0; j < w; j++) {
            m->rcounts[j] = m->counts[me];
            m->rdispls[j] = (int)((size_t)j * stride);
        }
        MPI_Request req;
        char *slab = p + off * es;
        int err = MPI_Ialltoallv(slab, m->counts, m->displs, mpi_type(t), m->scratch, m->rcounts,
                                 m->rdispls, mpi_type(t), m->comm, &req);
        if (mpi_wait(m, &req, err, "allreduce (reduce-scatter)"))
            return -1;
        reduce_strided(t, slab + (size_t)m->displs[me] * es, m->scratch, stride * es, w, 0,
                       (size_t)m->counts[me], average);
        err = MPI_Iallgatherv(MPI_IN_PLACE, 0, mpi_type(t), slab, m->counts, m->displs,
                              mpi_type(t), m->comm, &req);
        if (mpi_wait(m, &req, err, "allreduce (allgather)"))
            return -1;
    }
    return 0;
}

static int mpi_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    mpi_coll *m = (mpi_coll *)c;
    char *p = buf;
    m->ops++;
    m->deadline = dist_now() + m->timeout;
    for (size_t off = 0; off < bytes; off += 1u << 30) {
        size_t len = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
        MPI_Request req;
        int err = MPI_Ibcast(p + off, (int)len, MPI_BYTE, root, m->comm, &req);
        if (mpi_wait(m, &req, err, "broadcast"))
            return -1;
    }
    return 0;
}

static int mpi_barrier(coll *c)
{
    mpi_coll *m = (mpi_coll *)c;
    MPI_Request req;
    m->ops++;
    m->deadline = dist_now() + m->timeout;
    int err = MPI_Ibarrier(m->comm, &req);
    return mpi_wait(m, &req, err, "barrier");
}

static int mpi_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    mpi_coll *m = (mpi_coll *)c;
    if (bytes > (size_t)1 << 30)
        return cdl_error("MPI allgather of %zu bytes per rank: at most 1 GiB", bytes);
    MPI_Request req;
    m->ops++;
    m->deadline = dist_now() + m->timeout;
    int err = MPI_Iallgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, m->comm, &req);
    return mpi_wait(m, &req, err, "allgather");
}

/* ZeRO-1's parts (shard_part) of the whole buffer; MPI counts are ints. */
static int parts_fit(size_t n, const char *what)
{
    return n <= (size_t)INT32_MAX ? 0
                                  : cdl_error("MPI %s of %zu elements: at most 2^31 - 1", what, n);
}

/* Like the allreduce's first half over the parts of the whole buffer: per
 * round, member j sends the next chunk of part i to member i
 * (MPI_Ialltoallv), which sums the W chunks left to right (reduce.h) into
 * its buffer: the allreduce's bits. */
static int mpi_reduce_scatter(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    mpi_coll *m = (mpi_coll *)c;
    if (parts_fit(n, "reduce-scatter"))
        return -1;
    m->deadline = dist_now() + m->timeout;
    int w = c->size, me = c->rank;
    size_t es = coll_dtype_size(t), chunk = SCRATCH_BYTES / es / (size_t)w - PAD;
    size_t stride = chunk + PAD, lo, hi, mlo, mhi;
    shard_part(n, w, 0, &lo, &hi);
    shard_part(n, w, me, &mlo, &mhi);
    char *p = buf;
    m->ops++;
    for (size_t at = 0; at < hi - lo; at += chunk) {   /* part 0 is the longest */
        for (int j = 0; j < w; j++) {
            size_t a, b;
            shard_part(n, w, j, &a, &b);
            size_t len = b - a > at ? b - a - at : 0;
            m->counts[j] = (int)(len < chunk ? len : chunk);
            m->displs[j] = (int)(a + at);
        }
        for (int j = 0; j < w; j++) {
            m->rcounts[j] = m->counts[me];
            m->rdispls[j] = (int)((size_t)j * stride);
        }
        MPI_Request req;
        int err = MPI_Ialltoallv(p, m->counts, m->displs, mpi_type(t), m->scratch, m->rcounts,
                                 m->rdispls, mpi_type(t), m->comm, &req);
        if (mpi_wait(m, &req, err, "reduce-scatter"))
            return -1;
        if (m->counts[me])
            reduce_strided(t, p + (mlo + at) * es, m->scratch, stride * es, w, 0,
                           (size_t)m->counts[me], average);
    }
    return 0;
}

static int mpi_allgather_parts(coll *c, void *buf, size_t n, coll_dtype t)
{
    mpi_coll *m = (mpi_coll *)c;
    if (parts_fit(n, "allgather"))
        return -1;
    m->deadline = dist_now() + m->timeout;
    m->ops++;
    for (int j = 0; j < c->size; j++) {
        size_t a, b;
        shard_part(n, c->size, j, &a, &b);
        m->counts[j] = (int)(b - a);
        m->displs[j] = (int)a;
    }
    MPI_Request req;
    int err = MPI_Iallgatherv(MPI_IN_PLACE, 0, mpi_type(t), buf, m->counts, m->displs, mpi_type(t),
                              m->comm, &req);
    return mpi_wait(m, &req, err, "allgather");
}

static void mpi_destroy(coll *c)
{
    mpi_coll *m = (mpi_coll *)c;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !mpi_broken)   /* not with a request left pending */
        MPI_Comm_free(&m->comm);
    cdl_free(m->scratch);
    cdl_free(m->counts);
    cdl_free(m);
}

/* This rank gave up (an error of its own, or a failed collective): MPI has
 * no way to tell the peers why, but MPI_Abort at exit ends them at once,
 * where MPI_Finalize would wait for peers that wait for this rank. */
static void mpi_abort_op(coll *c, const char *why)
{
    (void)c;
    (void)why;
    mpi_broken = 1;
}

static const coll_ops mpi_ops = {
    .name = "mpi", .allreduce = mpi_allreduce, .broadcast = mpi_broadcast,
    .barrier = mpi_barrier, .allgather = mpi_allgather, .abort = mpi_abort_op,
    .destroy = mpi_destroy,
    .reduce_scatter = mpi_reduce_scatter, .allgather_parts = mpi_allgather_parts,
};

static void finalize_at_exit(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return;
    if (mpi_broken) {
        /* MPI_Finalize would wait for the peer that never came. MPI_Abort's
         * code becomes the process's (and mpirun's) exit status in place of
         * the one main returned: CDL_EXIT_PEER_LOST when a peer was lost,
         * as on the other backends, so that job scripts requeue the run. */
        int code = cdl_dist_peer_lost() ? CDL_EXIT_PEER_LOST : 1;
        fprintf(stderr, "cdl: rank %d failed (see its error above): aborting the MPI job with "
                "exit status %d\n", abort_rank, code);
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    /* Its fence waits for every rank: one that died after the last
     * collective would hold this process for good. */
    dist_watchdog *w = dist_watchdog_arm("MPI_Finalize", abort_rank, exit_timeout,
                                         MPI_PEER_HINT);
    MPI_Finalize();
    dist_watchdog_disarm(w);
}

/* MPI_Init once per process; MPI cannot be initialised again after
 * MPI_Finalize, so we finalise at exit (unless the program owns MPI).
 * MPI_Init_thread has no timeout: without a PMIx bootstrap before it (a
 * libcdl without PMIx, hier:mpi after the store's bootstrap, a job whose
 * launcher sets no PMIx variables) a rank that never comes held the others
 * in its fence for good, so it runs under a watchdog. */
static int ensure_init(int rank, double timeout_s, int (*stop)(void), int stop_status)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return cdl_error("MPI was already finalised in this process: create the mpi dist backend "
                         "before MPI_Finalize");
    if (inited)
        return 0;
    /* A rank killed mid-step leaves its peers writing to closed TCP
     * sockets, and Open MPI's TCP transport writes without MSG_NOSIGNAL:
     * with SIGPIPE at its default a peer then died of "Broken pipe"
     * (tests/slurm/test_pmix_loss.sh, now and then) instead of getting an
     * error back (MPI_ERRORS_RETURN below) and exiting 76, the status of a
     * lost peer. A handler the program installed stays. */
    struct sigaction pipe_sa;
    if (sigaction(SIGPIPE, NULL, &pipe_sa) == 0 && !(pipe_sa.sa_flags & SA_SIGINFO) &&
        pipe_sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    int provided;
    dist_watchdog *w = dist_watchdog_arm_stop("MPI_Init_thread", rank, timeout_s, MPI_PEER_HINT,
                                              stop, stop_status);
    if (!w)
        return -1;
    int err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    dist_watchdog_disarm(w);
    if (err != MPI_SUCCESS)
        return cdl_error("MPI_Init_thread failed: was the job started by mpirun or srun "
                         "--mpi=pmix?");
    exit_timeout = timeout_s;
    atexit(finalize_at_exit);
    if (provided < MPI_THREAD_SERIALIZED)
        return cdl_error("this MPI provides thread level %d, below MPI_THREAD_SERIALIZED: the "
                         "data-parallel communication thread needs it", provided);
    return 0;
}

coll *coll_mpi_create(const coll_group *g, int world_rank, int world, double timeout_s,
                      int *member, int (*stop)(void), int stop_status)
{
    *member = g->me >= 0;
    if (ensure_init(world_rank, timeout_s, stop, stop_status))
        return NULL;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &abort_rank);
    if (size != world)
        return cdl_error("rank %d: MPI sees %d processes but WORLD_SIZE=%d: the mpi backend "
                         "needs the job started by mpirun or srun --mpi=pmix", world_rank, size,
                         world), NULL;
    MPI_Comm comm;
    dist_watchdog *w = dist_watchdog_arm_stop("MPI_Comm_split", world_rank, timeout_s,
                                              MPI_PEER_HINT, stop, stop_status);
    if (!w)
        return NULL;
    int err = MPI_Comm_split(MPI_COMM_WORLD, g->me >= 0 ? 0 : MPI_UNDEFINED, g->me, &comm);
    dist_watchdog_disarm(w);
    if (err != MPI_SUCCESS)
        return mpi_fail(NULL, "MPI_Comm_split", err), NULL;
    if (g->me < 0)
        return NULL;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    mpi_coll *m = cdl_calloc(1, sizeof *m);
    if (!m) {
        MPI_Comm_free(&comm);
        return NULL;
    }
    m->base = (coll){&mpi_ops, g->me, g->size, 0};
    m->comm = comm;
    m->timeout = timeout_s;
    m->scratch = cdl_malloc(SCRATCH_BYTES + (size_t)g->size * PAD * 8);
    m->counts = cdl_calloc(4 * (size_t)g->size, sizeof *m->counts);
    if (!m->scratch || !m->counts) {
        mpi_destroy(&m->base);
        return NULL;
    }
    m->displs = m->counts + g->size;
    m->rcounts = m->displs + g->size;
    m->rdispls = m->rcounts + g->size;
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int on_node = local ? atoi(local) : 1;
    m->yield = on_node > (ncpu > online ? ncpu : (int)online);
    return &m->base;
}
#endif
