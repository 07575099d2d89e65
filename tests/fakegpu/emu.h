/* Test only: runs the kernels of the .cu files on the CPU.
 *
 * Machines without a GPU (CI, the developers' own) cannot run a kernel, but
 * most of what can go wrong in one is indexing and reduction logic, which
 * runs the same on the CPU. tests/unit/cuda.mk compiles each .cu file as
 * plain C++ (nvcc -x c++) with this header forced in first: the CUDA
 * keywords become nothing and __shared__ becomes static. Blocks run one
 * after another; the threads of a block are coroutines on the calling
 * thread (fibers, made once and reused by every launch; see "Fibers"
 * below), each run until it exits or waits at __syncthreads or a
 * warp shuffle, and a barrier opens when every thread still running in the
 * block (or warp) waits at it, as on a GPU, where exited threads no longer
 * count (blocks after the first run their threads as plain calls when the
 * first block never waited: cuk_emu_launch). Everything is deterministic.
 * Pointers are host pointers. Launch
 * errors (empty grids, too many threads) are reported by cudaGetLastError
 * like the runtime does; a deadlock (a barrier some threads never reach)
 * aborts with a message.
 *
 * It knows nothing of memory coalescing or timing: a check of results, not
 * of speed.
 */
#ifndef CDL_KERNELS_CUDA_EMU_H
#define CDL_KERNELS_CUDA_EMU_H

#ifndef __cplusplus
#error "emu.h is for compiling .cu files as C++"
#endif

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include <ucontext.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef VALGRIND_STACK_REGISTER
#define VALGRIND_STACK_REGISTER(lo, hi) 0
#define VALGRIND_STACK_DEREGISTER(id) ((void)(id))
#endif

#define CUK_EMULATION 1

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __forceinline__
#define __forceinline__ inline

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

inline uint3 cuk_emu_uint3(unsigned x, unsigned y, unsigned z)
{
    uint3 v;
    v.x = x;
    v.y = y;
    v.z = z;
    return v;
}

enum cuk_emu_state { CUK_EMU_READY, CUK_EMU_AT_SYNC, CUK_EMU_AT_WARP, CUK_EMU_DONE };

/* The launch being run. */
struct cuk_emu_launch_state {
    unsigned n;                                /* threads per block */
    dim3 grid, block;
    const std::function<void()> *kernel;
    std::vector<int> state;
    std::vector<uint64_t> slot;                /* one shuffle value per thread */
    std::vector<const void *> coll;            /* emu_mma.h: a lane's operands, at a warp op */
    unsigned current;
    int plain;                                 /* threads run as plain calls */
};

inline cuk_emu_launch_state *cuk_emu_now;
inline cudaError_t cuk_emu_error = cudaSuccess;

#define CUK_EMU_STACK (64u << 10)

/* Fibers: one per thread of a block, each with its own stack, made the
 * first time a launch needs that many and then reused, parked between
 * launches. A fiber loops: run the kernel for the current block and thread,
 * mark the thread done, switch back to the scheduler. A switch happens at
 * every barrier of every thread, so its cost is most of the emulator's:
 * glibc's swapcontext makes a system call each time (the signal mask), so
 * on x86-64 a switch saves the callee-saved registers and the FPU control
 * words and swaps stack pointers (cuk_emu_switch, below), which is all the
 * System V ABI asks a function call to preserve; elsewhere ucontext does
 * it. Valgrind is told about each stack. */
#if defined(__x86_64__) && defined(__linux__) && !defined(CUK_EMU_UCONTEXT)
#define CUK_EMU_FAST_SWITCH 1
/* Saves this context's stack pointer into *save and resumes the one at to. */
extern "C" void cuk_emu_switch(void **save, void *to);
/* One weak copy per object file that includes this header; the linker
 * keeps one. Frame, from the saved stack pointer up: MXCSR and x87 control
 * word (8 bytes), r15, r14, r13, r12, rbx, rbp, return address. */
__asm__(".pushsection .text.cuk_emu_switch,\"axG\",@progbits,cuk_emu_switch,comdat\n"
        ".weak cuk_emu_switch\n"
        ".type cuk_emu_switch,@function\n"
        "cuk_emu_switch:\n"
        "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
        "\tsubq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n"
        "\tmovq %rsp, (%rdi)\n"
        "\tmovq %rsi, %rsp\n"
        "\tldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n"
        "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
        "\tret\n"
        ".size cuk_emu_switch, .-cuk_emu_switch\n"
        ".popsection\n");
#else
#define CUK_EMU_FAST_SWITCH 0
#endif

struct cuk_emu_fiber {
    std::unique_ptr<char[]> stack;
    unsigned vg;
#if CUK_EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
};

/* Per host thread: its fibers and where the scheduler was left. */
struct cuk_emu_fiber_pool {
    std::vector<std::unique_ptr<cuk_emu_fiber>> fibers;   /* stable addresses */
#if CUK_EMU_FAST_SWITCH
    void *sched_sp;
#else
    ucontext_t sched;
#endif
    ~cuk_emu_fiber_pool()
    {
        for (auto &f : fibers)
            VALGRIND_STACK_DEREGISTER(f->vg);
    }
};
inline thread_local cuk_emu_fiber_pool cuk_emu_pool;

