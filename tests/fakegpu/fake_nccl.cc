/* NCCL for the fake GPU: the communicator calls libcdl makes
 * (lib/dist/coll_nccl.c), between the processes of one machine.
 *
 * A communicator is a POSIX shared-memory segment named after its unique
 * id; every rank maps it in ncclCommInitRankConfig and the name is
 * unlinked as soon as all have, so nothing is left in /dev/shm. A
 * collective is queued on its stream like any GPU work of the fake (it
 * runs when the host waits) and moves its data in chunks through one slot
 * per rank: write my slot, wait for everyone's, combine in rank order
 * (every rank computes the same bits), then mark the slot read.
 *
 * What it holds libcdl to, from NCCL's documentation:
 * - the config initialised with NCCL_CONFIG_INITIALIZER, ranks in range,
 *   each rank claimed once, the same nranks everywhere;
 * - one rank per GPU: two ranks of a communicator on the same device fail
 *   init with ncclInvalidUsage (real NCCL reports "Duplicate GPU detected"
 *   or hangs), which is why replicas packed on one GPU go through coll_hier;
 * - buffers in device memory, valid streams;
 * - every rank calling the same collective with the same count, type,
 *   operation and root, in the same order (a mismatch, which hangs or
 *   corrupts real NCCL, fails here with ncclInvalidUsage on every rank);
 * - non-blocking communicators: init returns ncclInProgress and
 *   ncclCommGetAsyncError says ncclInProgress once before ncclSuccess;
 * - a peer that never arrives (dead, or stuck elsewhere): while the host
 *   only polls (cudaStreamQuery, cudaEventQuery) the collective stays
 *   queued, not done, as NCCL's kernels spin on a GPU, so the host's own
 *   deadline must end the wait; a blocking wait turns it into
 *   ncclRemoteError after the timeout (CDL_FAKE_NCCL_TIMEOUT, else
 *   CDL_TIMEOUT, else 300 s) instead of hanging the test. ncclCommAbort on
 *   one rank fails the others' waits at once, as a real abort frees
 *   kernels stuck on a peer.
 * - CDL_FAKE_NCCL_LOG=1 (tests only): each communicator says which device
 *   it was made on (the current one, as NCCL takes it), visible and physical.
 * - CDL_FAKE_NCCL_STALL=N (tests only): the process hangs for good when
 *   its Nth collective (counted as they are queued) runs, a rank stuck
 *   before it arrives; the others must give up by their own timeouts.
 * Not modelled: NCCL's own algorithms (the sum here is in rank order, in
 * the buffer's type), communicators split or shared between threads.
 */
#include "fake.h"

#include <nccl.h>

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

const char id_magic[] = "cdl-fakenccl";
const int max_ranks = 64;
const size_t chunk = (size_t)1 << 20;

enum op_kind : uint32_t { op_allreduce = 1, op_broadcast, op_allgather };

/* What one rank asked for in one step: all ranks must agree. */
struct op_meta {
    uint32_t kind, dtype, redop;
    int32_t root;
    uint64_t count;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics");

struct seg_header {
    std::atomic<int32_t> nranks;              /* set by the first to map the segment */
    std::atomic<int32_t> joined, aborted;
    std::atomic<int32_t> claimed[max_ranks];  /* pid of the rank's process */
    std::atomic<int32_t> device[max_ranks];   /* its physical device + 1 */
    std::atomic<uint64_t> arrive[max_ranks];  /* step whose data is in the rank's slot */
    std::atomic<uint64_t> done[max_ranks];    /* step the rank has finished reading */
    op_meta meta[max_ranks];
};

size_t seg_bytes(int nranks)
{
    return sizeof(seg_header) + (size_t)nranks * chunk;
}

struct comm_state {
    seg_header *h = nullptr;
    size_t mapped = 0;
    int rank = 0, nranks = 0;
    uint64_t step = 0;
    bool pending_init = false;       /* non-blocking: GetAsyncError says InProgress once */
    bool destroyed = false, aborted = false;
    ncclResult_t error = ncclSuccess;
    double timeout = 300;

