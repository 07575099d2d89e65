/* The CUDA runtime of the fake GPU: the part of libcudart that libcdl
 * uses, implemented on the CPU, for tests on machines without a GPU.
 *
 * What it models, from the CUDA Runtime API's documented behaviour:
 * - Deferred execution. Work queued on a stream (copies, memsets, kernels,
 *   cuBLAS and cuDNN calls) runs only when the host waits for it
 *   (cudaStreamSynchronize, cudaEventSynchronize, a query, cudaFree, a
 *   synchronous call), in stream order, with cudaStreamWaitEvent ordering
 *   streams. So host code that reads a result, reuses a buffer or frees
 *   memory before waiting sees stale data here, as it may on a GPU. A copy
 *   to or from pageable memory also runs deferred, the least forgiving of
 *   what the runtime allows ("might be synchronous").
 * - Memory. cudaMalloc hands out host memory filled with 0xff bytes (NaN as
 *   floats), never zeroed; every copy, memset, cuBLAS and cuDNN argument is
 *   checked to lie inside one live allocation, with the direction the copy
 *   kind names. Freed blocks are poisoned and kept out of reuse for a while.
 * - Stream capture. Work on a capturing stream is recorded, not run;
 *   calls that capture forbids (synchronising the stream, cudaMalloc,
 *   cudaFree, pinned allocation in global or this thread's thread-local
 *   mode) fail with cudaErrorStreamCaptureUnsupported and invalidate the
 *   capture; cudaGraphLaunch queues the recorded work again, with the
 *   arguments it had when captured.
 * - Devices: CDL_FAKE_GPUS of them (default 1); CUDA_VISIBLE_DEVICES picks
 *   and orders them by physical index, up to its first invalid entry (none
 *   when it is empty or says -1); UUID and bus follow the physical device,
 *   so processes shown different devices see different GPUs.
 *   The current device is per host thread (0 until cudaSetDevice). A
 *   stream and an event belong to the device current when they were
 *   created, and the programming guide's rules hold: a kernel launched
 *   on a stream of another device than the current one fails, and so
 *   does cudaEventRecord of an event on a stream of another device
 *   (cudaErrorInvalidResourceHandle); copies, queries, synchronisation
 *   and cudaStreamWaitEvent work across devices.
 *
 * - An injected asynchronous fault (tests only): CDL_FAKE_FAULT_AT=N makes
 *   the Nth item of work queued in the process fault when it runs, as a
 *   kernel with a bad address would; from then on the context is lost, as
 *   on a GPU: nothing queued runs, waits, queries, launches and
 *   cudaGetLastError return cudaErrorIllegalAddress (sticky), so the
 *   error surfaces at whichever call checks next, not at the op at fault.
 * - Host waits (tests only): with CDL_FAKE_COUNT_WAITS=FILE the process
 *   counts its blocking waits (stream, event and device synchronisation,
 *   synchronous copies) and appends "PID COUNT" to FILE at exit, so a test
 *   can show that a training step waits for nothing on the host.
 * - Polling. A query runs the queued work but leaves a collective whose
 *   peers have not arrived at the front of its stream (not ready), as a
 *   GPU's NCCL kernel spins while the host polls; a blocking wait waits
 *   for the peers (with the fake NCCL's own timeout).
 *
 * Not modelled: the legacy default stream's implicit synchronisation with
 * blocking streams (libcdl creates only non-blocking streams; work on the
 * legacy stream is reported once), concurrency between streams (work runs one item at a time),
 * timing, and real device-side faults (a kernel that writes out of bounds
 * corrupts host memory, which ASan and valgrind catch in the test runs).
 */
#include "fake.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>
#include <vector>

#include "tests/fakegpu/emu.h"
#undef cudaGetLastError

/* Work queued on a stream: sequence number, the work, and for a
 * cudaStreamWaitEvent the stream and sequence number waited for. The work
 * is told whether the host only polls (a query): then work waiting for
 * another process (a collective's missing peer) may return false, not
 * done, and stays at the front of its stream for the next wait. */