/* Scheduler -> thread t's fiber, until it waits or finishes. */
inline void cuk_emu_resume(unsigned t)
{
    cuk_emu_fiber &f = *cuk_emu_pool.fibers[t];
#if CUK_EMU_FAST_SWITCH
    cuk_emu_switch(&cuk_emu_pool.sched_sp, f.sp);
#else
    swapcontext(&cuk_emu_pool.sched, &f.ctx);
#endif
}

/* Thread t's fiber -> the scheduler. */
inline void cuk_emu_yield(unsigned t)
{
    cuk_emu_fiber &f = *cuk_emu_pool.fibers[t];
#if CUK_EMU_FAST_SWITCH
    cuk_emu_switch(&f.sp, cuk_emu_pool.sched_sp);
#else
    swapcontext(&f.ctx, &cuk_emu_pool.sched);
#endif
}

inline cudaError_t cuk_emu_last_error()
{
    cudaError_t e = cuk_emu_error;
    cuk_emu_error = cudaSuccess;
    return e;
}
#define cudaGetLastError() cuk_emu_last_error()

inline void cuk_emu_set_thread(unsigned t)
{
    const dim3 &b = cuk_emu_now->block;
    threadIdx = cuk_emu_uint3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
}

/* Back to the scheduler until a barrier opens. */
inline void cuk_emu_wait(int at)
{
    cuk_emu_launch_state *L = cuk_emu_now;
    unsigned t = L->current;
    if (L->plain) {
        std::fprintf(stderr, "emu.h: a thread of block (%u,%u,%u) waits at a barrier, but the "
                     "threads of block (0,0,0) never did, so this block runs without coroutines: "
                     "make the kernel's barriers the same in every block\n",
                     blockIdx.x, blockIdx.y, blockIdx.z);
        std::abort();
    }
    L->state[t] = at;
    cuk_emu_yield(t);
    cuk_emu_set_thread(t);
}

/* A product rounded to float, never contracted into an FMA (as on a GPU):
 * the volatile store rounds it whatever the host compiler's -ffp-contract. */
inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}

inline void __syncthreads()
{
    cuk_emu_wait(CUK_EMU_AT_SYNC);
}

template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a type wider than 8 bytes");
    (void)mask;
    cuk_emu_launch_state *L = cuk_emu_now;
    unsigned t = L->current;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    L->slot[t] = bits;
    cuk_emu_wait(CUK_EMU_AT_WARP);           /* everyone has written */
    unsigned src = (t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask);
    bits = L->slot[src < L->n ? src : t];
    T r;
    std::memcpy(&r, &bits, sizeof r);
    cuk_emu_wait(CUK_EMU_AT_WARP);           /* everyone has read */
    return r;
}

/* The body of every fiber; it never returns. The launch and the thread
 * are read afresh each time round: a parked fiber is resumed by the next
 * block or launch that needs its thread. */
inline void cuk_emu_fiber_main()
{
    for (;;) {
        cuk_emu_launch_state *L = cuk_emu_now;
        unsigned t = L->current;
        (*L->kernel)();
        L->state[t] = CUK_EMU_DONE;
        cuk_emu_yield(t);
    }
}

/* At least n fibers, all parked at the start of their loop. */
inline void cuk_emu_fibers(unsigned n)
{
    auto &fs = cuk_emu_pool.fibers;
    while (fs.size() < n) {
        std::unique_ptr<cuk_emu_fiber> f(new cuk_emu_fiber());
        f->stack.reset(new char[CUK_EMU_STACK]);
        char *lo = f->stack.get(), *hi = lo + CUK_EMU_STACK;
        f->vg = VALGRIND_STACK_REGISTER(lo, hi);
#if CUK_EMU_FAST_SWITCH
        /* The frame cuk_emu_switch pops: control words, six registers, then
         * "return" into the fiber's body with the stack aligned as after a
         * call (rsp + 8 a multiple of 16 on entry). */
        uintptr_t top = ((uintptr_t)hi & ~(uintptr_t)15) - 8;   /* a null return address */
        uint64_t *sp = (uint64_t *)(top - 64);
        std::memset(sp, 0, 72);
        uint32_t mxcsr = __builtin_ia32_stmxcsr();
        uint16_t fcw;
        __asm__ volatile("fnstcw %0" : "=m"(fcw));
        std::memcpy(sp, &mxcsr, 4);
        std::memcpy((char *)sp + 4, &fcw, 2);
        sp[7] = (uint64_t)(uintptr_t)&cuk_emu_fiber_main;
        f->sp = sp;
#else
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = lo;
        f->ctx.uc_stack.ss_size = CUK_EMU_STACK;
        f->ctx.uc_link = nullptr;
        makecontext(&f->ctx, cuk_emu_fiber_main, 0);
#endif
        fs.push_back(std::move(f));
    }
}