    char *slot(int r) { return (char *)(h + 1) + (size_t)r * chunk; }
    ~comm_state()
    {
        if (h)
            munmap(h, mapped);
    }
};

double now()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double timeout_s()
{
    for (const char *v : {"CDL_FAKE_NCCL_TIMEOUT", "CDL_TIMEOUT"}) {
        const char *s = getenv(v);
        if (s && *s && atof(s) > 0)
            return atof(s);
    }
    return 300;
}

/* /cdl-fakenccl-PID-HEX: PID made the id (the rank that created the
 * communicator), so a test can look for what its own run left behind. */
void seg_name(const ncclUniqueId &id, char *out, size_t len)
{
    const unsigned char *r = (const unsigned char *)id.internal + sizeof id_magic;
    int32_t pid;
    memcpy(&pid, r + 16, sizeof pid);
    int n = snprintf(out, len, "/cdl-fakenccl-%d-", (int)pid);
    for (int i = 0; i < 16 && n + 2 < (int)len; i++)
        n += snprintf(out + n, len - (size_t)n, "%02x", r[i]);
}

/* Spins (yielding) until ready() or the deadline; false on timeout or when
 * a peer aborted, with c.error set. poll: looks once, false (c.error
 * unset) when not ready. */
template <class F> bool wait_for(comm_state &c, F ready, const char *what, bool poll = false)
{
    double deadline = now() + c.timeout;
    for (unsigned spins = 0; !ready(); spins++) {
        if (c.h->aborted.load()) {
            fprintf(stderr, "fakenccl: rank %d: %s: a peer aborted the communicator\n", c.rank,
                    what);
            c.error = ncclRemoteError;
            return false;
        }
        if (poll)
            return false;
        if ((spins & 1023) == 0 && now() > deadline) {
            fprintf(stderr, "fakenccl: rank %d: %s: peers missing after %.0f s\n", c.rank, what,
                    c.timeout);
            c.error = ncclRemoteError;
            return false;
        }
        sched_yield();
    }
    return true;
}

bool all_at_least(const std::atomic<uint64_t> *v, int n, uint64_t step)
{
    for (int r = 0; r < n; r++)
        if (v[r].load(std::memory_order_acquire) < step)
            return false;
    return true;
}

const char *kind_name(uint32_t k)
{
    return k == op_allreduce ? "ncclAllReduce" : k == op_broadcast ? "ncclBroadcast"
                                                                   : "ncclAllGather";
}

/* Where a queued collective stands, so that a poll can leave it and the
 * next wait resume it: the chunk (offset), and within a step (s) whether
 * my data is in my slot yet. */
struct progress {
    size_t off = 0;
    uint64_t s = 0;
    bool arrived = false;
};

/* One step of a collective: my bytes into my slot, everyone's slots to
 * combine(), then my slot is free again. 1 done, 0 not ready (poll),
 * -1 failed (c.error). */
template <class F>
int step(comm_state &c, progress &p, const op_meta &m, const void *mine, size_t bytes, F combine,
         bool poll)
{
    if (c.error != ncclSuccess)
        return -1;
    seg_header *h = c.h;
    if (!p.s)
        p.s = ++c.step;
    uint64_t s = p.s;
    if (!p.arrived) {
        if (!wait_for(c, [&] { return all_at_least(h->done, c.nranks, s - 1); },
                      kind_name(m.kind), poll))
            return c.error != ncclSuccess ? -1 : 0;
        h->meta[c.rank] = m;
        if (bytes)
            memcpy(c.slot(c.rank), mine, bytes);
        h->arrive[c.rank].store(s, std::memory_order_release);
        p.arrived = true;
    }
    if (!wait_for(c, [&] { return all_at_least(h->arrive, c.nranks, s); }, kind_name(m.kind),
                  poll))
        return c.error != ncclSuccess ? -1 : 0;
    p.s = 0;
    p.arrived = false;
    for (int r = 0; r < c.nranks; r++) {
        const op_meta &o = h->meta[r];
        if (memcmp(&o, &h->meta[0], sizeof o)) {
            fakegpu::complain("ncclComm rank %d: collective %llu is %s(count %llu, type %u, "
                              "op %u, root %d) on rank %d but %s(count %llu, type %u, op %u, "
                              "root %d) on rank 0: every rank must make the same calls in the "
                              "same order", c.rank, (unsigned long long)s, kind_name(o.kind),
                              (unsigned long long)o.count, o.dtype, o.redop, o.root, r,
                              kind_name(h->meta[0].kind), (unsigned long long)h->meta[0].count,
                              h->meta[0].dtype, h->meta[0].redop, h->meta[0].root);
            c.error = ncclInvalidUsage;
            h->done[c.rank].store(s, std::memory_order_release);
            return -1;
        }
    }
    combine();
    h->done[c.rank].store(s, std::memory_order_release);
    return 1;
}

/* Runs a collective of `total` bytes in chunks of at most `per` bytes
 * (at least one step, also for 0 bytes), each through step(). Whether it
 * is done (finished or failed); false when a poll left it waiting. */
template <class F> bool chunks(progress &p, size_t total, size_t per, F one, bool poll)
{
    for (;;) {
        size_t n = total - p.off < per ? total - p.off : per;
        int r = one(p.off, n);
        if (r == 0 && poll)
            return false;
        p.off += per;
        if (r < 0 || p.off >= total) {
            p = progress();   /* a graph may replay it */
            return true;
        }
    }
}

/* The process's collectives as queued, for CDL_FAKE_NCCL_STALL. */
uint64_t queued_collectives;

bool stall_here()
{
    static const uint64_t at = [] {
        const char *v = getenv("CDL_FAKE_NCCL_STALL");
        return v && *v ? (uint64_t)strtoull(v, nullptr, 10) : 0;
    }();
    return at && ++queued_collectives == at;
}

[[noreturn]] void stall()
{
    /* cdlrun's SIGTERM ends it, as its SIGKILL would a few seconds later
     * (cdl-train's own handler would only set its stop flag). */
    signal(SIGTERM, SIG_DFL);
    for (;;)
        pause();
}

template <class T> void reduce_into(comm_state &c, T *out, size_t n, ncclRedOp_t op)
{
    for (size_t i = 0; i < n; i++) {
        T acc = ((const T *)c.slot(0))[i];
        for (int r = 1; r < c.nranks; r++)
            acc += ((const T *)c.slot(r))[i];
        out[i] = op == ncclAvg ? acc / (T)c.nranks : acc;
    }
}

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

} // namespace