struct queued {
    uint64_t seq;
    std::function<bool(bool)> fn;
    CUstream_st *wait_on;
    uint64_t wait_upto;
};

struct CUstream_st {
    unsigned flags = 0;
    int device = -1;          /* current when it was created; -1: the legacy stream */
    std::deque<queued> q;
    bool capturing = false, invalidated = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capture_thread;
    std::vector<std::function<void()>> captured;
};

struct CUevent_st {
    int device = -1;          /* current when it was created */
    CUstream_st *stream = nullptr;
    uint64_t seq = 0;
    bool recorded = false, in_capture = false;
};

struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};

struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};

namespace fakegpu {
namespace {

struct block {
    size_t bytes;
    bool live;
};

std::map<uintptr_t, block> device_blocks;  /* base -> block, live or quarantined */
std::deque<uintptr_t> quarantine;
size_t quarantined_bytes, device_used;
std::map<uintptr_t, size_t> pinned;         /* cudaHostAlloc'd */
std::map<uintptr_t, size_t> registered;     /* cudaHostRegister'd */
std::vector<CUstream_st *> streams;         /* live ones, oldest first */
std::set<CUevent_st *> events;
std::set<CUgraph_st *> graphs;
std::set<CUgraphExec_st *> execs;
CUstream_st legacy_stream;
uint64_t next_seq;
bool legacy_warned;
thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device;

const size_t quarantine_cap = (size_t)64 << 20;

/* CDL_FAKE_COUNT_WAITS: the blocking waits of the process, written at exit. */
struct wait_count {
    unsigned long n = 0;
    ~wait_count()
    {
        const char *path = getenv("CDL_FAKE_COUNT_WAITS");
        FILE *f = path && *path ? fopen(path, "a") : nullptr;
        if (f) {
            fprintf(f, "%d %lu\n", (int)getpid(), n);
            fclose(f);
        }
    }
} host_waits;

/* At exit, frees the freed blocks still held back from reuse, so that leak
 * checkers report only what the program never gave back with cudaFree
 * (destroyed before device_blocks, which is defined earlier). */
struct quarantine_release {
    ~quarantine_release()
    {
        for (uintptr_t base : quarantine) {
            free((void *)base);
            device_blocks.erase(base);
        }
        quarantine.clear();
    }
} release_at_exit;

size_t device_mem_total()
{
    const char *s = getenv("CDL_FAKE_GPU_MEM_MB");
    long mb = s && *s ? strtol(s, nullptr, 10) : 8192;
    return (size_t)(mb > 0 ? mb : 8192) << 20;
}

cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

/* The injected fault (CDL_FAKE_FAULT_AT): the item of work that faults,
 * counted over the process, and the sticky error once it ran. */
cudaError_t sticky_error = cudaSuccess;
uint64_t queued_items;

uint64_t fault_at()
{
    static const uint64_t at = [] {
        const char *s = getenv("CDL_FAKE_FAULT_AT");
        return s && *s ? (uint64_t)strtoull(s, nullptr, 10) : 0;
    }();
    return at;
}

/* What a wait returns after running work: the sticky error once lost. */
cudaError_t after_run()
{
    return sticky_error ? fail(sticky_error) : cudaSuccess;
}

CUstream_st *resolve(cudaStream_t s)
{
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return &legacy_stream;
    return std::find(streams.begin(), streams.end(), s) != streams.end() ? s : nullptr;
}

bool alive(CUstream_st *s)
{
    return s == &legacy_stream || std::find(streams.begin(), streams.end(), s) != streams.end();
}

/* Runs the work of s queued up to sequence number upto. Of the orders a
 * GPU may choose, the least forgiving: first the work on other streams
 * that this work waits for (cudaStreamWaitEvent), as early as it may run,
 * then this stream's own. So work on another stream that should have
 * waited for s but does not runs before s's, and the result shows it.
 * poll (a query): stops at work that is not ready (returns false), as a
 * GPU's queue stays stuck on a collective whose peer never comes while
 * the host goes on polling; a blocking wait runs everything (true). */
bool run_until(CUstream_st *s, uint64_t upto, bool poll)
{
    for (size_t i = 0; i < s->q.size() && s->q[i].seq <= upto; i++) {
        if (s->q[i].wait_on && alive(s->q[i].wait_on)) {
            CUstream_st *src = s->q[i].wait_on;
            uint64_t to = s->q[i].wait_upto;
            if (!run_until(src, to, poll))   /* may run work of s too: what src waits for */
                break;
        }
    }
    while (!s->q.empty() && s->q.front().seq <= upto) {
        queued item = std::move(s->q.front());
        s->q.pop_front();
        if (!sticky_error && !item.fn(poll)) {   /* a lost context runs nothing more */
            s->q.push_front(std::move(item));      /* not ready: polled again later */
            return false;
        }
    }
    return true;
}

void run_until(CUstream_st *s, uint64_t upto)
{
    run_until(s, upto, false);
}

void run_all()
{
    for (size_t i = 0; i < streams.size(); i++)
        run_until(streams[i], std::numeric_limits<uint64_t>::max());
    run_until(&legacy_stream, std::numeric_limits<uint64_t>::max());
}

/* A call that stream capture forbids in this thread: cudaMalloc, cudaFree,
 * pinned allocation, synchronous copies, device synchronisation. */
bool capture_forbids(const char *call)
{
    bool bad = false;
    for (CUstream_st *s : streams)
        if (s->capturing && (s->mode == cudaStreamCaptureModeGlobal ||
                             (s->mode == cudaStreamCaptureModeThreadLocal &&
                              s->capture_thread == std::this_thread::get_id()))) {
            if (!s->invalidated)
                complain("%s during stream capture: not allowed in this capture mode; the "
                         "capture is invalidated", call);
            s->invalidated = true;
            bad = true;
        }
    return bad;
}

enum ptr_kind { PTR_HOST, PTR_PINNED, PTR_DEVICE };

bool in_map(const std::map<uintptr_t, size_t> &m, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin())
        return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

ptr_kind kind_of(const void *p)
{
    if (device_range(p, 1, nullptr, 0))
        return PTR_DEVICE;
    if (in_map(pinned, p, 1) || in_map(registered, p, 1))
        return PTR_PINNED;
    return PTR_HOST;
}

void *host_block(size_t bytes)
{
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p)
        memset(p, 0xff, (bytes + 255) / 256 * 256);
    return p;
}

} // namespace