/* Opens every barrier all of whose live threads wait at it; 0 if none. */
inline int cuk_emu_release(cuk_emu_launch_state *L)
{
    unsigned live = 0, at_sync = 0;
    for (unsigned t = 0; t < L->n; t++) {
        live += L->state[t] != CUK_EMU_DONE;
        at_sync += L->state[t] == CUK_EMU_AT_SYNC;
    }
    int opened = 0;
    if (live && at_sync == live) {
        for (unsigned t = 0; t < L->n; t++)
            L->state[t] = CUK_EMU_READY;
        return 1;
    }
    for (unsigned w = 0; w * 32 < L->n; w++) {
        unsigned lo = w * 32, hi = lo + 32 < L->n ? lo + 32 : L->n, wlive = 0, waiting = 0;
        for (unsigned t = lo; t < hi; t++) {
            wlive += L->state[t] != CUK_EMU_DONE;
            waiting += L->state[t] == CUK_EMU_AT_WARP;
        }
        if (wlive && waiting == wlive) {
            for (unsigned t = lo; t < hi; t++)
                if (L->state[t] == CUK_EMU_AT_WARP)
                    L->state[t] = CUK_EMU_READY;
            opened = 1;
        }
    }
    return opened;
}

/* One block with every thread a coroutine. Returns whether any thread
 * waited at a barrier or a shuffle. */
inline int cuk_emu_run_block(cuk_emu_launch_state *L)
{
    int waited = 0;
    for (unsigned t = 0; t < L->n; t++)
        L->state[t] = CUK_EMU_READY;
    for (;;) {
        for (unsigned t = 0; t < L->n; t++)
            if (L->state[t] == CUK_EMU_READY) {
                L->current = t;
                cuk_emu_set_thread(t);
                cuk_emu_resume(t);
            }
        int live = 0;
        for (unsigned t = 0; t < L->n; t++)
            live |= L->state[t] != CUK_EMU_DONE;
        if (!live)
            return waited;
        waited = 1;
        if (!cuk_emu_release(L)) {
            std::fprintf(stderr, "emu.h: deadlock in block (%u,%u,%u): threads wait at barriers "
                         "that others never reach\n", blockIdx.x, blockIdx.y, blockIdx.z);
            std::abort();
        }
    }
}

inline int cuk_emu_bad_config(dim3 grid, dim3 block)
{
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    return grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
           threads == 0 || threads > 1024 || block.z > 64;
}

/* Runs a launch now. Block (0,0,0) runs with coroutines; when none of its
 * threads waited at a barrier, the kernel is taken to have none (the kernels
 * of cdl either always synchronise or never) and the other blocks run their
 * threads as plain calls, which is a hundred times faster. A barrier reached
 * in such a block after all is reported and aborts: the fast path never
 * changes a result silently. */
inline void cuk_emu_launch(dim3 grid, dim3 block, const std::function<void()> &kernel)
{
    if (cuk_emu_bad_config(grid, block)) {
        cuk_emu_error = cudaErrorInvalidConfiguration;
        return;
    }
    cuk_emu_launch_state L;
    L.n = (unsigned)((unsigned long long)block.x * block.y * block.z);
    L.grid = grid;
    L.block = block;
    L.kernel = &kernel;
    L.plain = 0;
    L.state.assign(L.n, CUK_EMU_DONE);
    L.slot.assign(L.n, 0);
    L.coll.assign(L.n, nullptr);
    cuk_emu_fibers(L.n);
    cuk_emu_now = &L;
    blockDim = block;
    gridDim = grid;
    int barriers = 1;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = cuk_emu_uint3(x, y, z);
                if (x == 0 && y == 0 && z == 0) {
                    barriers = cuk_emu_run_block(&L);
                    continue;
                }
                if (barriers) {
                    cuk_emu_run_block(&L);
                    continue;
                }
                L.plain = 1;
                for (unsigned t = 0; t < L.n; t++) {
                    L.current = t;
                    cuk_emu_set_thread(t);
                    kernel();
                }
                L.plain = 0;
            }
    cuk_emu_now = nullptr;
}

/* Where launches go. Unset (the kernel unit tests), a launch runs at once;
 * the fake CUDA runtime of tests/fakegpu sets it to queue the launch on its
 * stream, to run in stream order when the host waits, or to record it into
 * a graph under capture. The launch configuration is checked here, as the
 * runtime checks it at launch. */
inline void (*cuk_emu_submit)(cudaStream_t, dim3, dim3, std::function<void()>) = nullptr;

inline void cuk_emu_submit_launch(cudaStream_t s, dim3 grid, dim3 block, std::function<void()> k)
{
    if (cuk_emu_bad_config(grid, block)) {
        cuk_emu_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (cuk_emu_submit)
        cuk_emu_submit(s, grid, block, std::move(k));
    else
        cuk_emu_launch(grid, block, k);
}

/* The tensor-core API (nvcuda::wmma) and bf16 type of the bf16 kernels. */
#include "emu_wmma.h"
/* The warp-level matrix instructions (mma.sync, ldmatrix) of mma.cuh. */
#include "emu_mma.h"

#endif