struct ncclComm {
    std::shared_ptr<comm_state> s;
};

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, id_magic, sizeof id_magic);
    char *r = id->internal + sizeof id_magic;
    int32_t pid = (int32_t)getpid();
    memcpy(r + 16, &pid, sizeof pid);
    if (getrandom(r, 16, 0) != 16) {
        fakegpu::complain("ncclGetUniqueId: getrandom: %s", strerror(errno));
        return ncclSystemError;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (!comm)
        return ncclInvalidArgument;
    *comm = nullptr;
    if (config && (config->size != sizeof *config || config->magic != 0xcafebeef)) {
        fakegpu::complain("ncclCommInitRankConfig: config not initialised with "
                          "NCCL_CONFIG_INITIALIZER");
        return ncclInvalidArgument;
    }
    if (nranks < 1 || nranks > max_ranks || rank < 0 || rank >= nranks) {
        fakegpu::complain("ncclCommInitRankConfig: rank %d of %d ranks (the fake takes up to %d)",
                          rank, nranks, max_ranks);
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal, id_magic, sizeof id_magic)) {
        fakegpu::complain("ncclCommInitRankConfig: the unique id did not come from "
                          "ncclGetUniqueId (was it passed to every rank intact?)");
        return ncclInvalidArgument;
    }
    int dev = -1, visible = -1;
    if (cudaGetDevice(&visible) != cudaSuccess || (dev = fakegpu::physical_device(visible)) < 0) {
        fakegpu::complain("ncclCommInitRankConfig: no CUDA device set on rank %d", rank);
        return ncclUnhandledCudaError;
    }
    /* CDL_FAKE_NCCL_LOG (tests only): the device NCCL takes, the calling
     * thread's current one, as a real communicator does. */
    const char *log = getenv("CDL_FAKE_NCCL_LOG");
    if (log && *log && strcmp(log, "0"))
        fprintf(stderr, "fakenccl: rank %d of %d: communicator on visible device %d (fake GPU %d)\n",
                rank, nranks, visible, dev);
    auto c = std::make_shared<comm_state>();
    c->rank = rank;
    c->nranks = nranks;
    c->timeout = timeout_s();
    char name[64];
    seg_name(id, name, sizeof name);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)seg_bytes(nranks)) != 0) {
        fprintf(stderr, "fakenccl: shm %s: %s\n", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return ncclSystemError;
    }
    void *p = mmap(nullptr, seg_bytes(nranks), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr, "fakenccl: mmap %s: %s\n", name, strerror(errno));
        return ncclSystemError;
    }
    c->h = (seg_header *)p;
    c->mapped = seg_bytes(nranks);
    seg_header *h = c->h;
    int32_t expect = 0;
    if (!h->nranks.compare_exchange_strong(expect, nranks) && expect != nranks) {
        fakegpu::complain("ncclCommInitRankConfig: rank %d says %d ranks, another rank said %d",
                          rank, nranks, expect);
        return ncclInvalidUsage;
    }
    int32_t none = 0;
    if (!h->claimed[rank].compare_exchange_strong(none, (int32_t)getpid())) {
        fakegpu::complain("ncclCommInitRankConfig: rank %d claimed twice (by pids %d and %d)",
                          rank, (int)none, (int)getpid());
        return ncclInvalidUsage;
    }
    h->device[rank].store(dev + 1);
    h->joined.fetch_add(1);
    if (!wait_for(*c, [&] { return h->joined.load() == nranks; }, "ncclCommInitRankConfig")) {
        shm_unlink(name);
        return ncclRemoteError;
    }
    shm_unlink(name);   /* every rank has it mapped: the name is no longer needed */
    for (int r = 0; r < nranks; r++) {
        if (r != rank && h->device[r].load() == dev + 1) {
            fprintf(stderr, "fakenccl: rank %d: Duplicate GPU detected: rank %d and rank %d "
                    "both on fake GPU %d\n", rank, rank, r, dev);
            return ncclInvalidUsage;
        }
    }
    bool blocking = !config || config->blocking != 0;
    c->pending_init = !blocking;
    *comm = new ncclComm{c};
    return blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *st)
{
    if (!comm || !st)
        return ncclInvalidArgument;
    std::lock_guard<std::recursive_mutex> g(fakegpu::lock());
    comm_state &c = *comm->s;
    if (c.pending_init) {
        c.pending_init = false;
        *st = ncclInProgress;
    } else {
        *st = c.error;
    }
    return ncclSuccess;
}