std::recursive_mutex &lock()
{
    static std::recursive_mutex m;
    return m;
}

void complain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fakegpu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* The machine's devices as this process sees them: the physical index of
 * each visible one, in order (CUDA_VISIBLE_DEVICES picks and reorders). */
std::vector<int> visible_devices()
{
    const char *n = getenv("CDL_FAKE_GPUS");
    long count = n && *n ? strtol(n, nullptr, 10) : 1;
    std::vector<int> v;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) {
        for (long i = 0; i < count; i++)
            v.push_back((int)i);
        return v;
    }
    for (const char *p = vis; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id >= count)
            break;  /* the runtime stops at the first invalid entry */
        v.push_back((int)id);
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end)
            break;
    }
    return v;
}

int device_count()
{
    return (int)visible_devices().size();
}

int physical_device(int device)
{
    std::vector<int> v = visible_devices();
    return device >= 0 && device < (int)v.size() ? v[(size_t)device] : -1;
}

bool device_range(const void *p, size_t bytes, char *why, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    auto it = device_blocks.upper_bound(a);
    if (it != device_blocks.begin()) {
        --it;
        if (a >= it->first && a < it->first + std::max<size_t>(it->second.bytes, 1)) {
            if (!it->second.live) {
                if (why)
                    snprintf(why, len, "%p is in device memory that was freed", p);
                return false;
            }
            if (a + bytes > it->first + it->second.bytes) {
                if (why)
                    snprintf(why, len, "%zu bytes at %p run %zu bytes past the end of its "
                             "%zu-byte allocation", bytes, p,
                             (size_t)(a + bytes - it->first - it->second.bytes),
                             it->second.bytes);
                return false;
            }
            return true;
        }
    }
    if (why)
        snprintf(why, len, "%p is not device memory", p);
    return false;
}

bool stream_ok(cudaStream_t s)
{
    return resolve(s) != nullptr;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> fn)
{
    return enqueue_pollable(s, [fn](bool) {
        fn();
        return true;
    });
}

cudaError_t enqueue_pollable(cudaStream_t s, std::function<bool(bool)> fn)
{
    CUstream_st *st = resolve(s);
    if (!st) {
        complain("work queued on stream %p, which does not exist (destroyed?)", (void *)s);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (sticky_error)
        return fail(sticky_error);
    if (st->capturing) {
        if (!st->invalidated)
            st->captured.push_back([fn] { fn(false); });
        return cudaSuccess;
    }
    if (fault_at() && ++queued_items == fault_at())
        fn = [](bool) {
            sticky_error = cudaErrorIllegalAddress;
            return true;
        };
    if (st == &legacy_stream && !legacy_warned) {
        /* Legal, but libcdl means every op to run on its own non-blocking
         * streams: the legacy stream would serialise against everything. */
        complain("work queued on the legacy default stream (stream 0): a missing "
                 "cublasSetStream, cudnnSetStream or stream argument?");
        legacy_warned = true;
    }
    st->q.push_back({++next_seq, std::move(fn), nullptr, 0});
    return cudaSuccess;
}

float tf32_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {  /* finite: round the low 13 bits away */
        u += 0x1000u;
        u &= 0xffffe000u;
    }
    memcpy(&x, &u, 4);
    return x;
}

/* Read once, as the driver does. */
bool tf32_allowed()
{
    static const bool allowed = [] {
        const char *o = getenv("NVIDIA_TF32_OVERRIDE");
        return !(o && strcmp(o, "0") == 0);
    }();
    return allowed;
}

namespace {
/* Kernel launches of the emulated .cu files come here. */
void submit_launch(cudaStream_t s, dim3 grid, dim3 blockd, std::function<void()> k)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    CUstream_st *st = resolve(s);
    if (st && st->device >= 0 && st->device != current_device) {
        complain("kernel launched on stream %p of device %d while device %d is current "
                 "(cudaSetDevice to the stream's device first)", (void *)s, st->device,
                 current_device);
        cuk_emu_error = fail(cudaErrorInvalidResourceHandle);
        return;
    }
    cudaError_t e = enqueue(s, [grid, blockd, k]() { cuk_emu_launch(grid, blockd, k); });
    if (e != cudaSuccess)
        cuk_emu_error = e;
}
[[maybe_unused]] const int installed = (cuk_emu_submit = submit_launch, 0);
} // namespace

} // namespace fakegpu

using namespace fakegpu;
#define LOCKED std::lock_guard<std::recursive_mutex> guard_(fakegpu::lock())

/* ------------------------------------------------------------ errors */

static const struct {
    cudaError_t e;
    const char *name, *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation is not permitted in the current state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
};

const char *cudaGetErrorString(cudaError_t e)
{
    for (const auto &t : error_table)
        if (t.e == e)
            return t.text;
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &t : error_table)
        if (t.e == e)
            return t.name;
    return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError(void)
{
    if (sticky_error)
        return sticky_error;
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return sticky_error ? sticky_error : last_error;
}