static ncclResult_t end_comm(ncclComm_t comm, bool abort)
{
    if (!comm)
        return ncclInvalidArgument;
    {
        std::lock_guard<std::recursive_mutex> g(fakegpu::lock());
        if (abort) {
            comm->s->aborted = true;
            comm->s->h->aborted.store(1);
        } else {
            comm->s->destroyed = true;
        }
    }
    delete comm;   /* the segment goes with the last queued collective holding it */
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return end_comm(comm, false);
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return end_comm(comm, true);
}

} // extern "C"

namespace {

ncclResult_t check_args(const char *call, ncclComm_t comm, cudaStream_t stream,
                        const void *send, size_t send_bytes, const void *recv, size_t recv_bytes)
{
    if (!comm) {
        fakegpu::complain("%s: NULL communicator", call);
        return ncclInvalidArgument;
    }
    if (comm->s->pending_init) {
        fakegpu::complain("%s: the non-blocking communicator is not ready yet (poll "
                          "ncclCommGetAsyncError until ncclSuccess first)", call);
        return ncclInvalidUsage;
    }
    if (!fakegpu::stream_ok(stream)) {
        fakegpu::complain("%s: invalid stream %p", call, (void *)stream);
        return ncclInvalidArgument;
    }
    char why[160];
    if (send && !fakegpu::device_range(send, send_bytes, why, sizeof why)) {
        fakegpu::complain("%s: sendbuff: %s", call, why);
        return ncclInvalidArgument;
    }
    if (!fakegpu::device_range(recv, recv_bytes, why, sizeof why)) {
        fakegpu::complain("%s: recvbuff: %s", call, why);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* Queues body(c, progress, poll) on the stream; it runs unless the
 * communicator ended or failed first; body returns whether it is done. */
template <class F> ncclResult_t queue(ncclComm_t comm, cudaStream_t stream, F body)
{
    std::shared_ptr<comm_state> s = comm->s;
    auto p = std::make_shared<progress>();
    bool stalls = stall_here();
    cudaError_t e = fakegpu::enqueue_pollable(stream, [s, p, body, stalls](bool poll) {
        if (s->destroyed)
            fakegpu::complain("rank %d: a collective queued before ncclCommDestroy ran after it: "
                              "the host destroyed the communicator without waiting for its "
                              "stream", s->rank);
        if (s->destroyed || s->aborted || s->error != ncclSuccess)
            return true;
        if (stalls)
            stall();
        return body(*s, *p, poll);
    });
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

} // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(fakegpu::lock());
    size_t es = type_size(datatype);
    if (datatype != ncclFloat32 && datatype != ncclFloat64) {
        fakegpu::complain("ncclAllReduce: type %d: the fake reduces float and double only",
                          (int)datatype);
        return ncclInvalidArgument;
    }
    if (op != ncclSum && op != ncclAvg) {
        fakegpu::complain("ncclAllReduce: op %d: the fake has ncclSum and ncclAvg only", (int)op);
        return ncclInvalidArgument;
    }
    ncclResult_t r = check_args("ncclAllReduce", comm, stream, sendbuff, count * es, recvbuff,
                                count * es);
    if (r != ncclSuccess)
        return r;
    op_meta m = {op_allreduce, (uint32_t)datatype, (uint32_t)op, -1, count};
    return queue(comm, stream, [=](comm_state &c, progress &p, bool poll) {
        return chunks(p, count * es, chunk / es * es, [&](size_t off, size_t n) {
            char *dst = (char *)recvbuff + off;
            return step(c, p, m, (const char *)sendbuff + off, n, [&] {
                if (datatype == ncclFloat32)
                    reduce_into(c, (float *)dst, n / es, op);
                else
                    reduce_into(c, (double *)dst, n / es, op);
            }, poll);
        }, poll);
    });
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(fakegpu::lock());
    size_t es = type_size(datatype);
    if (!es || !comm || root < 0 || root >= comm->s->nranks) {
        fakegpu::complain("ncclBroadcast: type %d, root %d: invalid", (int)datatype, root);
        return ncclInvalidArgument;
    }
    size_t bytes = count * es;
    ncclResult_t r = check_args("ncclBroadcast", comm, stream,
                                comm->s->rank == root ? sendbuff : nullptr, bytes, recvbuff, bytes);
    if (r != ncclSuccess)
        return r;
    op_meta m = {op_broadcast, (uint32_t)datatype, 0, root, count};
    return queue(comm, stream, [=](comm_state &c, progress &p, bool poll) {
        return chunks(p, bytes, chunk, [&](size_t off, size_t n) {
            return step(c, p, m, (const char *)sendbuff + off, c.rank == root ? n : 0, [&] {
                memmove((char *)recvbuff + off, c.slot(root), n);
            }, poll);
        }, poll);
    });
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(fakegpu::lock());
    size_t es = type_size(datatype);
    if (!es || !comm) {
        fakegpu::complain("ncclAllGather: type %d: invalid", (int)datatype);
        return ncclInvalidArgument;
    }
    size_t bytes = sendcount * es;
    ncclResult_t r = check_args("ncclAllGather", comm, stream, sendbuff, bytes, recvbuff,
                                bytes * (size_t)comm->s->nranks);
    if (r != ncclSuccess)
        return r;
    op_meta m = {op_allgather, (uint32_t)datatype, 0, -1, sendcount};
    return queue(comm, stream, [=](comm_state &c, progress &p, bool poll) {
        return chunks(p, bytes, chunk, [&](size_t off, size_t n) {
            return step(c, p, m, (const char *)sendbuff + off, n, [&] {
                for (int q = 0; q < c.nranks; q++)
                    memcpy((char *)recvbuff + (size_t)q * bytes + off, c.slot(q), n);
            }, poll);
        }, poll);
    });
}

} // extern "C"