/* ------------------------------------------------------------ devices */

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = device_count();
    return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    int n = device_count();
    if (n == 0)
        return fail(cudaErrorNoDevice);
    if (device < 0 || device >= n)
        return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

/* Per device of this process, as the runtime keeps them: the scheduling
 * flags only (how host threads wait; nothing else is modelled). */
static unsigned int device_flags[64];

cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    LOCKED;
    const unsigned int sched = cudaDeviceScheduleSpin | cudaDeviceScheduleYield |
                               cudaDeviceScheduleBlockingSync;
    if (flags & ~(sched | cudaDeviceMapHost | cudaDeviceLmemResizeToMax))
        return fail(cudaErrorInvalidValue);
    if (current_device < 0 || current_device >= 64)
        return fail(cudaErrorInvalidDevice);
    device_flags[current_device] = flags;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    LOCKED;
    if (current_device < 0 || current_device >= 64)
        return fail(cudaErrorInvalidDevice);
    *flags = device_flags[current_device] | cudaDeviceMapHost;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    int n = device_count();
    if (device < 0 || device >= n)
        return fail(n ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "cdl fake GPU %d (CPU emulation, tests/fakegpu)",
             device);
    /* The UUID and bus of the physical device, the same in every process
     * whatever CUDA_VISIBLE_DEVICES says, as on a real machine. */
    int phys = physical_device(device);
    for (int i = 0; i < 16; i++)
        prop->uuid.bytes[i] = (char)(0xc0 + i * 7 + phys * 13);
    prop->totalGlobalMem = device_mem_total();
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 4;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->pciBusID = phys + 1;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    LOCKED;
    *total = device_mem_total();
    *free_bytes = *total > device_used ? *total - device_used : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    LOCKED;
    if (capture_forbids("cudaDeviceSynchronize"))
        return fail(cudaErrorStreamCaptureUnsupported);
    host_waits.n++;
    run_all();
    return after_run();
}

/* ------------------------------------------------------------ memory */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    LOCKED;
    *p = nullptr;
    if (capture_forbids("cudaMalloc"))
        return fail(cudaErrorStreamCaptureUnsupported);
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    if (bytes == 0)
        return cudaSuccess;
    if (device_used + bytes > device_mem_total())
        return fail(cudaErrorMemoryAllocation);
    void *b = host_block(bytes);
    if (!b)
        return fail(cudaErrorMemoryAllocation);
    device_blocks[(uintptr_t)b] = block{bytes, true};
    device_used += bytes;
    *p = b;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    LOCKED;
    if (!p)
        return cudaSuccess;
    if (capture_forbids("cudaFree"))
        return fail(cudaErrorStreamCaptureUnsupported);
    run_all();  /* cudaFree synchronises the device */
    auto it = device_blocks.find((uintptr_t)p);
    if (it == device_blocks.end() || !it->second.live) {
        complain("cudaFree(%p): %s", p, it == device_blocks.end()
                                            ? "not the start of a device allocation"
                                            : "freed twice");
        return fail(cudaErrorInvalidValue);
    }
    it->second.live = false;
    memset(p, 0xff, it->second.bytes);
    device_used -= it->second.bytes;
    quarantine.push_back(it->first);
    quarantined_bytes += it->second.bytes;
    while (quarantined_bytes > quarantine_cap) {
        auto q = device_blocks.find(quarantine.front());
        quarantine.pop_front();
        quarantined_bytes -= q->second.bytes;
        free((void *)q->first);
        device_blocks.erase(q);
    }
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    LOCKED;
    (void)flags;
    *p = nullptr;
    if (capture_forbids("cudaHostAlloc"))
        return fail(cudaErrorStreamCaptureUnsupported);
    void *b = host_block(bytes ? bytes : 1);
    if (!b)
        return fail(cudaErrorMemoryAllocation);
    pinned[(uintptr_t)b] = bytes ? bytes : 1;
    *p = b;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *p)
{
    LOCKED;
    if (!p)
        return cudaSuccess;
    if (capture_forbids("cudaFreeHost"))
        return fail(cudaErrorStreamCaptureUnsupported);
    run_all();
    auto it = pinned.find((uintptr_t)p);
    if (it == pinned.end()) {
        complain("cudaFreeHost(%p): not the start of a cudaHostAlloc block", p);
        return fail(cudaErrorInvalidValue);
    }
    memset(p, 0xff, it->second);
    free(p);
    pinned.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    LOCKED;
    (void)flags;
    if (!p || !bytes)
        return fail(cudaErrorInvalidValue);
    if (capture_forbids("cudaHostRegister"))
        return fail(cudaErrorStreamCaptureUnsupported);
    uintptr_t a = (uintptr_t)p;
    for (const auto &r : registered)
        if (a < r.first + r.second && r.first < a + bytes)
            return fail(cudaErrorHostMemoryAlreadyRegistered);
    if (device_range(p, 1, nullptr, 0) || in_map(pinned, p, 1))
        return fail(cudaErrorHostMemoryAlreadyRegistered);
    registered[a] = bytes;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    LOCKED;
    if (capture_forbids("cudaHostUnregister"))
        return fail(cudaErrorStreamCaptureUnsupported);
    auto it = registered.find((uintptr_t)p);
    if (it == registered.end())
        return fail(cudaErrorHostMemoryNotRegistered);
    run_all();
    registered.erase(it);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    LOCKED;
    memset(a, 0, sizeof *a);
    switch (kind_of(p)) {
    case PTR_DEVICE:
        a->type = cudaMemoryTypeDevice;
        a->device = current_device;
        a->devicePointer = (void *)p;
        break;
    case PTR_PINNED:
        a->type = cudaMemoryTypeHost;
        a->device = current_device;
        a->devicePointer = (void *)p;
        a->hostPointer = (void *)p;
        break;
    case PTR_HOST:
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        break;
    }
    return cudaSuccess;
}

static const char *copy_kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
    }
    return "?";
}

/* Checks one side of a copy: device memory where the kind says so, host
 * memory otherwise. */
static bool copy_side_ok(const char *call, const char *side, const void *p, size_t bytes,
                         bool want_device, cudaMemcpyKind kind)
{
    char why[160];
    if (want_device) {
        if (device_range(p, bytes, why, sizeof why))
            return true;
        complain("%s(%s): %s of %zu bytes: %s", call, copy_kind_name(kind), side, bytes, why);
        return false;
    }
    ptr_kind k = kind_of(p);
    if (k == PTR_DEVICE) {
        complain("%s(%s): %s %p is device memory, but the copy kind says host", call,
                 copy_kind_name(kind), side, p);
        return false;
    }
    if (k == PTR_PINNED && !in_map(pinned, p, bytes) && !in_map(registered, p, bytes)) {
        complain("%s(%s): %s: %zu bytes at %p run past the end of their pinned block", call,
                 copy_kind_name(kind), side, bytes, p);
        return false;
    }
    return true;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    LOCKED;
    if (!bytes)
        return cudaSuccess;
    CUstream_st *st = resolve(s);
    if (!st) {
        complain("cudaMemcpyAsync on stream %p, which does not exist", (void *)s);
        return fail(cudaErrorInvalidResourceHandle);
    }
    bool dst_dev, src_dev;
    switch (kind) {
    case cudaMemcpyHostToDevice: dst_dev = true, src_dev = false; break;
    case cudaMemcpyDeviceToHost: dst_dev = false, src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = true, src_dev = true; break;
    case cudaMemcpyHostToHost: dst_dev = false, src_dev = false; break;
    case cudaMemcpyDefault:
        dst_dev = kind_of(dst) == PTR_DEVICE;
        src_dev = kind_of(src) == PTR_DEVICE;
        break;
    default:
        return fail(cudaErrorInvalidValue);
    }
    if (!copy_side_ok("cudaMemcpyAsync", "dst", dst, bytes, dst_dev, kind) ||
        !copy_side_ok("cudaMemcpyAsync", "src", src, bytes, src_dev, kind))
        return fail(cudaErrorInvalidValue);
    if (st->capturing && ((!dst_dev && kind_of(dst) == PTR_HOST) ||
                          (!src_dev && kind_of(src) == PTR_HOST))) {
        complain("cudaMemcpyAsync of pageable host memory during stream capture: a graph can "
                 "only copy device or pinned memory; the capture is invalidated");
        st->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (!dst_dev && !src_dev) {  /* host to host: synchronous */
        run_until(st, std::numeric_limits<uint64_t>::max());
        memmove(dst, src, bytes);
        return cudaSuccess;
    }
    return enqueue(s, [dst, src, bytes]() { memmove(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    LOCKED;
    if (capture_forbids("cudaMemcpy"))
        return fail(cudaErrorStreamCaptureUnsupported);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
    host_waits.n++;
    if (e == cudaSuccess)
        run_all();
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    LOCKED;
    if (!bytes)
        return cudaSuccess;
    char why[160];
    if (!device_range(p, bytes, why, sizeof why)) {
        complain("cudaMemsetAsync of %zu bytes: %s", bytes, why);
        return fail(cudaErrorInvalidValue);
    }
    cudaError_t e = enqueue(s, [p, value, bytes]() { memset(p, value, bytes); });
    return e == cudaSuccess ? e : fail(e);
}

/* ------------------------------------------------------------ streams */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    LOCKED;
    CUstream_st *st = new CUstream_st;
    st->flags = flags;
    st->device = current_device;
    streams.push_back(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!st || st == &legacy_stream)
        return fail(cudaErrorInvalidResourceHandle);
    if (st->capturing) {
        complain("cudaStreamDestroy of a capturing stream");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    /* The queued work still runs, as on a GPU; events recorded on it are
     * complete. */
    run_until(st, std::numeric_limits<uint64_t>::max());
    for (CUevent_st *e : events)
        if (e->stream == st)
            e->stream = nullptr, e->recorded = false;
    streams.erase(std::find(streams.begin(), streams.end(), st));
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!st)
        return fail(cudaErrorInvalidResourceHandle);
    if (st->capturing) {
        complain("cudaStreamSynchronize of a capturing stream; the capture is invalidated");
        st->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    host_waits.n++;
    if (st == &legacy_stream)
        run_all();
    else
        run_until(st, std::numeric_limits<uint64_t>::max());
    return after_run();
}

/* Not ready the first time there is work; that work has run by the next
 * query, except work waiting for another process (a collective whose peer
 * has not arrived), which stays queued. Host code that polls must
 * therefore poll, and bound its polling itself. */
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!st)
        return fail(cudaErrorInvalidResourceHandle);
    if (st->capturing) {
        st->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (sticky_error)
        return fail(sticky_error);
    if (st->q.empty())
        return cudaSuccess;
    run_until(st, std::numeric_limits<uint64_t>::max(), true);
    return cudaErrorNotReady;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!st)
        return fail(cudaErrorInvalidResourceHandle);
    if (st == &legacy_stream) {
        complain("cudaStreamBeginCapture on the legacy default stream");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (st->capturing)
        return fail(cudaErrorIllegalState);
    st->capturing = true;
    st->invalidated = false;
    st->mode = mode;
    st->capture_thread = std::this_thread::get_id();
    st->captured.clear();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    LOCKED;
    *graph = nullptr;
    CUstream_st *st = resolve(s);
    if (!st)
        return fail(cudaErrorInvalidResourceHandle);
    if (!st->capturing)
        return fail(cudaErrorIllegalState);
    if (st->mode != cudaStreamCaptureModeRelaxed &&
        st->capture_thread != std::this_thread::get_id())
        return fail(cudaErrorStreamCaptureWrongThread);
    st->capturing = false;
    if (st->invalidated) {
        st->captured.clear();
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    CUgraph_st *g = new CUgraph_st;
    g->ops.swap(st->captured);
    graphs.insert(g);
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!st)
        return fail(cudaErrorInvalidResourceHandle);
    *status = !st->capturing      ? cudaStreamCaptureStatusNone
              : st->invalidated ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

/* ------------------------------------------------------------ events */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    LOCKED;
    (void)flags;
    CUevent_st *ev = new CUevent_st;
    ev->device = current_device;
    events.insert(ev);
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    LOCKED;
    if (!events.erase(e))
        return fail(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    LOCKED;
    CUstream_st *st = resolve(s);
    if (!events.count(e) || !st)
        return fail(cudaErrorInvalidResourceHandle);
    if (st->device >= 0 && st->device != e->device) {
        complain("cudaEventRecord: the event belongs to device %d, the stream %p to device %d "
                 "(create events with the stream's device current)", e->device, (void *)s,
                 st->device);
        return fail(cudaErrorInvalidResourceHandle);
    }
    e->stream = st;
    e->recorded = true;
    e->in_capture = st->capturing;
    e->seq = next_seq;  /* everything queued on st so far */
    return cudaSuccess;
}

static bool event_done(CUevent_st *e)
{
    return !e->recorded || e->stream->q.empty() || e->stream->q.front().seq > e->seq;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    LOCKED;
    if (!events.count(e))
        return fail(cudaErrorInvalidResourceHandle);
    if (e->recorded && e->in_capture)
        return fail(cudaErrorCapturedEvent);
    if (sticky_error)
        return fail(sticky_error);
    if (event_done(e))
        return cudaSuccess;
    run_until(e->stream, e->seq, true);
    return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    LOCKED;
    if (!events.count(e))
        return fail(cudaErrorInvalidResourceHandle);
    if (e->recorded && e->in_capture)
        return fail(cudaErrorCapturedEvent);
    host_waits.n++;
    if (e->recorded)
        run_until(e->stream, e->seq);
    return after_run();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    LOCKED;
    (void)flags;
    CUstream_st *st = resolve(s);
    if (!events.count(e) || !st)
        return fail(cudaErrorInvalidResourceHandle);
    if (!e->recorded)
        return cudaSuccess;
    if (st->capturing || e->in_capture) {
        /* Joining streams into one capture (fork/join graphs) is not
         * modelled; libcdl captures one stream. */
        complain("cudaStreamWaitEvent across a stream capture is not modelled by the fake GPU");
        if (st->capturing)
            st->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    CUstream_st *src = e->stream;
    uint64_t upto = e->seq;
    cudaError_t r = enqueue_pollable(s, [src, upto](bool poll) {
        /* a destroyed stream's work has all run */
        return !alive(src) || run_until(src, upto, poll);
    });
    if (r == cudaSuccess && !st->q.empty()) {
        st->q.back().wait_on = src;
        st->q.back().wait_upto = upto;
    }
    return r;
}

/* ------------------------------------------------------------ graphs */

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    LOCKED;
    (void)flags;
    *exec = nullptr;
    if (!graphs.count(graph))
        return fail(cudaErrorInvalidValue);
    CUgraphExec_st *x = new CUgraphExec_st;
    x->ops = graph->ops;
    execs.insert(x);
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    LOCKED;
    if (!execs.count(exec))
        return fail(cudaErrorInvalidResourceHandle);
    std::vector<std::function<void()>> ops = exec->ops;
    return enqueue(s, [ops]() {
        for (const auto &op : ops)
            op();
    });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    LOCKED;
    if (!graphs.erase(graph))
        return fail(cudaErrorInvalidValue);
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    LOCKED;
    if (!execs.erase(exec))
        return fail(cudaErrorInvalidValue);
    delete exec;
    return cudaSuccess;
}
